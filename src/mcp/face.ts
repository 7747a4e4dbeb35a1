import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { create, fromJson, type JsonObject, type Message } from "@bufbuild/protobuf";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { isInitializeRequest, ProtocolError, ProtocolErrorCode, Server, WebStandardStreamableHTTPServerTransport, type Tool } from "@modelcontextprotocol/server";
import type { Authenticator } from "../auth/authenticate.js";
import { rateKey, type RateLimiter } from "../auth/rate-limit.js";
import { authRules } from "../auth/rules.js";
import type { Clock } from "../clock.js";
import { errorTable, HubError, type HubCode } from "../errors.js";
import { sha256Hex } from "../ids.js";
import type { FaceObserver } from "../observe.js";
import { finishCall, kCall, noteOutcome, startCall } from "../server/call-record.js";
import { kRemoteAddress } from "../server/context.js";
import type { InProcessCaller, InProcessStream } from "../server/in-process.js";
import { requestIdOfRequest } from "../server/interceptors/errors.js";
import { remoteAddressOf } from "../server/listen.js";
import { restErrorFromConnect, restErrorFromHub } from "../transcode/rest-errors.js";
import { toRestJson } from "../transcode/rest-json.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { serveResources, type Subscriptions } from "./resources.js";
import { listed, presented, tools, type ToolDef } from "./tools.js";
import { webRequestOf, writeWebResponse } from "./web.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface McpFaceDeps {
  /** The hub's methods behind its interceptors (auth, limits, metrics, errors). */
  call: InProcessCaller;
  /** The auth rules' check, for a session that names no agent yet (register binds it later). */
  authenticate: Authenticator["authenticate"];
  limiter: RateLimiter;
  clock: Clock;
  observer: FaceObserver;
  maxBodyBytes: number;
  /** Sessions open at once; an initialize past it is refused (503) unless an idle one can go. */
  maxSessions: number;
  /** A session unused this long is closed (its agent's leases lapse at their TTL). */
  idleMs: number;
  version: string;
}

/** One MCP session: the agent it acts as, and the credentials every tool call presents. */
interface Session {
  id: string;
  transport: WebStandardStreamableHTTPServerTransport;
  /** SHA-256 of the Authorization header it was opened with: every request must bring the same. */
  authHash: string;
  /** The project its headers name. */
  project: string;
  /** The agent it acts as; unset until `register` binds a session opened without X-Kxm-Agent. */
  agentId?: string;
  header: Headers;
  remote: string;
  lastUsedMs: number;
  /** POSTs under way (a tool call that waits): a busy session is never idle. */
  busy: number;
  /** Its resource subscriptions: one stream each, ended with the session. */
  resources: Subscriptions;
}

const instructions =
  "kxm-hub coordinates the agents of your project: see who is online (list_agents), message them (send_message, get_message, ack_message, reply_message), and take a fenced lease (acquire_lease) before touching anything shared. Present the lease's fencing token with every write to what it protects, renew long work before the lease lapses, and release it when done. Subscribe to the resources kxm://inbox, kxm://agents and kxm://leases to be told when they change instead of polling.";

/** The tools as tools/list answers them (JSON Schemas from the descriptors: object schemas, as the SDK types want). */
const listedTools = tools.map(listed) as unknown as Tool[];
const byName = new Map(tools.map((t) => [t.name, t]));
const pathOf = (t: ToolDef) => `/${t.method.parent.typeName}/${t.method.name}`;
const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";
type Registered = { agent: { id: string }; agentKey: string };

/**
 * The SDK's Server, answering a request whose params its own schema refuses (an initialize
 * without params, a tools/call without a name) with InvalidParams (-32602), the code JSON-RPC has
 * for it, instead of the InternalError (-32603) the SDK gives it: a hostile request is the
 * client's fault, and -32603 stays what it means, a fault of the hub. The SDK throws such a
 * refusal as a plain Error whose message is the schema's list of issues, before the hub's
 * handler runs; anything the hub's handlers throw is a ProtocolError already.
 */
class HubServer extends Server {
  protected override _wrapHandler(method: string, handler: Parameters<Server["_wrapHandler"]>[1]): ReturnType<Server["_wrapHandler"]> {
    const inner = super._wrapHandler(method, handler);
    return async (request, ctx) => {
      try {
        return await inner(request, ctx);
      } catch (e) {
        if (e instanceof ProtocolError || !isSchemaRefusal(e)) throw e;
        throw new ProtocolError(ProtocolErrorCode.InvalidParams, `invalid params for ${method}: ${summaryOf(e)}`);
      }
    };
  }
}

