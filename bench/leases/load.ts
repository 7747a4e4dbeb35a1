/**
 * Closed-loop load: `concurrency` workers, each running cycles back to back for a warm-up and
 * then a measured window. Every awaited call inside a cycle is one sample (one decision, or
 * one ping). Used for the RPC scenarios (in the hub's thread or in a worker thread) and for
 * the store floor.
 */
import { performance } from "node:perf_hooks";
import { Code, ConnectError, createClient, type CallOptions } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PingService } from "./ping.js";
import { Samples } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";

export interface Phase {
  warmupMs: number;
  durationMs: number;
  /** Stop the measured window after this many samples too; 0 = no count limit. */
  maxOps: number;
}

export interface RunResult {
  /** Sorted latency samples of the measured window, ms. */
  lat: Float64Array;
  ops: number;
  cycles: number;
  refused: number;
  errors: number;
  elapsedMs: number;
  firstError?: string;
}

export type CycleOutcome = "cycle" | "refused";
/** Times one call; only calls inside the measured window are kept. */
export type Timed = <T>(call: () => Promise<T>) => Promise<T>;

export async function runClosedLoop(
  concurrency: number,
  phase: Phase,
  makeCycle: (worker: number) => (timed: Timed) => Promise<CycleOutcome>,
): Promise<RunResult> {
  const samples = new Samples();
  const warmEnd = performance.now() + phase.warmupMs;
  let measuring = false;
  let start = 0;
  let stopAt = Infinity;
  let cycles = 0;
  let refused = 0;
  let errors = 0;
  let firstError: string | undefined;

  const timed: Timed = async (call) => {
    const t0 = performance.now();
    try {
      return await call();
    } finally {
      // A refusal (thrown) is still a decision and still a sample.
      if (measuring) samples.push(performance.now() - t0);
    }
  };

  const done = () => measuring && (performance.now() >= stopAt || (phase.maxOps > 0 && samples.n >= phase.maxOps));

  async function worker(w: number) {
    const cycle = makeCycle(w);
    while (!done()) {
      if (!measuring && performance.now() >= warmEnd) {
        measuring = true;
        start = performance.now();
        stopAt = start + phase.durationMs;
      }
      const counting = measuring;
      try {
        const outcome = await cycle(timed);
        if (counting) {
          if (outcome === "cycle") cycles++;
          else refused++;
        }
      } catch (e) {
        errors++;
        firstError ??= e instanceof Error ? e.message : String(e);
        return; // an unexpected failure stops this worker; the report shows it
      }
    }
  }

  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return { lat: samples.sorted(), ops: samples.n, cycles, refused, errors, elapsedMs: performance.now() - start, firstError };
}

export interface AgentCreds {
  id: string;
  key: string;
  name: string;
  project: string;
}

export interface RpcScenario {
  baseUrl: string;
  httpVersion: "2" | "1.1";
  kind: "ping" | "lease";
  concurrency: number;
  /** One per worker. */
  agents: AgentCreds[];
  /** Lease name per worker (all equal in the contention scenario). */
  names: string[];
  ttlMs: number;
  phase: Phase;
}

type PingClient = { ping(req: object, options?: CallOptions): Promise<unknown> };

/** Runs one RPC scenario over one shared transport (one HTTP/2 connection, or a keep-alive pool). */
export async function runRpcScenario(s: RpcScenario): Promise<RunResult> {
  const { transport, close } = makeTransport(s.baseUrl, s.httpVersion, s.concurrency);
  try {
    if (s.kind === "ping") {
      const client = createClient(PingService, transport) as unknown as PingClient;
      return await runClosedLoop(s.concurrency, s.phase, () => async (timed) => {
        await timed(() => client.ping({}));
        return "cycle";
      });
    }
    const leases = createClient(LeaseService, transport);
    return await runClosedLoop(s.concurrency, s.phase, (w) => {
      const a = s.agents[w]!;
      const name = s.names[w]!;
      const options: CallOptions = { headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key } };
      return async (timed) => {
        let fencingToken: bigint;
        try {
          const got = await timed(() => leases.acquireLease({ name, ttlMs: s.ttlMs }, options));
          fencingToken = got.lease!.fencingToken;
        } catch (e) {
          if (e instanceof ConnectError && e.code === Code.Aborted) return "refused"; // lease_held
          throw e;
        }
        await timed(() => leases.renewLease({ name, fencingToken, ttlMs: s.ttlMs }, options));
        await timed(() => leases.releaseLease({ name, fencingToken }, options));
        return "cycle";
      };
    });
  } finally {
    close();
  }
}
