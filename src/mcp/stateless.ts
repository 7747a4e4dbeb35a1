import { AsyncLocalStorage } from "node:async_hooks";
import { createMcpHandler, ProtocolError, ProtocolErrorCode, type ServerEvent, type ServerEventBus } from "@modelcontextprotocol/server";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import { sha256Hex } from "../ids.js";
import type { FaceObserver } from "../observe.js";
import { requestIdOfRequest } from "../http/request-id.js";
import { remoteAddressOf } from "../http/listen.js";
import { restErrorFromHub, type RestError } from "../transcode/rest-errors.js";
import { headerOf, reachesTool, refuseHttp, type Identity, type McpCalls, type Registered } from "./calls.js";
import { isResource, resourceWatches, type Watches } from "./resources.js";
import { noRoomCode, rpcError, webRequestOf, writeWebResponse } from "./web.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface StatelessDeps {
  clock: Clock;
  observer: FaceObserver;
  /** Bindings kept at once (least recently used goes first); past it with all busy, a request that needs a new one is refused (503). */
  maxBindings: number;
  /** A binding unused this long is forgotten (the next request registers again; leases lapse at their TTL). */
  idleMs: number;
  /**
   * The longest lease TTL: a binding used within it may hold its agent's only key to leases that
   * are still live, and is neither forgotten nor evicted (registering again takes the agent over,
   * which releases them).
   */
  leaseTtlMaxMs: number;
  /** Aborted when the hub shuts down: a listen stream whose watch ends then is ended by `close`, gracefully. */
  shutdownSignal?: AbortSignal;
  /** Told when a request's headers registered (took over) an agent: its 2025-era sessions act with a key that no longer works. */
  registered(agentId: string): Promise<void>;
}

/**
 * What a request's headers resolved to: (project, sha256(Authorization), X-Kxm-Agent) → the agent
 * RegisterAgent answered, with the headers every call as it carries. A binding without an agent
 * (no X-Kxm-Agent) only records that the token may act in the project.
 */
/** A request's binding, or why it has none: refused (`error`), or no room for it (`full`). */
type Resolved = { binding?: Binding; error?: RestError; full?: "full" | "project" };

interface Binding {
  key: string;
  project: string;
  header: Headers;
  agentId?: string;
  lastUsedMs: number;
  /** Requests under way (a tool call that waits, an open listen stream): a busy binding is never idle. */
  busy: number;
  /** Its open listen streams (at most maxListens). */
  listens: number;
}

/**
 * Listen streams one binding may hold open: the SDK's own limit is one for the whole hub
 * (maxBindings), which one agent could otherwise take for itself.
 */
const maxListens = 4;

/** A `subscriptions/listen` stream's watches (opened as its binding) and the SDK's listener they tell. */
interface Listener {
  watches: Watches;
  attach(sink: (e: ServerEvent) => void): void;
  attached: boolean;
  close(): Promise<void>;
}

/** One request as the SDK's calls back (the factory, the bus, onerror) see it: set around handler.fetch. */
interface Scope {
  req: Req;
  body: unknown;
  ac: AbortController;
  /** The binding the factory resolved; busy until the answer is written. */
  binding?: Binding;
  /** The listen stream's watches, opened by the factory before the SDK acknowledges. */
  listener?: Listener;
  /** A listen stream, counted in its binding's `listens` until it ends. */
  listening?: boolean;
  /** What the factory refused (its answer replaces the SDK's). */
  refused?: (res: Res) => void;
  /** The last error the SDK reported for the request (logged when it answers 5xx). */
  error?: Error;
}

/** Thrown by the factory to refuse: the SDK answers it 500, and the face answers `Scope.refused` instead. */
class Refused extends Error {}

/**
 * The bus `subscriptions/listen` streams subscribe to, scoped: a stream gets the changes its own
 * watches see (opened as its binding's agent, so one project's changes never wake another
 * project's listener, nor one agent's inbox another's), found through the request it opened on
 * (the SDK subscribes synchronously while serving it). An unscoped publish (the handler's
 * `notify`) reaches every stream only for list changes, which are the same for everyone; a
 * resource update is never broadcast.
 */
