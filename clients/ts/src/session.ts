import os from "node:os";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import type { Http2SessionManager } from "@connectrpc/connect-node";
import { monotonicClock, type Clock } from "./clock.js";
import { callError, HubError } from "./errors.js";
import { checkFence, type FenceCheck } from "./fence.js";
import { LeaseService, PeerService, PresenceService, type Agent, type Message } from "./generated.js";
import { inboxEvents, type InboxEvent, type InboxOptions } from "./inbox.js";
import { HeldLease, type AcquireOptions } from "./lease.js";
import { awaitReply } from "./reply.js";
import { handshakeFailure } from "./tls-failure.js";
import { nodeTlsOptions, ownTransport, type TlsOptions } from "./tls.js";

/** The codes of a call that ended without the hub's answer (callError): it may have been carried out. */
const unanswered = new Set(["cancelled", "unavailable", "unknown"]);
/** How long each call of settleUnanswered may take. */
const settleTimeoutMs = 10_000;

export interface SessionOptions {
  /** The hub's base URL, e.g. `http://127.0.0.1:7331`, or `https://hub.example:7331` for a hub with TLS. */
  url: string;
  project: string;
  /** The agent's name in the project (a registration resumes the offline agent of that name). */
  name: string;
  /** The project's token (`Authorization: Bearer`); none on a loopback hub without tokens. */
  token?: string;
  purpose?: string;
  model?: string;
  /** Host label; default: this machine's host name. */
  host?: string;
  /** Heartbeat interval; default 10 s, well inside the hub's default stale-after of 30 s. */
  heartbeatMs?: number;
  /**
   * Default: Connect over HTTP/2 (connect-node), one connection, closed by close(). A function
   * of the interceptors the session adds.
   */
  transport?: (interceptors: Interceptor[]) => Transport;
  /**
   * For an `https://` URL: the CA to trust (default: the system's) and the client certificate and
   * key for a hub with mutual TLS; PEM text or file paths (see TlsOptions). Used by the default
   * transport; a `transport` of your own brings its own `nodeOptions`.
   */
  tls?: TlsOptions;
  /** Default: the monotonic clock. */
  clock?: Clock;
  /**
   * Replace an instance of this name that the hub still has online (a restart that cannot wait
   * for the crashed one to go stale): its key stops working, its streams end and its leases are
   * released, the next grant of each on a higher token. Default false: such a name is refused
   * with `duplicate_agent_name`.
   */
  takeover?: boolean;
}

/**
 * An agent's session with the hub: registered (or resumed) on open, its credentials on every
 * call, a heartbeat while it lives, and unregistered on close. `lost` aborts when the hub refuses
 * the agent (its key rotated away) or heartbeats have failed for three intervals in a row.
 */
export class Session {
  readonly agent: Agent;
  /** True when `takeover` replaced an instance the hub still had online. */
  readonly takenOver: boolean;
  /** The leases that instance held, which the takeover released. */
  readonly releasedLeases: string[];
  readonly leases: Client<typeof LeaseService>;
  readonly peer: Client<typeof PeerService>;
  readonly presence: Client<typeof PresenceService>;
  readonly #lost = new AbortController();
  readonly #closing = new AbortController();
  readonly #held = new Set<HeldLease>();
  /** Acquires in flight, by lease name. */
  readonly #acquiring = new Map<string, number>();
  /** By lease name: the look after an acquire whose answer never came (settleUnanswered). */
  readonly #unsettled = new Map<string, Promise<void>>();
  /** The leases whose look waits for the acquires of the name in flight to end. */
  readonly #lookLater = new Set<string>();
  readonly #heartbeats: Promise<void>;
  readonly #connection: Http2SessionManager | undefined;

  private constructor(
    o: Required<Pick<SessionOptions, "heartbeatMs">> & { clock: Clock; connection: Http2SessionManager | undefined },
    registered: { agent?: Agent; takenOver: boolean; releasedLeases: string[] },
    clients: { leases: Client<typeof LeaseService>; peer: Client<typeof PeerService>; presence: Client<typeof PresenceService> },
  ) {
    this.agent = registered.agent!;
    this.takenOver = registered.takenOver;
    this.releasedLeases = registered.releasedLeases;
    ({ leases: this.leases, peer: this.peer, presence: this.presence } = clients);
    this.clock = o.clock;
    this.#connection = o.connection;
    this.#heartbeats = this.beat(o.heartbeatMs);
  }

  private readonly clock: Clock;