/** The issues of a schema refusal (a JSON array of {path, message}), or undefined for any other error. */
function issuesOf(e: unknown): { path?: unknown[]; message?: string }[] | undefined {
  if (!(e instanceof Error) || !e.message.startsWith("[")) return undefined;
  try {
    const issues: unknown = JSON.parse(e.message);
    return Array.isArray(issues) && issues.every((i) => i !== null && typeof i === "object" && "message" in i) ? (issues as { path?: unknown[]; message?: string }[]) : undefined;
  } catch {
    return undefined;
  }
}
const isSchemaRefusal = (e: unknown) => issuesOf(e) !== undefined;
const summaryOf = (e: unknown) =>
  (issuesOf(e) ?? [])
    .slice(0, 3)
    .map((i) => `${(i.path ?? []).join(".") || "params"}: ${String(i.message)}`)
    .join("; ");

/** A JSON-RPC error answer at the HTTP level (before any session or tool). */
function rpcError(res: Res, status: number, code: number, message: string, data?: unknown, headers: Record<string, string> = {}) {
  const body = JSON.stringify({ jsonrpc: "2.0", id: null, error: { code, message, ...(data !== undefined && { data }) } });
  res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...headers });
  res.end(body);
}

/**
 * The MCP face at `/mcp` (MCP's Streamable HTTP transport, the SDK's own): a session per
 * `initialize`, bound to the agent its headers name (`X-Kxm-Project`, `X-Kxm-Agent`, with the
 * project's token), registered (or taken over from an earlier session) through RegisterAgent.
 * Every tool call is one of the hub's RPCs, made in-process as that agent through the same
 * interceptors as the RPC and REST faces: one rule, one error, one metric per call, whatever the
 * face. Its resources (kxm://inbox, kxm://agents, kxm://leases) are read the same way, and a
 * subscription to one is one of the hub's server streams, opened as that agent (resources.ts) and
 * ended with the session however it ends. A session ended with DELETE releases its agent's leases
 * and unregisters it, as the client libraries' close does; a session that is dropped or idles out
 * holds its leases only until their TTL.
 */
