import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createAuthenticator } from "../../src/auth/authenticate.js";
import { sha256Hex } from "../../src/ids.js";
import { decideAcquire } from "../../src/lease/rules.js";
import type { Observer } from "../../src/observe.js";
import { createPresence } from "../../src/presence/presence.js";
import { DurabilityLost, GroupCommit, type BatchBackend } from "../../src/store/group-commit.js";
import { fdatasyncWal, type WalSync } from "../../src/store/sqlite/batch.js";
import { Checkpointer } from "../../src/store/sqlite/checkpointer.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import type { LeaseRow } from "../../src/domain.js";

const silentObserver: Observer = { log: () => {}, count: () => {} };

/**
 * Group commit (store/group-commit.ts, store/sqlite/batch.ts): decisions made together share
 * one transaction and one WAL sync, and nothing of a batch (answers or reads of it) comes out
 * before that sync has finished. The sync is held by hand here to see every step.
 */

const dirs: string[] = [];
const stores: SqliteStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function tempFile(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-gc-"));
  dirs.push(dir);
  return path.join(dir, "kxm.db");
}

/** A WAL sync the test finishes by hand (`release`), or fails (`fail`); counts calls. */
function heldSync() {
  const waiting: { resolve(): void; reject(e: Error): void }[] = [];
  const held = {
    calls: 0,
    pending: () => waiting.length,
    release() {
      for (const w of waiting.splice(0)) w.resolve();
    },
    fail(e: Error) {
      for (const w of waiting.splice(0)) w.reject(e);
    },
    factory: (): WalSync => ({
      sync: () => {
        held.calls++;
        return new Promise<void>((resolve, reject) => waiting.push({ resolve, reject }));
      },
      close: () => {},
    }),
  };
  return held;
}

function open(options: Partial<ConstructorParameters<typeof SqliteStore>[0]> = {}): SqliteStore {
  const store = new SqliteStore({ path: tempFile(), synchronous: "full", ...options });
  stores.push(store);
  return store;
}

const holder = (n: number) => ({ agentId: `a${n}`, agentName: `agent-${n}`, project: "p" });
const acquire = (store: SqliteStore, name: string, n: number, nowMs = 1_000) =>
  store.leases.decideLease({ project: "p", name }, (cur) => decideAcquire(cur, { name, holder: holder(n), ttlMs: 30_000, nowMs }));

/** Settles pending promise callbacks and one setImmediate turn (when batches start). */
const turn = () => new Promise((r) => setImmediate(r));

/** Tracks whether a promise has settled yet. */
function watch<T>(p: Promise<T>) {
  const w = { settled: false, value: undefined as T | undefined, error: undefined as unknown };
  p.then(
    (v) => Object.assign(w, { settled: true, value: v }),
    (e: unknown) => Object.assign(w, { settled: true, error: e }),
  );
  return w;
}

