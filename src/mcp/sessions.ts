import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { ProtocolErrorCode, WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/server";
import type { Clock } from "../clock.js";
import { sha256Hex } from "../ids.js";
import type { FaceObserver } from "../observe.js";
import { remoteAddressOf } from "../http/listen.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { headerOf, refuseHttp, type Identity, type McpCalls, type Registered } from "./calls.js";
import type { RestError } from "../transcode/rest-errors.js";
import type { Subscriptions } from "./resources.js";
import { noRoomCode, rpcError, webRequestOf, writeWebResponse } from "./web.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface SessionDeps {
  clock: Clock;
  observer: FaceObserver;
  /** Sessions open at once; an initialize past it is refused (503) unless an idle one can go. */
  maxSessions: number;
  /** A session unused this long is closed (its agent's leases lapse at their TTL). */
  idleMs: number;
  /** Told when a session binds an agent: the agent's 2026-07-28 bindings act with a key that no longer works. */
  bound(agentId: string): void;
}

/** One MCP session (2025 era): the agent it acts as, and the credentials every tool call presents. */
interface Session extends Identity {
  id: string;
  transport: WebStandardStreamableHTTPServerTransport;
  /** SHA-256 of the Authorization header it was opened with: every request must bring the same. */
  authHash: string;
  lastUsedMs: number;
  /** POSTs under way (a tool call that waits): a busy session is never idle. */
  busy: number;
  /** Called once `busy` is back to 0 (a shutdown waits for the answers under way). */
  idle: (() => void)[];
  /** Its resource subscriptions: one stream each, ended with the session. */
  resources: Subscriptions;
}

/**
 * The 2025-era leg of `/mcp`: a session per `initialize` (the SDK's
 * WebStandardStreamableHTTPServerTransport and one Server each), bound to the agent its headers
 * name (`X-Kxm-Project`, `X-Kxm-Agent`, with the project's token), registered (or taken over from
 * an earlier session) through RegisterAgent, or bound later by the `register` tool. A
 * subscription to a resource is one of the hub's server streams, opened as that agent and ended
 * with the session however it ends. A session ended with DELETE releases its agent's leases and
 * unregisters it, as the client libraries' close does; a session that is dropped or idles out
 * holds its leases only until their TTL.
 */