function createScopedBus(scope: AsyncLocalStorage<Scope>): ServerEventBus {
  const everyone = new Set<(e: ServerEvent) => void>();
  return {
    publish(event) {
      if (event.kind === "resource_updated") return;
      for (const l of everyone) {
        try {
          l(event);
        } catch {
          // one stream's failure is its own
        }
      }
    },
    subscribe(listener) {
      const own = scope.getStore()?.listener;
      everyone.add(listener);
      own?.attach(listener);
      let live = true;
      return () => {
        if (!live) return;
        live = false;
        everyone.delete(listener);
        void own?.close();
      };
    },
  };
}

/** The distinct kxm:// resources a listen request names (others are acknowledged by the SDK but never change). */
function listenedUris(body: unknown): string[] {
  const uris = (body as { params?: { notifications?: { resourceSubscriptions?: unknown } } } | undefined)?.params?.notifications?.resourceSubscriptions;
  return Array.isArray(uris) ? [...new Set(uris.filter((u): u is string => typeof u === "string" && isResource(u)))] : [];
}

const isListen = (body: unknown) => (body as { method?: unknown } | undefined)?.method === "subscriptions/listen";

/**
 * The methods a request's Server answers in this era: calls.ts serverFor's, and the SDK's own that
 * a client sends (its discovery probe, listen). A request for one of them is checked as its
 * headers' agent (the token refused at the client's first probe, as at a session's initialize).
 * `ping` is no 2026-07-28 method: the SDK answers it "method not found".
 */