describe("group commit", () => {
  it("answers a decision only after its batch's WAL sync, and reads wait for it too", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const granted = watch(acquire(store, "main", 1));
    await turn();
    expect(held.pending()).toBe(1); // committed, now syncing
    const read = watch(store.leases.getLease({ project: "p", name: "main" }));
    for (let i = 0; i < 5; i++) await turn();
    expect(granted.settled).toBe(false);
    expect(read.settled).toBe(false);

    held.release();
    await turn();
    expect(granted.error).toBeUndefined();
    expect(granted.value).toMatchObject({ kind: "granted" });
    expect((read.value as LeaseRow | undefined)?.holderAgentId).toBe("a1");
  });

  it("decisions made in one turn share one transaction and one sync; one that throws is undone alone", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const first = watch(acquire(store, "a", 1));
    const broken = watch(
      store.leases.decideLease({ project: "p", name: "b" }, () => {
        throw new Error("boom");
      }),
    );
    const second = watch(acquire(store, "c", 2));
    const refused = watch(acquire(store, "a", 3)); // sees the first grant of the same batch
    await turn();
    expect(held.calls).toBe(1);
    held.release();
    await turn();
    expect(store.commitStats()).toEqual({ commits: 1, works: 4 });
    expect(first.value).toMatchObject({ kind: "granted", lease: { fencingToken: 1 } });
    expect((broken.error as Error).message).toBe("boom");
    expect(second.value).toMatchObject({ kind: "granted", lease: { fencingToken: 1 } });
    expect(refused.error).toMatchObject({ code: "lease_held" });
    expect(await store.leases.getLease({ project: "p", name: "b" })).toBeUndefined();
    expect((await store.leases.getLease({ project: "p", name: "c" }))?.holderAgentId).toBe("a2");
  });

  it("a lease decision whose statement fails after it wrote takes its whole batch back: nothing of it stays, each of it fails", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const first = watch(acquire(store, "a", 1));
    // It queues a waiter (a write), then its row breaks the table's CHECK (a token of 0): a
    // lease decision has no savepoint of its own, so the batch is rolled back as a whole.
    const broken = watch(
      store.leases.decideLease({ project: "p", name: "b" }, () => ({
        queue: { add: { id: "wtr_1", agentId: "a2", agentName: "agent-2", ttlMs: 1_000, deadlineMs: 60_000, sinceMs: 1_000 } },
        write: { project: "p", name: "b", holderAgentId: "a2", holderAgentName: "agent-2", fencingToken: 0, acquiredAtMs: 1_000, expiresAtMs: 2_000 },
        result: "written",
      })),
    );
    const second = watch(acquire(store, "c", 3));
    await turn();
    await turn();
    expect(held.calls).toBe(0);
    for (const w of [first, broken, second]) expect(String(w.error)).toMatch(/CHECK constraint failed/);
    expect(store.commitStats()).toEqual({ commits: 0, works: 0 });
    for (const name of ["a", "b", "c"]) expect(await store.leases.getLease({ project: "p", name })).toBeUndefined();
    expect(await store.leases.leaseWaiters("p")).toEqual([]);
    // The store goes on: the next batch numbers from where the file is.
    const again = watch(acquire(store, "a", 1));
    await turn();
    held.release();
    await turn();
    expect(again.value).toMatchObject({ kind: "granted", lease: { fencingToken: 1 } });
    expect(await store.changes.readChanges("p", "leases", 0, 10)).toMatchObject({ head: 1, changes: [{ seq: 1 }] });
  });

  it("answers the decisions that changed something first, then the rest, once the batch is durable", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const first = acquire(store, "held", 1);
    await turn();
    held.release();
    await first;
    const order: string[] = [];
    const refused = acquire(store, "held", 2).catch(() => order.push("refusal"));
    const granted = acquire(store, "free", 2).then(() => order.push("grant"));
    while (held.pending() === 0) await turn();
    expect(order).toEqual([]);
    held.release();
    await Promise.all([refused, granted]);
    expect(order).toEqual(["grant", "refusal"]);
  });

  it("queues what arrives during a sync into the next batch, which starts after it", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const one = watch(acquire(store, "x", 1));
    await turn();
    const later = [watch(acquire(store, "y", 1)), watch(acquire(store, "z", 1))];
    await turn();
    expect(held.calls).toBe(1); // the second batch waits for the first's sync
    held.release();
    await turn();
    expect(one.settled).toBe(true);
    expect(later.every((w) => !w.settled)).toBe(true);
    await turn();
    expect(held.calls).toBe(2);
    held.release();
    await turn();
    expect(later.every((w) => w.settled && w.error === undefined)).toBe(true);
    expect(store.commitStats()).toEqual({ commits: 2, works: 3 });
  });

  it("a batch that wrote nothing answers without a sync", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const refusal = watch(store.leases.decideLease({ project: "p", name: "none" }, () => ({ result: "read only" })));
    await turn();
    await turn();
    expect(refusal.value).toBe("read only");
    expect(held.calls).toBe(0);
  });

  it("a sync that fails answers nothing of its batch and stops the store", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const lost = watch(acquire(store, "main", 1));
    await turn();
    held.fail(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
    await turn();
    expect(lost.error).toBeInstanceOf(DurabilityLost);
    await expect(acquire(store, "other", 1)).rejects.toBeInstanceOf(DurabilityLost);
    await expect(store.leases.getLease({ project: "p", name: "main" })).rejects.toBeInstanceOf(DurabilityLost);
    expect(await store.ready()).toBe(false);
  });

  it("a WAL that cannot be opened for its sync after the COMMIT answers nothing of the batch and stops the store", async () => {
    // The COMMIT is done: failing the batch as if it had not been would leave it applied unseen.
    const store = open({
      walSync: () => {
        throw Object.assign(new Error("EMFILE: too many open files"), { code: "EMFILE" });
      },
    });
    const lost = watch(acquire(store, "main", 1));
    await turn();
    await turn();
    expect(lost.error).toBeInstanceOf(DurabilityLost);
    await expect(acquire(store, "other", 1)).rejects.toBeInstanceOf(DurabilityLost);
    expect(await store.ready()).toBe(false);
  });

  it.each([
    ["removed", (file: string) => fs.rmSync(file)],
    ["removed", (file: string) => fs.rmSync(`${file}-wal`)],
    ["replaced", (file: string) => (fs.copyFileSync(file, `${file}.copy`), fs.renameSync(`${file}.copy`, file))],
  ])("a data file %s under the running store stops it before its next batch, and nothing more is answered", async (how, change) => {
    const file = tempFile();
    const store = open({ path: file, fileCheckMs: 0 });
    expect(await acquire(store, "main", 1)).toMatchObject({ kind: "granted" });
    change(file);
    const lost = await acquire(store, "other", 1).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(DurabilityLost);
    expect((lost as Error).message).toContain(`was ${how} while the hub ran`);
    await expect(store.leases.getLease({ project: "p", name: "main" })).rejects.toBeInstanceOf(DurabilityLost);
    expect(await store.ready()).toBe(false);
  });

  it("FULL (the default) syncs the -wal file after each writing batch; NORMAL never does", async () => {
    let full = 0;
    const counting = (file: string): WalSync => {
      const real = fdatasyncWal(file);
      return { sync: () => (full++, real.sync()), close: real.close };
    };
    const store = open({ walSync: counting });
    await Promise.all([acquire(store, "a", 1), acquire(store, "b", 1)]);
    await acquire(store, "c", 1);
    expect(full).toBe(2);
    expect(store.commitStats()).toEqual({ commits: 2, works: 3 });

    let normal = 0;
    const other = open({ synchronous: "normal", walSync: () => ({ sync: async () => void normal++, close() {} }) });
    await acquire(other, "a", 1);
    expect(normal).toBe(0);
  });

  it("peekCaller (authentication) sees a committed agent before its sync; getAgent waits for it", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const row = { id: "agt_1", project: "p", name: "a", purpose: "", keyHash: sha256Hex("key_1"), connectedAtMs: 1, lastSeenAtMs: 1, online: true };
    const registered = watch(store.agents.decideAgentLeases({ project: "p", nameKey: "a" }, () => ({ write: row, result: 0 })));
    await turn();
    expect(held.pending()).toBe(1);
    expect((await store.agents.peekCaller("agt_1"))?.agent).toEqual(row);
    const durable = watch(store.agents.getAgent("agt_1"));
    await turn();
    expect(durable.settled).toBe(false);
    held.release();
    await turn();
    expect(registered.settled && durable.value).toEqual(row);
  });

  it("authentication refuses only on the durable row: an unregister still syncing is waited for", async () => {
    const held = heldSync();
    const store = open({ walSync: held.factory });
    const clock = new FakeClock();
    const presence = createPresence({ store, clock, observer: silentObserver, staleAfterMs: 90_000 });
    const auth = createAuthenticator({ store, presence, adminToken: undefined, projectTokens: {}, loopback: true, clock });
    const reg = watch(presence.register({ name: "a", project: "p" }));
    await turn();
    held.release();
    await turn();
    const { agent, agentKey } = reg.value!;
    const creds = { authorization: null, agentId: agent.id, agentKey };
    const rule = { kind: "agent" } as const;
    await expect(auth.authenticate(rule, creds, () => undefined)).resolves.toMatchObject({ agentId: agent.id });

    const gone = watch(presence.unregister({ kind: "agent", agentId: agent.id, agentName: agent.name, project: "p" }));
    await turn();
    expect(held.pending()).toBe(1); // the key rotation is committed, not durable
    const refused = watch(auth.authenticate(rule, creds, () => undefined));
    for (let i = 0; i < 3; i++) await turn();
    expect(refused.settled).toBe(false);
    held.release();
    await turn();
    await turn();
    expect(gone.settled).toBe(true);
    expect(refused.error).toMatchObject({ code: "invalid_agent_identity" });
  });

  it("bounds a batch to maxBatch decisions", async () => {
    const store = open({ maxBatch: 3 });
    await Promise.all(Array.from({ length: 7 }, (_, i) => acquire(store, `r${i}`, 1)));
    expect(store.commitStats()).toEqual({ commits: 3, works: 7 });
  });

  it("close commits what is queued first", async () => {
    const file = tempFile();
    const store = new SqliteStore({ path: file, synchronous: "full" });
    const pending = acquire(store, "late", 1);
    await store.close();
    await expect(pending).resolves.toMatchObject({ kind: "granted" });
    const again = new SqliteStore({ path: file, synchronous: "full" });
    stores.push(again);
    expect((await again.leases.getLease({ project: "p", name: "late" }))?.fencingToken).toBe(1);
  });
});

