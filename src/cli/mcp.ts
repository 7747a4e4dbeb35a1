import os from "node:os";
import { Transform, type Readable } from "node:stream";
import {
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  ProtocolErrorCode,
  SdkError,
  SdkHttpError,
  StreamableHTTPClientTransport,
  type JSONRPCMessage,
  type RequestId,
} from "@modelcontextprotocol/client";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { flagHelp, type FlagDoc } from "../config.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";
import { hubTls, tlsFlags, tlsRefusal, type HubTls } from "./tls-client.js";
import { hubFetch } from "./tls-fetch.js";
import { hubUrl, parseFlags } from "./agent-target.js";

/**
 * `kxm-hub mcp`: a stdio bridge for MCP clients that only launch local servers. It relays
 * JSON-RPC messages, untouched, between its stdin/stdout (the MCP client) and the hub's `/mcp`
 * (Streamable HTTP, one 2025-era session bound to the agent its headers name), with the SDK's own
 * transports on both sides. stdout carries protocol messages only; diagnostics go to stderr.
 *
 * - A request the hub never answers (hub down, a refusal at the HTTP level such as a wrong
 *   token's 401, a response stream cut short) is answered on stdout with a JSON-RPC error for its
 *   id, which the MCP client shows.
 * - stdin's end (the MCP client is gone), SIGTERM, SIGINT or SIGHUP end the session with DELETE,
 *   so the hub releases the agent's leases at once and unregisters it; then exit 0.
 * - The hub no longer knowing the session (404: idled out, its agent taken over, the hub restarted) ends the bridge
 *   with `session_lost` and exit 1: the MCP client sees its server go and can start it again.
 */

const flags = {
  url: {
    env: "KXM_URL",
    value: "url",
    meaning: "the hub's base URL, such as http://127.0.0.1:7331; the bridge talks to <url>/mcp",
    default: "none, required",
  },
  token: {
    env: "KXM_TOKEN",
    value: "token",
    meaning: "sent as Authorization: Bearer: the project's token (or the admin token)",
    default: "none (a hub without tokens)",
  },
  project: { env: "KXM_PROJECT", value: "project", meaning: "the project the agent works in (X-Kxm-Project)", default: "none, required" },
  agent: {
    env: "KXM_AGENT",
    value: "name",
    meaning: "the agent's name (X-Kxm-Agent): the session registers it, or takes it over from an earlier one",
    default: "none, required",
  },
  host: { env: "KXM_AGENT_HOST", value: "host", meaning: "the agent's host as the hub shows it (X-Kxm-Host)", default: "this machine's hostname" },
  purpose: { env: "KXM_AGENT_PURPOSE", value: "text", meaning: "what the agent is doing, as the hub shows it (X-Kxm-Purpose)", default: "none" },
  ...tlsFlags,
} satisfies Record<string, FlagDoc>;

/** What a request's response stream ending without its answer fails with. */
const noAnswer = new Error("the response stream ended without an answer");

/** How long ending the session (DELETE) may take before the bridge exits anyway. */
const endTimeoutMs = 10_000;

export const mcpHelp = `Usage: kxm-hub mcp [--url <url>] [--project <project>] [--agent <name>] [--token <token>] ...

A stdio MCP server for MCP clients that only launch local commands: it relays the client's
messages to the hub's MCP face (<url>/mcp, Streamable HTTP) as one session bound to the agent.
stdout carries protocol messages only; diagnostics go to stderr. When stdin ends (the client
closed) or on SIGTERM/SIGINT, the session ends with DELETE: the hub releases the agent's leases at
once and unregisters it. A request the hub cannot take (the hub down, a refusal, a failed TLS
handshake: tls_failed with its TLS code) is answered with a JSON-RPC error the client shows, and a
line on stderr. A flag wins over its variable; an empty variable counts as unset.

${flagHelp(flags)}
  --help, -h
      this text

Exit codes: 0 the client closed, or a signal; 1 the hub lost the session (kxm-hub: session_lost:
... on stderr; start the bridge again); 2 usage error.

In an MCP client's configuration (.mcp.json and the like):
  { "mcpServers": { "kxm-hub": { "command": "npx", "args": ["kxm-hub", "mcp"], "env": {
      "KXM_URL": "http://127.0.0.1:7331", "KXM_PROJECT": "org/repo", "KXM_AGENT": "alice-editor",
      "KXM_TOKEN": "<the project's token>" } } } }`;

/** A header value: fetch refuses anything but printable ASCII, so it is refused here, by name. */
function headerValue(flag: keyof typeof flags, value: string): string {
  if (/[^\x20-\x7e]/.test(value)) throw usageError(`--${flag} (${flags[flag].env}) must be printable ASCII: it travels in an HTTP header`);
  return value;
}

