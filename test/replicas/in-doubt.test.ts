import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { LeaseService, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService, type WatchPresenceResponse } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { AgentRow, Delivery } from "../../src/domain.js";
import { decideSend, expiredError, messageChange } from "../../src/peer/rules.js";
import { StoreClient } from "../../src/store/postgres/client.js";
import { bigintAsNumber, PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { refusalOf } from "../fixtures/rpc.js";
import { StreamScope } from "../fixtures/streams.js";

/**
 * Hubs on one PostgreSQL database when the way to it fails (a proxy between one hub and the
 * database): a COMMIT whose answer is lost with the database out of reach for a moment, one that
 * never reached the database, one still running when the connection went, and connections that
 * go silent. What a hub committed reaches its own watchers once it can learn so, as it reaches
 * the other hubs', and what it did not commit is never answered nor handed to them; a hub whose
 * connections went silent looks again on others; a backlog another hub committed is read at the
 * reader's pace.
 */

async function sql(url: string, text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  const c = new pg.Client({ connectionString: url, types: bigintAsNumber });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as Record<string, unknown>[];
  } finally {
    await c.end();
  }
}

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

const h2 = protocols[1];
const leasesOf = (t: TestHub, headers: Record<string, string>) => createClient(LeaseService, h2.make(t.baseUrl, [withHeaders(headers)]));


/**
 * A TCP proxy in front of PostgreSQL. `cutAfterCommit()`: the next COMMIT a client sends goes
 * through, the server's answer to it is dropped, every connection is cut and new ones are
 * refused until `heal()` (the database "unreachable" right after a commit). `cutWithCommit()`:
 * the next COMMIT a client sends goes through and its connection is cut at once, the server
 * still running it (the hub loses its connection while its COMMIT runs).
 */
async function startProxy(target: number) {
  type Pair = { client: net.Socket; upstream: net.Socket; frozen?: boolean; ending?: boolean };
  const pairs = new Set<Pair>();
  let refusing = false;
  let armed = false;
  let committed!: () => void;
  const commitCut = new Promise<void>((r) => (committed = r));
  let cutting = false;
  let cutMidCommit!: () => void;
  const midCommitCut = new Promise<void>((r) => (cutMidCommit = r));
  const cutAll = () => {
    for (const p of pairs) {
      p.client.destroy();
      p.upstream.destroy();
    }
    pairs.clear();
  };
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(target, "127.0.0.1");
    const pair: Pair = { client, upstream };
    pairs.add(pair);
    let watching = false;
    client.on("data", (d) => {
      if (pair.frozen) return;
      if (armed && d.includes("COMMIT")) {
        armed = false;
        watching = true;
      }
      upstream.write(d);
      if (cutting && d.includes("COMMIT")) {
        // The COMMIT goes on to the server (end() sends what was written first); the hub's
        // side is cut now.
        cutting = false;
        pair.ending = true;
        upstream.end();
        client.destroy();
        cutMidCommit();
      }
    });
    upstream.on("data", (d) => {
      if (pair.frozen || pair.ending) return;
      if (watching && d.includes("COMMIT")) {
        // The server committed; its answer never reaches the hub.
        refusing = true;
        cutAll();
        committed();
        return;
      }
      client.write(d);
    });
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      if (!pair.ending) upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    cutAfterCommit() {
      armed = true;
      return commitCut;
    },
    heal() {
      refusing = false;
    },
    cutWithCommit() {
      cutting = true;
      return midCommitCut;
    },
    /** The connections open now go silent both ways (a black hole: no RST, no FIN); new ones work. */
    freezeExisting() {
      for (const p of pairs) p.frozen = true;
    },
    cutFrozen() {
      for (const p of [...pairs]) if (p.frozen) {
        p.client.destroy();
        p.upstream.destroy();
      }
    },
    async close() {
      cutAll();
      await new Promise((r) => server.close(r));
    },
  };
}