  /** Registers (or resumes) the agent and starts its heartbeats. */
  static async open(o: SessionOptions): Promise<Session> {
    const credentials: Record<string, string> = o.token ? { authorization: `Bearer ${o.token}` } : {};
    const auth: Interceptor = (next) => (req) => {
      for (const [k, v] of Object.entries(credentials)) req.header.set(k, v);
      return next(req);
    };
    const own = o.transport ? undefined : ownTransport(o.url, o.tls);
    const connection = own?.connection;
    const transport = (o.transport ?? own!.make)([auth]);
    const presence = createClient(PresenceService, transport);
    let registered;
    try {
      registered = await presence.registerAgent({
        name: o.name,
        project: o.project,
        purpose: o.purpose,
        model: o.model,
        host: o.host ?? os.hostname().slice(0, 64),
        takeover: o.takeover ?? false,
      });
    } catch (e) {
      connection?.abort();
      const err = callError(e, undefined);
      // A refused client certificate reaches the transport as a reset or a cancelled stream: one
      // handshake of its own says whether TLS is why.
      if (own && ["unavailable", "cancelled", "unknown"].includes(err.code)) {
        const tls = await handshakeFailure(o.url, nodeTlsOptions(o.tls));
        if (tls) throw HubError.tls(tls, e);
      }
      throw err;
    }
    credentials["x-kxm-agent-id"] = registered.agent!.id;
    credentials["x-kxm-agent-key"] = registered.agentKey;
    return new Session({ heartbeatMs: o.heartbeatMs ?? 10_000, clock: o.clock ?? monotonicClock, connection }, registered, {
      leases: createClient(LeaseService, transport),
      peer: createClient(PeerService, transport),
      presence,
    });
  }

  /** Aborts when the session is lost; `reason` is the HubError that says why. */
  get lost(): AbortSignal {
    return this.#lost.signal;
  }