/** `<url>/mcp`, keeping a path prefix (a hub behind a proxy); a URL already ending in /mcp is kept. */
function mcpUrl(raw: string): URL {
  const url = hubUrl(raw, "--url (KXM_URL)");
  const base = url.pathname.replace(/\/+$/, "");
  url.pathname = base.endsWith("/mcp") ? base : `${base}/mcp`;
  url.search = "";
  url.hash = "";
  return url;
}

interface BridgeOptions {
  url: URL;
  headers: Record<string, string>;
  tls: HubTls;
}

/** One stderr line in the command line's format (`kxm-hub: <code>: <message>`). */
const note = (code: string, message: string) => process.stderr.write(`kxm-hub: ${code}: ${message.split("\n")[0]}\n`);

/**
 * The MCP client's stdin as the SDK's stdio transport reads it, each line checked first: one that
 * is no JSON, or no JSON-RPC message, is answered here (`refuse`: -32700 Parse error with id null,
 * or -32600 Invalid Request with the line's id when it has one, JSON-RPC 2.0 §5.1) and not passed
 * on. The SDK's transport drops such a line (no JSON) or reports it without its id, and the client
 * would wait for an answer to that id until its own timeout.
 */
function checkedStdin(input: Readable, refuse: (id: RequestId | null, code: number, message: string) => void): Readable {
  let rest = "";
  const decoder = new TextDecoder();
  const check = (line: string, out: string[]) => {
    if (line.trim() === "") return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      return refuse(null, ProtocolErrorCode.ParseError, "a line on stdin is not JSON");
    }
    const m = parsed as JSONRPCMessage;
    if (isJSONRPCRequest(m) || isJSONRPCNotification(m) || isJSONRPCResultResponse(m) || isJSONRPCErrorResponse(m)) return void out.push(`${line}\n`);
    const id = (parsed as { id?: unknown } | null)?.id;
    refuse(typeof id === "string" || typeof id === "number" ? id : null, ProtocolErrorCode.InvalidRequest, "a line on stdin is not a JSON-RPC 2.0 request, notification or response");
  };
  return input.pipe(
    new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        rest += decoder.decode(chunk, { stream: true });
        const lines = rest.split("\n");
        rest = lines.pop()!;
        const out: string[] = [];
        for (const line of lines) check(line, out);
        callback(null, out.length > 0 ? out.join("") : undefined);
      },
      flush(callback) {
        const out: string[] = [];
        check(rest + decoder.decode(), out);
        callback(null, out.length > 0 ? out.join("") : undefined);
      },
    }),
  );
}

/** fetch's own error says only "fetch failed"; the socket's code (ECONNREFUSED, ENOTFOUND) is in its cause. */
function causeOf(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (e instanceof Error ? e.message : String(e));
}

/** The JSON-RPC error the hub put in an HTTP refusal's body, if it did. */
function hubErrorOf(text: unknown): { code?: number; message?: string; data?: unknown } | undefined {
  if (typeof text !== "string") return undefined;
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; data?: unknown } };
    const e = body?.error;
    if (typeof e !== "object" || e === null) return undefined;
    return { code: typeof e.code === "number" ? e.code : undefined, message: typeof e.message === "string" ? e.message : undefined, data: e.data };
  } catch {
    return undefined;
  }
}

/**
 * Runs the relay until stdin ends or a signal (resolves) or the hub loses the session (rejects
 * with CommandError session_lost).
 */