const served = new Set(["server/discover", "tools/list", "tools/call", "resources/list", "resources/read", "resources/templates/list", "subscriptions/listen"]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const optional = (v: unknown, is: (v: unknown) => boolean) => v === undefined || is(v);
const isString = (v: unknown) => typeof v === "string";
const isBoolean = (v: unknown) => typeof v === "boolean";

/**
 * Whether the SDK's params schema for `method` (its 2026-07-28 dispatch schemas) takes `params`,
 * and what the hub's handler does with them reaches an RPC: a cursor is a string; a read names a
 * string URI, and one of the hub's resources (any other is refused by the hub before any RPC); a
 * listen's filter is an object of flags and a list of URIs; a tool call reaches its tool
 * (calls.ts reachesTool). Mirrors the SDK's checks, which run only after the factory: a request
 * they refuse must register nothing.
 */
function paramsServed(method: string, params: unknown): boolean {
  const p = isObject(params) ? params : {};
  switch (method) {
    case "tools/list":
    case "resources/list":
    case "resources/templates/list":
      return optional(p.cursor, isString);
    case "resources/read":
      return typeof p.uri === "string" && isResource(p.uri);
    case "subscriptions/listen": {
      const f = p.notifications;
      return (
        isObject(f) &&
        ["toolsListChanged", "promptsListChanged", "resourcesListChanged"].every((k) => optional(f[k], isBoolean)) &&
        optional(f.resourceSubscriptions, (u) => Array.isArray(u) && u.every(isString))
      );
    }
    case "tools/call":
      return reachesTool(params);
    default:
      return true;
  }
}

/**
 * Whether `body` is a request the Server will act on, which needs its agent (registered, or taken
 * over, on a miss): a notification, a method it does not serve, params the SDK's schema refuses,
 * a read of a resource the hub does not have, or a tool call that reaches no tool's RPC (naming
 * no tool, or with arguments the tool refuses: calls.ts reachesTool) is refused or dropped
 * without one, and must register nothing.
 */
function needsAgent(body: unknown): boolean {
  const b = body as { id?: unknown; method?: unknown; params?: unknown } | undefined;
  if (b === undefined || b.id === undefined || typeof b.method !== "string" || !served.has(b.method)) return false;
  return paramsServed(b.method, b.params);
}

const idOf = (body: unknown) => {
  const id = (body as { id?: unknown } | undefined)?.id;
  return typeof id === "string" || typeof id === "number" ? id : null;
};

/**
 * The 2026-07-28 leg of `/mcp` (stateless: no initialize, no session, no DELETE): the SDK's
 * createMcpHandler, strict (`legacy: 'reject'`: the face routes 2025-era traffic to its sessions),
 * with a Server per request from the same code as a session's (calls.ts). Identity comes from the
 * headers of every request (Authorization, X-Kxm-Project, X-Kxm-Agent; X-Kxm-Host and
 * X-Kxm-Purpose when registering), resolved through a small LRU of bindings; a miss registers the
 * agent as a session's initialize does (with takeover). That happens in the server factory, which
 * the SDK calls once the request passed its envelope checks, and only for a request the Server
 * will act on (needsAgent): a notification, a method it does not serve or a tool call without a
 * tool, or with arguments its tool refuses, registers nothing; the hub's refusal (401 with a
 * Bearer challenge, …) replaces the SDK's answer.
 * Resources are read per request; `subscriptions/listen` on kxm:// URIs opens
 * one hub stream per URI as the binding's agent, for as long as the listen stream is open.
 */
export function createStateless(deps: StatelessDeps, calls: McpCalls) {
  /** Least recently used first. */
  const bindings = new Map<string, Binding>();
  const pending = new Map<string, Promise<Resolved>>();
  const scope = new AsyncLocalStorage<Scope>();
  const bus = createScopedBus(scope);
  let closed = false;

  /**
   * The factory runs once the SDK has validated the request (era, envelope, headers), so a request
   * it refuses never registers anything. It resolves the request's headers to a binding, opens a
   * listen request's watches, and builds the Server that acts as the binding's agent.
   */
  const handler = createMcpHandler(
    async () => {
      const at = scope.getStore();
      if (!at) throw new Error("an MCP request outside the face's scope");
      return (await prepare(at)).server;
    },
    {
      legacy: "reject",
      bus,
      // Always a stream: a tool call that waits (acquire_lease, read_inbox) keeps traffic on it.
      responseMode: "sse",
      maxSubscriptions: deps.maxBindings * maxListens,
      onerror: (e) => {
        const at = scope.getStore();
        if (at) at.error = e;
      },
    },
  );

  const keyOf = (project: string, authorization: string | undefined, name: string) => `${project}\n${sha256Hex(authorization ?? "")}\n${name}`;

  /** Forgets `b` (when it is still the binding of its key): the next request with its headers registers again. */
  function forget(b: Binding) {
    if (bindings.get(b.key) === b) bindings.delete(b.key);
  }

  /** Forgets the bindings of `agentId` (but `except`): another session or request took the agent over, rotating its key. */
  function forgetAgent(agentId: string, except?: Binding) {
    for (const b of [...bindings.values()]) if (b !== except && b.agentId === agentId) bindings.delete(b.key);
  }

  /** Whether `b` can go: not busy, and unused for longer than any lease its agent took can live. */
  const spare = (b: Binding, unusedMs: number) => b.busy === 0 && b.lastUsedMs <= deps.clock.now() - Math.max(unusedMs, deps.leaseTtlMaxMs);

  /** Forgets the bindings unused for `idleMs` (and the longest lease TTL). */
  function expireIdle(): number {
    const idle = [...bindings.values()].filter((b) => spare(b, deps.idleMs));
    for (const b of idle) bindings.delete(b.key);
    return idle.length;
  }

  /** How many bindings (held and being made) `project` has. */
  const bindingsOf = (project: string): number => {
    let n = reservedBy.get(project) ?? 0;
    for (const b of bindings.values()) if (b.project === project) n++;
    return n;
  };

  /** Places taken by bindings being made (their agent registering), by project: counted as bindings already. */
  const reservedBy = new Map<string, number>();
  /** Bindings being made, all projects together. */
  const reserved = (): number => {
    let n = 0;
    for (const count of reservedBy.values()) n += count;
    return n;
  };

  /**
   * Room for one more binding of `project`: the least recently used one that can go (spare) goes;
   * "full" when none can. One project holds at most a quarter of the table ("project" past it).
   */
  function makeRoom(project: string): true | "full" | "project" {
    const share = Math.max(1, Math.floor(deps.maxBindings / 4));
    if (bindingsOf(project) >= share) {
      expireIdle();
      if (bindingsOf(project) >= share) return "project";
    }
    if (bindings.size + reserved() < deps.maxBindings) return true;
    expireIdle();
    for (const b of bindings.values()) {
      if (bindings.size + reserved() < deps.maxBindings) break;
      if (spare(b, 0)) bindings.delete(b.key);
    }
    return bindings.size + reserved() < deps.maxBindings ? true : "full";
  }

  /** The binding of a request's headers: held, or made (registering its agent, or checking its token). */
  async function resolve(req: Req, project: string, name: string | undefined) {
    const authorization = typeof req.headers.authorization === "string" ? req.headers.authorization : undefined;
    const key = keyOf(project, authorization, name ?? "");
    const held = bindings.get(key);
    if (held) {
      bindings.delete(key);
      bindings.set(key, held);
      return { binding: held };
    }
    const already = pending.get(key);
    if (already) return already;
    // Its place is taken before its agent registers, and kept: a registration (a takeover, even)
    // is never followed by "too many MCP clients".
    const made = (async (): Promise<Resolved> => {
      const room = makeRoom(project);
      if (room !== true) return { full: room };
      reservedBy.set(project, (reservedBy.get(project) ?? 0) + 1);
      try {
        return await bind();
      } finally {
        const left = reservedBy.get(project)! - 1;
        if (left === 0) reservedBy.delete(project);
        else reservedBy.set(project, left);
      }
    })().finally(() => pending.delete(key));
    pending.set(key, made);
    return made;

    async function bind(): Promise<Resolved> {
      const header = new Headers();
      if (authorization !== undefined) header.set("authorization", authorization);
      const caller = { header, remote: remoteAddressOf(req) };
      const checked = name
        ? await calls.register(caller, "mcp request", project, name, headerOf(req, "x-kxm-host"), headerOf(req, "x-kxm-purpose"))
        : await calls.mayRegister(caller, "request", project);
      if (checked.error) return { error: checked.error };
      const binding: Binding = { key, project, header, lastUsedMs: deps.clock.now(), busy: 0, listens: 0 };
      if (name) {
        const r = (checked as { message?: unknown }).message as Registered;
        binding.agentId = r.agent.id;
        header.set("x-kxm-agent-id", r.agent.id);
        header.set("x-kxm-agent-key", r.agentKey);
        forgetAgent(r.agent.id);
        await deps.registered(r.agent.id);
      }
      bindings.set(key, binding);
      return { binding };
    }
  }

  /** Whether a request's headers name a binding held now (its requests count as a session's do). */
  /** The binding a request's headers resolve to, if this hub keeps one (its agent, if it has one). */
  function heldFor(req: Req): { agentId?: string } | undefined {
    const project = headerOf(req, "x-kxm-project");
    if (!project) return undefined;
    const authorization = typeof req.headers.authorization === "string" ? req.headers.authorization : undefined;
    return bindings.get(keyOf(project, authorization, headerOf(req, "x-kxm-agent") ?? ""));
  }

  /** Opens the watches a listen request names, as `identity`, before the SDK acknowledges it (so every change after the acknowledgement is told). */
  async function listen(identity: Identity, uris: string[], ac: AbortController): Promise<Listener> {
    let sink: ((e: ServerEvent) => void) | undefined;
    const missed = new Set<string>();
    const watches = resourceWatches(calls.resourceCalls(identity), {
      route: "mcp subscriptions/listen",
      notify: async (uri) => {
        if (sink) sink({ kind: "resource_updated", uri });
        else missed.add(uri);
      },
      // Its stream ended on its own (the agent taken over): so does the listen stream; the client listens again.
      ended: () => {
        if (!deps.shutdownSignal?.aborted) ac.abort();
      },
    });
    const listener: Listener = {
      watches,
      attached: false,
      attach(s) {
        sink = s;
        listener.attached = true;
        for (const uri of missed) s({ kind: "resource_updated", uri });
        missed.clear();
      },
      close: () => watches.close(),
    };
    try {
      for (const uri of uris) await watches.watch(uri);
    } catch (e) {
      await watches.close();
      throw e;
    }
    return listener;
  }

  /** Refuses the request with the factory's answer instead of the SDK's. */
  function refuse(at: Scope, answer: (res: Res) => void): never {
    at.refused = answer;
    throw new Refused("refused before serving");
  }

  /** The request's identity (its binding), its listen watches, and its Server. */
  async function prepare(at: Scope) {
    const id = idOf(at.body);
    const project = headerOf(at.req, "x-kxm-project");
    if (!project) {
      refuse(at, (res) =>
        rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "every request acts as one agent of a project: set the X-Kxm-Project header, and X-Kxm-Agent, with Authorization: Bearer <project token>", { code: "protocol_error" }, {}, id),
      );
    }
    // Nothing the SDK will refuse or drop on its own registers an agent (a takeover, on a miss).
    if (!needsAgent(at.body)) return calls.serverFor({ era: "modern", project, remote: remoteAddressOf(at.req), header: new Headers() });
    const resolved = await resolve(at.req, project, headerOf(at.req, "x-kxm-agent"));
    if (resolved.full === "project") {
      refuse(at, (res) => rpcError(res, 503, noRoomCode, "too many MCP clients of this project on this hub (a quarter of its places): try again later", { code: "resource_exhausted" }, {}, id));
    }
    if (resolved.full) refuse(at, (res) => rpcError(res, 503, noRoomCode, "too many MCP clients on this hub: try again later", { code: "resource_exhausted" }, {}, id));
    if (resolved.error) refuse(at, (res) => refuseHttp(res, resolved.error!));
    const b = resolved.binding!;
    b.busy++;
    b.lastUsedMs = deps.clock.now();
    at.binding = b;
    const identity: Identity = {
      era: "modern",
      project: b.project,
      remote: remoteAddressOf(at.req),
      header: b.header,
      ...(b.agentId !== undefined && { agentId: b.agentId }),
      touch: () => void (b.lastUsedMs = deps.clock.now()),
      // A call refused because the agent's key no longer works (another client took the name over): the next request registers again.
      stale: () => forget(b),
    };
    if (isListen(at.body)) {
      if (b.listens >= maxListens) {
        refuse(at, (res) => rpcError(res, 429, ProtocolErrorCode.InvalidRequest, `too many listen streams open for this client (at most ${maxListens}): close one`, { code: "resource_exhausted" }, {}, id));
      }
      b.listens++;
      at.listening = true;
    }
    const uris = isListen(at.body) ? listenedUris(at.body) : [];
    if (uris.length > 0) {
      try {
        at.listener = await listen(identity, uris, at.ac);
      } catch (e) {
        const refusal = e instanceof ProtocolError ? e : new ProtocolError(ProtocolErrorCode.InvalidRequest, String(e));
        refuse(at, (res) => rpcError(res, 200, refusal.code, refusal.message, refusal.data, {}, id));
      }
    }
    return calls.serverFor(identity);
  }

  /** Answers one 2026-07-28 request (the face classified it, read its body and charged the limiter). */
  async function handle(req: Req, res: Res, body: unknown, ac: AbortController): Promise<void> {
    if (closed) return refuseHttp(res, restErrorFromHub(errors.hubShuttingDown(), requestIdOfRequest(req)));
    if (isListen(body)) return exchange(req, res, body, ac);
    // A call under way is answered before a shutdown ends the exchanges (close).
    const answered = exchange(req, res, body, ac);
    underway.add(answered);
    try {
      await answered;
    } finally {
      underway.delete(answered);
    }
  }

  /** Requests under way other than listen streams. */
  const underway = new Set<Promise<void>>();

  async function exchange(req: Req, res: Res, body: unknown, ac: AbortController): Promise<void> {
    const at: Scope = { req, body, ac };
    try {
      const response = await scope.run(at, () => handler.fetch(webRequestOf(req, ac.signal), { parsedBody: body }));
      if (at.refused) {
        await response.body?.cancel().catch(() => undefined);
        return at.refused(res);
      }
      if (response.status >= 500 && response.status !== 503) {
        deps.observer.log("internal_error", { face: "mcp", era: "2026-07-28", status: response.status, error: at.error ? (at.error.stack ?? at.error.message) : "the SDK answered 5xx" });
      }
      await writeWebResponse(res, response);
    } finally {
      if (at.listener && !at.listener.attached) await at.listener.close();
      if (at.binding) {
        at.binding.busy--;
        if (at.listening) at.binding.listens--;
        at.binding.lastUsedMs = deps.clock.now();
      }
    }
  }

  return {
    handle,
    heldFor,
    forgetAgent: (agentId: string) => forgetAgent(agentId),
    expireIdle,
    /** Ends the listen streams (gracefully) once the calls under way are answered; later requests are refused hub_shutting_down. */
    close: async () => {
      closed = true;
      await Promise.allSettled([...underway]);
      return handler.close();
    },
    get size() {
      return bindings.size;
    },
  };
}

export type Stateless = ReturnType<typeof createStateless>;