describe("a commit whose answer is lost", () => {
  it("a RELEASED committed while the database was unreachable reaches the watchers of the hub that made it", async () => {
    const url = await server.createDatabase();
    const proxy = await startProxy(server.port);
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    // The hubs' time stands still: no activity write (a COMMIT of its own) comes before the release's.
    const clock = new FakeClock();
    try {
      await using a = await startTestHub({ clock, config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url: viaProxy.toString(), clock }) } });
      await using b = await startTestHub({ clock, config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url, clock }) } });
      using s = new StreamScope();
      const holder = await a.register("holder");
      const watcherA = await a.register("watcher-a");
      const watcherB = await b.register("watcher-b");
      const onA = s.add((signal) => leasesOf(a, watcherA.headers).watchLeases({}, { signal }));
      const onB = s.add((signal) => leasesOf(b, watcherB.headers).watchLeases({}, { signal }));
      const snapA = await onA.next();
      const snapB = await onB.next();
      expect([snapA.event.case, snapB.event.case]).toEqual(["snapshot", "snapshot"]);

      const cl = leasesOf(a, holder.headers);
      const g = await cl.acquireLease({ name: "deploy", ttlMs: 600_000 });
      const grantedA = (await onA.next()) as WatchLeasesResponse;
      const grantedB = (await onB.next()) as WatchLeasesResponse;
      expect([grantedA.cursor, grantedB.cursor]).toEqual([snapA.cursor + 1n, snapB.cursor + 1n]);

      // The release commits, then every connection of hub A drops and the database is out of
      // its reach for a moment: A cannot tell whether it committed and answers unavailable.
      const cut = proxy.cutAfterCommit();
      const release = cl.releaseLease({ name: "deploy", fencingToken: g.lease!.fencingToken });
      release.catch(() => undefined);
      await cut;
      const answered = await release.then(
        () => "ok",
        (e: unknown) => refusalOf(e).reason,
      );
      proxy.heal();
      const stored = await sql(url, "SELECT seq, body FROM watch_changes WHERE project = 'p' AND stream = 'leases' ORDER BY seq");
      expect(stored.length).toBe(2); // the release did commit
      expect(answered).toBe("STORE_UNAVAILABLE");

      // The holder retries, as a store_unavailable answer says it may.
      const retried = await cl.releaseLease({ name: "deploy", fencingToken: g.lease!.fencingToken }).then(
        () => "ok",
        (e: unknown) => refusalOf(e).reason,
      );

      // Hub B's watcher sees the release (its tail reads the row)...
      const seenB = (await onB.next()) as WatchLeasesResponse;
      expect(seenB.cursor).toBe(grantedB.cursor + 1n);
      // ... and hub A's own watcher must too: it is a committed change of the stream.
      let seenA: unknown;
      try {
        seenA = ((await onA.next()) as WatchLeasesResponse).cursor;
      } catch (e) {
        seenA = `${String(e)} (retry answered ${retried})`;
      }
      expect(seenA).toBe(grantedA.cursor + 1n);
    } finally {
      await proxy.close();
    }
  });
});


