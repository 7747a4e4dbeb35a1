import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseEventKind, LeaseService, type LeaseEvent, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import type { HubConfig } from "../../src/config.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { changeRetention } from "../../src/events/watch.js";
import { Frames, idle, StreamScope, streamProtocols } from "../fixtures/streams.js";

const keepAliveMs = 15_000;
const tokens = { p: "tok-p", q: "tok-q" };
const config: Partial<HubConfig> = { projectTokens: tokens, cleanupIntervalMs: 3_600_000 };

/** LeaseService.WatchLeases, once per streaming wire, on a fresh hub per test. */
describe.each(streamProtocols)("WatchLeases over $name", (protocol) => {
  const leases = (t: TestHub, headers: Record<string, string>) =>
    createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(headers)]));

  /** Watches as an agent (own project) or with a project token naming `project`. */
  const watch = (s: StreamScope, t: TestHub, as: AgentCreds | { token: string; project: string }) =>
    s.add((signal) =>
      "headers" in as
        ? leases(t, as.headers).watchLeases({}, { signal })
        : leases(t, { authorization: `Bearer ${as.token}` }).watchLeases({ project: as.project }, { signal }),
    );

  /** Resumes after `cursor` as an agent. */
  const resume = (s: StreamScope, t: TestHub, as: AgentCreds, cursor: bigint) =>
    s.add((signal) => leases(t, as.headers).watchLeases({ afterCursor: cursor }, { signal }));

  const acquire = async (t: TestHub, as: AgentCreds, name: string, ttlMs = 60_000) =>
    (await leases(t, as.headers).acquireLease({ name, ttlMs })).lease!;

  async function snapshot(f: Frames<WatchLeasesResponse>) {
    const r = await f.next();
    if (r.event.case !== "snapshot") throw new Error(`expected a snapshot, got ${r.event.case}`);
    return { cursor: r.cursor, leases: r.event.value.leases };
  }

  /** The next change; its cursor must be above the previous one. */
  async function change(f: Frames<WatchLeasesResponse>, pos: { cursor: bigint }): Promise<LeaseEvent> {
    const r = await f.next();
    if (r.event.case !== "change") throw new Error(`expected a change, got ${r.event.case}`);
    expect(r.cursor).toBeGreaterThan(pos.cursor);
    pos.cursor = r.cursor;
    return r.event.value;
  }

  const summary = (e: LeaseEvent) => ({
    kind: LeaseEventKind[e.kind],
    name: e.lease?.name,
    holder: e.lease?.holderAgentName,
    token: Number(e.lease?.fencingToken),
  });

  it("starts with the live leases, then reports GRANTED, RENEWED, RELEASED and TAKEN_OVER with their tokens", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    await acquire(t, a, "db");
    await acquire(t, a, "cache", 5_000);
    await acquire(t, b, "queue");
    t.clock.advance(5_001); // cache lapses: not live any more

    const w = watch(s, t, b);
    const snap = await snapshot(w);
    expect(snap.leases.map((l) => [l.name, l.holderAgentName, Number(l.fencingToken)])).toEqual([
      ["db", "alpha", 1],
      ["queue", "beta", 1],
    ]);
    const pos = { cursor: snap.cursor };

    const granted = await acquire(t, a, "jobs", 10_000);
    expect(summary(await change(w, pos))).toEqual({ kind: "GRANTED", name: "jobs", holder: "alpha", token: 1 });

    t.clock.advance(1_000);
    await leases(t, a.headers).renewLease({ name: "jobs", fencingToken: granted.fencingToken, ttlMs: 20_000 });
    const renewed = await change(w, pos);
    expect(summary(renewed)).toEqual({ kind: "RENEWED", name: "jobs", holder: "alpha", token: 1 });
    expect(ms(renewed.lease?.expiresAt)).toBe(t.clock.now() + 20_000);
    expect(ms(renewed.lease?.acquiredAt)).toBe(ms(granted.acquiredAt));

    await acquire(t, a, "jobs", 30_000); // the holder's own live lease: extended
    expect(summary(await change(w, pos))).toMatchObject({ kind: "RENEWED", token: 1 });

    await leases(t, a.headers).releaseLease({ name: "jobs", fencingToken: granted.fencingToken });
    expect(summary(await change(w, pos))).toEqual({ kind: "RELEASED", name: "jobs", holder: "alpha", token: 1 });

    await acquire(t, b, "cache");
    expect(summary(await change(w, pos))).toEqual({ kind: "TAKEN_OVER", name: "cache", holder: "beta", token: 2 });

    await acquire(t, b, "jobs");
    expect(summary(await change(w, pos))).toEqual({ kind: "GRANTED", name: "jobs", holder: "beta", token: 2 });
  });

  it("shows a watcher only its project's leases", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const qa = await t.register("alpha", "q", tokens.q);
    await acquire(t, qa, "x");
    await acquire(t, a, "x");

    const wp = watch(s, t, { token: tokens.p, project: "p" });
    const wq = watch(s, t, qa);
    const [sp, sq] = [await snapshot(wp), await snapshot(wq)];
    expect(sp.leases.map((l) => l.resource)).toEqual(["p/x"]);
    expect(sq.leases.map((l) => l.resource)).toEqual(["q/x"]);

    await acquire(t, qa, "y");
    await acquire(t, a, "z");
    await acquire(t, qa, "w");
    expect((await change(wp, sp)).lease?.resource).toBe("p/z");
    expect((await change(wq, sq)).lease?.resource).toBe("q/y");
    expect((await change(wq, sq)).lease?.resource).toBe("q/w");
  });

  it("resumes after any frame's cursor: a keep-alive at the cursor, every change after it in order, then live ones", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const w = watch(s, t, a);
    const pos = { cursor: (await snapshot(w)).cursor };
    await acquire(t, a, "one");
    await change(w, pos);
    const afterOne = pos.cursor;
    await acquire(t, a, "two");
    await acquire(t, a, "three");
    w.close();

    const r = resume(s, t, a, afterOne);
    const k = await r.next();
    expect({ kind: k.event.case, cursor: k.cursor }).toEqual({ kind: "keepAlive", cursor: afterOne });
    const at = { cursor: afterOne };
    expect(summary(await change(r, at))).toMatchObject({ kind: "GRANTED", name: "two" });
    expect(at.cursor).toBe(afterOne + 1n);
    expect(summary(await change(r, at))).toMatchObject({ kind: "GRANTED", name: "three" });
    await acquire(t, a, "four");
    expect(summary(await change(r, at))).toMatchObject({ kind: "GRANTED", name: "four" });
    expect(at.cursor).toBe(afterOne + 3n);
  });

  it("refuses a cursor the hub does not hold (CURSOR_EXPIRED): purged past retention, or ahead of the project's changes", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "q", tokens.q);
    await acquire(t, a, "one");
    await acquire(t, a, "two");
    await acquire(t, b, "other"); // another project's changes count for nothing here
    t.clock.advance(changeRetention.ms + 1);
    await t.hub.sweepNow();
    const purged = refusalOf(await resume(s, t, a, 0n).error());
    expect(purged).toMatchObject({ code: "out_of_range", reason: "CURSOR_EXPIRED", metadata: { afterSeq: "0", oldestSeq: "2" } });
    expect(refusalOf(await resume(s, t, a, 3n).error())).toMatchObject({ reason: "CURSOR_EXPIRED" });
    expect(refusalOf(await resume(s, t, a, -1n).error())).toMatchObject({ reason: "PROTOCOL_ERROR" });
    // At the head nothing is missing: the stream resumes, and a newer change comes through.
    const r = resume(s, t, a, 2n);
    expect((await r.next()).event.case).toBe("keepAlive");
    await acquire(t, a, "three");
    expect(summary(await change(r, { cursor: 2n }))).toMatchObject({ name: "three" });
  });

  it("sends keep-alives while idle", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const w = watch(s, t, a);
    const snap = await snapshot(w);
    await idle(t.clock);
    t.clock.advance(keepAliveMs);
    const k = await w.next();
    expect({ kind: k.event.case, cursor: k.cursor }).toEqual({ kind: "keepAlive", cursor: snap.cursor });
  });
});

