import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import type { Http2SessionManager } from "@connectrpc/connect-node";
import { create, toJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import { jittered, monotonicClock, type Clock } from "./clock.js";
import { callError, HubError } from "./errors.js";
import { SyncEventSchema, SyncService, type SyncEventResult } from "./generated.js";
import { ownTransport, type TlsOptions } from "./tls.js";

/** One run fact (`kxm.sync-event.v1`) as the generated code builds it. */
export type RunFact = MessageInitShape<typeof SyncEventSchema>;

export interface RunFactSyncOptions {
  /** The hub's base URL, e.g. `http://127.0.0.1:7331`, or `https://...` for a hub with TLS. */
  url: string;
  /** The hub project the runtime pushes into. */
  project: string;
  /** The pushing runtime (`^[a-z][a-z0-9]{1,15}_[A-Za-z0-9][A-Za-z0-9_-]{5,127}$`): every fact's homeRuntimeId. */
  runtimeId: string;
  /** The project's token (`Authorization: Bearer`); none on a loopback hub without tokens. */
  token?: string;
  /** Facts per PushEvents call, 1..100 (the hub's limit; default 100). */
  batchSize?: number;
  /**
   * The hub's request size limit in bytes (default 262,144, the hub's 256 KiB): a batch is cut
   * short of it, its facts measured as JSON, which is never smaller than their binary encoding.
   * A single fact over it is sent alone, and the hub's payload_too_large thrown.
   */
  maxBatchBytes?: number;
  /** Default: Connect over HTTP/2, one connection, closed by close(). */
  transport?: (interceptors: Interceptor[]) => Transport;
  /** For an `https://` URL: the CA to trust and the client certificate and key (see SessionOptions.tls). */
  tls?: TlsOptions;
  /** Default: the monotonic clock (retry back-off). */
  clock?: Clock;
}

/** What a push did: one result per fact in the order given, and each run's gapless cursor after it. */
export interface PushOutcome {
  results: SyncEventResult[];
  /** `${projectId}/${runId}` → the largest N with sequences 1..N stored on the hub. */
  cursors: Map<string, bigint>;
}

/**
 * A workflow runtime's run facts on their way to the hub. `push` sends them in order, in batches
 * the hub takes (at most 100 facts and maxBatchBytes, each batch one transaction on the hub), and sends a batch
 * again after a dropped connection, an unavailable hub or a rate limit, with a back-off: the hub
 * stores each fact exactly once under (projectId, runId, sequence), so a batch sent twice comes
 * back as duplicates, never as doubles. A refusal of a whole batch (a bad token, a malformed
 * batch) is thrown as a HubError; a refused fact is a result (`conflict`, `rejected`), never an
 * exception: read `results`. `cursor` tells where a run stands on the hub, so a runtime that
 * restarts pushes from cursor + 1.
 */
export class RunFactSync {
  readonly #sync: Client<typeof SyncService>;
  readonly #connection: Http2SessionManager | undefined;
  readonly #clock: Clock;
  readonly #batchSize: number;
  readonly #batchBytes: number;

  constructor(private readonly o: RunFactSyncOptions) {
    const batchSize = o.batchSize ?? 100;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100) throw new HubError("protocol_error", "batchSize must be an integer from 1 to 100");
    this.#batchSize = batchSize;
    const maxBatchBytes = o.maxBatchBytes ?? 262_144;
    if (!Number.isSafeInteger(maxBatchBytes) || maxBatchBytes < 2 * requestReserveBytes) {
      throw new HubError("protocol_error", `maxBatchBytes must be an integer of at least ${2 * requestReserveBytes}`);
    }
    this.#batchBytes = maxBatchBytes - requestReserveBytes;
    this.#clock = o.clock ?? monotonicClock;
    const auth: Interceptor = (next) => (req) => {
      if (o.token) req.header.set("authorization", `Bearer ${o.token}`);
      return next(req);
    };
    const own = o.transport ? undefined : ownTransport(o.url, o.tls);
    this.#connection = own?.connection;
    const transport = (o.transport ?? own!.make)([auth]);
    this.#sync = createClient(SyncService, transport);
  }

  /** Pushes `facts` in order (see the class). `signal` stops the retries; what was pushed stays pushed. */
  async push(facts: RunFact[], o: { signal?: AbortSignal } = {}): Promise<PushOutcome> {
    const out: PushOutcome = { results: [], cursors: new Map() };
    for (const events of this.#batches(facts)) {
      const r = await this.#retried(() => this.#sync.pushEvents({ project: this.o.project, runtimeId: this.o.runtimeId, events }, { signal: o.signal }), o.signal);
      out.results.push(...r.results);
      for (const c of r.cursors) out.cursors.set(`${c.projectId}/${c.runId}`, c.cursor);
    }
    return out;
  }

  /** `facts` in order, cut into batches of at most batchSize facts and maxBatchBytes. */
  *#batches(facts: RunFact[]): Generator<RunFact[]> {
    let batch: RunFact[] = [];
    let bytes = 0;
    for (const fact of facts) {
      const size = factBytes(fact);
      if (batch.length > 0 && (batch.length === this.#batchSize || bytes + size > this.#batchBytes)) {
        yield batch;
        batch = [];
        bytes = 0;
      }
      batch.push(fact);
      bytes += size;
    }
    if (batch.length > 0) yield batch;
  }

  /** The run's gapless cursor on the hub (0 when none of it is stored): push from cursor + 1. */
  async cursor(projectId: string, runId: string, o: { signal?: AbortSignal } = {}): Promise<bigint> {
    const r = await this.#retried(() => this.#sync.getCursor({ project: this.o.project, projectId, runId }, { signal: o.signal }), o.signal);
    return r.cursor?.cursor ?? 0n;
  }

  /** Closes the connection. */
  close(): void {
    this.#connection?.abort();
  }

  async #retried<T>(call: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    let backoffMs = 100;
    for (;;) {
      try {
        return await call();
      } catch (e) {
        const err = callError(e, signal);
        if (signal?.aborted || !err.transient) throw err;
        // rate_limited says how long to wait; otherwise back off, doubling up to 5 s.
        const retryAfterMs = Number(err.metadata.retryAfterMs);
        await this.#clock.sleep(Number.isFinite(retryAfterMs) && retryAfterMs > 0 ? retryAfterMs : jittered(backoffMs), signal);
        backoffMs = Math.min(backoffMs * 2, 5_000);
      }
    }
  }
}

/** What a PushEvents request holds besides its facts (project, runtime id, field names), with room to spare. */
const requestReserveBytes = 1024;

/** A fact's size in a request: its JSON (never smaller than its binary encoding) and a separator. */
function factBytes(fact: RunFact): number {
  return Buffer.byteLength(toJsonString(SyncEventSchema, create(SyncEventSchema, fact))) + 8;
}
