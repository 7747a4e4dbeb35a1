import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { describe, expect, it } from "vitest";
import { bin, repo, runCli } from "../fixtures/cli.js";
import { jsonOf, startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub mcp`, the stdio bridge, run as the command against a real hub: MCP clients that only
 * launch local servers (the official client's StdioClientTransport here) reach the hub's `/mcp`
 * through it as one agent, and ending the client ends the session, so its leases go at once.
 */

type Result = { isError?: boolean; structuredContent?: Record<string, any>; content: { type: string; text?: string }[] }; // eslint-disable-line @typescript-eslint/no-explicit-any

/** Each wait's bound: events are awaited, never slept for. */
const timeoutMs = 20_000;

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const tokenOf = (r: Result) => r.structuredContent?.lease?.fencingToken as number;

const bridgeEnv = (t: TestHub, name: string, o: { token?: string; project?: string } = {}): Record<string, string> => ({
  KXM_URL: t.baseUrl,
  KXM_PROJECT: o.project ?? "p",
  KXM_AGENT: name,
  KXM_AGENT_HOST: "bridge-host",
  ...(o.token !== undefined && { KXM_TOKEN: o.token }),
});

/** An MCP client that launches `kxm-hub mcp` as its local server (the child's stderr kept apart). */
function bridgedClient(env: Record<string, string>) {
  const transport = new StdioClientTransport({ command: process.execPath, args: [bin, "mcp"], env, cwd: repo, stderr: "pipe" });
  let stderr = "";
  transport.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const client = new Client({ name: "bridge-test", version: "1.0.0" });
  return { client, transport, stderr: () => stderr };
}

async function bridged(t: TestHub, name: string, o: { token?: string; project?: string } = {}) {
  const b = bridgedClient(bridgeEnv(t, name, o));
  await within(b.client.connect(b.transport), `${name} to connect through the bridge`);
  const call = async (tool: string, args: Record<string, unknown> = {}) => (await b.client.callTool({ name: tool, arguments: args }, { timeout: 90_000 })) as Result;
  return { ...b, call };
}

/** An agent straight over Streamable HTTP, as a client that can set headers does. */
async function direct(t: TestHub, name: string, o: { token?: string } = {}) {
  const headers: Record<string, string> = { "x-kxm-project": "p", "x-kxm-agent": name };
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers } });
  const client = new Client({ name: `test-${name}`, version: "1.0.0" });
  await client.connect(transport);
  const call = async (tool: string, args: Record<string, unknown> = {}) => (await client.callTool({ name: tool, arguments: args }, { timeout: 90_000 })) as Result;
  return { client, transport, call };
}

/** Asks the hub (no sleeps) until the lease has a waiter. */
async function waiterAppears(t: TestHub, lease: string) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const leases = (await jsonOf(await t.rest(`/v1/leases?project=p`))).leases as { name: string; waiters: unknown[] }[];
    if ((leases.find((l) => l.name === lease)?.waiters.length ?? 0) > 0) return;
    if (Date.now() > deadline) throw new Error(`no one ever waited for ${lease}: ${JSON.stringify(leases)}`);
    await new Promise((r) => setImmediate(r));
  }
}

/**
 * The bridge spawned by hand, spoken to in JSON lines: what the MCP client would see on stdout,
 * and the bridge's exit code and stderr.
 */
function rawBridge(env: Record<string, string>) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
  const child: ChildProcess = spawn(process.execPath, [bin, "mcp"], { cwd: repo, env: { ...base, ...env }, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  const answers = new Map<number, (m: Record<string, any>) => void>(); // eslint-disable-line @typescript-eslint/no-explicit-any
  const lines: string[] = [];
  child.stdout!.on("data", (b: Buffer) => {
    stdout += b.toString();
    let nl: number;
    while ((nl = stdout.indexOf("\n")) >= 0) {
      const line = stdout.slice(0, nl);
      stdout = stdout.slice(nl + 1);
      lines.push(line);
      const m = JSON.parse(line);
      if (typeof m.id === "number" && ("result" in m || "error" in m)) answers.get(m.id)?.(m);
    }
  });
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  let nextId = 1;
  const send = (m: object) => child.stdin!.write(`${JSON.stringify({ jsonrpc: "2.0", ...m })}\n`);
  const request = (method: string, params: object) => {
    const id = nextId++;
    const answered = new Promise<Record<string, any>>((resolve) => answers.set(id, resolve)); // eslint-disable-line @typescript-eslint/no-explicit-any
    send({ id, method, params });
    return answered;
  };
  return {
    child,
    exited,
    lines,
    stderr: () => stderr,
    request,
    notify: (method: string, params: object = {}) => send({ method, params }),
    async open() {
      const init = await within(
        request("initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1.0.0" } }),
        "the initialize answer",
      );
      expect(init.result?.protocolVersion, JSON.stringify(init)).toBe("2025-06-18");
      send({ method: "notifications/initialized" });
    },
    async call(name: string, args: object) {
      return (await within(request("tools/call", { name, arguments: args }), `${name} through the raw bridge`)).result as Result;
    },
  };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe("kxm-hub mcp (stdio bridge)", () => {
  it("lists the hub's tools through the bridge and acts as the agent its variables name", async () => {
    await using t = await startTestHub();
    const a = await bridged(t, "alpha");
    const { tools } = await a.client.listTools();
    expect(tools.map((x) => x.name)).toEqual(expect.arrayContaining(["acquire_lease", "release_lease", "get_lease", "list_agents", "send_message", "read_inbox", "whoami"]));
    expect(tools.find((x) => x.name === "acquire_lease")!.inputSchema).toMatchObject({ type: "object", required: ["name"] });
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha", project: "p", host: "bridge-host" });
    await a.client.close();
    expect(a.stderr()).toBe("");
  });

  it("hands the bridge agent's lease to an agent waiting over Streamable HTTP, on a higher fencing token", async () => {
    await using t = await startTestHub();
    const a = await bridged(t, "alpha");
    const b = await direct(t, "beta");
    const first = await a.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000 });
    expect(first.isError).toBeFalsy();
    expect(first.structuredContent?.lease).toMatchObject({ holderAgentName: "alpha" });
    expect(await b.call("acquire_lease", { name: "repo/main" })).toMatchObject({ isError: true, structuredContent: { code: "lease_held" } });

    const waiting = b.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000, wait_ms: 60_000 });
    await waiterAppears(t, "repo/main");
    expect((await a.call("release_lease", { name: "repo/main", fencing_token: tokenOf(first) })).isError).toBeFalsy();
    const granted = await within(waiting, "the waiting acquire");
    expect(granted.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(granted)).toBe(tokenOf(first) + 1);
    // The bridge agent's token is stale now, and the hub says so through the bridge.
    expect(await a.call("renew_lease", { name: "repo/main", fencing_token: tokenOf(first) })).toMatchObject({ isError: true, structuredContent: { code: "lease_superseded" } });
    await a.client.close();
    await b.transport.terminateSession();
  });

  it("closing the client ends the session: the bridge agent's lease goes to the waiter at once, and the agent is unregistered", async () => {
    await using t = await startTestHub();
    const a = await bridged(t, "alpha");
    const b = await direct(t, "beta");
    const held = await a.call("acquire_lease", { name: "deploy", ttl_ms: 300_000 });
    expect(held.isError).toBeFalsy();
    // The hub clock stands still: only a release, never the TTL, can grant this wait.
    const waiting = b.call("acquire_lease", { name: "deploy", ttl_ms: 30_000, wait_ms: 60_000 });
    await waiterAppears(t, "deploy");

    await within(a.client.close(), "the bridge's client to close");
    const granted = await within(waiting, "the waiting acquire");
    expect(granted.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(granted)).toBe(tokenOf(held) + 1);
    const agents = (await b.call("list_agents", { include_offline: true })).structuredContent?.agents as { name: string; online: boolean }[];
    expect(agents.find((x) => x.name === "alpha")?.online).toBeFalsy();
    expect(a.stderr()).toBe("");
    await b.transport.terminateSession();
  });

  it("exits 0 once stdin ends or on SIGTERM, having released the agent's leases, with nothing but protocol on stdout", async () => {
    await using t = await startTestHub();
    for (const how of ["stdin", "SIGTERM"] as const) {
      const r = rawBridge(bridgeEnv(t, `raw-${how}`));
      await r.open();
      const held = await r.call("acquire_lease", { name: `lease-${how}`, ttl_ms: 300_000 });
      expect(held.structuredContent?.lease).toMatchObject({ holderAgentName: `raw-${how}` });
      const leaseNames = async () => ((await jsonOf(await t.rest(`/v1/leases?project=p`))).leases as { name: string }[]).map((l) => l.name);
      expect(await leaseNames()).toContain(`lease-${how}`);
      if (how === "stdin") r.child.stdin!.end();
      else r.child.kill("SIGTERM");
      expect(await within(r.exited, `the bridge to exit after ${how}`), r.stderr()).toBe(0);
      expect(r.stderr()).toBe("");
      // Released, not lapsed (the hub clock stands still): the lease is free at once.
      expect(await leaseNames()).not.toContain(`lease-${how}`);
      const agents = await t.rest(`/v1/agents?project=p&includeOffline=true`);
      expect(agents.status).toBe(200);
      const agent = ((await jsonOf(agents)).agents as { name: string; online?: boolean }[]).find((x) => x.name === `raw-${how}`);
      expect(agent, `raw-${how} is still known, offline`).toBeDefined();
      expect(agent!.online).toBeFalsy();
      for (const line of r.lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: "2.0" });
    }
  });

  it("carries mail and a resource notification through the bridge, keeps projects apart, and a bridge killed outright holds its lease only until its TTL", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p", q: "tok-q" } } });
    const a = bridgedClient(bridgeEnv(t, "alpha", { token: "tok-p" }));
    const told: string[] = [];
    let tell: () => void = () => undefined;
    a.client.setNotificationHandler("notifications/resources/updated", (n) => {
      told.push(n.params.uri);
      tell();
    });
    await within(a.client.connect(a.transport), "alpha to connect through the bridge");
    const call = async (tool: string, args: Record<string, unknown> = {}) => (await a.client.callTool({ name: tool, arguments: args }, { timeout: 90_000 })) as Result;
    const b = await direct(t, "beta", { token: "tok-p" });
    await a.client.subscribeResource({ uri: "kxm://inbox" });

    // beta writes; alpha is told (on the session's event stream, relayed by the bridge), reads,
    // acknowledges and replies. The event stream opens on its own after initialize: until it has,
    // a notification has nowhere to go, so beta writes again until one is told (each wait bounded).
    const sent: string[] = [];
    for (let i = 0; !told.includes("kxm://inbox"); i++) {
      if (i === 20) throw new Error("alpha was never told of its mail");
      const notified = new Promise<void>((resolve) => (tell = resolve));
      sent.push((await b.call("send_message", { target: "alpha", content: `review ${i}` })).structuredContent!.message.id as string);
      await Promise.race([notified, new Promise((r) => setTimeout(r, 1_000))]);
    }
    const inbox = (await call("read_inbox")).structuredContent!;
    expect((inbox.events as { message?: { id: string } }[]).map((e) => e.message?.id)).toEqual(sent);
    for (const id of sent) expect((await call("ack_message", { message_id: id })).isError).toBeFalsy();
    expect((await call("reply_message", { message_id: sent[0], content: "on it" })).isError).toBeFalsy();
    expect((await b.call("get_message", { message_id: sent[0] })).structuredContent?.message).toMatchObject({ status: "replied", reply: { content: "on it" } });
    expect((await call("read_inbox")).structuredContent?.events).toEqual([]);

    // Another project sees nothing of this one through its own bridge.
    const q = await bridged(t, "quentin", { token: "tok-q", project: "q" });
    const held = await call("acquire_lease", { name: "repo/main", ttl_ms: 10_000 });
    expect(held.isError).toBeFalsy();
    expect(await q.call("get_lease", { name: "repo/main" })).toMatchObject({ isError: true, structuredContent: { code: "lease_not_found" } });
    expect(((await q.call("list_agents", { include_offline: true })).structuredContent?.agents as { name: string }[]).map((x) => x.name)).toEqual(["quentin"]);
    expect(await q.call("get_message", { message_id: sent[0] })).toMatchObject({ isError: true, structuredContent: { code: "message_not_found" } });
    await q.client.close();

    // Killed outright, the bridge ends nothing: the lease stays alpha's until its TTL, then goes to the next agent on a higher token.
    const gone = new Promise<void>((resolve) => (a.transport.onclose = () => resolve()));
    process.kill(a.transport.pid!, "SIGKILL");
    await within(gone, "the bridge to be gone");
    expect(await b.call("acquire_lease", { name: "repo/main" })).toMatchObject({ isError: true, structuredContent: { code: "lease_held", lease: { holderAgentName: "alpha" } } });
    t.clock.advance(10_001);
    const next = await b.call("acquire_lease", { name: "repo/main" });
    expect(next.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(next)).toBe(tokenOf(held) + 1);
    await b.transport.terminateSession();
  });

  it("refuses a wrong token with an error the client sees, and one line on stderr", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    const wrong = bridgedClient(bridgeEnv(t, "mallory", { token: "nope" }));
    const refused = await within(
      wrong.client.connect(wrong.transport).then(
        () => undefined,
        (e: unknown) => e as Error & { code?: number; data?: Record<string, unknown> },
      ),
      "the refusal",
    );
    expect(refused, "initialize must fail").toBeDefined();
    expect(refused!.message).toMatch(/HTTP 401/);
    expect(refused!.message).toMatch(/KXM_TOKEN/);
    expect(refused!.data).toMatchObject({ httpStatus: 401, code: "invalid_auth" });
    await within(wrong.client.close(), "the refused client to close");
    expect(wrong.stderr()).toMatch(/^kxm-hub: invalid_auth: .*HTTP 401.*\n$/);

    const a = await bridged(t, "alpha", { token: "tok-p" });
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha" });
    await a.client.close();
  });

  it("answers a line that is no JSON (-32700, id null) and a request of the wrong shape (-32600, its id), one stderr line each, and goes on", async () => {
    await using t = await startTestHub();
    const r = rawBridge({ KXM_URL: t.baseUrl, KXM_PROJECT: "p", KXM_AGENT: "alpha" });
    await r.open();
    r.child.stdin!.write("this is not json\n");
    r.child.stdin!.write(`${JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/call", params: "oops" })}\n`);
    expect((await r.call("whoami", {})).structuredContent).toMatchObject({ agent: { name: "alpha" } });
    r.child.stdin!.end();
    expect(await within(r.exited, "the bridge's exit")).toBe(0);
    const parsed = r.lines.map((l) => JSON.parse(l) as { id?: unknown; error?: { code?: number } });
    expect(parsed.filter((m) => m.error).map((m) => [m.id, m.error!.code])).toEqual([
      [null, -32700],
      [99, -32600],
    ]);
    expect(r.stderr().trimEnd().split("\n").filter((l) => l.includes("stdin_invalid"))).toHaveLength(2);
    expect(r.stderr()).not.toMatch(/^\s*[{[]/m);
  });

  it("refuses a KXM_URL with a user name or password (exit 2) and never prints the password", async () => {
    const r = await runCli(["mcp"], { env: { KXM_URL: "http://user:s3cretPW@127.0.0.1:9", KXM_PROJECT: "p", KXM_AGENT: "alpha" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^kxm-hub: usage_error: --url \(KXM_URL\) carries a user name or password/);
    expect(r.stdout + r.stderr).not.toContain("s3cretPW");
  });

  it("answers with an error the client sees when the hub is not there", async () => {
    const port = await closedPort();
    const b = bridgedClient({ KXM_URL: `http://127.0.0.1:${port}`, KXM_PROJECT: "p", KXM_AGENT: "alpha" });
    const refused = await within(b.client.connect(b.transport).then(() => undefined, (e: unknown) => e as Error), "the refusal");
    expect(refused?.message).toMatch(/cannot reach the kxm hub at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
    await within(b.client.close(), "the client to close");
    expect(b.stderr()).toMatch(/^kxm-hub: hub_unreachable: /);
  });

  it("exits 1 with session_lost on stderr when the hub no longer has the session", async () => {
    await using t = await startTestHub({ config: { mcpSessionIdleMs: 10_000 } });
    const r = rawBridge(bridgeEnv(t, "idle"));
    await r.open();
    expect((await r.call("whoami", {})).structuredContent?.agent).toMatchObject({ name: "idle" });
    // The session idles out on the hub clock. A sweep spares a session whose last call is still
    // finishing (its answer may be out before that), so sweep until the hub no longer has it.
    for (let sweeps = 1; ; sweeps++) {
      t.clock.advance(15_000);
      await t.hub.sweepNow();
      // The next call is answered with an error, unless the bridge saw it first on its event stream and is gone.
      const answer = await within(
        Promise.race([r.request("tools/call", { name: "whoami", arguments: {} }), r.exited.then(() => undefined)]),
        "an answer or the bridge's exit",
      );
      if (answer?.result && sweeps < 20) continue;
      if (answer) expect(answer.error?.message, JSON.stringify(answer)).toMatch(/HTTP 404/);
      break;
    }
    expect(await within(r.exited, "the bridge to exit"), r.stderr()).toBe(1);
    expect(r.stderr()).toMatch(/^kxm-hub: session_lost: .*HTTP 404/m);
    for (const line of r.lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: "2.0" });
  });

  it("exits 1 with session_lost when its agent is taken over outside /mcp, after answering the call that found out", async () => {
    await using t = await startTestHub();
    const r = rawBridge(bridgeEnv(t, "moved"));
    await r.open();
    expect((await r.call("whoami", {})).structuredContent?.agent).toMatchObject({ name: "moved" });
    // Another client of the agent takes it over (REST, with takeover): the session's key no longer works.
    expect((await t.rest("/v1/agents/register", { json: { name: "moved", project: "p", takeover: true } })).status).toBe(200);
    const refused = await within(
      Promise.race([r.request("tools/call", { name: "whoami", arguments: {} }), r.exited.then(() => undefined)]),
      "an answer or the bridge's exit",
    );
    if (refused?.result) expect(refused.result).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    expect(await within(r.exited, "the bridge to exit"), r.stderr()).toBe(1);
    expect(r.stderr()).toMatch(/^kxm-hub: session_lost: .*HTTP 404.*taken over/m);
    for (const line of r.lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: "2.0" });
  });

  it("refuses to start without KXM_AGENT: one line on stderr, exit 2, nothing on stdout", async () => {
    await using t = await startTestHub();
    const r = await runCli(["mcp"], { env: { KXM_URL: t.baseUrl, KXM_PROJECT: "p" } });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^kxm-hub: usage_error: KXM_AGENT \(--agent\) is required[^\n]*\n$/);
    // A flag stands in for its variable; the URL is required too.
    const noUrl = await runCli(["mcp", "--agent", "alpha", "--project", "p"]);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stdout).toBe("");
    expect(noUrl.stderr).toMatch(/^kxm-hub: usage_error: KXM_URL \(--url\) is required/);
  });
});