describe("WatchLeases across a restart", () => {
  it("resumes on the restarted hub with a cursor it gave before", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-watch-"));
    const dataPath = path.join(dir, "kxm.db");
    try {
      let cursor: bigint;
      let agent: AgentCreds;
      {
        await using t = await startTestHub({ config: { ...config, dataPath } });
        using s = new StreamScope();
        agent = await t.register("alpha", "p", tokens.p);
        const client = createClient(LeaseService, streamProtocols[0]!.make(t.baseUrl, [withHeaders(agent.headers)]));
        const w = s.add((signal) => client.watchLeases({}, { signal }));
        const snap = await w.next();
        await client.acquireLease({ name: "one" });
        cursor = (await w.next()).cursor;
        expect(cursor).toBe(snap.cursor + 1n);
        await client.acquireLease({ name: "two" });
      }
      await using t = await startTestHub({ config: { ...config, dataPath } });
      using s = new StreamScope();
      const again = await t.register("alpha", "p", tokens.p); // resumes the agent, with a new key
      const client = createClient(LeaseService, streamProtocols[0]!.make(t.baseUrl, [withHeaders(again.headers)]));
      const r = s.add((signal) => client.watchLeases({ afterCursor: cursor }, { signal }));
      expect((await r.next()).event.case).toBe("keepAlive");
      const next = await r.next();
      expect(next.cursor).toBe(cursor + 1n);
      expect(next.event.case === "change" && next.event.value.lease?.name).toBe("two");
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("WatchLeases of an agent evicted as its stream opens", () => {
  it("ends with INVALID_AGENT_IDENTITY when the eviction lands between the stream's authentication and its start", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    using s = new StreamScope();
    const transport = (headers: Record<string, string>) => streamProtocols[1]!.make(t.baseUrl, [withHeaders(headers)]);
    const watcher = await t.register("watcher", "p", "tok-p");
    const holder = await t.register("holder", "p", "tok-p");
    const ops = createClient(OpsService, transport({ authorization: "Bearer tok-p" }));
    // The eviction lands while the stream's authentication reads the agent (its row as it was).
    const agents = t.hub.store.agents as { peekCaller: (id: string) => Promise<unknown> };
    const peek = agents.peekCaller.bind(agents);
    let armed = true;
    agents.peekCaller = async (id: string) => {
      const found = await peek(id);
      if (armed && id === watcher.id) {
        armed = false;
        await ops.evictAgent({ project: "p", agentId: watcher.id });
      }
      return found;
    };
    const w = s.add((signal) => createClient(LeaseService, transport(watcher.headers)).watchLeases({}, { signal }));
    const frames: string[] = [];
    let end = "open";
    try {
      frames.push(((await w.next()) as WatchLeasesResponse).event.case ?? "");
      await createClient(LeaseService, transport(holder.headers)).acquireLease({ name: "after-eviction", ttlMs: 60_000 });
      const f = (await w.next()) as WatchLeasesResponse;
      frames.push(`${f.event.case}:${f.event.case === "change" ? f.event.value.lease?.name : ""}`);
    } catch (e) {
      end = refusalOf(e).reason;
    }
    expect({ end, frames }).toEqual({ end: "INVALID_AGENT_IDENTITY", frames: [] });
  });
});
