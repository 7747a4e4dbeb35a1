import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import net from "node:net";
import pg from "pg";
import type { Decision } from "../../src/store/change-feed.js";
import { decideAcquire } from "../../src/lease/rules.js";
import { decideSend } from "../../src/peer/rules.js";
import { StoreOpenError, StoreUnavailable } from "../../src/store/store.js";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { StoreClient } from "../../src/store/postgres/client.js";
import { schemaVersion } from "../../src/store/postgres/schema.js";
import { sendTogether } from "../../src/store/postgres/transaction.js";
import { listenForInbox, replicaLockClass } from "../../src/store/postgres/inbox-notify.js";
import { createTail } from "../../src/store/postgres/tail.js";
import { ListenerCount } from "../../src/events/listening.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import type { AgentRow, Delivery, LeaseKey, LeaseRow } from "../../src/domain.js";

/**
 * What the PostgreSQL store must do beyond the contract suite: several stores on one database
 * (one per hub replica) keep one fence, and the schema is migrated once and checked.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

const key: LeaseKey = { project: "p", name: "repo/main" };
/** The presence change a forgotten agent records (presence.ts forgetOffline). */
const forgottenChange = (r: AgentRow) => ({ stream: "presence" as const, body: { forgotten: { id: r.id, name: r.name } } });

/**
 * The backends of this database waiting for a lock now, seen from `c`. The activity as of now: a
 * transaction reads one snapshot of it unless it clears it first.
 */