function runBridge({ url, headers, tls }: BridgeOptions): Promise<void> {
  const origin = url.origin;
  /** Requests relayed to the hub and not answered yet, with what cancels their response stream. */
  const pending = new Map<RequestId, { method: string; abort: AbortController }>();
  /** Errors a failed request already reported: the transport's onerror need not repeat them. */
  const reported = new WeakSet<object>();
  let ending = false;

  let settle!: { resolve: () => void; reject: (e: unknown) => void };
  const done = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));

  const send = hubFetch(tls);
  const http = new StreamableHTTPClientTransport(url, {
    requestInit: { headers },
    // Sees every answer: a 404 to a request that names the session means the hub no longer has it.
    fetch: async (input, init) => {
      const res = await send(input, init);
      if (res.status === 404 && !ending && new Headers(init?.headers).has("mcp-session-id")) setImmediate(() => void loseSession());
      return res;
    },
  });
  const stdio = new StdioServerTransport(
    checkedStdin(process.stdin, (id, code, message) => {
      note("stdin_invalid", message);
      void answerError(id as RequestId, code, message);
    }),
  );

  const toClient = (message: JSONRPCMessage) =>
    stdio.send(message as Parameters<StdioServerTransport["send"]>[0]).catch((e: unknown) => {
      if (!ending) note("stdout_failed", `could not write to the MCP client: ${e instanceof Error ? e.message : String(e)}`);
    });

  const answerError = (id: RequestId, code: number, message: string, data?: unknown) =>
    toClient({ jsonrpc: "2.0", id, error: { code, message, ...(data !== undefined && { data }) } });

  /** A request the hub will not answer: a JSON-RPC error the client shows, and a line on stderr. */
  function failed(id: RequestId, e: unknown) {
    const p = pending.get(id);
    if (!p) return; // answered, cancelled, or already answered by a session loss
    pending.delete(id);
    if (typeof e === "object" && e !== null) reported.add(e);
    if (e instanceof SdkHttpError) {
      const status = e.status;
      const hub = hubErrorOf((e.data as { text?: unknown }).text);
      const what = hub?.message ?? e.statusText ?? "no reason given";
      const hubData = typeof hub?.data === "object" && hub.data !== null ? (hub.data as Record<string, unknown>) : {};
      const hint =
        status === 401 ? "; check KXM_TOKEN (the project's token)"
        : status === 403 ? "; check KXM_TOKEN and KXM_PROJECT"
        : hub === undefined ? "; is KXM_URL the hub's base URL?"
        : "";
      const message = `the kxm hub at ${origin} refused ${p.method} (HTTP ${status}): ${what}${hint}`;
      note(typeof hubData.code === "string" ? hubData.code : `http_${status}`, message);
      void answerError(id, hub?.code ?? ProtocolErrorCode.InternalError, message, { ...hubData, httpStatus: status });
      return;
    }
    const tlsFailed = tlsRefusal(e, url, tls);
    const [code, message] =
      tlsFailed ? [tlsFailed.code, `${tlsFailed.message}: ${p.method} was not delivered`]
      : e === noAnswer ? ["no_answer", `the kxm hub at ${origin} ended the response to ${p.method} without an answer`]
      : e instanceof SdkError ? ["unexpected_answer", `the server at ${url.href} answered ${p.method} with something other than MCP (${e.message}); is KXM_URL a kxm hub?`]
      : ["hub_unreachable", `cannot reach the kxm hub at ${origin} (${causeOf(e)}): ${p.method} was not delivered; is the hub running? see KXM_URL`];
    note(code, message);
    void answerError(id, ProtocolErrorCode.InternalError, message, { code });
  }

  function relayRequest(message: JSONRPCMessage & { id: RequestId; method: string }) {
    const abort = new AbortController();
    pending.set(message.id, { method: message.method, abort });
    http
      .send(message, {
        requestSignal: abort.signal,
        // Every response stream ends here; one that ended without the answer leaves the request pending.
        onRequestStreamEnd: () => failed(message.id, noAnswer),
      })
      .catch((e: unknown) => failed(message.id, e));
  }

  stdio.onmessage = (raw) => {
    const message = raw as JSONRPCMessage;
    if (ending) {
      if (isJSONRPCRequest(message)) void answerError(message.id, ProtocolErrorCode.InternalError, "the kxm-hub mcp bridge is shutting down");
      return;
    }
    if (isJSONRPCRequest(message)) return relayRequest(message);
    // A notification, or the client's answer to a request of the hub's: relayed as they are.
    const cancelled =
      isJSONRPCNotification(message) && message.method === "notifications/cancelled"
        ? (message.params as { requestId?: RequestId } | undefined)?.requestId
        : undefined;
    void http
      .send(message)
      .catch((e: unknown) => {
        if (typeof e === "object" && e !== null) reported.add(e);
        const why = e instanceof SdkHttpError ? `HTTP ${e.status}` : (tlsRefusal(e, url, tls)?.message ?? causeOf(e));
        if (!ending) note("relay_failed", `could not relay a ${"method" in message ? message.method : "response"} to the hub at ${origin}: ${why}`);
      })
      .finally(() => {
        // A cancelled request is not answered: its response stream is closed, so the hub is not left holding it.
        const p = cancelled === undefined ? undefined : pending.get(cancelled);
        if (p) {
          pending.delete(cancelled!);
          p.abort.abort();
        }
      });
  };

  http.onmessage = (message) => {
    if ((isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) && message.id !== undefined) {
      const p = pending.get(message.id);
      pending.delete(message.id);
      // The negotiated version goes on every later request (MCP-Protocol-Version), as the SDK's Client does.
      if (p?.method === "initialize" && isJSONRPCResultResponse(message)) {
        const version = (message.result as { protocolVersion?: unknown }).protocolVersion;
        if (typeof version === "string") http.setProtocolVersion(version);
      }
    }
    void toClient(message);
  };

  http.onerror = (e) => {
    // A failed request reports its own error (the transport's onerror runs just before its send rejects).
    setImmediate(() => {
      if (ending || reported.has(e)) return;
      reported.add(e);
      note("hub_stream", e.message);
    });
  };

  stdio.onerror = (e) => {
    if (!ending) note("stdin_invalid", e.message);
  };

  /** The MCP client is gone or a signal came: end the session so the hub releases the agent's leases. */
  async function end(why: string) {
    if (ending) return;
    ending = true;
    for (const [id, p] of pending) {
      p.abort.abort();
      void answerError(id, ProtocolErrorCode.InternalError, `the kxm-hub mcp bridge is shutting down (${why})`);
    }
    pending.clear();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        http.terminateSession(),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${endTimeoutMs / 1000} s`)), endTimeoutMs))),
      ]);
    } catch (e) {
      const why = e instanceof SdkHttpError ? `HTTP ${e.status}` : causeOf(e);
      note("session_end_failed", `could not end the MCP session at ${origin} (${why}); the agent's leases lapse at their TTL`);
    } finally {
      clearTimeout(timer);
    }
    await http.close().catch(() => undefined);
    await stdio.close().catch(() => undefined);
    settle.resolve();
  }

  /** The hub answered 404 to the session: nothing more can go through it. */
  async function loseSession() {
    if (ending) return;
    ending = true;
    const message =
      "the kxm hub no longer has this MCP session (HTTP 404): it was idle too long, its agent was taken over, or the hub restarted; start kxm-hub mcp again";
    await Promise.all(
      [...pending].map(([id, p]) => {
        p.abort.abort();
        return answerError(id, ProtocolErrorCode.InternalError, message, { code: "session_lost", httpStatus: 404 });
      }),
    );
    pending.clear();
    await http.close().catch(() => undefined);
    await stdio.close().catch(() => undefined);
    settle.reject(new CommandError("session_lost", `${message} (${origin})`, exitCodes.refused));
  }

  stdio.onclose = () => void end("the MCP client closed stdin");
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(signal, () => void end(signal));

  void (async () => {
    try {
      await http.start();
      await stdio.start();
    } catch (e) {
      settle.reject(e);
    }
  })();
  return done;
}