describe("group commit with a backend that prepares", () => {
  /** A backend whose prepare the test ends by hand; it records each batch's works. */
  function preparing() {
    const batches: number[][] = [];
    let ready: { resolve(): void; reject(e: Error): void } | undefined;
    const backend: BatchBackend<number> = {
      prepare: () => new Promise<void>((resolve, reject) => (ready = { resolve, reject })),
      commit: async (works) => {
        batches.push(works);
        return works.map((w) => ({ ok: true as const, value: w * 10, wrote: true }));
      },
    };
    return { backend, batches, ready: () => ready!, preparing: () => ready !== undefined };
  }

  it("takes the batch once prepare is done: what was queued while it waited joins it", async () => {
    const b = preparing();
    const group = new GroupCommit(b.backend);
    const first = group.submit<number>(1);
    await turn();
    expect(b.preparing()).toBe(true);
    const later = [group.submit<number>(2), group.submit<number>(3)];
    b.ready().resolve();
    expect(await Promise.all([first, ...later])).toEqual([10, 20, 30]);
    expect(b.batches).toEqual([[1, 2, 3]]);
  });

  it("a prepare that fails fails the works queued by then, and the next batch runs", async () => {
    const b = preparing();
    const group = new GroupCommit(b.backend);
    const first = group.submit<number>(1);
    await turn();
    const second = group.submit<number>(2);
    b.ready().reject(new Error("no connection"));
    await expect(first).rejects.toThrow("no connection");
    await expect(second).rejects.toThrow("no connection");
    const third = group.submit<number>(3);
    await turn();
    b.ready().resolve();
    expect(await third).toBe(30);
    expect(b.batches).toEqual([[3]]);
  });
});

