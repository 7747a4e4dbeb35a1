import type { Client } from "@connectrpc/connect";
import type { Clock } from "./clock.js";
import { callError, HubError } from "./errors.js";
import type { Lease, LeaseService } from "./generated.js";

export interface AcquireOptions {
  /** Time to live on the hub, 5,000..600,000 ms (default 30,000). */
  ttlMs?: number;
  /** Wait this long for a lease another agent holds, in the hub's queue (default 0: lease_held at once). */
  waitMs?: number;
  /**
   * Stops waiting (and leaves the queue). A grant that crossed the abort on the wire is looked up
   * and released by the session (docs/clients.md).
   */
  signal?: AbortSignal;
}

/**
 * A lease this process holds, renewed about every third of its TTL until it is released or lost.
 * `lost` aborts (its reason a HubError) when the hub says the lease is gone (`lease_superseded`,
 * `lease_expired`, `lease_not_found`), and also when renewals have failed for so long that the
 * lease may lapse on the hub: a fifth of the TTL before that, counted from the earliest moment
 * the hub can have granted or renewed it (the send time of the call; for a grant that came out of
 * the queue, the send time plus how long the hub says the call waited), so the work it guards
 * stops before anyone else can be granted it.
 */
export class HeldLease {
  #lease: Lease;
  readonly #lost = new AbortController();
  readonly #stop = new AbortController();
  readonly #done: Promise<void>;
  #validUntilMs: number;

  constructor(
    private readonly leases: Client<typeof LeaseService>,
    private readonly clock: Clock,
    lease: Lease,
    private readonly ttlMs: number,
    /** The earliest the hub can have granted it: the acquire's send time plus the wait it reports. */
    grantedNoEarlierThanMs: number,
  ) {
    this.#lease = lease;
    this.#validUntilMs = grantedNoEarlierThanMs + ttlMs;
    this.#done = this.keep();
  }

  get name(): string {
    return this.#lease.name;
  }

  /** The fencing token: present it with every write to the guarded resource (docs/leases.md, "Fencing a real resource"). */
  get token(): bigint {
    return this.#lease.fencingToken;
  }

  /** The lease as the hub last granted or renewed it. */
  get lease(): Lease {
    return this.#lease;
  }

  /** Aborts when the lease is lost; `reason` is the HubError that says why. */
  get lost(): AbortSignal {
    return this.#lost.signal;
  }

  /**
   * The latest the lease can still be valid on the hub, on the session's clock: the send time of
   * the last confirmed grant or renewal plus the TTL. Past it, another holder may exist.
   */
  get validUntilMs(): number {
    return this.#validUntilMs;
  }

  /** Throws the loss, if the lease is lost: call it before an irreversible step. */
  check(): void {
    if (this.#lost.signal.aborted) throw this.#lost.signal.reason as HubError;
  }

  /**
   * Stops renewing and releases the lease (a lease already lost is not released). An abort of
   * `signal` ends the release call with HubError `cancelled`: the lease is not renewed any more
   * either way, and lapses at its TTL if the hub did not take the release.
   */
  async release(o: { signal?: AbortSignal } = {}): Promise<void> {
    this.#stop.abort();
    await this.#done;
    if (this.#lost.signal.aborted) return;
    this.#lose(new HubError("released", `lease ${this.name} was released`));
    try {
      await this.leases.releaseLease({ name: this.name, fencingToken: this.token }, { signal: o.signal });
    } catch (e) {
      const err = callError(e, o.signal);
      // Gone already (superseded, lapsed and taken): nothing of ours to release.
      if (!["lease_superseded", "lease_not_found"].includes(err.code)) throw err;
    }
  }

  /**
   * The session's agent was refused for good (its key no longer works: taken over, evicted): the
   * lease is lost with it at once, not at its next renewal. @internal
   */
  endWithSession(reason: HubError): void {
    this.#lose(reason);
    this.#stop.abort();
  }

  #lose(reason: HubError): void {
    if (!this.#lost.signal.aborted) this.#lost.abort(reason);
  }

  /** Renews every ttl/3; retries a failed renewal until the lease may be lapsing, then gives it up. */
  private async keep(): Promise<void> {
    const margin = this.ttlMs / 5;
    // A third of the TTL after the grant (its validity's start), not after its answer arrived: a
    // slow answer must not push the first renewal past the point where the lease is given up.
    let nextRenewAt = this.#validUntilMs - this.ttlMs + this.ttlMs / 3;
    while (!this.#stop.signal.aborted && !this.#lost.signal.aborted) {
      const lostAt = this.#validUntilMs - margin;
      await this.clock.sleep(Math.min(nextRenewAt, lostAt) - this.clock.now(), this.#stop.signal);
      if (this.#stop.signal.aborted) return;
      if (this.clock.now() >= lostAt) {
        this.#lose(new HubError("lease_unconfirmed", `lease ${this.name} could not be renewed before it may lapse`, {}, this.#lease, true));
        return;
      }
      const sentAt = this.clock.now();
      try {
        const r = await this.leases.renewLease(
          { name: this.name, fencingToken: this.token, ttlMs: this.ttlMs },
          { signal: this.#stop.signal, timeoutMs: Math.max(1, Math.floor(lostAt - sentAt)) },
        );
        if (r.lease) this.#lease = r.lease;
        this.#validUntilMs = sentAt + this.ttlMs;
        nextRenewAt = sentAt + this.ttlMs / 3;
      } catch (e) {
        if (this.#stop.signal.aborted) return;
        const err = callError(e, this.#stop.signal);
        if (!err.transient && err.code !== "rate_limited") {
          this.#lose(err);
          return;
        }
        // The hub is away: try again soon, while the lease can still be valid. Over the rate
        // limit: not before its window ends (an earlier try is refused too), nor past lostAt.
        const retryAfterMs = err.code === "rate_limited" ? Number(err.metadata.retryAfterMs) : NaN;
        nextRenewAt = this.clock.now() + Math.max(Math.min(1_000, this.ttlMs / 10), Number.isFinite(retryAfterMs) ? retryAfterMs : 0);
      }
    }
  }
}