async function lockWaiters(c: pg.Client): Promise<number[]> {
  await c.query("SELECT pg_stat_clear_snapshot()");
  return (await c.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows.map((r) => r.pid);
}

/** The lease rules' own acquire, for agent `id` of project p (60 s). */
const decideAcquireFor = (id: string, name: string, nowMs: number, cur: LeaseRow | undefined, waiters: Parameters<typeof decideAcquire>[2]) =>
  decideAcquire(cur, { name, holder: { agentId: id, agentName: id, project: "p" }, ttlMs: 60_000, nowMs }, waiters);

/** Grants the lease to `holder` when nobody holds it (the lease rules in miniature); "held" else. */
const acquire = (holder: string) => (cur: LeaseRow | undefined): Decision<LeaseRow, number | "held"> => {
  if (cur?.holderAgentId) return { result: "held" };
  const token = (cur?.fencingToken ?? 0) + 1;
  const write: LeaseRow = { ...key, holderAgentId: holder, holderAgentName: holder, fencingToken: token, acquiredAtMs: 1, expiresAtMs: 2 };
  return { write, result: token };
};
const release = (holder: string, token: number) => (cur: LeaseRow | undefined): Decision<LeaseRow, boolean> =>
  cur?.holderAgentId === holder && cur.fencingToken === token
    ? { write: { ...cur, holderAgentId: null, holderAgentName: null }, result: true }
    : { result: false };

describe("PostgreSQL store", () => {
  it("three stores on one database race for one lease: one winner a round, tokens strictly growing", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open({ url })));
    try {
      const tokens: number[] = [];
      for (let round = 0; round < 20; round++) {
        // 50 agents spread over the three stores, all at once.
        const answers = await Promise.all(
          Array.from({ length: 50 }, (_, i) => stores[i % 3]!.leases.decideLease(key, acquire(`agt_${round}_${i}`)).then((r) => ({ i, r }))),
        );
        const winners = answers.filter((a) => a.r !== "held");
        expect(winners).toHaveLength(1);
        const { i, r } = winners[0]!;
        const token = r as number;
        tokens.push(token);
        expect(await stores[(i + 1) % 3]!.leases.decideLease(key, release(`agt_${round}_${i}`, token))).toBe(true);
      }
      expect(tokens).toEqual(Array.from({ length: 20 }, (_, k) => k + 1));
      expect((await stores[2]!.leases.getLease(key))?.fencingToken).toBe(20);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("an open store holds its replica's liveness lock already, so a call it queues at once is not taken for one of a hub that is gone (D79)", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open({ url })));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks
          WHERE locktype = 'advisory' AND classid = $1 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        [replicaLockClass],
      );
      expect(rows[0]!.n).toBe(3);
    } finally {
      await client.end();
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("three stores deciding on one project at once batch their decisions, never deadlock, and number its changes without a gap", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open({ url })));
    try {
      const names = ["n0", "n1", "n2", "n3"];
      const agent = (i: number): AgentRow => ({ id: `agt_${i}`, project: "p", name: `a${i}`, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (let i = 0; i < names.length; i++) {
        await stores[0]!.agents.decideAgentLeases({ project: "p", nameKey: `a${i}` }, () => ({ write: agent(i), change: { stream: "presence", body: { i } }, result: 0 }));
      }
      // Each lease decision flips its lease (held by its agent, or released) and records a change.
      const flip = (i: number) => (cur: LeaseRow | undefined, nowMs: number, _w: unknown, holder: AgentRow | undefined) => {
        const held = cur?.holderAgentId != null;
        const write: LeaseRow = {
          project: "p",
          name: names[i]!,
          holderAgentId: held ? null : holder!.id,
          holderAgentName: held ? null : holder!.name,
          fencingToken: (cur?.fencingToken ?? 0) + (held ? 0 : 1),
          acquiredAtMs: nowMs,
          expiresAtMs: nowMs + 60_000,
        };
        return { write, change: { stream: "leases" as const, body: { name: names[i], held: !held } }, result: write.fencingToken };
      };
      const decided: Promise<unknown>[] = [];
      for (let round = 0; round < 15; round++) {
        for (const [s, store] of stores.entries()) {
          for (let i = 0; i < names.length; i++) decided.push(store.leases.decideLease({ project: "p", name: names[i]! }, flip(i), `agt_${i}`));
          // Between them, decisions on the agents (what an eviction or a key rotation locks) and a sweep.
          decided.push(
            store.agents.decideAgent(`agt_${(round + s) % names.length}`, (cur) => ({ write: { ...cur!, lastSeenAtMs: round }, change: { stream: "presence", body: { round } }, result: 0 })),
          );
          decided.push(store.agents.sweepStaleAgents(3_600_000, (a) => ({ stream: "presence", body: { stale: a.id } })));
        }
      }
      const outcomes = await Promise.allSettled(decided);
      expect(outcomes.filter((o) => o.status === "rejected")).toEqual([]);
      // Batches formed: more decisions than commits.
      const stats = stores.map((st) => st.commitStats());
      expect(stats.reduce((n, st) => n + st.works, 0)).toBeGreaterThan(stats.reduce((n, st) => n + st.commits, 0));
      // Every change numbered once, 1..N in each stream, whichever store made it.
      const leaseChanges = await stores[1]!.changes.readChanges("p", "leases", 0, 10_000);
      expect(leaseChanges.changes.map((c) => c.seq)).toEqual(Array.from({ length: 15 * 3 * names.length }, (_, k) => k + 1));
      const presence = await stores[2]!.changes.readChanges("p", "presence", 0, 10_000);
      // Registrations, agent decisions, and each agent swept offline once (last seen long ago; nothing sets it online again).
      expect(presence.changes.map((c) => c.seq)).toEqual(Array.from({ length: names.length + 15 * 3 + names.length }, (_, k) => k + 1));
      expect(presence.changes.filter((c) => (c.body as { stale?: string }).stale !== undefined)).toHaveLength(names.length);
      // Each lease's token went up by one per grant: 45 decisions, alternately grant and release.
      for (const name of names) expect((await stores[0]!.leases.getLease({ project: "p", name }))?.fencingToken).toBe(23);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
    // No deadlock was found: each connection's statistics are reported when it ends.
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      for (;;) {
        const [row] = (await c.query<{ others: number }>("SELECT count(*)::int AS others FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")).rows;
        if (row!.others === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const [stats] = (await c.query<{ deadlocks: string }>("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")).rows;
      expect(Number(stats!.deadlocks)).toBe(0);
    } finally {
      await c.end();
    }
  });

  it("three stores sending in one project at once number each inbox without a gap, and keep one message per idempotency key", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open({ url })));
    try {
      const agent = (i: number): AgentRow => ({ id: `agt_${i}`, project: "p", name: `A${i}`, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (let i = 0; i < 4; i++) await stores[0]!.agents.decideAgentLeases({ project: "p", nameKey: `a${i}` }, () => ({ write: agent(i), result: 0 }));
      const send = (store: PostgresStore, from: number, target: string, n: number, key?: string, content?: string) => {
        const sender = { agentId: `agt_${from}`, agentName: `A${from}`, project: "p" };
        const input = { target, content: content ?? key ?? `m${n}`, delivery: "followUp" as Delivery, hops: 0, maxHops: 3, ttlMs: 60_000, allowOffline: false, ...(key && { idempotencyKey: key }) };
        return store.messages.decideSend({ senderId: sender.agentId, project: "p", target, ...(key && { idempotencyKey: key }) }, (ctx, nowMs) =>
          decideSend(ctx, { sender, input, id: `msg_${n}`, nowMs }),
        );
      };
      const sent: Promise<{ result: { message: { id: string }; idempotent: boolean } }>[] = [];
      let n = 0;
      for (let round = 0; round < 20; round++) {
        for (const store of stores) {
          // To agt_0 by id and by its name in another case, to agt_1; and a key sent twice a round (the same request).
          sent.push(send(store, 2, "agt_0", n++), send(store, 3, "a0", n++), send(store, 2, "agt_1", n++));
          sent.push(send(store, 3, "agt_1", n++, `k${round}`), send(store, 3, "agt_1", n++, `k${round}`));
        }
      }
      // A refusal among them changes nothing: an unknown target. A lone surrogate in a content
      // is stored as the driver encodes any string parameter (U+FFFD), not refused by the server.
      const refused = send(stores[1]!, 2, "nobody", n++).catch((e: unknown) => e);
      const answers = await Promise.all(sent);
      expect(await refused).toMatchObject({ code: "target_not_found" });
      const odd = await send(stores[1]!, 2, "agt_1", n++, undefined, "x\ud800y");
      expect((await stores[0]!.messages.getMessage(odd.result.message.id))?.content).toBe("x\ufffdy");
      const stats = stores.map((st) => st.commitStats());
      expect(stats.reduce((k, st) => k + st.works, 0)).toBeGreaterThan(stats.reduce((k, st) => k + st.commits, 0));
      // One message per key: 20 rounds x 3 stores x 2 sends of it, one kept per round.
      const keyed = answers.filter((_, i) => i % 5 >= 3);
      expect(new Set(keyed.map((a) => a.result.message.id)).size).toBe(20);
      expect(keyed.filter((a) => !a.result.idempotent)).toHaveLength(20);
      for (const [agentId, count] of [["agt_0", 120], ["agt_1", 81]] as const) {
        const events = await stores[2]!.messages.readInbox(agentId, 0, 1_000);
        expect(events.map((e) => e.seq)).toEqual(Array.from({ length: count }, (_, k) => k + 1));
        for (const e of events) expect(e.message.seq).toBe(e.seq);
        expect((await stores[0]!.messages.inboxState(agentId)).head).toBe(count);
      }
      const changes = await stores[0]!.changes.readChanges("p", "messages", 0, 10_000);
      expect(changes.changes.map((c) => c.seq)).toEqual(Array.from({ length: 201 }, (_, k) => k + 1));
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("a connection lost in the middle of a batch answers none of it, keeps none of it, and the next batch runs", async () => {
    const url = await server.createDatabase();
    const store = await PostgresStore.open({ url });
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const row: AgentRow = { id: "agt_k", project: "p", name: "k", purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true };
      await store.agents.decideAgentLeases({ project: "p", nameKey: "k" }, () => ({ write: row, result: 0 }));
      // Another session holds the agent's row, so the batch's second decision waits for it.
      await other.query("BEGIN");
      await other.query("SELECT 1 FROM agents WHERE id = 'agt_k' FOR UPDATE");
      const granted = (cur: LeaseRow | undefined, nowMs: number) => ({
        write: { ...key, holderAgentId: "agt_k", holderAgentName: "k", fencingToken: (cur?.fencingToken ?? 0) + 1, acquiredAtMs: nowMs, expiresAtMs: nowMs + 60_000 },
        change: { stream: "leases" as const, body: { granted: true } },
        result: 1,
      });
      // Submitted together: one batch, the lease decided and written first, then the registration waits.
      const lease = store.leases.decideLease(key, granted);
      const registration = store.agents.decideAgentLeases({ project: "p", nameKey: "k" }, (cur) => ({ write: { ...cur!, lastSeenAtMs: 2 }, result: 0 }));
      registration.catch(() => undefined); // refused with the lease, before the test looks at it
      let waiting: number | undefined;
      while (waiting === undefined) waiting = (await lockWaiters(other))[0];
      await other.query("SELECT pg_terminate_backend($1)", [waiting]);
      await expect(lease).rejects.toBeInstanceOf(StoreUnavailable);
      await expect(registration).rejects.toBeInstanceOf(StoreUnavailable);
      await other.query("ROLLBACK");
      // Nothing of the batch stayed: no lease row, no change; the next batch decides on what is there.
      expect(await store.leases.getLease(key)).toBeUndefined();
      expect(await store.changes.readChanges("p", "leases", 0, 10)).toEqual({ head: 0, changes: [] });
      expect(await store.leases.decideLease(key, granted)).toBe(1);
      expect((await store.leases.getLease(key))?.fencingToken).toBe(1);
      expect((await store.changes.readChanges("p", "leases", 0, 10)).changes.map((c) => c.seq)).toEqual([1]);
    } finally {
      await other.end();
      await store.close();
    }
  });

  it("raise-fence waits for a project's first decision in flight: its lease ends released above the new base, its heads too", async () => {
    const url = await server.createDatabase();
    const store = await PostgresStore.open({ url });
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const fresh: LeaseKey = { project: "q", name: "r" };
      const granted = (cur: LeaseRow | undefined, nowMs: number) => ({
        write: { ...fresh, holderAgentId: "agt_q", holderAgentName: "q", fencingToken: (cur?.fencingToken ?? 0) + 1, acquiredAtMs: nowMs, expiresAtMs: nowMs + 60_000 },
        change: { stream: "leases" as const, body: { granted: true } },
        result: (cur?.fencingToken ?? 0) + 1,
      });
      // Another session inserts the lease row and keeps it uncommitted: the decision creates
      // project q's head rows at the fence base, reads the floor, then waits on that row.
      await other.query("BEGIN");
      await other.query("INSERT INTO leases (project, name, fencing_token, acquired_at, expires_at) VALUES ('q', 'r', 1, 0, 0)");
      const decision = store.leases.decideLease(fresh, granted);
      while ((await lockWaiters(other)).length < 1);
      // raise-fence now must wait for the decision: a row it has not committed yet is one a
      // snapshot would miss, and it stands on the old base.
      let raiseSettled = false;
      const raised = store.raiseFence(1000).finally(() => (raiseSettled = true));
      while (!raiseSettled && (await lockWaiters(other)).length < 2);
      await other.query("ROLLBACK");
      expect(await decision).toBe(1);
      expect(await raised).toMatchObject({ fenceBase: 1000, leasesReleased: 1, highestTokenBefore: 1 });
      expect(await store.leases.getLease(fresh)).toMatchObject({ holderAgentId: null, fencingToken: 1001 });
      expect((await store.changes.readChanges("q", "leases", 0, 10)).head).toBe(1001);
      expect(await store.leases.decideLease(fresh, granted)).toBe(1002);
    } finally {
      await other.end();
      await store.close();
    }
  });

  it("a sweep on another hub does not forget an agent a batch of sends is about to name", async () => {
    const url = await server.createDatabase();
    const [a, b] = await Promise.all([PostgresStore.open({ url }), PostgresStore.open({ url })]);
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const agent = (id: string, online: boolean, lastSeenAtMs: number): AgentRow => ({ id, project: "p", name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs, online });
      await a.agents.decideAgentLeases({ project: "p", nameKey: "agt_s" }, () => ({ write: agent("agt_s", true, 1), result: 0 }));
      await a.agents.decideAgentLeases({ project: "p", nameKey: "agt_y" }, () => ({ write: agent("agt_y", true, 1), result: 0 }));
      // X has been offline long enough to be forgotten, and nothing names it yet.
      await a.agents.decideAgentLeases({ project: "p", nameKey: "agt_x" }, () => ({ write: agent("agt_x", false, 1), result: 0 }));
      const sender = { agentId: "agt_s", agentName: "agt_s", project: "p" };
      const send = (target: string, n: number) => {
        const input = { target, content: `m${n}`, delivery: "followUp" as Delivery, hops: 0, maxHops: 3, ttlMs: 600_000, allowOffline: true };
        return a.messages.decideSend({ senderId: "agt_s", project: "p", target }, (ctx, nowMs) => decideSend(ctx, { sender, input, id: `msg_${n}`, nowMs }));
      };
      await send("agt_y", 0);
      // Another session holds Y's inbox stream: the next batch (sends to Y and to X) has read
      // what it decides on and waits there.
      await other.query("BEGIN");
      await other.query("SELECT 1 FROM inbox_streams WHERE agent_id = 'agt_y' FOR UPDATE");
      const toY = send("agt_y", 1);
      const toX = send("agt_x", 2);
      while ((await lockWaiters(other)).length === 0);
      // The sweep records its changes in the project's presence stream: it waits for the batch
      // in flight (which holds the project's heads), and then sees the message it sent to X.
      const forgetting = b.agents.forgetAgents(60_000, forgottenChange);
      await other.query("ROLLBACK");
      await Promise.all([toY, toX]);
      const forgotten = await forgetting;
      expect(forgotten.map((f) => f.id)).not.toContain("agt_x");
      expect(await a.agents.getAgent("agt_x")).toMatchObject({ id: "agt_x" });
      expect(await a.messages.getMessage("msg_2")).toMatchObject({ toId: "agt_x", status: "queued" });
      // Once the message is no longer open the agent can go; while it is, the sweep leaves it.
      expect((await b.agents.forgetAgents(60_000, forgottenChange)).map((f) => f.id)).not.toContain("agt_x");
    } finally {
      await other.end();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("the message purge on another hub takes inbox streams in the order a batch of sends does: neither waits on the other in a cycle", async () => {
    const url = await server.createDatabase();
    const [a, b] = await Promise.all([PostgresStore.open({ url }), PostgresStore.open({ url })]);
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    const failed: string[] = [];
    const query = StoreClient.prototype.query;
    // Every error a statement of the stores meets (a deadlock is retried by the store, so it is
    // seen on its way out of the driver, not in the outcomes).
    StoreClient.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const r = (query as (...a: unknown[]) => unknown).apply(this, args);
      if (r instanceof Promise) r.catch((e: { code?: string }) => failed.push(String(e?.code)));
      return r;
    } as typeof query;
    try {
      const agent = (id: string): AgentRow => ({ id, project: "p", name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (const id of ["agt_s", "agt_a", "agt_z"]) await a.agents.decideAgentLeases({ project: "p", nameKey: id }, () => ({ write: agent(id), result: 0 }));
      const sender = { agentId: "agt_s", agentName: "agt_s", project: "p" };
      const send = (target: string, id: string) => {
        const input = { target, content: id, delivery: "followUp" as Delivery, hops: 0, maxHops: 3, ttlMs: 600_000, allowOffline: true };
        return a.messages.decideSend({ senderId: "agt_s", project: "p", target }, (ctx, nowMs) => decideSend(ctx, { sender, input, id, nowMs }));
      };
      // Two ended messages, the first (by id) to Z, the second to A: in message order the purge
      // took Z's stream, then A's; a batch of sends to A and Z takes A's, then Z's.
      await send("agt_z", "msg_1");
      await send("agt_a", "msg_2");
      await other.query("UPDATE messages SET status = 'cancelled', cancelled_at = 1 WHERE id IN ('msg_1', 'msg_2')");
      // Another session holds the second message's event: the purge (hub b) waits there.
      await other.query("BEGIN");
      await other.query("SELECT 1 FROM inbox_events WHERE message_id = 'msg_2' FOR UPDATE");
      const purge = b.messages.purgeMessages(1_000, 100);
      purge.catch(() => undefined);
      while ((await lockWaiters(other)).length < 1);
      // Hub a's batch of sends to A and Z goes through while the purge waits: the purge holds no
      // stream yet. (Taken in message order, it held Z's, and the batch waited for it.)
      const sends = Promise.all([send("agt_a", "msg_3"), send("agt_z", "msg_4")]);
      let sent = false;
      void sends.then(() => (sent = true), () => (sent = true));
      while (!sent) expect((await lockWaiters(other)).length, "a send waits for the purge").toBeLessThan(2);
      await sends;
      await other.query("ROLLBACK");
      expect((await purge).map((m) => m.id).sort()).toEqual(["msg_1", "msg_2"]);
      expect(failed).not.toContain("40P01");
      expect(await a.messages.inboxState("agt_a")).toMatchObject({ purgedThrough: 1, head: 2 });
      expect(await a.messages.inboxState("agt_z")).toMatchObject({ purgedThrough: 1, head: 2 });
    } finally {
      StoreClient.prototype.query = query;
      await other.end();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("a hub gone in the middle of a transaction, its connection left open, holds its project's heads only until the server ends that transaction (D90)", async () => {
    const url = await server.createDatabase();
    const gone = await PostgresStore.open({ url, idleInTransactionMs: 300 });
    const other = await PostgresStore.open({ url });
    try {
      expect(await other.leases.decideLease(key, acquire("agt_b"))).toBe(1);
      // What a batch of the gone hub was doing when its host went: the project's heads locked,
      // then nothing more, and nothing closes its connection.
      const client = await (gone as unknown as { pool: pg.Pool }).pool.connect();
      const ended = new Promise<Error>((resolve) => client.on("error", resolve));
      await client.query("BEGIN");
      await client.query("SELECT head FROM watch_heads WHERE project = 'p' FOR UPDATE");
      // The other hub's next decision on the project waits for the heads, and has them once the
      // server has ended that transaction with its session.
      expect(await other.leases.decideLease(key, release("agt_b", 1))).toBe(true);
      expect(((await ended) as Error & { code?: string }).code).toBe("25P03");
      client.release(true);
    } finally {
      await gone.close();
      await other.close();
    }
  });

  it("every connection of a hub asks the server to end a transaction left idle and to probe it once silent, where nothing else set them (D90)", async () => {
    const url = await server.createDatabase();
    const show = async (store: PostgresStore) => {
      const client = await (store as unknown as { pool: pg.Pool }).pool.connect();
      try {
        const { rows } = await client.query<{ replica: string; idle: string; keepalives: string }>(
          `SELECT current_setting('kxm.replica') AS replica, current_setting('idle_in_transaction_session_timeout') AS idle,
             concat_ws(' ', current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'),
             current_setting('tcp_user_timeout')) AS keepalives`,
        );
        return rows[0]!;
      } finally {
        client.release();
      }
    };
    const opened = async (at: string) => {
      const store = await PostgresStore.open({ url: at });
      try {
        return await show(store);
      } finally {
        await store.close();
      }
    };
    const plain = await opened(url);
    expect(plain).toMatchObject({ idle: "10s", keepalives: "10 5 3 25000" });
    expect(plain.replica).toMatch(/^kxm-hub /);
    // A parameter the database URL names wins, as does the database's own setting.
    expect((await opened(`${url}?idle_in_transaction_session_timeout=60000`)).idle).toBe("1min");
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await admin.query(`ALTER DATABASE ${admin.database} SET idle_in_transaction_session_timeout = '2min'`);
      await admin.query(`ALTER DATABASE ${admin.database} SET tcp_keepalives_count = 7`);
    } finally {
      await admin.end();
    }
    expect(await opened(url)).toMatchObject({ idle: "2min", keepalives: "10 5 7 25000" });
  });

  it("a batch that waited for its project's heads decides at a time after the wait, not at the time it began waiting", async () => {
    const url = await server.createDatabase();
    const [a, b] = await Promise.all([PostgresStore.open({ url }), PostgresStore.open({ url })]);
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const agent = (id: string): AgentRow => ({ id, project: "p", name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (const id of ["h1", "h9"]) await a.agents.decideAgentLeases({ project: "p", nameKey: id }, () => ({ write: agent(id), result: 0 }));
      const dbNow = async () => Number((await other.query<{ ms: string }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms")).rows[0]!.ms);
      // Hub b's batch holds p's heads (a presence decision, which moves the presence head but
      // not the lease head) while it waits for a row another session holds.
      await other.query("BEGIN");
      await other.query("SELECT 1 FROM agents WHERE id = 'h9' FOR UPDATE");
      const bBatch = b.agents.decideAgent("h9", (cur, nowMs) => ({ write: { ...cur!, lastSeenAtMs: nowMs }, change: { stream: "presence" as const, body: {} }, result: 0 }));
      while ((await lockWaiters(other)).length < 1);
      const grant = (name: string) =>
        a.leases.decideLease({ project: "p", name }, (cur, nowMs, waiters) => decideAcquireFor("h1", name, nowMs, cur, waiters));
      const first = grant("one");
      while ((await lockWaiters(other)).length < 2);
      // Hub a's batch waits for the heads; the database's clock moves on by 20 ms meanwhile, and
      // a second request arrives.
      const waitingSince = await dbNow();
      while ((await dbNow()) < waitingSince + 20);
      const sentAtMs = Date.now();
      const second = grant("two");
      await other.query("ROLLBACK");
      await bBatch;
      // Both were decided once the heads were hub a's, which was after the second was sent.
      for (const decided of [await first, await second]) {
        expect((decided as { lease: { acquiredAtMs: number } }).lease.acquiredAtMs).toBeGreaterThanOrEqual(sentAtMs);
      }
    } finally {
      await other.end();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("a COMMIT whose answer is lost is looked up: the batch that committed is answered, and its changes reach this hub's watchers", async () => {
    const url = await server.createDatabase();
    // A proxy that, once armed, cuts the connection on which PostgreSQL answers a COMMIT, before
    // that answer reaches the hub: the transaction committed, and the hub cannot know.
    let armed = false;
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((client) => {
      const upstream = net.connect(server.port, "127.0.0.1");
      sockets.add(client).add(upstream);
      client.on("data", (d) => upstream.write(d));
      upstream.on("data", (d) => {
        if (armed && d.includes(Buffer.from("COMMIT\0"))) {
          armed = false;
          client.destroy();
          upstream.destroy();
        }
        if (!client.destroyed) client.write(d);
      });
      for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
        a.on("error", () => b.destroy());
        a.on("close", () => b.destroy());
      }
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const viaProxy = url.replace(`:${server.port}/`, `:${(proxy.address() as net.AddressInfo).port}/`);
    // Hub a's tail does not look while the test runs: no COMMIT of its own goes through the proxy.
    const [a, b] = await Promise.all([PostgresStore.open({ url: viaProxy, tailIntervalMs: 3_600_000 }), PostgresStore.open({ url })]);
    const heardA: number[] = [];
    const heardB: number[] = [];
    const stopA = a.changes.tailChanges((c) => heardA.push(c.seq));
    const stopB = b.changes.tailChanges((c) => heardB.push(c.seq));
    try {
      const fresh: LeaseKey = { project: "p", name: "r" };
      const granted = (cur: LeaseRow | undefined, nowMs: number) => ({
        write: { ...fresh, holderAgentId: "agt_a", holderAgentName: "a", fencingToken: (cur?.fencingToken ?? 0) + 1, acquiredAtMs: nowMs, expiresAtMs: nowMs + 60_000 },
        change: { stream: "leases" as const, body: { granted: true } },
        result: (cur?.fencingToken ?? 0) + 1,
      });
      armed = true;
      // Answered as what it was: a grant, committed; the lease is there for both hubs.
      expect(await a.leases.decideLease(fresh, granted)).toBe(1);
      expect(armed).toBe(false);
      expect((await b.leases.getLease(fresh))?.fencingToken).toBe(1);
      expect(heardA).toEqual([1]);
      while (heardB.length === 0) await new Promise((r) => setTimeout(r, 5));
      expect(heardB).toEqual([1]);
      // The next batch runs on a new connection.
      expect(await a.leases.decideLease({ project: "p", name: "s" }, (cur, nowMs) => ({ ...granted(cur, nowMs), write: { ...granted(cur, nowMs).write, name: "s" } }))).toBe(1);
      expect(heardA).toEqual([1, 2]);
    } finally {
      stopA();
      stopB();
      await Promise.all([a.close(), b.close()]);
      for (const s of sockets) s.destroy();
      proxy.close();
    }
  });

  it("a batch run again with a savepoint per decision takes the next batch's transaction, begun ahead on its heads (D84): it never waits on it", async () => {
    const url = await server.createDatabase();
    const store = await PostgresStore.open({ url });
    try {
      const agent = (id: string): AgentRow => ({ id, project: "p", name: id, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (const id of ["agt_a", "agt_b", "agt_c"]) await store.agents.decideAgent(id, () => ({ write: agent(id), result: 0 }), "p");
      // Connections open and idle in the pool, so the transaction begun ahead asks for the heads
      // at once, before the batch below gives them up.
      await Promise.all(Array.from({ length: 6 }, () => store.agents.getAgent("agt_a")));
      const seen = (id: string, n: number) => store.agents.decideAgent(id, (cur) => ({ write: { ...cur!, lastSeenAtMs: n }, result: n }), "p");
      let later: Promise<number>[] | undefined;
      // In the batch first; as it decides, the batch is in flight, and what is queued now has the
      // next batch's transaction begun ahead, waiting on the heads.
      const first = store.agents.decideAgent(
        "agt_a",
        (cur) => {
          later ??= [seen("agt_c", 3), seen("agt_a", 4)];
          return { write: { ...cur!, lastSeenAtMs: 2 }, result: 2 };
        },
        "p",
      );
      // Second in the batch: it writes, then throws, so the batch is rolled back (giving up the
      // heads) and runs again with a savepoint per decision.
      const undone = store.agents.decideAgent(
        "agt_b",
        (cur) => ({
          write: { ...cur!, lastSeenAtMs: 99 },
          result: 0,
          get change(): never {
            throw new Error("refused");
          },
        }),
        "p",
      );
      await expect(undone).rejects.toThrow("refused");
      expect(await first).toBe(2);
      expect(later).toBeDefined();
      expect(await Promise.all(later!)).toEqual([3, 4]);
      expect(await Promise.all(["agt_a", "agt_b", "agt_c"].map(async (id) => (await store.agents.getAgent(id))?.lastSeenAtMs))).toEqual([4, 1, 3]);
    } finally {
      await store.close();
    }
  }, 15_000);

  it("stores opening together migrate the database once, and a newer schema is refused", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresStore.open({ url })));
    await Promise.all(stores.map((s) => s.close()));
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      expect((await c.query("SELECT version FROM kxm_schema")).rows).toEqual([{ version: schemaVersion }]);
      await c.query("UPDATE kxm_schema SET version = version + 1");
    } finally {
      await c.end();
    }
    const e = await PostgresStore.open({ url }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(StoreOpenError);
    expect((e as StoreOpenError).code).toBe("runtime_schema_newer");
  });

  it("is not ready while the database is down, and serves again when it is back", async () => {
    const own = await startPostgres();
    try {
      const store = await PostgresStore.open({ url: await own.createDatabase() });
      expect(await store.ready()).toBe(true);
      expect(await store.leases.decideLease(key, acquire("agt_a"))).toBe(1);
      own.stopServer("immediate");
      expect(await store.ready()).toBe(false);
      await expect(store.leases.decideLease(key, acquire("agt_b"))).rejects.toThrow();
      own.startServer();
      expect(await store.ready()).toBe(true);
      // Nothing answered was lost; the lease is still held with its token.
      expect(await store.leases.decideLease(key, acquire("agt_b"))).toBe("held");
      expect((await store.leases.getLease(key))?.fencingToken).toBe(1);
      await store.close();
    } finally {
      await own.stop();
    }
  });
});

/**
 * What the batches (store/postgres/batches.ts) take for granted of a pipelined connection (the
 * pool's, postgres-store.ts): statements asked together under sendTogether go in one write, in
 * order; and when one of them fails, the COMMIT sent behind it only ends the transaction, as a
 * ROLLBACK, so that a batch is rejected with the statement's own error and keeps nothing.
 */
describe("pipelined connections", () => {
  async function pipelined(): Promise<{ client: pg.Client; writes: () => number }> {
    const client = new pg.Client({ connectionString: await server.createDatabase(), pipeline: true });
    await client.connect();
    const socket = client.connection.stream as unknown as { _write: (...a: unknown[]) => void; _writev?: (...a: unknown[]) => void };
    let writes = 0;
    for (const m of ["_write", "_writev"] as const) {
      const own = socket[m];
      if (own) socket[m] = (...a: unknown[]) => (writes++, own.apply(socket, a));
    }
    return { client, writes: () => writes };
  }

  it("sends the statements asked under sendTogether in one write, and answers each in order", async () => {
    const { client, writes } = await pipelined();
    try {
      const before = writes();
      const answers = await sendTogether(client, () =>
        Promise.all([1, 2, 3].map((n) => client.query<{ n: number }>({ name: "kxm_test_n", text: "SELECT $1::int AS n", values: [n] }))),
      );
      expect(answers.map((a) => a.rows[0]!.n)).toEqual([1, 2, 3]);
      expect(writes() - before).toBe(1);
      // Asked together without it, each is a write of its own.
      const apart = writes();
      await Promise.all([4, 5].map((n) => client.query({ name: "kxm_test_n", text: "SELECT $1::int AS n", values: [n] })));
      expect(writes() - apart).toBe(2);
    } finally {
      await client.end();
    }
  });

  it("a failed statement fails those behind it, and the COMMIT behind them ends the transaction as a ROLLBACK", async () => {
    const { client } = await pipelined();
    try {
      await client.query("CREATE TABLE t (k int PRIMARY KEY)");
      await client.query("BEGIN");
      const sent = sendTogether(client, () => [
        client.query("INSERT INTO t VALUES ($1)", [1]),
        client.query("INSERT INTO t VALUES ($1)", [1]),
        client.query("INSERT INTO t VALUES ($1)", [2]),
        client.query("COMMIT"),
      ]);
      const settled = await Promise.allSettled(sent);
      expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
      expect(((settled[1] as PromiseRejectedResult).reason as { code: string }).code).toBe("23505");
      expect(((settled[2] as PromiseRejectedResult).reason as { code: string }).code).toBe("25P02");
      expect((settled[3] as PromiseFulfilledResult<pg.QueryResult>).value.command).toBe("ROLLBACK");
      expect((await client.query("SELECT count(*)::int AS n FROM t")).rows[0]).toEqual({ n: 0 });
    } finally {
      await client.end();
    }
  });
});

/**
 * How a replica hears of the inbox events another one commits (store/postgres/inbox-notify.ts,
 * migrations 009 and 010), and what the tail does when it does (tail.ts wake).
 */
describe("inbox events wake the other replicas' tails", () => {
  it("a statement that adds inbox events notifies every listener but the replica that wrote them, once committed", async () => {
    const url = await server.createDatabase();
    const store = await PostgresStore.open({ url }); // migrates
    await store.close();
    const heard: string[] = [];
    let next: (() => void) | undefined;
    const listener = listenForInbox({ connectionString: url }, "kxm-hub self", () => {
      heard.push("woken");
      next?.();
    });
    const writer = async (name: string, n: number) => {
      const c = new pg.Client({ connectionString: url, application_name: name });
      await c.connect();
      try {
        await c.query("BEGIN");
        await c.query("INSERT INTO inbox_events (agent_id, seq, kind, message_id, created_at) VALUES ('agt_a', $1, 'message', 'msg_a', 1)", [n]);
        await c.query(n === 0 ? "ROLLBACK" : "COMMIT");
      } finally {
        await c.end();
      }
    };
    try {
      await listener.listening;
      // Notifications arrive in commit order: when the last one is heard, the ones before it
      // would have been. A rolled-back insert and its own replica's events are not heard.
      await writer("kxm-hub other", 0);
      await writer("kxm-hub self", 1);
      let woken = new Promise<void>((resolve) => (next = resolve));
      await writer("kxm-hub other", 2);
      await woken;
      expect(heard).toHaveLength(1);
      woken = new Promise<void>((resolve) => (next = resolve));
      await writer("kxm-hub other", 3);
      await woken;
      expect(heard).toHaveLength(2);
    } finally {
      await listener.close();
    }
  });

  it("each hub names itself in what it notifies, even when the database URL sets an application_name for all of them", async () => {
    const base = await server.createDatabase();
    const url = `${base}${base.includes("?") ? "&" : "?"}application_name=shared`;
    const stores = await Promise.all([1, 2].map(() => PostgresStore.open({ url })));
    const listener = new pg.Client({ connectionString: base });
    const payloads: string[] = [];
    let heard: (() => void) | undefined;
    listener.on("notification", (n) => {
      payloads.push(n.payload ?? "");
      heard?.();
    });
    await listener.connect();
    try {
      await listener.query("LISTEN kxm_inbox");
      const agent = (i: number): AgentRow => ({ id: `agt_${i}`, project: "p", name: `a${i}`, purpose: "", keyHash: "00", connectedAtMs: 1, lastSeenAtMs: 1, online: true });
      for (let i = 0; i < 2; i++) await stores[0]!.agents.decideAgentLeases({ project: "p", nameKey: `a${i}` }, () => ({ write: agent(i), result: 0 }));
      for (const [i, store] of stores.entries()) {
        const sender = { agentId: "agt_0", agentName: "a0", project: "p" };
        const input = { target: "agt_1", content: `m${i}`, delivery: "followUp" as Delivery, hops: 0, maxHops: 3, ttlMs: 60_000, allowOffline: false };
        const notified = new Promise<void>((resolve) => (heard = resolve));
        await store.messages.decideSend({ senderId: "agt_0", project: "p", target: "agt_1" }, (ctx, nowMs) => decideSend(ctx, { sender, input, id: `msg_${i}`, nowMs }));
        await notified;
      }
      expect(payloads).toHaveLength(2);
      expect(payloads[0]).toMatch(/^kxm-hub [0-9a-f-]{36}$/);
      expect(payloads[1]).toMatch(/^kxm-hub [0-9a-f-]{36}$/);
      expect(payloads[0]).not.toBe(payloads[1]);
    } finally {
      await listener.end();
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("a woken tail looks at once instead of at its next tick, and a wake during a look makes another", async () => {
    let calls = 0;
    const looked: (() => void)[] = [];
    let hold: Promise<void> | undefined;
    const rows = (async () => {
      calls++;
      looked.splice(0).forEach((f) => f());
      await hold;
      return [{ xmin: String(100 + calls), r0: [] }];
    }) as Parameters<typeof createTail>[0];
    const nextLook = () => new Promise<void>((resolve) => looked.push(resolve));
    const tail = createTail(rows, 3_600_000, 0);
    const first = nextLook();
    const stop = tail.add({ sql: "SELECT '[]'::json", params: [], deliver: () => {} });
    await first;
    // The first look found where windows start; the next tick is an hour away.
    let second = nextLook();
    tail.wake();
    await second;
    expect(calls).toBe(2);
    // Woken while a look runs: another once it ends.
    let release!: () => void;
    hold = new Promise<void>((resolve) => (release = resolve));
    second = nextLook();
    tail.wake();
    await second;
    const third = nextLook();
    tail.wake();
    release();
    hold = undefined;
    await third;
    expect(calls).toBe(4);
    stop();
  });

  it("a tail reader that throws on a window neither stops the others nor holds the window", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      const froms: unknown[] = [];
      let calls = 0;
      const rows = ((_sql: string, params?: unknown[]): Promise<unknown[]> => {
        calls++;
        froms.push(params?.[0]);
        return Promise.resolve([{ xmin: String(100 + calls), r0: [`row ${calls}`], r1: [`row ${calls}`] }]);
      }) as Parameters<typeof createTail>[0];
      const good: unknown[] = [];
      const tail = createTail(rows, 20, 0, 1_000);
      const stopBad = tail.add({ sql: "SELECT 'bad'", params: [], deliver: () => {
        throw new Error("a row it cannot read");
      } });
      const stopGood = tail.add({ sql: "SELECT 'good'", params: [], deliver: (r) => good.push(...r) });
      await vi.advanceTimersByTimeAsync(0);
      await vi.advanceTimersByTimeAsync(20);
      await vi.advanceTimersByTimeAsync(20);
      // Every look's rows reached the good reader (the first look only finds where windows start)...
      expect(good.length).toBeGreaterThanOrEqual(2);
      expect(good).toEqual(Array.from({ length: good.length }, (_, i) => `row ${i + 2}`));
      // ...and each look starts where the last one ended: the window moved past the failing reader's rows.
      expect(froms.slice(1)).toEqual(Array.from({ length: froms.length - 1 }, (_, i) => String(101 + i)));
      stopBad();
      stopGood();
    } finally {
      vi.useRealTimers();
    }
  });

  it("a tail gives up a look that never answers (a connection gone silent) and looks again; the late answer is ignored", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      let calls = 0;
      let answerLate!: (rows: unknown[]) => void;
      const rows = ((): Promise<unknown[]> => {
        calls++;
        if (calls === 2) return new Promise((resolve) => (answerLate = resolve));
        return Promise.resolve([{ xmin: String(100 + calls), r0: [`row ${calls}`] }]);
      }) as Parameters<typeof createTail>[0];
      const delivered: unknown[] = [];
      const tail = createTail(rows, 20, 0, 1_000, 500);
      const stop = tail.add({ sql: "SELECT '[]'::json", params: [], deliver: (r) => delivered.push(...r) });
      await vi.advanceTimersByTimeAsync(0); // the first look: where windows start
      await vi.advanceTimersByTimeAsync(20); // the second: it hangs
      expect(calls).toBe(2);
      await vi.advanceTimersByTimeAsync(480);
      expect(calls).toBe(2); // still waiting for it
      await vi.advanceTimersByTimeAsync(40); // given up at 500 ms, then the next tick
      expect(calls).toBe(3);
      expect(delivered).toEqual(["row 3"]);
      answerLate([{ xmin: "102", r0: ["late row"] }]);
      await vi.advanceTimersByTimeAsync(0);
      expect(delivered).toEqual(["row 3"]);
      stop();
    } finally {
      vi.useRealTimers();
    }
  });

  /**
   * A tail on the test's timers (every 20 ms while someone listens, else every second) whose looks
   * are counted (`looks()`) and find nothing; `fn` runs with it, the real timers back after.
   */
  async function pacedTail(fn: (t: { tail: ReturnType<typeof createTail>; listening: ListenerCount; looks: () => number }) => Promise<void>) {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      let calls = 0;
      const rows = (async () => {
        calls++;
        return [{ xmin: String(100 + calls), r0: [], r1: [] }];
      }) as Parameters<typeof createTail>[0];
      await fn({ tail: createTail(rows, 20, 0, 1_000), listening: new ListenerCount(), looks: () => calls });
    } finally {
      vi.useRealTimers();
    }
  }

  it("a tail looks every interval only while someone listens: seldom else, wakes ignored, at once when someone starts", async () => {
    await pacedTail(async ({ tail, listening, looks }) => {
      const stop = tail.add({ sql: "SELECT '[]'::json", params: [], deliver: () => {}, listening });
      await vi.advanceTimersByTimeAsync(0);
      expect(looks()).toBe(1);
      // Nobody listens: the next look is a second away, and a wake does not bring it forward.
      await vi.advanceTimersByTimeAsync(500);
      tail.wake();
      await vi.advanceTimersByTimeAsync(499);
      expect(looks()).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(looks()).toBe(2);
      // Someone starts listening: a look at once, then one every 20 ms.
      const leave = listening.join();
      await vi.advanceTimersByTimeAsync(0);
      expect(looks()).toBe(3);
      await vi.advanceTimersByTimeAsync(100);
      expect(looks()).toBe(8);
      // Nobody again: the tick already armed, then one a second.
      leave();
      await vi.advanceTimersByTimeAsync(20);
      expect(looks()).toBe(9);
      await vi.advanceTimersByTimeAsync(999);
      expect(looks()).toBe(9);
      await vi.advanceTimersByTimeAsync(1);
      expect(looks()).toBe(10);
      // A reader that gives no `listening` always wants its rows: a look at once, then every 20 ms.
      const always = tail.add({ sql: "SELECT '[]'::json", params: [], deliver: () => {} });
      await vi.advanceTimersByTimeAsync(0);
      expect(looks()).toBe(11);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(looks()).toBe(61);
      always();
      stop();
    });
  });

  it("a tail's readers on one count each keep the wake: removing one leaves the other woken when listening starts", async () => {
    await pacedTail(async ({ tail, listening, looks }) => {
      // As the hub's two tails (changes, inbox): two readers on one count.
      const stopA = tail.add({ sql: "SELECT '[]'::json", params: [], deliver: () => {}, listening });
      const stopB = tail.add({ sql: "SELECT '[]'::json AS b", params: [], deliver: () => {}, listening });
      await vi.advanceTimersByTimeAsync(1_000);
      stopA();
      await vi.advanceTimersByTimeAsync(100);
      const before = looks();
      const leave = listening.join();
      await vi.advanceTimersByTimeAsync(0);
      expect(looks()).toBe(before + 1);
      leave();
      stopB();
    });
  });

  it("a store's tail that nobody listened to looks as soon as someone does, not at its idle tick", async () => {
    const url = await server.createDatabase();
    // b's idle tick is an hour away: only someone starting to listen can make it look again.
    const [a, b] = await Promise.all([PostgresStore.open({ url }), PostgresStore.open({ url, tailIntervalMs: 20, tailIdleMs: 3_600_000 })]);
    const listening = new ListenerCount();
    const heard: number[] = [];
    const stop = b.changes.tailChanges((c) => heard.push(c.seq), listening);
    try {
      const granted = (name: string) => (cur: LeaseRow | undefined, nowMs: number) => ({
        write: { project: "p", name, holderAgentId: "agt_a", holderAgentName: "a", fencingToken: (cur?.fencingToken ?? 0) + 1, acquiredAtMs: nowMs, expiresAtMs: nowMs + 60_000 },
        change: { stream: "leases" as const, body: { name } },
        result: (cur?.fencingToken ?? 0) + 1,
      });
      // Whether b's first look (where its window starts) came before this commit or after, it
      // does not look again by itself for an hour.
      await a.leases.decideLease({ project: "p", name: "before" }, granted("before"));
      const leave = listening.join();
      await a.leases.decideLease({ project: "p", name: "after" }, granted("after"));
      while (!heard.includes(2)) await new Promise((r) => setTimeout(r, 5));
      expect(heard.at(-1)).toBe(2);
      leave();
    } finally {
      stop();
      await Promise.all([a.close(), b.close()]);
    }
  });
});