describe("group commit with a backend that prepares ahead", () => {
  /**
   * A backend that may prepare while a batch is in flight (BatchBackend.prepareAhead): each
   * prepare and each commit is ended by the test; it records the batches and what was abandoned.
   */
  function ahead() {
    const prepares: { resolve(): void; reject(e: Error): void }[] = [];
    const commits: { works: number[]; resolve(): void; reject(e: Error): void }[] = [];
    let abandoned = 0;
    const backend: BatchBackend<number> = {
      prepareAhead: () => true,
      prepare: () => new Promise<void>((resolve, reject) => prepares.push({ resolve, reject })),
      abandon: () => void abandoned++,
      commit: (works) =>
        new Promise((resolve, reject) =>
          commits.push({ works, resolve: () => resolve(works.map((w) => ({ ok: true as const, value: w * 10, wrote: true }))), reject }),
        ),
    };
    return { backend, prepares, commits, abandoned: () => abandoned };
  }

  it("prepares the next batch while one commits, once works wait for it, and takes them with that prepare", async () => {
    const b = ahead();
    const group = new GroupCommit(b.backend);
    const first = group.submit<number>(1);
    await turn();
    // Queued while the batch waits on its own prepare: it joins that batch, no second prepare.
    const joining = group.submit<number>(2);
    await turn();
    expect(b.prepares).toHaveLength(1);
    b.prepares[0]!.resolve();
    await turn();
    expect(b.commits.map((c) => c.works)).toEqual([[1, 2]]);
    expect(b.prepares).toHaveLength(1);
    // Queued while [1, 2] commits: the next batch's prepare begins at once, and only once.
    const next = [group.submit<number>(3), group.submit<number>(4)];
    expect(b.prepares).toHaveLength(2);
    b.prepares[1]!.resolve();
    await turn();
    expect(b.commits).toHaveLength(1);
    b.commits[0]!.resolve();
    expect(await Promise.all([first, joining])).toEqual([10, 20]);
    await turn();
    await turn();
    // Taken with the prepare begun ahead: none more.
    expect(b.commits.map((c) => c.works)).toEqual([[1, 2], [3, 4]]);
    expect(b.prepares).toHaveLength(2);
    b.commits[1]!.resolve();
    expect(await Promise.all(next)).toEqual([30, 40]);
    // Nothing queued: nothing prepared ahead, and the pipeline is idle.
    await group.idle();
    expect(b.prepares).toHaveLength(2);
  });

  it("what a full batch leaves queued has its prepare begun as that batch is taken", async () => {
    const b = ahead();
    const group = new GroupCommit(b.backend, 2);
    const all = [1, 2, 3].map((w) => group.submit<number>(w));
    await turn();
    b.prepares[0]!.resolve();
    await turn();
    expect(b.commits.map((c) => c.works)).toEqual([[1, 2]]);
    expect(b.prepares).toHaveLength(2);
    b.prepares[1]!.resolve();
    b.commits[0]!.resolve();
    await turn();
    await turn();
    expect(b.commits.map((c) => c.works)).toEqual([[1, 2], [3]]);
    b.commits[1]!.resolve();
    expect(await Promise.all(all)).toEqual([10, 20, 30]);
    expect(b.prepares).toHaveLength(2);
  });

  it("prepares nothing ahead when nothing waits, and a lone batch prepares once", async () => {
    const b = ahead();
    const group = new GroupCommit(b.backend);
    const only = group.submit<number>(5);
    await turn();
    b.prepares[0]!.resolve();
    await turn();
    expect(b.prepares).toHaveLength(1);
    b.commits[0]!.resolve();
    expect(await only).toBe(50);
    await group.idle();
    expect(b.prepares).toHaveLength(1);
  });

  /** Batch [1] committing, with 2 queued behind it (so its prepare begun ahead). */
  async function oneCommittingOneWaiting() {
    const b = ahead();
    const group = new GroupCommit(b.backend);
    const first = group.submit<number>(1);
    await turn();
    b.prepares[0]!.resolve();
    await turn();
    const second = group.submit<number>(2);
    return { b, first, second };
  }

  it("a prepare begun ahead that fails fails the next batch only", async () => {
    const { b, first, second } = await oneCommittingOneWaiting();
    b.prepares[1]!.reject(new Error("no connection"));
    b.commits[0]!.resolve();
    expect(await first).toBe(10);
    await expect(second).rejects.toThrow("no connection");
    expect(b.commits).toHaveLength(1);
  });

  it("a prepare begun ahead is abandoned when the pipeline stops before its batch", async () => {
    const { b, first, second } = await oneCommittingOneWaiting();
    expect(b.prepares).toHaveLength(2);
    b.commits[0]!.reject(new DurabilityLost("sync failed"));
    await expect(first).rejects.toThrow("sync failed");
    await expect(second).rejects.toThrow("sync failed");
    expect(b.abandoned()).toBe(1);
    expect(b.commits).toHaveLength(1);
  });
});

