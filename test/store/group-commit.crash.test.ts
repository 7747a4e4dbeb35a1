import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fromJson, type DescService, type JsonObject } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { SyncEventSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { SyncOutcome, SyncService } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { ChildHubs } from "../fixtures/child-hub.js";
import { clientFor, protocols, withHeaders } from "../fixtures/clients.js";
import { parseExposition, valueOf } from "../fixtures/prometheus.js";
import { refusalOf } from "../fixtures/rpc.js";
import { syncEvent } from "../sync/fixtures.js";

/**
 * Group commit across a SIGKILL. A real hub runs as a child process on a temp SQLite file while
 * dozens of concurrent calls push run facts, cycle leases and send messages, so that batches of
 * several decisions are committing when the child is SIGKILLed; a second hub then opens the same
 * file. It proves:
 *  1. no answered decision is lost: every push answered `accepted` has all its events (cursor k),
 *     every fencing token answered is at or below the stored one, every sent message exists;
 *  2. no unanswered decision is half applied: each push carries the k events of one fresh run
 *     and is one decision, so its run has all k events or none (cursor k or 0, and pushing it
 *     again answers k duplicates or k accepted), never a prefix.
 * The metrics scraped before the kill show more decisions than commits: batches were shared.
 *
 * Why it holds: a batch runs its decisions in one IMMEDIATE transaction, a savepoint each, and
 * commits once; an answer leaves only after that COMMIT is in the WAL and the WAL is synced. A
 * SIGKILL can stop the process before the COMMIT (the whole batch is rolled back by the WAL on
 * the next open, none of it was answered) or after it (all of it is kept), never inside one
 * decision's savepoint as seen from disk. (A SIGKILL keeps the OS page cache, so it tests the
 * order of COMMIT and answer; the WAL sync is what extends this to power loss.)
 */

const TOKEN = "tok-p";
const auth = { authorization: `Bearer ${TOKEN}` };
const RT = "rtm_runtime0001";
const PRJ = "prj_project0001";
const AGENTS = 12;
const LEASES = ["alpha", "beta", "gamma"];
const PUSH_WORKERS = 32;
const MESSAGE_WORKERS = 4;
const PUSHES_BEFORE_KILL = 300;

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

const startChild = (dir: string, dataPath: string) => hubs.start(dir, dataPath, { KXM_PROJECT_TOKENS: JSON.stringify({ p: TOKEN }) });

/** A client of `service` on the i-th wire (every wire takes a share of the load). */
const client = <S extends DescService>(service: S, url: string, i: number, headers: Record<string, string> = {}) =>
  clientFor(service, protocols[i % protocols.length]!.make(url, [withHeaders({ ...auth, ...headers })]));

interface Push {
  runId: string;
  k: number;
  answered: boolean;
}

/** Push n: the k = 5..10 events of its own run, sequences 1..k. */
const pushOf = (n: number): Push => ({ runId: `run_push${String(n).padStart(6, "0")}`, k: 5 + (n % 6), answered: false });
const eventsOf = (p: Push) =>
  Array.from({ length: p.k }, (_, i) => {
    const event = syncEvent({ runId: p.runId, sequence: i + 1, payload: { status: "running", summary: `#${i + 1}` } });
    return fromJson(SyncEventSchema, event as JsonObject);
  });

describe("group commit across a SIGKILL", () => {
  it("keeps every answered decision and applies no unanswered one by halves", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-group-crash-"));
    const dataPath = path.join(dir, "state", "kxm.db");
    try {
      const first = await startChild(dir, dataPath);
      const presence = client(PresenceService, first.url, 0);
      const agents: { name: string; headers: Record<string, string> }[] = [];
      for (let i = 0; i < AGENTS; i++) {
        const r = await presence.registerAgent({ name: `agent-${i}`, project: "p" });
        agents.push({ name: `agent-${i}`, headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey } });
      }

      // Load: every worker loops until a call fails; a failure is only allowed after the kill.
      let killed = false;
      const until = async (step: () => Promise<void>) => {
        for (;;) {
          try {
            await step();
          } catch (e) {
            if (killed && e instanceof ConnectError) return; // the hub is gone (assertions still fail)
            throw e;
          }
        }
      };
      const pushes: Push[] = [];
      let answeredPushes = 0;
      let enough!: () => void;
      const enoughPushes = new Promise<void>((resolve) => (enough = resolve));
      const pushWorker = (w: number) => {
        const sync = client(SyncService, first.url, w);
        return until(async () => {
          const p = pushOf(pushes.length);
          pushes.push(p);
          const res = await sync.pushEvents({ project: "p", runtimeId: RT, events: eventsOf(p) });
          expect(res.results.map((r) => r.outcome)).toEqual(Array(p.k).fill(SyncOutcome.ACCEPTED));
          expect(res.cursors.map((c) => Number(c.cursor))).toEqual([p.k]);
          p.answered = true;
          if (++answeredPushes === PUSHES_BEFORE_KILL) enough();
        });
      };
      /** Per lease name, the largest token any answer showed (a grant, or a refusal's holder). */
      const tokens = new Map(LEASES.map((n) => [n, 0]));
      const seen = (name: string, token: bigint | undefined) => tokens.set(name, Math.max(tokens.get(name)!, Number(token ?? 0)));
      const leaseWorker = (a: number) => {
        const leases = client(LeaseService, first.url, a, agents[a]!.headers);
        let i = a;
        return until(async () => {
          const name = LEASES[i++ % LEASES.length]!;
          try {
            const r = await leases.acquireLease({ name, ttlMs: 5_000 });
            seen(name, r.lease!.fencingToken);
            await leases.releaseLease({ name, fencingToken: r.lease!.fencingToken });
          } catch (e) {
            if (killed) throw e;
            const refusal = refusalOf(e);
            expect(["LEASE_HELD", "LEASE_NOT_FOUND", "LEASE_SUPERSEDED"]).toContain(refusal.reason);
            seen(name, refusal.lease?.fencingToken);
          }
        });
      };
      const messages: { sender: number; id: string }[] = [];
      const messageWorker = (a: number) => {
        const peer = client(PeerService, first.url, a, agents[a]!.headers);
        let n = 0;
        return until(async () => {
          const target = agents[(a + 1 + (n++ % (AGENTS - 1))) % AGENTS]!.name;
          const r = await peer.sendMessage({ target, content: `from ${a} #${n}`, allowOffline: true });
          messages.push({ sender: a, id: r.message!.id });
        });
      };
      const load = Promise.all([
        ...Array.from({ length: PUSH_WORKERS }, (_, w) => pushWorker(w)),
        ...agents.map((_, a) => leaseWorker(a)),
        ...Array.from({ length: MESSAGE_WORKERS }, (_, a) => messageWorker(a)),
      ]);

      // Mid-load: read the commit metrics, then SIGKILL with every worker's call in flight.
      await Promise.race([enoughPushes, load]);
      const scrape = await fetch(`${first.url}/metrics`); // open on a loopback hub without an admin token
      expect(scrape.status).toBe(200);
      const metrics = parseExposition(await scrape.text());
      const commits = valueOf(metrics, "kxm_store_commits_total")!;
      const decisions = valueOf(metrics, "kxm_store_decisions_total")!;
      killed = first.child.kill("SIGKILL");
      await load;
      await first.exited;
      expect(first.child.signalCode).toBe("SIGKILL");
      expect(commits).toBeGreaterThan(0);
      expect(decisions, `${decisions} decisions in ${commits} commits`).toBeGreaterThan(commits);
      const inFlight = pushes.filter((p) => !p.answered);
      expect(answeredPushes).toBeGreaterThanOrEqual(PUSHES_BEFORE_KILL);
      expect(inFlight).toHaveLength(PUSH_WORKERS); // each push worker's last call: unanswered

      const second = await startChild(dir, dataPath);
      // 1 + 2: each push's run holds all its events or none, and all of them once answered.
      const sync = client(SyncService, second.url, 1);
      const cursors = await Promise.all(
        pushes.map(async (p) => Number((await sync.getCursor({ project: "p", projectId: PRJ, runId: p.runId })).cursor!.cursor)),
      );
      pushes.forEach((p, i) => {
        if (p.answered) expect(cursors[i], `${p.runId} answered`).toBe(p.k);
        else expect([0, p.k], `${p.runId} in flight`).toContain(cursors[i]);
      });
      // The events table agrees with the cursors: pushing an in-flight run again is all-or-nothing.
      for (const p of inFlight) {
        const again = await sync.pushEvents({ project: "p", runtimeId: RT, events: eventsOf(p) });
        const outcome = cursors[pushes.indexOf(p)] === p.k ? SyncOutcome.DUPLICATE : SyncOutcome.ACCEPTED;
        expect(again.results.map((r) => r.outcome), p.runId).toEqual(Array(p.k).fill(outcome));
      }

      // 1: no fencing token answered before the kill is handed out again.
      const checker = await client(PresenceService, second.url, 0).registerAgent({ name: "checker", project: "p" });
      const leases = client(LeaseService, second.url, 0, { "x-kxm-agent-id": checker.agent!.id, "x-kxm-agent-key": checker.agentKey });
      for (const name of LEASES) {
        const fence = tokens.get(name)!;
        expect(fence, name).toBeGreaterThan(0);
        try {
          const r = await leases.acquireLease({ name, ttlMs: 5_000 });
          expect(Number(r.lease!.fencingToken), `${name} granted after restart`).toBeGreaterThan(fence);
        } catch (e) {
          const refusal = refusalOf(e); // still held by a pre-kill holder: its token is the stored one
          expect(refusal.reason).toBe("LEASE_HELD");
          expect(Number(refusal.lease!.fencingToken), `${name} held after restart`).toBeGreaterThanOrEqual(fence);
        }
      }

      // 1: every message whose send was answered is stored.
      expect(messages.length).toBeGreaterThan(0);
      const peers = agents.map((a, i) => client(PeerService, second.url, i, a.headers));
      await Promise.all(messages.map(async (m) => expect((await peers[m.sender]!.getMessage({ messageId: m.id })).message?.id).toBe(m.id)));

      second.child.kill("SIGTERM");
      await second.exited;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000); // real processes on the real clock: slow on a loaded machine, never a hang
});
