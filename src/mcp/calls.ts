import { randomUUID } from "node:crypto";
import { create, fromJson, type JsonObject, type Message } from "@bufbuild/protobuf";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { ProtocolError, ProtocolErrorCode, Server, type Tool } from "@modelcontextprotocol/server";
import type { Authenticator } from "../auth/authenticate.js";
import type { RefusalMonitor } from "../auth/audit.js";
import { authRules } from "../auth/rules.js";
import type { Clock } from "../clock.js";
import { errorTable, HubError, type HubCode } from "../errors.js";
import type { FaceObserver } from "../observe.js";
import { finishCall, kCall, noteOutcome, startCall } from "../http/call-record.js";
import { kCharged, kRemoteAddress } from "../http/context.js";
import type { InProcessCaller, InProcessStream } from "../wire/in-process.js";
import { restErrorFromConnect, restErrorFromHub, type RestError } from "../transcode/rest-errors.js";
import { toRestJson } from "../transcode/rest-json.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { serveResources, type ResourceCalls, type Subscriptions } from "./resources.js";
import { listed, presented, tools, type ToolDef } from "./tools.js";
import { rpcError } from "./web.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

/**
 * What both protocol eras of the MCP face share: a tool call, a resource read and a resource
 * watch are each one of the hub's RPCs, made in-process as the caller's agent through the same
 * interceptors as the RPC and REST faces (one rule, one error, one metric per call, whatever the
 * face or era), and the `Server` that answers them. Who the caller is (the Identity) is all an era
 * adds: a 2025-era session (sessions.ts) binds it once, a 2026-07-28 request (stateless.ts) brings
 * it in its headers every time.
 */

export interface McpCallDeps {
  /** The hub's methods behind its interceptors (auth, limits, metrics, errors). */
  call: InProcessCaller;
  /** The auth rules' check, for a caller that names no agent (register binds it later, or it only lists). */
  authenticate: Authenticator["authenticate"];
  /** Told of its refused authentications, as every face's are (bursts become audit alerts). */
  refusals?: Pick<RefusalMonitor, "refusedWith">;
  clock: Clock;
  observer: FaceObserver;
  version: string;
}

/** The protocol era a caller speaks: 2024-11-05 … 2025-11-25 (sessions), or 2026-07-28 (stateless). */
export type Era = "legacy" | "modern";

/** What a call presents before any identity: the request's Authorization (and nothing more), and its address. */
export interface Caller {
  header: Headers;
  remote: string;
}

/** Who the calls of a session (legacy) or of one request (modern) act as. */
export interface Identity extends Caller {
  era: Era;
  /** The project its headers name. */
  project: string;
  /** The agent it acts as (`header` then carries its id and key); unset for one that names none. */
  agentId?: string;
  /** Told after every call made as it (activity). */
  touch?(): void;
  /** Told when a call as its agent was refused invalid_agent_identity: its key no longer works (taken over). */
  stale?(): void;
  /** `register` answered (legacy only: the modern era has no session to bind): act as that agent from now on. */
  bind?(r: Registered): Promise<void>;
  /** A `register` call is under way: a second one is refused until it has bound the session (or failed). */
  registering?: boolean;
}

export type Registered = { agent: { id: string }; agentKey: string };

const isIdentity = (c: Caller | Identity): c is Identity => "era" in c;

export const instructions =
  "kxm-hub coordinates the agents of your project: see who is online (list_agents), message them (send_message, get_message, ack_message, reply_message), and take a fenced lease (acquire_lease) before touching anything shared. Present the lease's fencing token with every write to what it protects, renew long work before the lease lapses, and release it when done. Subscribe to the resources kxm://inbox, kxm://agents and kxm://leases to be told when they change instead of polling.";

/** The tools as tools/list answers them (JSON Schemas from the descriptors: object schemas, as the SDK types want). */
const listedTools = tools.map(listed) as unknown as Tool[];
const byName = new Map(tools.map((t) => [t.name, t]));
const pathOf = (t: ToolDef) => `/${t.method.parent.typeName}/${t.method.name}`;
export const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";

/**
 * The SDK's Server, answering a request whose params its own schema refuses (an initialize
 * without params, a tools/call without a name) with InvalidParams (-32602), the code JSON-RPC has
 * for it, instead of the InternalError (-32603) the SDK gives it: a hostile request is the
 * client's fault, and -32603 stays what it means, a fault of the hub. The SDK throws such a
 * refusal as a plain Error whose message is the schema's list of issues, before the hub's
 * handler runs; anything the hub's handlers throw is a ProtocolError already.
 */