describe("folding the WAL back", () => {
  it("a fold is answered even when the worker cannot run: the batch it holds is never stuck", async () => {
    // No database at that path: the worker's connection fails as it starts.
    const checkpointer = new Checkpointer(path.join(tempFile(), "missing.db"));
    await checkpointer.fold();
    expect(checkpointer.last).toMatchObject({ ok: false });
    expect(checkpointer.restartDue()).toBe(false);
    await checkpointer.close();
  });

  it("a fold is answered when the worker ends without being asked to", async () => {
    const file = tempFile();
    const store = new SqliteStore({ path: file, synchronous: "full" });
    stores.push(store);
    await acquire(store, "r", 1);
    const checkpointer = new Checkpointer(file);
    await checkpointer.fold();
    expect(checkpointer.last).toMatchObject({ ok: true });
    const worker = (checkpointer as unknown as { worker: { terminate(): Promise<number> } }).worker;
    const folded = checkpointer.fold();
    await worker.terminate();
    await folded;
    expect(checkpointer.last).toMatchObject({ ok: false, error: expect.stringContaining("ended") });
    // A new worker serves the next one.
    await checkpointer.fold();
    expect(checkpointer.last).toMatchObject({ ok: true });
    await checkpointer.close();
  });
});

describe("WAL checkpoints", () => {
  it("run in a worker thread, never inside a COMMIT: the WAL is copied into the database while the store works", async () => {
    const file = tempFile();
    const store = new SqliteStore({ path: file, synchronous: "full" });
    stores.push(store);
    const db = (store as unknown as { db: { pragma(s: string, o: { simple: true }): unknown } }).db;
    expect(db.pragma("wal_autocheckpoint", { simple: true })).toBe(0);
    const checkpointer = (store as unknown as { checkpointer: { last?: { ok: boolean; checkpointed?: number } } }).checkpointer;
    for (let i = 0; i < 450; i++) await acquire(store, `r${i % 50}`, i % 50, 1_000 + i);
    for (let i = 0; i < 200 && checkpointer.last === undefined; i++) await new Promise((r) => setTimeout(r, 10));
    expect(checkpointer.last).toMatchObject({ ok: true });
    expect(checkpointer.last!.checkpointed).toBeGreaterThan(0);
    await store.close();
    const again = new SqliteStore({ path: file, synchronous: "full" });
    stores.push(again);
    expect((await again.leases.listLeases({ project: "p", limit: 100, includeExpired: true, nowMs: 0 })).length).toBe(50);
  });
});