  /**
   * Acquires a lease and keeps it renewed (see HeldLease): with `waitMs`, waits for it in the
   * hub's queue. Throws HubError (`lease_held` with the holder's lease).
   */
  async acquire(name: string, o: AcquireOptions = {}): Promise<HeldLease> {
    const ttlMs = o.ttlMs ?? 30_000;
    // What the request cannot carry is the caller's mistake, refused here: sent, it failed to
    // encode and read as the hub being away (transient), and started a look at the lease.
    for (const [field, v] of [["ttlMs", ttlMs], ["waitMs", o.waitMs]] as const) {
      if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= 2_147_483_647)) {
        throw new HubError("protocol_error", `${field} must be a whole number of milliseconds, 0..2147483647 (got ${v})`, { field });
      }
    }
    for (let look = this.#unsettled.get(name); look; look = this.#unsettled.get(name)) {
      const signal = o.signal;
      await (signal ? Promise.race([look, new Promise((r) => signal.addEventListener("abort", r, { once: true }))]) : look);
      if (signal?.aborted) throw new HubError("cancelled", "the acquire was cancelled before it was sent");
    }
    const sentAt = this.clock.now();
    let answer;
    this.#acquiring.set(name, (this.#acquiring.get(name) ?? 0) + 1);
    try {
      answer = await this.leases.acquireLease({ name, ttlMs, waitMs: o.waitMs }, { signal: o.signal });
    } catch (e) {
      const err = callError(e, o.signal);
      this.#doneAcquiring(name);
      this.#acquireEnded(name, unanswered.has(err.code));
      throw err;
    }
    this.#doneAcquiring(name);
    // Renewed: this agent holds the lease already, under this acquire's token. When a call of
    // this session holds it (or is acquiring it), two holders of one token are what no fence can
    // tell apart, so the lease stays that call's and this is refused. When none does, nobody
    // answers for it: an acquire whose answer was lost (and whose look at the lease failed too),
    // or an earlier process of the agent. This acquire takes it over, token and all: refusing
    // would renew it at every retry, and neither this agent nor any other would ever get it.
    if (answer.renewed && this.#after(name)) {
      this.#acquireEnded(name, false);
      throw new HubError("lease_held", `lease ${name} is already held by this agent (fencing token ${answer.lease?.fencingToken}); hold it once`, {}, answer.lease, false);
    }
    // A grant out of the queue came at least `waitedMs` after the call was sent (and no later than
    // now): its time to live counts from there, never from before the wait.
    const grantedNoEarlierThan = sentAt + Math.min(answer.waitedMs, this.clock.now() - sentAt);
    const held = new HeldLease(this.leases, this.clock, answer.lease!, ttlMs, grantedNoEarlierThan);
    this.#held.add(held);
    // Held by this call now: a look put off for the name has nothing left to settle.
    this.#lookLater.delete(name);
    held.lost.addEventListener("abort", () => this.#held.delete(held), { once: true });
    return held;
  }

  #doneAcquiring(name: string): void {
    const n = this.#acquiring.get(name)! - 1;
    if (n === 0) this.#acquiring.delete(name);
    else this.#acquiring.set(name, n);
  }

  /** Whether a call of this session holds lease `name`. */
  #holds(name: string): boolean {
    return [...this.#held].some((h) => h.name === name);
  }

  /** Whether a call of this session holds lease `name` or is acquiring it. */
  #after(name: string): boolean {
    return this.#acquiring.has(name) || this.#holds(name);
  }

  /**
   * An acquire of `name` ended without holding the lease (counted out of #acquiring already);
   * `noAnswer` says it got no answer. Starts the look it needs, or one put off for the name.
   */
  #acquireEnded(name: string, noAnswer: boolean): void {
    if (noAnswer || this.#lookLater.has(name)) this.#settleUnanswered(name);
  }

  /**
   * An acquire that got no answer (cancelled, timed out, the connection lost) may have been
   * granted all the same: the grant was on its way when the call ended. Nothing of this session
   * would ever release it, and it would stay held until its time to live ran out. So the lease
   * is looked up, and released when this agent holds it and no call of this session holds or
   * acquires it (as etcd's lock recipe deletes its key when a wait for the lock is cancelled).
   * While another acquire of the name is in flight, the look is put off until the last of them
   * ends: without the lease, the look runs then; holding it, that call answers for it. The next
   * acquire of the name waits for this look; close() too.
   */
  #settleUnanswered(name: string): void {
    if (this.#lost.signal.aborted || this.#holds(name)) {
      this.#lookLater.delete(name);
      return;
    }
    if (this.#acquiring.has(name)) {
      this.#lookLater.add(name);
      return;
    }
    this.#lookLater.delete(name);
    if (this.#unsettled.has(name)) return;
    const look = (async () => {
      if (this.#after(name)) return;
      const { lease } = await this.leases.getLease({ name }, { timeoutMs: settleTimeoutMs });
      if (!lease || lease.holderAgentId !== this.agent.id || this.#after(name)) return;
      await this.leases.releaseLease({ name, fencingToken: lease.fencingToken }, { timeoutMs: settleTimeoutMs });
    })()
      .catch(() => undefined)
      .finally(() => this.#unsettled.delete(name));
    this.#unsettled.set(name, look);
  }

  /**
   * Runs `fn` holding the lease: `fn` gets the fencing token and a signal that aborts if the
   * lease is lost; the lease is released when `fn` settles.
   */
  async withLease<T>(name: string, fn: (lease: { token: bigint; signal: AbortSignal }) => Promise<T>, o: AcquireOptions = {}): Promise<T> {
    const held = await this.acquire(name, o);
    try {
      return await fn({ token: held.token, signal: held.lost });
    } finally {
      await held.release().catch(() => undefined);
    }
  }

  /**
   * Whether `fencingToken` is the live holder's current token for lease `name` of the agent's
   * project (see checkFence): what a resource this agent guards asks before accepting a write.
   */
  checkFence(name: string, fencingToken: bigint | number, o: { signal?: AbortSignal } = {}): Promise<FenceCheck> {
    return checkFence(this.leases, name, fencingToken, o);
  }

  /** The agent's inbox (see inboxEvents): resumes across dropped connections and hub restarts. */
  inbox(o: InboxOptions = {}): AsyncGenerator<InboxEvent> {
    return inboxEvents(this.peer, this.clock, o);
  }

  /**
   * Sends a message to an agent of the project (id or name). Its reply: `awaitReply`. An abort
   * of `signal` ends the call with HubError `cancelled` (the hub may have stored the message
   * already).
   */
  async send(target: string, content: string, o: { signal?: AbortSignal } = {}): Promise<Message> {
    try {
      return (await this.peer.sendMessage({ target, content }, { signal: o.signal })).message!;
    } catch (e) {
      throw callError(e, o.signal);
    }
  }

  /**
   * The reply to a message this agent sent, whether it came before this call or comes later (see
   * awaitReply in reply.ts). Throws HubError `message_ended` when the message ended without one.
   */
  awaitReply(message: Message | string, o: { signal?: AbortSignal } = {}): Promise<Message> {
    return awaitReply(this.peer, this.clock, this.agent.id, typeof message === "string" ? message : message.id, o.signal);
  }

  /** Releases every lease still held, stops the heartbeats, unregisters the agent and closes the connection. */
  async close(): Promise<void> {
    await Promise.all([...this.#held].map((h) => h.release().catch(() => undefined)));
    await Promise.all(this.#unsettled.values());
    this.#closing.abort();
    await this.#heartbeats;
    if (!this.#lost.signal.aborted) {
      this.#lost.abort(new HubError("closed", "the session was closed"));
      await this.presence.unregisterAgent({ agentId: this.agent.id }).catch(() => undefined);
    }
    this.#connection?.abort();
  }

  private async beat(everyMs: number): Promise<void> {
    let failures = 0;
    while (!this.#closing.signal.aborted) {
      await this.clock.sleep(everyMs, this.#closing.signal);
      if (this.#closing.signal.aborted) return;
      try {
        // At most one interval: a heartbeat that never answers (a connection gone silent) is a
        // failed one, so three of them lose the session instead of hanging it.
        await this.presence.heartbeat({ agentId: this.agent.id }, { signal: this.#closing.signal, timeoutMs: everyMs });
        failures = 0;
      } catch (e) {
        if (this.#closing.signal.aborted) return;
        const err = callError(e, this.#closing.signal);
        if (!err.transient || ++failures >= 3) {
          this.#lost.abort(err);
          // Refused for good (its key no longer works: taken over, evicted): what it holds is
          // lost with it, at once, not at the next renewal.
          if (!err.transient) for (const h of [...this.#held]) h.endWithSession(err);
          return;
        }
      }
    }
  }
}

/** Opens a session (Session.open). */
export const connect = (o: SessionOptions) => Session.open(o);