describe("a sweep over two projects whose COMMIT answer is lost", () => {
  it("the agents it marked stale reach the watchers of the hub that swept, as they reach another hub's", async () => {
    const url = await server.createDatabase();
    const proxy = await startProxy(server.port);
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    const clock = new FakeClock();
    const config = { cleanupIntervalMs: 3_600_000, projectTokens: { p: "tok-p", q: "tok-q" } };
    try {
      await using a = await startTestHub({ clock, config, overrides: { store: await PostgresStore.open({ url: viaProxy.toString(), clock }) } });
      await using b = await startTestHub({ clock, config, overrides: { store: await PostgresStore.open({ url, clock }) } });
      using s = new StreamScope();
      const watch = (t: TestHub) =>
        s.add((signal) =>
          createClient(PresenceService, h2.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-p" })])).watchPresence({ project: "p" }, { signal }),
        );
      const alpha = await a.register("alpha", "p", "tok-p");
      await a.register("omega", "q", "tok-q");
      const onA = watch(a);
      const onB = watch(b);
      const snapA = (await onA.next()) as WatchPresenceResponse;
      const snapB = (await onB.next()) as WatchPresenceResponse;
      expect([snapA.event.case, snapB.event.case]).toEqual(["snapshot", "snapshot"]);

      clock.jump(30_001); // both agents are stale now (no sleeper woken)
      const cut = proxy.cutAfterCommit();
      const swept = a.hub.sweepNow().then(
        () => "ok",
        (e: unknown) => String(e),
      );
      await cut;
      proxy.heal(); // the database is reachable again at once
      expect(await swept).toMatch(/cannot be reached/);
      const stored = await sql(url, "SELECT project, seq FROM watch_changes WHERE stream = 'presence' ORDER BY project, seq");
      // alpha's and omega's registrations, then both marked stale: the sweep committed.
      expect(stored.map((r) => r.project)).toEqual(["p", "p", "q", "q"]);

      const seenB = (await onB.next()) as WatchPresenceResponse;
      expect(seenB.event.case === "agent" && [seenB.event.value.id, seenB.event.value.online]).toEqual([alpha.id, false]);
      let seenA: unknown;
      try {
        const f = (await onA.next()) as WatchPresenceResponse;
        seenA = f.event.case === "agent" && [f.event.value.id, f.event.value.online];
      } catch (e) {
        seenA = String(e);
      }
      expect(seenA).toEqual([alpha.id, false]);
    } finally {
      await proxy.close();
    }
  });
});

describe("a batch whose COMMIT never reached the database", () => {
  it("is not answered as committed, nor handed to the hub's watchers, when a sweep of the same hub then wrote the same change number", async () => {
    // A send in project p holds p's head rows; its connection is lost before its COMMIT reaches
    // the server, so it rolls back. A message expiry sweep of the same store, over p and q (a
    // transaction of its own), was waiting for p's heads: it takes them and writes p's next
    // message change, the number the send had, with the same store's marks on it. The send's
    // in-doubt check runs only after that sweep has committed.
    const url = await server.createDatabase();
    const clock = new FakeClock();
    const a = await PostgresStore.open({ url, clock, tailIntervalMs: 3_600_000 });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const heard: string[] = [];
    const stop = a.changes.tailChanges((c) => heard.push(`${c.project}/${c.stream}/${c.seq} ${JSON.stringify(c.body)}`));
    const proto = StoreClient.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const query = proto.query;
    try {
      const agent = (id: string, project: string): AgentRow => ({ id, project, name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: clock.now(), online: true });
      for (const [id, p] of [["s", "p"], ["t", "p"], ["u", "q"], ["v", "q"]] as const) {
        await a.agents.decideAgentLeases({ project: p, nameKey: id }, () => ({ write: agent(id, p), result: 0 }));
      }
      const send = (project: string, from: string, to: string, id: string, ttlMs: number) => {
        const sender = { agentId: from, agentName: from, project };
        const input = { target: to, content: id, delivery: "followUp" as Delivery, hops: 0, maxHops: 3, ttlMs, allowOffline: true };
        return a.messages.decideSend({ senderId: from, project, target: to }, (ctx, now) => decideSend(ctx, { sender, input, id, nowMs: now }));
      };
      // A message due soon in each project: the expiry sweep spans p and q.
      await send("p", "s", "t", "msg_p1", 1_000);
      await send("q", "u", "v", "msg_q1", 1_000);
      clock.advance(5_000);

      let sweep: Promise<unknown> | undefined;
      let armed = true;
      /** The statements each connection was asked for while armed. */
      const asked = new Map<pg.Client, Promise<unknown>[]>();
      proto.query = function (this: pg.Client, ...args: unknown[]) {
        const text = typeof args[0] === "string" ? args[0] : (args[0] as { text?: string } | undefined)?.text;
        if (!armed || text !== "COMMIT") {
          const run = query.apply(this, args);
          if (armed && run instanceof Promise) asked.set(this, [...(asked.get(this) ?? []), run]);
          return run;
        }
        armed = false;
        // The batch's statements went out and ran; its COMMIT is lost with the connection once
        // they are answered and the sweep waits for p's heads. The batch learns of the loss once
        // the sweep has committed.
        return (async () => {
          await Promise.allSettled(asked.get(this) ?? []);
          sweep = a.messages.expireMessages(expiredError, messageChange, 100);
          sweep.catch(() => undefined);
          for (;;) {
            await admin.query("SELECT pg_stat_clear_snapshot()");
            const waiting = await admin.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
            if (waiting.rowCount) break;
          }
          (this as unknown as { connection: { stream: net.Socket } }).connection.stream.destroy();
          try {
            return await (query.apply(this, args) as Promise<unknown>);
          } catch (e) {
            await sweep.catch(() => undefined);
            throw e;
          }
        })();
      };
      const outcome = await send("p", "s", "t", "msg_p2", 600_000).then(
        (r) => `answered ${r.result.message.id}`,
        (e: unknown) => (e as Error).name,
      );
      proto.query = query;
      await sweep;
      expect([(await a.messages.getMessage("msg_p1"))?.status, (await a.messages.getMessage("msg_q1"))?.status]).toEqual(["expired", "expired"]);
      // The send did not commit: it is not answered as sent, and its change is not handed out.
      expect(await a.messages.getMessage("msg_p2")).toBeUndefined();
      expect(outcome).toBe("StoreUnavailable");
      const stored = await a.changes.readChanges("p", "messages", 0, 100);
      const storedNow = stored.changes.map((c) => `p/messages/${c.seq} ${JSON.stringify(c.body)}`);
      expect(storedNow.length).toBe(2); // msg_p1 sent, then expired
      expect(heard.filter((h) => h.startsWith("p/messages/"))).toEqual(storedNow);
    } finally {
      proto.query = query;
      stop();
      await admin.end();
      await a.close();
    }
  });
});

describe("a sweep over two projects whose connection is lost while its COMMIT runs", () => {
  it("its changes reach the watchers of the hub that swept once the COMMIT completes, as they reach another hub's", async () => {
    const url = await server.createDatabase();
    const proxy = await startProxy(server.port);
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    const clock = new FakeClock();
    const a = await PostgresStore.open({ url: viaProxy.toString(), clock, tailIntervalMs: 3_600_000 });
    const b = await PostgresStore.open({ url, clock, tailIntervalMs: 10 });
    const heardA: string[] = [];
    const heardB: string[] = [];
    const stopA = a.changes.tailChanges((c) => heardA.push(`${c.project}/${c.stream}/${c.seq}`));
    const stopB = b.changes.tailChanges((c) => heardB.push(`${c.project}/${c.stream}/${c.seq}`));
    try {
      const agent = (id: string, project: string): AgentRow => ({ id, project, name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: clock.now(), online: true });
      await a.agents.decideAgentLeases({ project: "p", nameKey: "x" }, () => ({ write: agent("x", "p"), result: 0 }));
      await a.agents.decideAgentLeases({ project: "q", nameKey: "y" }, () => ({ write: agent("y", "q"), result: 0 }));
      // A COMMIT that takes a moment on the server (a slow disk, a synchronous standby): here a
      // deferred trigger that sleeps 1.5 s at commit time.
      await sql(url, "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$");
      await sql(url, "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON watch_changes DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.project = 'q') EXECUTE FUNCTION slow_commit()");
      clock.advance(60_000);
      const cut = proxy.cutWithCommit();
      const swept = a.agents.sweepStaleAgents(30_000, (r) => ({ stream: "presence", body: { stale: r.id } })).then(
        () => "ok",
        (e: unknown) => (e as Error).name,
      );
      await cut;
      expect(await swept).toBe("StoreUnavailable");
      // The sweep committed: another hub hears both changes...
      for (let i = 0; i < 250 && heardB.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
      expect(heardB.sort()).toEqual(["p/presence/1", "q/presence/1"]);
      // ... and so do the watchers of the hub that swept (its tail skips its own rows).
      for (let i = 0; i < 250 && heardA.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
      expect(heardA.sort()).toEqual(["p/presence/1", "q/presence/1"]);
    } finally {
      stopA();
      stopB();
      await Promise.all([a.close(), b.close()]);
      await proxy.close();
    }
  });
});

describe("a token revocation whose COMMIT answer is lost", () => {
  it("ends the streams opened with the token on the hub that revoked it, as on the other hub", async () => {
    const url = await server.createDatabase();
    const proxy = await startProxy(server.port);
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    const admin = { authorization: "Bearer tok-admin" };
    const config = { cleanupIntervalMs: 3_600_000, authToken: "tok-admin" };
    try {
      await using a = await startTestHub({ config, overrides: { store: await PostgresStore.open({ url: viaProxy.toString() }) } });
      await using b = await startTestHub({ config, overrides: { store: await PostgresStore.open({ url }) } });
      const made = (await (await a.rest("/v1/ops/projects/p/tokens", { json: { scope: "read" }, headers: admin })).json()) as {
        secret: string;
        token: { tokenId: string };
      };
      const owner = (await (await a.rest("/v1/ops/projects/p/tokens", { json: { scope: "agent" }, headers: admin })).json()) as { secret: string };
      const holder = await a.register("holder", "p", owner.secret);
      const ends = (t: TestHub) => {
        const it = createClient(LeaseService, h2.make(t.baseUrl, [withHeaders({ authorization: `Bearer ${made.secret}` })]))
          .watchLeases({ project: "p" })
          [Symbol.asyncIterator]();
        const frames: string[] = [];
        const ended = (async () => {
          try {
            for (;;) {
              const r = await it.next();
              if (r.done) return "ended";
              frames.push(r.value.event.case ?? "");
            }
          } catch (e) {
            return e instanceof ConnectError ? Code[e.code] : String(e);
          }
        })();
        return { frames, ended, stop: () => void it.return?.() };
      };
      const onA = ends(a);
      const onB = ends(b);
      const deadline = Date.now() + 5_000;
      while ((onA.frames.length < 1 || onB.frames.length < 1) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect([onA.frames, onB.frames]).toEqual([["snapshot"], ["snapshot"]]);

      const cut = proxy.cutAfterCommit();
      const revoked = a.rest(`/v1/ops/projects/p/tokens/${made.token.tokenId}`, { method: "DELETE", headers: admin });
      await cut;
      const first = (await revoked).status;
      proxy.heal();
      const state = await sql(url, "SELECT scope, revoked_at IS NOT NULL AS revoked FROM project_tokens ORDER BY created_at");
      const retry = (await a.rest(`/v1/ops/projects/p/tokens/${made.token.tokenId}`, { method: "DELETE", headers: admin })).status;
      // Refused on both hubs now: the revocation committed.
      expect((await a.rest("/v1/leases?project=p", { headers: { authorization: `Bearer ${made.secret}` } })).status).toBe(401);
      expect(await onB.ended).toBe("Unauthenticated");

      // On hub A the stream opened with the revoked token goes on, and is sent the project's leases.
      await createClient(LeaseService, h2.make(a.baseUrl, [withHeaders(holder.headers)])).acquireLease({ name: "secret-plan", ttlMs: 60_000 });
      const outcome = await Promise.race([onA.ended, new Promise((r) => setTimeout(() => r(`still open after the revocation (first answer ${first}, retry ${retry}, token rows ${JSON.stringify(state)}), frames ${JSON.stringify(onA.frames)}`), 3_000))]);
      onA.stop();
      expect(outcome).toBe("Unauthenticated");
    } finally {
      await proxy.close();
    }
  });
});


describe("connections that go silent", () => {
  it("a hub whose pooled connections to the database were silently dropped still delivers other hubs' changes to its watchers once the database is reachable", async () => {
    const url = await server.createDatabase();
    const proxy = await startProxy(server.port);
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    try {
      await using a = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url }) } });
      await using b = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url: viaProxy.toString(), tailLookTimeoutMs: 500 }) } });
      using s = new StreamScope();
      const holder = await a.register("holder");
      const watcher = await b.register("watcher");
      const w = s.add((signal) => leasesOf(b, watcher.headers).watchLeases({}, { signal }));
      const snap = await w.next();
      const cl = leasesOf(a, holder.headers);
      await cl.acquireLease({ name: "one", ttlMs: 60_000 });
      expect((await w.next()).cursor).toBe(snap.cursor + 1n); // the tail works
      // Every connection hub b holds goes silent (a NAT or firewall dropped their state); the
      // database itself stays reachable: new connections work.
      proxy.freezeExisting();
      expect((await sql(viaProxy.toString(), "SELECT 1 AS ok"))[0]!.ok).toBe(1);
      await cl.acquireLease({ name: "two", ttlMs: 60_000 });
      let seen: unknown;
      try {
        seen = (await w.next()).cursor;
      } catch (e) {
        seen = String(e);
      }
      // Let the silent connections fail now, so the hubs can close.
      proxy.cutFrozen();
      expect(seen).toBe(snap.cursor + 2n);
    } finally {
      await proxy.close();
    }
  });
});