/**
 * `kxm-hub mcp`: reads the flags and variables (a flag wins; an empty variable counts as unset),
 * then relays until the MCP client or the hub ends it. Throws CommandError: usage_error (exit 2),
 * session_lost (exit 1).
 */
export async function mcpCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags(argv, Object.fromEntries(Object.keys(flags).map((f) => [f, { type: "string" as const }])));
  if (values.help) {
    await new Promise<void>((resolve) => process.stdout.write(`${mcpHelp}\n`, () => resolve()));
    return;
  }
  if (positionals.length > 0) throw usageError(`unexpected argument ${JSON.stringify(positionals[0])}; see kxm-hub mcp --help`);
  const given: Partial<Record<keyof typeof flags, string>> = {};
  for (const [flag, doc] of Object.entries(flags) as [keyof typeof flags, FlagDoc][]) {
    const v = (values[flag] as string | undefined) ?? process.env[doc.env!];
    if (v !== undefined && v.trim() !== "") given[flag] = v.trim();
  }
  const missing = (["url", "project", "agent"] as const).filter((f) => given[f] === undefined);
  if (missing.length > 0) {
    const names = missing.map((f) => `${flags[f].env} (--${f})`).join(", ");
    throw usageError(`${names} ${missing.length === 1 ? "is" : "are"} required: the hub's URL, and the project and agent name this MCP client acts as; see kxm-hub mcp --help`);
  }
  const url = mcpUrl(given.url!);
  const headers: Record<string, string> = {
    "x-kxm-project": headerValue("project", given.project!),
    "x-kxm-agent": headerValue("agent", given.agent!),
    "x-kxm-host": headerValue("host", given.host ?? os.hostname()),
  };
  if (given.purpose !== undefined) headers["x-kxm-purpose"] = headerValue("purpose", given.purpose);
  if (given.token !== undefined) headers.authorization = `Bearer ${headerValue("token", given.token)}`;

  await runBridge({ url, headers, tls: hubTls(given) });
  // Clean end: out once stdout is flushed (a keep-alive socket must not hold the client waiting).
  await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
  process.exit(0);
}
