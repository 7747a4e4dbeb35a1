import { describe, expect, it } from "vitest";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  PresenceService,
  PresenceState,
  RuntimePresenceState,
  type Agent,
  type RuntimePresence,
  type WatchPresenceResponse,
} from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols } from "../fixtures/streams.js";

const keepAliveMs = 15_000;
const staleAfterMs = 30_000;
const tokens = { p: "tok-p", q: "tok-q" };
const config: Partial<HubConfig> = { projectTokens: tokens, authToken: "tok-admin", cleanupIntervalMs: 3_600_000 };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** PresenceService.WatchPresence, once per streaming wire, on a fresh hub per test. */
describe.each(streamProtocols)("WatchPresence over $name", (protocol) => {
  const presence = (t: TestHub, headers: Record<string, string>, transport?: Transport) =>
    createClient(PresenceService, transport ?? protocol.make(t.baseUrl, [withHeaders(headers)]));

  const register = (t: TestHub, name: string) => t.register(name, "p", tokens.p);

  /** Watches as an agent (own project) or with a bearer token naming `project`. */
  const watch = (s: StreamScope, t: TestHub, as: AgentCreds | string, project = "p") =>
    s.add((signal) =>
      typeof as === "string"
        ? presence(t, bearer(as)).watchPresence({ project }, { signal })
        : presence(t, as.headers).watchPresence({}, { signal }),
    );

  const heartbeatRuntime = (t: TestHub, runtimeId: string, host?: string) =>
    presence(t, bearer(tokens.p)).reportRuntimePresence({ project: "p", runtimeId, host });

  async function snapshot(f: Frames<WatchPresenceResponse>) {
    const r = await f.next();
    if (r.event.case !== "snapshot") throw new Error(`expected a snapshot, got ${r.event.case}`);
    return { cursor: r.cursor, ...r.event.value };
  }

  /** The next change frame (keep-alives skipped); cursors must grow. */
  async function change(f: Frames<WatchPresenceResponse>, after: { cursor: bigint }) {
    for (;;) {
      const r = await f.next();
      if (r.event.case === "keepAlive") continue;
      expect(r.cursor).toBeGreaterThan(after.cursor);
      after.cursor = r.cursor;
      if (r.event.case === "agent") return { agent: r.event.value as Agent };
      if (r.event.case === "runtime") return { runtime: r.event.value as RuntimePresence };
      throw new Error(`unexpected frame ${r.event.case}`);
    }
  }

  it("as an agent: a snapshot with offline agents and runtimes, then registrations, resumes, unregistrations, heartbeats", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await register(t, "alpha");
    const b = await register(t, "beta");
    await presence(t, b.headers).unregisterAgent({ agentId: b.id });
    await heartbeatRuntime(t, "rtm_runtime01", "box-1");
    await register(t, "other");
    await t.register("elsewhere", "q", tokens.q);

    const w = watch(s, t, a);
    const snap = await snapshot(w);
    expect(snap.agents.map((x) => [x.name, x.presence])).toEqual([
      ["alpha", PresenceState.ONLINE],
      ["beta", PresenceState.OFFLINE],
      ["other", PresenceState.ONLINE],
    ]);
    expect(snap.runtimes).toHaveLength(1);
    expect(snap.runtimes[0]).toMatchObject({ runtimeId: "rtm_runtime01", host: "box-1", presence: RuntimePresenceState.ONLINE });
    const pos = { cursor: snap.cursor };

    const g = await register(t, "gamma");
    expect((await change(w, pos)).agent).toMatchObject({ id: g.id, name: "gamma", online: true, presence: PresenceState.ONLINE });
    await presence(t, g.headers).unregisterAgent({ agentId: g.id });
    expect((await change(w, pos)).agent).toMatchObject({ id: g.id, online: false, presence: PresenceState.OFFLINE });
    const again = await register(t, "Beta");
    expect(again.id).toBe(b.id);
    expect((await change(w, pos)).agent).toMatchObject({ id: b.id, name: "Beta", online: true });

    t.clock.advance(5_000);
    const hb = (await heartbeatRuntime(t, "rtm_runtime01")).presence!;
    const rt = (await change(w, pos)).runtime!;
    expect(rt).toMatchObject({ runtimeId: "rtm_runtime01", presence: RuntimePresenceState.ONLINE });
    expect(rt.host).toBeUndefined();
    expect(ms(rt.heartbeatAt)).toBe(t.clock.now());
    expect(ms(rt.registeredAt)).toBe(ms(hb.registeredAt));
    expect(ms(rt.registeredAt)).toBe(t.clock.now() - 5_000);
    // Another project's registration is not seen: the next frame is this project's.
    await t.register("elsewhere-2", "q", tokens.q);
    const z = await register(t, "zeta");
    expect((await change(w, pos)).agent?.id).toBe(z.id);
  });

  it("with a project token: agents going stale and runtimes expiring on the sweep", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await register(t, "alpha");
    await heartbeatRuntime(t, "rtm_runtime01");
    const w = watch(s, t, tokens.p);
    const snap = await snapshot(w);
    expect(snap.agents.map((x) => x.id)).toEqual([a.id]);
    const pos = { cursor: snap.cursor };

    t.clock.advance(staleAfterMs + 1);
    await t.hub.sweepNow();
    expect((await change(w, pos)).agent).toMatchObject({ id: a.id, online: false, presence: PresenceState.OFFLINE });
    expect((await change(w, pos)).runtime).toMatchObject({ runtimeId: "rtm_runtime01", presence: RuntimePresenceState.EXPIRED });

    // Coming back: a heartbeat revives the agent, a runtime heartbeat reports it online again.
    await presence(t, a.headers).heartbeat({ agentId: a.id });
    expect((await change(w, pos)).agent).toMatchObject({ id: a.id, online: true, presence: PresenceState.ONLINE });
    await heartbeatRuntime(t, "rtm_runtime01");
    expect((await change(w, pos)).runtime).toMatchObject({ presence: RuntimePresenceState.ONLINE });
  });

  it("with the admin token: any project", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    await t.register("elsewhere", "q", tokens.q);
    const w = watch(s, t, "tok-admin", "q");
    const snap = await snapshot(w);
    expect(snap.agents.map((x) => x.name)).toEqual(["elsewhere"]);
    await register(t, "alpha");
    const b = await t.register("beta", "q", tokens.q);
    expect((await change(w, { cursor: snap.cursor })).agent?.id).toBe(b.id);
  });

  it("refuses a wrong token or another project's token (UNAUTHENTICATED, INVALID_AUTH)", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    for (const [token, project] of [["nope", "p"], [tokens.q, "p"], ["tok-adminx", "q"]] as const) {
      const e = refusalOf(await watch(s, t, token, project).error());
      expect(e).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    }
  });

  it("sends keep-alives while idle, at the hub-clock interval, with the current cursor", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    await register(t, "alpha");
    const w = watch(s, t, tokens.p);
    const snap = await snapshot(w);
    for (let i = 1; i <= 2; i++) {
      await idle(t.clock);
      t.clock.advance(keepAliveMs);
      const k = await w.next();
      expect({ kind: k.event.case, cursor: k.cursor }).toEqual({ kind: "keepAlive", cursor: snap.cursor });
      if (k.event.case === "keepAlive") expect(ms(k.event.value.at)).toBe(t.clock.now());
    }
  });

  it("fans one registration out to 200 concurrent watchers", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    // Four transports: over HTTP/2 that is four connections with 50 streams each.
    const transports = Array.from({ length: 4 }, () => protocol.make(t.baseUrl, [withHeaders(bearer(tokens.p))]));
    const watchers = Array.from({ length: 200 }, (_, i) =>
      s.add((signal) => presence(t, {}, transports[i % 4]).watchPresence({ project: "p" }, { signal })),
    );
    const snaps = await Promise.all(watchers.map(snapshot));
    expect(snaps.every((x) => x.agents.length === 0)).toBe(true);
    const a = await register(t, "alpha");
    const seen = await Promise.all(watchers.map((w, i) => change(w, { cursor: snaps[i]!.cursor })));
    expect(seen.filter((x) => x.agent?.id === a.id)).toHaveLength(200);
  });
});

describe("WatchPresence and a burst larger than the stream's lag", () => {
  const watchP = (t: TestHub, s: StreamScope) =>
    s.add((signal) => createClient(PresenceService, streamProtocols[1]!.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-p" })])).watchPresence({ project: "p" }, { signal }));

  it("reads every change of one sweep that marks more agents stale than the lag, at the reader's pace", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" }, streamMaxLag: 8 } });
    using s = new StreamScope();
    for (let i = 0; i < 10; i++) await t.register(`ag${i}`, "p", "tok-p");
    const w = watchP(t, s);
    const snap = (await w.next()) as WatchPresenceResponse;
    expect(snap.event.case).toBe("snapshot");
    t.clock.jump(30_001);
    await t.hub.sweepNow();
    const cursors: bigint[] = [];
    for (let i = 0; i < 10; i++) cursors.push(((await w.next()) as WatchPresenceResponse).cursor);
    expect(cursors).toEqual(Array.from({ length: 10 }, (_, i) => snap.cursor + BigInt(i + 1)));
  });
});