describe("WAL size under sustained writes", () => {
  it("stays bounded: past restartFrames the worker folds the WAL back between batches, and SQLite restarts it", async () => {
    // The checkpoints this thread runs (the worker's connection is in a thread of its own, with
    // its own copy of the driver): none. The fold runs in the worker while the batch waits.
    const pragma = vi.spyOn(Database.prototype, "pragma");
    const file = tempFile();
    const store = new SqliteStore({ path: file, synchronous: "full", restartFrames: 1_024 });
    stores.push(store);
    let n = 0;
    let largest = 0;
    const row = (name: string, token: number) => ({
      project: "p",
      name,
      holderAgentId: "a",
      holderAgentName: "a".repeat(200),
      fencingToken: token,
      acquiredAtMs: 1,
      expiresAtMs: 2,
    });
    // 64 writers without a pause: a checkpoint in another thread never sees the WAL's end.
    const writer = async () => {
      while (n < 120_000) {
        const token = ++n;
        const name = `r${token % 5_000}`;
        await store.leases.decideLease({ project: "p", name }, () => ({ write: row(name, token), result: 0 }));
        if (token % 5_000 === 0) largest = Math.max(largest, fs.statSync(`${file}-wal`).size);
      }
    };
    await Promise.all(Array.from({ length: 64 }, writer));
    // Without the fold, 120,000 decisions leave a WAL of ~40 MB (and growing with every write).
    expect(largest).toBeLessThan(12 * 1024 * 1024);
    const checkpoints = pragma.mock.calls.filter(([source]) => String(source).includes("wal_checkpoint"));
    pragma.mockRestore();
    expect(checkpoints).toEqual([]);
    expect((await store.leases.listLeases({ project: "p", limit: 10_000, includeExpired: true, nowMs: 0 })).length).toBe(5_000);
  }, 60_000);
});