export class HubServer extends Server {
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

/**
 * The request message a tool call's arguments (by proto name) make, with what the identity fills
 * (`filled`), or why they make none: an argument the tool does not take or a required one left
 * out (its input schema's `additionalProperties: false` and `required`), or a value its field
 * cannot hold. Decided before anything is done as the agent: a 2026-07-28 call refused here
 * registers no agent (reachesTool).
 */
function requestOf(def: ToolDef, given: Record<string, unknown>, filled: JsonObject = {}): { message: Message } | { refused: string } {
  const unknown = Object.keys(given).filter((k) => !(k in def.fields));
  if (unknown.length > 0) return { refused: `${def.name} takes no argument ${unknown.join(", ")}` };
  const missing = (def.required ?? []).filter((k) => given[k] === undefined || given[k] === null);
  if (missing.length > 0) return { refused: `${def.name} needs the argument ${missing.join(", ")}` };
  try {
    return { message: fromJson(def.method.input, { ...(given as JsonObject), ...filled }) };
  } catch (e) {
    return { refused: e instanceof Error ? e.message : String(e) };
  }
}

/**
 * Whether a 2026-07-28 tools/call's params reach its tool's RPC: they name a tool other than
 * `register` (in that era the headers of each request register, and the call is refused as
 * unbound), their arguments are an object (as the SDK's params schema has them) and make the
 * tool's request (requestOf). A call that does not is refused (by the SDK or the tool) before
 * anything is done as an agent, so stateless.ts registers none for it.
 */
export function reachesTool(params: unknown): boolean {
  const p = params as { name?: unknown; arguments?: unknown } | undefined;
  const def = typeof p?.name === "string" ? byName.get(p.name) : undefined;
  if (!def || pathOf(def) === registerPath) return false;
  const args = p!.arguments === undefined ? {} : p!.arguments;
  if (typeof args !== "object" || args === null || Array.isArray(args)) return false;
  return "message" in requestOf(def, args as Record<string, unknown>);
}

/** The refusal of a caller that has no agent, for everything but a legacy session's `register`. */
export function unbound(era: Era): HubError {
  return era === "legacy"
    ? new HubError("invalid_agent_identity", "this session has no agent yet: call the register tool with your agent's name first (or set the X-Kxm-Agent header)")
    : new HubError(
        "invalid_agent_identity",
        "protocol 2026-07-28 has no session to bind an agent to: set the X-Kxm-Agent header (with X-Kxm-Project and Authorization) on every request, or use a 2025-era connection (initialize) to call register",
      );
}

/** A hub refusal before any MCP exchange: its REST status, a JSON-RPC error body, and a Bearer challenge with a 401. */
export function refuseHttp(res: Res, e: RestError): void {
  const status = errorTable[e.body.code as HubCode]?.rest ?? 500;
  rpcError(res, status, ProtocolErrorCode.InvalidRequest, String(e.body.error), e.body, status === 401 ? { "www-authenticate": "Bearer" } : {});
}

/** A request header's trimmed value, or undefined when absent or blank. */
export function headerOf(req: Req, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;
}

/** The hub's calls as an MCP caller, shared by both eras. */
export function createMcpCalls(deps: McpCallDeps) {
  /** A new `mcp` call record for `path`, and what an in-process call of it carries: its headers (with its request id) and context values. */
  function begin(route: string, path: string, header: Headers, remote: string) {
    const requestId = `req_${randomUUID().replaceAll("-", "")}`;
    const [service, method] = path.slice(1).split("/") as [string, string];
    const call = startCall("mcp", { service, method, route });
    call.requestId = requestId;
    const h = new Headers(header);
    h.set("x-request-id", requestId);
    // The face charged the MCP request's budget (face.ts): its RPCs are not charged again.
    return { requestId, call, header: h, contextValues: createContextValues().set(kRemoteAddress, remote).set(kCall, call).set(kCharged, true) };
  }

  /** One in-process call as the caller (an identity's agent, or a caller registering), reported as an `mcp` call. */
  async function invoke(c: Caller | Identity, route: string, path: string, message: Message, signal?: AbortSignal): Promise<{ message?: Message; error?: RestError }> {
    const { requestId, call, ...input } = begin(route, path, c.header, c.remote);
    const who = isIdentity(c) ? c : undefined;
    if (who && who.agentId === undefined && (path !== registerPath || who.era === "modern")) {
      const e = unbound(who.era);
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
      const error = restErrorFromConnect(e, requestId);
      if (who?.agentId !== undefined && error.body.code === "invalid_agent_identity") who.stale?.();
      return { error };
    } finally {
      who?.touch?.();
      finishCall(deps.observer, call, { requestId });
    }
  }

  /** One in-process server stream as the identity's agent, until `signal` aborts: one `mcp` call from its opening to its end. */
  async function openStream(s: Identity, route: string, path: string, message: Message, signal: AbortSignal) {
    const { requestId, call, ...input } = begin(route, path, s.header, s.remote);
    let opened: InProcessStream;
    try {
      if (s.agentId === undefined) throw unbound(s.era);
      opened = await deps.call.stream(path, { message, ...input, signal }, "mcp");
    } catch (e) {
      if (call.code === undefined) noteOutcome(call, e);
      finishCall(deps.observer, call, { requestId });
      if (e instanceof HubError) return { error: restErrorFromHub(e, requestId) };
      if (!(e instanceof ConnectError)) throw e;
      const error = restErrorFromConnect(e, requestId);
      if (s.agentId !== undefined && error.body.code === "invalid_agent_identity") s.stale?.();
      return { error };
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

  /** What an identity lends its resources: its calls and streams. */
  const resourceCalls = (s: Identity): ResourceCalls => ({
    call: (route, path, message, signal) => invoke(s, route, path, message, signal),
    stream: (route, path, message, signal) => openStream(s, route, path, message, signal),
  });

  /** A tool call: the model's arguments (by proto name) plus what the identity fills, to the tool's RPC. */
  async function callTool(s: Identity, name: string, args: Record<string, unknown> | undefined, signal: AbortSignal) {
    const def = byName.get(name);
    if (!def) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `unknown tool ${JSON.stringify(name)}: tools/list names the tools`);
    const refused = (code: HubCode, message: string, extra: JsonObject = {}) => ({
      isError: true,
      content: [{ type: "text" as const, text: `${code}: ${message}` }],
      structuredContent: { error: message, code, ...extra },
    });
    const registering = pathOf(def) === registerPath;
    if (registering && s.registering) return refused("protocol_error", "a register call of this session is under way: it binds the session once");
    // A 2026-07-28 register call binds no agent (reachesTool): it is refused as unbound (invoke).
    if (registering && s.agentId !== undefined) {
      return refused("protocol_error", "this session already acts as an agent (bound by its X-Kxm-Agent header or an earlier register call): open another session for another agent");
    }
    const request = requestOf(def, args ?? {}, {
      ...(def.bound?.includes("agent_id") && { agent_id: s.agentId ?? "" }),
      ...(registering && { project: s.project }),
    });
    if ("refused" in request) return refused("protocol_error", request.refused);
    const { message } = request;
    // The session binds once: a register call holds the session's turn from its check to its binding.
    if (registering) s.registering = true;
    try {
      const out = await invoke(s, `mcp tools/call ${name}`, pathOf(def), message, signal);
      if (out.error) return refused(out.error.body.code as HubCode, String(out.error.body.error), out.error.body);
      if (registering) await s.bind?.(out.message as unknown as Registered);
      const json = presented(toRestJson(def.method.output, out.message as never));
      return { content: [{ type: "text" as const, text: def.text(json) }], structuredContent: json };
    } finally {
      if (registering) s.registering = false;
    }
  }

  /**
   * The Server that answers as `s`: a 2025-era session's for its lifetime, a 2026-07-28
   * request's for that request. Its resources are read as `s`; a session subscribes to them
   * (resources/subscribe), a 2026-07-28 client listens instead (subscriptions/listen, served by
   * the SDK's handler from the watches stateless.ts opens).
   */
  function serverFor(s: Identity): { server: Server; resources: Subscriptions } {
    const server = new HubServer(
      { name: "kxm-hub", version: deps.version },
      { capabilities: { tools: { listChanged: false }, resources: { subscribe: true, listChanged: false } }, instructions },
    );
    server.setRequestHandler("tools/list", () => ({ tools: listedTools }));
    server.setRequestHandler("tools/call", (req, ctx) => callTool(s, req.params.name, req.params.arguments, ctx.mcpReq.signal));
    const resources = serveResources(server, resourceCalls(s), { subscribe: s.era === "legacy" });
    return { server, resources };
  }

  /**
   * Registers (or takes over: a client that starts again gets its name back at once) the agent
   * `name` of `project`, with the caller's Authorization: how a session with X-Kxm-Agent binds at
   * initialize, and how a 2026-07-28 request's headers become an agent.
   */
  function register(c: Caller, route: string, project: string, name: string, host: string | undefined, purpose: string | undefined) {
    return invoke(c, route, registerPath, create(PresenceService.method.registerAgent.input, { name, project, host, purpose, takeover: true }));
  }

  /**
   * Whether the caller's token may register an agent in `project`: RegisterAgent's own rule
   * (src/auth/rules.ts), for a caller that names no agent (a session that binds later, a
   * 2026-07-28 request that only lists), so a wrong token is refused as for one that names its
   * agent. Reported as an `mcp` call of its own (method `initialize` for a session, `request`
   * for a 2026-07-28 request), since no RPC runs.
   */
  async function mayRegister(c: Caller, method: "initialize" | "request", project: string): Promise<{ error?: RestError }> {
    const { requestId, call } = begin(`mcp ${method}`, `/mcp/${method}`, c.header, c.remote);
    try {
      await deps.authenticate(authRules[registerPath.slice(1)]!, { authorization: c.header.get("authorization"), agentId: null, agentKey: null }, (f) => (f === "project" ? project : undefined));
      call.code = "ok";
      return {};
    } catch (e) {
      if (!(e instanceof HubError)) throw e;
      deps.refusals?.refusedWith(c.remote, e);
      noteOutcome(call, e);
      return { error: restErrorFromHub(e, requestId) };
    } finally {
      finishCall(deps.observer, call, { requestId });
    }
  }

  return { invoke, openStream, resourceCalls, callTool, serverFor, register, mayRegister };
}

export type McpCalls = ReturnType<typeof createMcpCalls>;