describe("maxLag across hubs, default settings", () => {
  it("a watcher on B that reads every frame as it comes is not cut off when B's tail delivers a backlog at once", async () => {
    const url = await server.createDatabase();
    await using a = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url }) } });
    await using b = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 }, overrides: { store: await PostgresStore.open({ url }) } });
    using s = new StreamScope();
    const agents = [];
    for (let i = 0; i < 10; i++) agents.push(await a.register(`ag${i}`));
    const watcher = await b.register("watcher");
    const w = s.add((signal) => leasesOf(b, watcher.headers).watchLeases({}, { signal }));
    const snap = await w.next();
    // Another client's transaction stays open on the server for a moment (docs/replicas.md: it
    // delays what the other hubs learn), while hub A commits 1,100 lease changes.
    const pin = new pg.Client({ connectionString: url });
    await pin.connect();
    await pin.query("BEGIN");
    await pin.query("SELECT pg_current_xact_id()");
    await Promise.all(
      agents.map(async (ag, i) => {
        const cl = leasesOf(a, ag.headers);
        for (let r = 0; r < 55; r++) {
          const g = await cl.acquireLease({ name: `res-${i}`, ttlMs: 60_000 });
          await cl.releaseLease({ name: `res-${i}`, fencingToken: g.lease!.fencingToken });
        }
      }),
    );
    await pin.query("COMMIT");
    await pin.end();
    let got = 0;
    let error = "none";
    try {
      for (; got < 1_100; got++) {
        const f = await w.next();
        if (f.event.case === "keepAlive") got--;
      }
    } catch (e) {
      error = `${refusalOf(e).reason} after ${got} frames, resumeAfterSeq=${refusalOf(e).metadata.resumeAfterSeq} (snapshot ${snap.cursor})`;
    }
    expect(error).toBe("none");
  }, 60_000);
});