describe("closing with a checkpoint worker", () => {
  const storeModule = new URL("../../src/store/sqlite/sqlite-store.ts", import.meta.url).href;

  /**
   * Runs `body` in a process of its own, with `store` a SqliteStore on `file` (more options in
   * `options`), and nothing else pending: only the store's own handles keep that process up. The
   * script is a file, not -e: given with -e, an unsettled top-level await did not end the process.
   */
  function runAlone(dir: string, options: string, body: string, timeoutMs: number) {
    const file = path.join(dir, "kxm.db");
    const entry = path.join(dir, "alone.mjs");
    fs.writeFileSync(
      entry,
      `import { SqliteStore } from ${JSON.stringify(storeModule)};
      const store = new SqliteStore({ path: ${JSON.stringify(file)}, synchronous: "full"${options} });
      const row = (i, holder) => ({ project: "p", name: "r" + i, holderAgentId: "a", holderAgentName: holder, fencingToken: 1, acquiredAtMs: 1, expiresAtMs: 2 });
      ${body}`,
    );
    return spawnSync(process.execPath, ["--import", "tsx", entry], {
      cwd: path.resolve(import.meta.dirname, "../.."),
      encoding: "utf8",
      timeout: timeoutMs,
    });
  }

  it("close resolves (and the WAL is folded back) in a process with nothing else to do, a checkpoint under way", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-gc-close-"));
    dirs.push(dir);
    const out = runAlone(
      dir,
      "",
      `for (let i = 0; i < 300; i++) await store.leases.decideLease({ project: "p", name: "r" + i }, () => ({ write: row(i, "a"), result: 0 }));
      await store.close();
      console.log("closed");`,
      20_000,
    );
    expect(out.stderr).toBe("");
    expect(out.stdout.trim()).toBe("closed");
    expect(fs.existsSync(path.join(dir, "kxm.db-wal"))).toBe(false);
  }, 30_000);

  it("a batch held for a fold keeps a process with nothing else to do alive until it is answered", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-gc-fold-"));
    dirs.push(dir);
    // 16 frames: nearly every worker report asks for a fold, and the loop awaits each decision
    // with nothing else pending, so only the worker's checkpoint can keep the process up.
    const out = runAlone(
      dir,
      ", restartFrames: 16",
      `for (let i = 0; i < 2000; i++) await store.leases.decideLease({ project: "p", name: "r" + i }, () => ({ write: row(i, "a".repeat(500)), result: 0 }));
      const n = (await store.leases.listLeases({ project: "p", limit: 5000, includeExpired: true, nowMs: 0 })).length;
      await store.close();
      console.log("closed " + n);`,
      50_000,
    );
    expect(out.stderr).toBe("");
    expect(out.stdout.trim()).toBe("closed 2000");
  }, 60_000);
});