export function createSessions(deps: SessionDeps, calls: McpCalls) {
  const sessions = new Map<string, Session>();

  /**
   * Binds a session to the agent RegisterAgent answered: its calls carry the agent's id and key
   * from now on. The agent's earlier sessions act with a key that no longer works: they end
   * (without releasing: a takeover did, and a resumed agent had nothing).
   */
  async function bind(s: Session, r: Registered) {
    s.agentId = r.agent.id;
    s.header.set("x-kxm-agent-id", r.agent.id);
    s.header.set("x-kxm-agent-key", r.agentKey);
    deps.bound(r.agent.id);
    await endAgentSessions(r.agent.id, s);
  }

  /** Closes the sessions that act as `agentId` (but `except`): another session or request took the agent over. */
  async function endAgentSessions(agentId: string, except?: Session) {
    for (const other of [...sessions.values()].filter((x) => x !== except && x.agentId === agentId)) {
      sessions.delete(other.id);
      await closeSession(other);
    }
  }

  /**
   * A call as the session's agent was refused invalid_agent_identity: its key no longer works (the
   * agent was taken over outside /mcp: a REST or RPC register with takeover, a library client). The
   * session ends as one taken over through /mcp does (endAgentSessions), without releasing (the
   * takeover did): its next request is answered 404, and the client (or `kxm-hub mcp`) starts again,
   * instead of keeping a session whose every call is refused and that never idles out. The requests
   * under way (the refused call among them) are answered first: a transport closed under them
   * would leave the client waiting for answers that never come.
   */
  function retire(s: Session) {
    if (sessions.get(s.id) !== s) return;
    sessions.delete(s.id);
    const close = () => void closeSession(s);
    if (s.busy > 0) s.idle.push(close);
    else close();
  }

  /** DELETE: the agent's leases are released and the agent unregistered, as a library's close does. */
  async function endAgent(s: Session) {
    if (s.agentId === undefined) return;
    const leases: { name: string; holderAgentId: string; fencingToken: bigint }[] = [];
    let pageToken = "";
    do {
      const page = await calls.invoke(s, "mcp session end", "/kxm.hub.v1.LeaseService/ListLeases", create(LeaseService.method.listLeases.input, { pageSize: 1_000, pageToken }));
      const m = page.message as unknown as { leases: typeof leases; nextPageToken: string } | undefined;
      leases.push(...(m?.leases ?? []).filter((l) => l.holderAgentId === s.agentId));
      pageToken = m?.nextPageToken ?? "";
    } while (pageToken !== "");
    for (const l of leases) {
      await calls.invoke(s, "mcp session end", "/kxm.hub.v1.LeaseService/ReleaseLease", create(LeaseService.method.releaseLease.input, { name: l.name, fencingToken: l.fencingToken }));
    }
    await calls.invoke(s, "mcp session end", "/kxm.hub.v1.PresenceService/UnregisterAgent", create(PresenceService.method.unregisterAgent.input, { agentId: s.agentId! }));
  }

  /** Closes a session without DELETE (idle, taken over, hub shutdown); resolves once its subscriptions' streams have ended. */
  async function closeSession(s: Session) {
    await s.transport.close().catch(() => undefined);
    await s.resources.close();
  }

  /** Places taken by initializes whose session is not in the table yet. */
  const reserved = new Set<{ project: string }>();

  /** How many sessions `project` has open, or is opening. */
  const sessionsOf = (project: string): number => {
    let n = 0;
    for (const s of sessions.values()) if (s.project === project) n++;
    for (const p of reserved) if (p.project === project) n++;
    return n;
  };

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
   * that header, check the token against the project (RegisterAgent's rule) and open a session
   * that `register` binds later; then open the session.
   */
  async function open(req: Req, res: Res, body: unknown, signal: AbortSignal) {
    const project = headerOf(req, "x-kxm-project");
    const name = headerOf(req, "x-kxm-agent");
    if (!project) {
      return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "an MCP session acts as one agent of a project: set the X-Kxm-Project header, and X-Kxm-Agent (or call the register tool), with Authorization: Bearer <project token>", { code: "protocol_error" });
    }
    // One project holds at most a quarter of the table, so that no project's sessions (an agent
    // each, or none yet) keep every other project out of /mcp. A place is taken before the agent
    // registers and counted until the session is in the table: initializes that overlap cannot
    // take more than there is, and one refused for room has registered nothing.
    const share = Math.max(1, Math.floor(deps.maxSessions / 4));
    if (sessionsOf(project) >= share) await expireIdle();
    if (sessionsOf(project) >= share) {
      return rpcError(res, 503, noRoomCode, `too many MCP sessions open for this project (at most ${share}, a quarter of the hub's): close one (DELETE) or try again later`, { code: "resource_exhausted" });
    }
    if (sessions.size + reserved.size >= deps.maxSessions) await expireIdle();
    if (sessions.size + reserved.size >= deps.maxSessions) {
      return rpcError(res, 503, noRoomCode, "too many MCP sessions open on this hub: try again later", { code: "resource_exhausted" });
    }
    const place = { project };
    reserved.add(place);
    try {
      await openIn(req, res, body, signal, project, name);
    } finally {
      reserved.delete(place);
    }
  }

  /**
   * The rest of `open`, its place taken. The agent is registered (or taken over) only once the
   * transport has accepted the initialize (its Accept, Content-Type and JSON-RPC checks, the SDK's
   * own), in `onsessioninitialized`, which the transport awaits before it hands the message to the
   * Server: an initialize the transport refuses changes nothing, and one the hub refuses (a wrong
   * token, a name taken) is answered with the hub's refusal instead of the transport's answer.
   */
  async function openIn(req: Req, res: Res, body: unknown, signal: AbortSignal, project: string, name: string | undefined) {
    const remote = remoteAddressOf(req);
    const header = new Headers();
    const authorization = req.headers.authorization;
    if (typeof authorization === "string") header.set("authorization", authorization);
    const s: Session = {
      era: "legacy",
      id: "",
      transport: undefined as never,
      authHash: sha256Hex(String(authorization ?? "")),
      project,
      header,
      remote,
      lastUsedMs: deps.clock.now(),
      busy: 0,
      idle: [],
      resources: undefined as never,
      touch: () => void (s.lastUsedMs = deps.clock.now()),
      bind: (r) => bind(s, r),
      stale: () => retire(s),
    };
    /** Why the hub refused the initialize after the transport accepted it (the hub's answer replaces the transport's). */
    let refused: { error: RestError } | { thrown: unknown } | undefined;
    s.transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: async (id) => {
        try {
          // A client that starts again gets its name back at once: the earlier session's agent is taken over.
          const checked = name
            ? await calls.register({ header, remote }, "mcp initialize", project, name, headerOf(req, "x-kxm-host"), headerOf(req, "x-kxm-purpose"))
            : await calls.mayRegister({ header, remote }, "initialize", project);
          if (checked.error) refused = { error: checked.error };
          else if (name) await bind(s, (checked as { message?: unknown }).message as Registered);
        } catch (e) {
          refused = { thrown: e };
        }
        // The transport answers a throw here before the Server sees the initialize; that answer is replaced below.
        if (refused) throw new Error("initialize refused by the hub");
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
    const { server, resources } = calls.serverFor(s);
    s.resources = resources;
    await server.connect(s.transport);
    const response = await s.transport.handleRequest(webRequestOf(req, signal), { parsedBody: body });
    if (refused) {
      await response.body?.cancel().catch(() => undefined);
      await closeSession(s);
      if ("thrown" in refused) throw refused.thrown;
      return refuseHttp(res, refused.error);
    }
    await writeWebResponse(res, response);
  }

  /** The session a request names, when its Authorization is the one it was opened with (a leaked session id alone is not enough). */
  function find(req: Req): Session | undefined {
    const id = req.headers["mcp-session-id"];
    const s = typeof id === "string" ? sessions.get(id) : undefined;
    return s && s.authHash === sha256Hex(String(req.headers.authorization ?? "")) ? s : undefined;
  }

  /** A request within session `s`. */
  async function serve(s: Session, req: Req, res: Res, body: unknown, signal: AbortSignal) {
    s.lastUsedMs = deps.clock.now();
    // A POST under way (a tool call that waits) keeps the session; an open GET stream alone does not.
    const counted = req.method === "POST";
    if (counted) s.busy++;
    try {
      return await writeWebResponse(res, await s.transport.handleRequest(webRequestOf(req, signal), { parsedBody: body }));
    } finally {
      if (counted) {
        s.busy--;
        s.lastUsedMs = deps.clock.now();
        if (s.busy === 0) for (const done of s.idle.splice(0)) done();
      }
    }
  }

  return {
    open,
    find,
    serve,
    expireIdle,
    endAgentSessions,
    /**
     * Closes every session (hub shutdown), each once the tool calls under way in it have been
     * answered; their agents' leases lapse at their TTL.
     */
    async close() {
      const all = [...sessions.values()];
      sessions.clear();
      await Promise.all(
        all.map(async (s) => {
          if (s.busy > 0) await new Promise<void>((resolve) => s.idle.push(resolve));
          await closeSession(s);
        }),
      );
    },
    get size() {
      return sessions.size;
    },
  };
}

export type Sessions = ReturnType<typeof createSessions>;