export function createMcpFace(deps: McpFaceDeps) {
  const sessions = new Map<string, Session>();

  /** The body, parsed, within the hub's limit; undefined when there is none. */
  function readJson(req: Req): Promise<{ body?: unknown; refused?: [number, number, string] }> {
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size > deps.maxBodyBytes) {
          req.pause();
          resolve({ refused: [413, ProtocolErrorCode.InvalidRequest, `request body over ${deps.maxBodyBytes} bytes`] });
        } else chunks.push(chunk);
      });
      req.on("error", () => resolve({ refused: [400, ProtocolErrorCode.ParseError, "request body unreadable"] }));
      req.on("end", () => {
        if (size > deps.maxBodyBytes) return;
        if (chunks.length === 0) return resolve({});
        try {
          resolve({ body: JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks))) });
        } catch {
          resolve({ refused: [400, ProtocolErrorCode.ParseError, "request body is not JSON in UTF-8"] });
        }
      });
    });
  }

  /** A new `mcp` call record for `path`, and what an in-process call of it carries: its headers (with its request id) and context values. */
  function begin(route: string, path: string, header: Headers, remote: string) {
    const requestId = `req_${randomUUID().replaceAll("-", "")}`;
    const [service, method] = path.slice(1).split("/") as [string, string];
    const call = startCall("mcp", { service, method, route });
    call.requestId = requestId;
    const h = new Headers(header);
    h.set("x-request-id", requestId);
    return { requestId, call, header: h, contextValues: createContextValues().set(kRemoteAddress, remote).set(kCall, call) };
  }

  /** The refusal of a session that has no agent yet, for everything but `register`. */
  const unbound = () =>
    new HubError("invalid_agent_identity", "this session has no agent yet: call the register tool with your agent's name first (or set the X-Kxm-Agent header)");

  /** One in-process call as the session's agent, reported as an `mcp` call. */
  async function invoke(s: Session | undefined, route: string, path: string, message: Message, header: Headers, remote: string, signal?: AbortSignal) {
    const { requestId, call, ...input } = begin(route, path, header, remote);
    if (s && s.agentId === undefined && path !== registerPath) {
      const e = unbound();
      noteOutcome(call, e);
      finishCall(deps.observer, call, { requestId });
      return { error: restErrorFromHub(e, requestId) };
    }
    try {
      const out = await deps.call(path, { message, ...input, ...(signal && { signal }) }, "mcp");
      call.code ??= "ok";
      return { message: out.message };
    } catch (e) {
      if (!(e instanceof ConnectError)) throw e;
      if (call.code === undefined) noteOutcome(call, e);
      return { error: restErrorFromConnect(e, requestId) };
    } finally {
      if (s) s.lastUsedMs = deps.clock.now();
      finishCall(deps.observer, call, { requestId });
    }
  }

  /** One in-process server stream as the session's agent, until `signal` aborts: one `mcp` call from its opening to its end. */
  async function openStream(s: Session, route: string, path: string, message: Message, signal: AbortSignal) {
    const { requestId, call, ...input } = begin(route, path, s.header, s.remote);
    let opened: InProcessStream;
    try {
      if (s.agentId === undefined) throw unbound();
      opened = await deps.call.stream(path, { message, ...input, signal }, "mcp");
    } catch (e) {
      if (call.code === undefined) noteOutcome(call, e);
      finishCall(deps.observer, call, { requestId });
      if (e instanceof HubError) return { error: restErrorFromHub(e, requestId) };
      if (!(e instanceof ConnectError)) throw e;
      return { error: restErrorFromConnect(e, requestId) };
    }
    const frames = (async function* () {
      try {
        yield* opened.message;
      } catch (e) {
        if (call.code === undefined) noteOutcome(call, e);
        throw e;
      } finally {
        call.code ??= "ok";
        finishCall(deps.observer, call, { requestId });
      }
    })();
    return { frames };
  }

  /** A tool call: the model's arguments (by proto name) plus what the session fills, to the tool's RPC. */
  async function callTool(s: Session, name: string, args: Record<string, unknown> | undefined, signal: AbortSignal) {
    const def = byName.get(name);
    if (!def) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `unknown tool ${JSON.stringify(name)}: tools/list names the tools`);
    const given = args ?? {};
    const unknown = Object.keys(given).filter((k) => !(k in def.fields));
    const refused = (code: HubCode, message: string, extra: JsonObject = {}) => ({
      isError: true,
      content: [{ type: "text" as const, text: `${code}: ${message}` }],
      structuredContent: { error: message, code, ...extra },
    });
    if (unknown.length > 0) return refused("protocol_error", `${name} takes no argument ${unknown.join(", ")}`);
    const registering = pathOf(def) === registerPath;
    if (registering && s.agentId !== undefined) {
      return refused("protocol_error", "this session already acts as an agent (bound by its X-Kxm-Agent header or an earlier register call): open another session for another agent");
    }
    let message: Message;
    try {
      message = fromJson(def.method.input, {
        ...(given as JsonObject),
        ...(def.bound?.includes("agent_id") && { agent_id: s.agentId ?? "" }),
        ...(registering && { project: s.project }),
      });
    } catch (e) {
      return refused("protocol_error", e instanceof Error ? e.message : String(e));
    }
    const out = await invoke(s, `mcp tools/call ${name}`, pathOf(def), message, s.header, s.remote, signal);
    if (out.error) return refused(out.error.body.code as HubCode, String(out.error.body.error), out.error.body);
    if (registering) await bind(s, out.message as unknown as Registered);
    const json = presented(toRestJson(def.method.output, out.message as never));
    return { content: [{ type: "text" as const, text: def.text(json) }], structuredContent: json };
  }

  function serverFor(s: Session): Server {
    const server = new HubServer(
      { name: "kxm-hub", version: deps.version },
      { capabilities: { tools: { listChanged: false }, resources: { subscribe: true, listChanged: false } }, instructions },
    );
    server.setRequestHandler("tools/list", () => ({ tools: listedTools }));
    server.setRequestHandler("tools/call", (req, ctx) => callTool(s, req.params.name, req.params.arguments, ctx.mcpReq.signal));
    s.resources = serveResources(server, {
      call: (route, path, message, signal) => invoke(s, route, path, message, s.header, s.remote, signal),
      stream: (route, path, message, signal) => openStream(s, route, path, message, signal),
    });
    return server;
  }

  /**
   * Binds a session to the agent RegisterAgent answered: its calls carry the agent's id and key
   * from now on. The agent's earlier sessions act with a key that no longer works: they end
   * (without releasing: a takeover did, and a resumed agent had nothing).
   */
  async function bind(s: Session, r: Registered) {
    s.agentId = r.agent.id;
    s.header.set("x-kxm-agent-id", r.agent.id);
    s.header.set("x-kxm-agent-key", r.agentKey);
    for (const other of [...sessions.values()].filter((x) => x !== s && x.agentId === r.agent.id)) {
      sessions.delete(other.id);
      await closeSession(other);
    }
  }

  /**
   * Whether the caller's token may register an agent in `project`: RegisterAgent's own rule
   * (src/auth/rules.ts), checked at initialize for a session that binds its agent later, so a
   * wrong token is refused then, as for a session that names its agent. Reported as an `mcp`
   * call of its own (initialize), since no RPC runs.
   */
  async function mayRegister(project: string, header: Headers, remote: string) {
    const { requestId, call } = begin("mcp initialize", "/mcp/initialize", header, remote);
    try {
      await deps.authenticate(authRules[registerPath.slice(1)]!, { authorization: header.get("authorization"), agentId: null, agentKey: null }, (f) => (f === "project" ? project : undefined));
      call.code = "ok";
      return {};
    } catch (e) {
      if (!(e instanceof HubError)) throw e;
      noteOutcome(call, e);
      return { error: restErrorFromHub(e, requestId) };
    } finally {
      finishCall(deps.observer, call, { requestId });
    }
  }

  /** DELETE: the agent's leases are released and the agent unregistered, as a library's close does. */
  async function endAgent(s: Session) {
    if (s.agentId === undefined) return;
    const leases: { name: string; holderAgentId: string; fencingToken: bigint }[] = [];
    let pageToken = "";
    do {
      const page = await invoke(s, "mcp session end", "/kxm.hub.v1.LeaseService/ListLeases", create(LeaseService.method.listLeases.input, { pageSize: 1_000, pageToken }), s.header, s.remote);
      const m = page.message as unknown as { leases: typeof leases; nextPageToken: string } | undefined;
      leases.push(...(m?.leases ?? []).filter((l) => l.holderAgentId === s.agentId));
      pageToken = m?.nextPageToken ?? "";
    } while (pageToken !== "");
    for (const l of leases) {
      await invoke(s, "mcp session end", "/kxm.hub.v1.LeaseService/ReleaseLease", create(LeaseService.method.releaseLease.input, { name: l.name, fencingToken: l.fencingToken }), s.header, s.remote);
    }
    await invoke(s, "mcp session end", "/kxm.hub.v1.PresenceService/UnregisterAgent", create(PresenceService.method.unregisterAgent.input, { agentId: s.agentId! }), s.header, s.remote);
  }

  /** Closes a session without DELETE (idle, taken over, hub shutdown); resolves once its subscriptions' streams have ended. */
  async function closeSession(s: Session) {
    await s.transport.close().catch(() => undefined);
    await s.resources.close();
  }

  /** Closes the sessions unused for `idleMs`; their agents' leases lapse at their TTL. */
  async function expireIdle(): Promise<number> {
    const cutoff = deps.clock.now() - deps.idleMs;
    const idle = [...sessions.values()].filter((s) => s.busy === 0 && s.lastUsedMs <= cutoff);
    for (const s of idle) {
      sessions.delete(s.id);
      await closeSession(s);
    }
    return idle.length;
  }

  /**
   * `initialize` without a session: bind the agent its headers name (X-Kxm-Agent), or, without
   * that header, check the token against the project (ListAgents, the project-token rule) and
   * open a session that `register` binds later; then open the session.
   */
  async function open(req: Req, res: Res, body: unknown, signal: AbortSignal) {
    if (sessions.size >= deps.maxSessions) await expireIdle();
    if (sessions.size >= deps.maxSessions) return rpcError(res, 503, ProtocolErrorCode.InternalError, "too many MCP sessions open on this hub: try again later", { code: "resource_exhausted" });
    const h = (name: string) => {
      const v = req.headers[name];
      return typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;
    };
    // What the transport would refuse is refused before the agent is registered: a refusal changes nothing.
    const accepts = String(req.headers.accept ?? "");
    if (!accepts.includes("application/json") || !accepts.includes("text/event-stream")) {
      return rpcError(res, 406, ProtocolErrorCode.InvalidRequest, "Not Acceptable: the client must accept both application/json and text/event-stream");
    }
    if (!String(req.headers["content-type"] ?? "").toLowerCase().startsWith("application/json")) {
      return rpcError(res, 415, ProtocolErrorCode.InvalidRequest, "Unsupported Media Type: the body must be application/json");
    }
    const project = h("x-kxm-project");
    const name = h("x-kxm-agent");
    if (!project) {
      return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "an MCP session acts as one agent of a project: set the X-Kxm-Project header, and X-Kxm-Agent (or call the register tool), with Authorization: Bearer <project token>", { code: "protocol_error" });
    }
    const remote = remoteAddressOf(req);
    const header = new Headers();
    const authorization = req.headers.authorization;
    if (typeof authorization === "string") header.set("authorization", authorization);
    // A client that starts again gets its name back at once: the earlier session's agent is taken over.
    const checked = name
      ? await invoke(
          undefined,
          "mcp initialize",
          registerPath,
          create(PresenceService.method.registerAgent.input, { name, project, host: h("x-kxm-host"), purpose: h("x-kxm-purpose"), takeover: true }),
          header,
          remote,
        )
      : await mayRegister(project, header, remote);
    if (checked.error) {
      const e = checked.error;
      const status = errorTable[e.body.code as HubCode]?.rest ?? 500;
      return rpcError(res, status, ProtocolErrorCode.InvalidRequest, String(e.body.error), e.body, status === 401 ? { "www-authenticate": "Bearer" } : {});
    }
    const s: Session = { id: "", transport: undefined as never, authHash: sha256Hex(String(authorization ?? "")), project, header, remote, lastUsedMs: deps.clock.now(), busy: 0, resources: undefined as never };
    if (name) await bind(s, (checked as { message?: unknown }).message as Registered);
    s.transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        s.id = id;
        sessions.set(id, s);
      },
      onsessionclosed: async () => {
        sessions.delete(s.id);
        await s.resources.close();
        await endAgent(s).catch((e: unknown) => deps.observer.log("mcp_session_end_failed", { agentId: s.agentId, error: String(e) }));
      },
    });
    s.transport.onclose = () => {
      sessions.delete(s.id);
      void s.resources.close();
    };
    await serverFor(s).connect(s.transport);
    await writeWebResponse(res, await s.transport.handleRequest(webRequestOf(req, signal), { parsedBody: body }));
  }

  /** Answers one request to `/mcp`. */
  async function handle(req: Req, res: Res): Promise<void> {
    const ac = new AbortController();
    res.once("close", () => ac.abort());
    if (!["POST", "GET", "DELETE"].includes(req.method ?? "")) {
      return rpcError(res, 405, ProtocolErrorCode.InvalidRequest, "MCP over Streamable HTTP takes POST, GET and DELETE", undefined, { allow: "POST, GET, DELETE" });
    }
    const read = req.method === "POST" ? await readJson(req) : {};
    if (read.refused) {
      if (req.httpVersionMajor === 1) res.setHeader("connection", "close");
      return rpcError(res, ...read.refused);
    }
    const id = req.headers["mcp-session-id"];
    const s = typeof id === "string" ? sessions.get(id) : undefined;
    if (s && s.authHash === sha256Hex(String(req.headers.authorization ?? ""))) {
      s.lastUsedMs = deps.clock.now();
      // A POST under way (a tool call that waits) keeps the session; an open GET stream alone does not.
      const counted = req.method === "POST";
      if (counted) s.busy++;
      try {
        return await writeWebResponse(res, await s.transport.handleRequest(webRequestOf(req, ac.signal), { parsedBody: read.body }));
      } finally {
        if (counted) {
          s.busy--;
          s.lastUsedMs = deps.clock.now();
        }
      }
    }
    // No session of this caller's: whatever it is, it is charged to the caller's address.
    const verdict = deps.limiter.take(rateKey(undefined, remoteAddressOf(req)), deps.clock.now());
    if (verdict?.retryAfterMs !== undefined) {
      return rpcError(res, 429, ProtocolErrorCode.InvalidRequest, "rate limited", { code: "rate_limited", retryAfterMs: verdict.retryAfterMs }, { "retry-after": String(Math.ceil(verdict.retryAfterMs / 1_000)) });
    }
    if (id !== undefined) return rpcError(res, 404, -32001, "session not found: initialize a new one");
    if (req.method === "POST" && isInitializeRequest(read.body)) return open(req, res, read.body, ac.signal);
    return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "Mcp-Session-Id header is required: start with initialize");
  }

  return {
    handle: (req: Req, res: Res) =>
      handle(req, res).catch((e: unknown) => {
        deps.observer.log("internal_error", { requestId: requestIdOfRequest(req), face: "mcp", error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
        if (!res.headersSent) rpcError(res, 500, ProtocolErrorCode.InternalError, "internal error");
        else res.destroy();
      }),
    expireIdle,
    /** Closes every session (hub shutdown); their agents' leases lapse at their TTL. */
    async close() {
      for (const s of [...sessions.values()]) await closeSession(s);
      sessions.clear();
    },
    get size() {
      return sessions.size;
    },
  };
}

export type McpFace = ReturnType<typeof createMcpFace>;
