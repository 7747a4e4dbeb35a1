import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { create, fromJson, type JsonObject, type Message } from "@bufbuild/protobuf";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { isInitializeRequest, ProtocolError, ProtocolErrorCode, Server, WebStandardStreamableHTTPServerTransport, type Tool } from "@modelcontextprotocol/server";
import { rateKey, type RateLimiter } from "../auth/rate-limit.js";
import type { Clock } from "../clock.js";
import { errorTable, type HubCode } from "../errors.js";
import { sha256Hex } from "../ids.js";
import type { FaceObserver } from "../observe.js";
import { finishCall, kCall, noteOutcome, startCall } from "../server/call-record.js";
import { kRemoteAddress } from "../server/context.js";
import type { InProcessCaller } from "../server/in-process.js";
import { requestIdOfRequest } from "../server/interceptors/errors.js";
import { remoteAddressOf } from "../server/listen.js";
import { restErrorFromConnect } from "../transcode/rest-errors.js";
import { toRestJson } from "../transcode/rest-json.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { listed, tools, type ToolDef } from "./tools.js";
import { webRequestOf, writeWebResponse } from "./web.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface McpFaceDeps {
  /** The hub's methods behind its interceptors (auth, limits, metrics, errors). */
  call: InProcessCaller;
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
  agentId: string;
  header: Headers;
  remote: string;
  lastUsedMs: number;
  /** POSTs under way (a tool call that waits): a busy session is never idle. */
  busy: number;
}

const instructions =
  "kxm-hub coordinates the agents of your project: see who is online (list_agents), message them (send_message, get_message, ack_message, reply_message), and take a fenced lease (acquire_lease) before touching anything shared. Present the lease's fencing token with every write to what it protects, renew long work before the lease lapses, and release it when done.";

/** The tools as tools/list answers them (JSON Schemas from the descriptors: object schemas, as the SDK types want). */
const listedTools = tools.map(listed) as unknown as Tool[];
const byName = new Map(tools.map((t) => [t.name, t]));
const pathOf = (t: ToolDef) => `/${t.method.parent.typeName}/${t.method.name}`;

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
 * face. A session ended with DELETE releases its agent's leases and unregisters it, as the
 * client libraries' close does; a session that is dropped or idles out holds its leases only
 * until their TTL.
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

  /** One in-process call as the session's agent, reported as an `mcp` call. */
  async function invoke(s: Session | undefined, route: string, path: string, message: Message, header: Headers, remote: string, signal?: AbortSignal) {
    const requestId = `req_${randomUUID().replaceAll("-", "")}`;
    const [service, method] = path.slice(1).split("/") as [string, string];
    const call = startCall("mcp", { service, method, route });
    call.requestId = requestId;
    const h = new Headers(header);
    h.set("x-request-id", requestId);
    try {
      const out = await deps.call(path, { message, header: h, contextValues: createContextValues().set(kRemoteAddress, remote).set(kCall, call), ...(signal && { signal }) }, "mcp");
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
    let message: Message;
    try {
      message = fromJson(def.method.input, { ...(given as JsonObject), ...(def.bound?.includes("agent_id") && { agent_id: s.agentId }) });
    } catch (e) {
      return refused("protocol_error", e instanceof Error ? e.message : String(e));
    }
    const out = await invoke(s, `mcp tools/call ${name}`, pathOf(def), message, s.header, s.remote, signal);
    if (out.error) return refused(out.error.body.code as HubCode, String(out.error.body.error), out.error.body);
    const json = toRestJson(def.method.output, out.message as never);
    return { content: [{ type: "text" as const, text: def.text(json) }], structuredContent: json };
  }

  function serverFor(s: Session): Server {
    const server = new Server({ name: "kxm-hub", version: deps.version }, { capabilities: { tools: { listChanged: false } }, instructions });
    server.setRequestHandler("tools/list", () => ({ tools: listedTools }));
    server.setRequestHandler("tools/call", (req, ctx) => callTool(s, req.params.name, req.params.arguments, ctx.mcpReq.signal));
    return server;
  }

  /** DELETE: the agent's leases are released and the agent unregistered, as a library's close does. */
  async function endAgent(s: Session) {
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
    await invoke(s, "mcp session end", "/kxm.hub.v1.PresenceService/UnregisterAgent", create(PresenceService.method.unregisterAgent.input, { agentId: s.agentId }), s.header, s.remote);
  }

  /** Closes the sessions unused for `idleMs`; their agents' leases lapse at their TTL. */
  async function expireIdle(): Promise<number> {
    const cutoff = deps.clock.now() - deps.idleMs;
    const idle = [...sessions.values()].filter((s) => s.busy === 0 && s.lastUsedMs <= cutoff);
    for (const s of idle) {
      sessions.delete(s.id);
      await s.transport.close().catch(() => undefined);
    }
    return idle.length;
  }

  /** `initialize` without a session: bind the agent its headers name, then open the session. */
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
    if (!project || !name) {
      return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "an MCP session acts as one agent: set the X-Kxm-Project and X-Kxm-Agent headers (and Authorization: Bearer <project token>)", { code: "protocol_error" });
    }
    const remote = remoteAddressOf(req);
    const header = new Headers();
    const authorization = req.headers.authorization;
    if (typeof authorization === "string") header.set("authorization", authorization);
    // A client that starts again gets its name back at once: the earlier session's agent is taken over.
    const registered = await invoke(
      undefined,
      "mcp initialize",
      "/kxm.hub.v1.PresenceService/RegisterAgent",
      create(PresenceService.method.registerAgent.input, { name, project, host: h("x-kxm-host"), purpose: h("x-kxm-purpose"), takeover: true }),
      header,
      remote,
    );
    if (registered.error) {
      const e = registered.error;
      const status = errorTable[e.body.code as HubCode]?.rest ?? 500;
      return rpcError(res, status, ProtocolErrorCode.InvalidRequest, String(e.body.error), e.body, status === 401 ? { "www-authenticate": "Bearer" } : {});
    }
    const r = registered.message as unknown as { agent: { id: string }; agentKey: string };
    header.set("x-kxm-agent-id", r.agent.id);
    header.set("x-kxm-agent-key", r.agentKey);
    // The agent's earlier sessions act with a key that no longer works: they end (without releasing: the takeover did).
    for (const other of [...sessions.values()].filter((x) => x.agentId === r.agent.id)) {
      sessions.delete(other.id);
      await other.transport.close().catch(() => undefined);
    }
    const s: Session = { id: "", transport: undefined as never, authHash: sha256Hex(String(authorization ?? "")), agentId: r.agent.id, header, remote, lastUsedMs: deps.clock.now(), busy: 0 };
    s.transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        s.id = id;
        sessions.set(id, s);
      },
      onsessionclosed: async () => {
        sessions.delete(s.id);
        await endAgent(s).catch((e: unknown) => deps.observer.log("mcp_session_end_failed", { agentId: s.agentId, error: String(e) }));
      },
    });
    s.transport.onclose = () => sessions.delete(s.id);
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
      for (const s of [...sessions.values()]) await s.transport.close().catch(() => undefined);
      sessions.clear();
    },
    get size() {
      return sessions.size;
    },
  };
}

export type McpFace = ReturnType<typeof createMcpFace>;
