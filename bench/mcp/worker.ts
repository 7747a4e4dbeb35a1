/**
 * The load of bench/mcp/run.ts, on a worker thread: per scenario, `conc` agents over one face
 * repeat one operation as fast as they are answered. Posts `{kind: "begin"}` when the measured
 * part starts and `{kind: "result"}` when it ends.
 */
import { parentPort, workerData } from "node:worker_threads";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { monoMs, percentile, Samples } from "../common/stats.js";

export interface Scenario {
  face: "rest" | "mcp";
  op: "get" | "cycle";
  conc: number;
  seconds: number;
  warmupSeconds: number;
}
export interface ScenarioResult {
  calls: number;
  errors: number;
  callsPerSec: number;
  p50: number;
  p99: number;
}
export type WorkerMessage = { kind: "begin" } | { kind: "end" } | { kind: "result"; result: ScenarioResult } | { kind: "done" };

const baseUrl = (workerData as { baseUrl: string }).baseUrl;
const project = "bench";
let round = 0;

/** One agent of a face: `call(tool, args)` answers true when the hub said ok. */
interface Agent {
  call(tool: "get_lease" | "acquire_lease" | "release_lease", args: Record<string, unknown>): Promise<{ ok: boolean; token?: number }>;
  close(): Promise<void>;
}

async function restAgent(name: string): Promise<Agent> {
  const res = await fetch(`${baseUrl}/v1/agents/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, project }) });
  if (!res.ok) throw new Error(`register ${name}: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { agent: { id: string }; agentKey: string };
  const headers = { "content-type": "application/json", "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey };
  const paths = {
    get_lease: (a: Record<string, unknown>) => ({ url: `/v1/leases/${encodeURIComponent(String(a.name))}?project=${project}`, method: "GET", body: undefined }),
    acquire_lease: (a: Record<string, unknown>) => ({ url: `/v1/leases/${encodeURIComponent(String(a.name))}/acquire`, method: "POST", body: JSON.stringify({ ttlMs: a.ttl_ms }) }),
    release_lease: (a: Record<string, unknown>) => ({ url: `/v1/leases/${encodeURIComponent(String(a.name))}/release`, method: "POST", body: JSON.stringify({ fencingToken: a.fencing_token }) }),
  };
  return {
    async call(tool, args) {
      const p = paths[tool](args);
      const r = await fetch(`${baseUrl}${p.url}`, { method: p.method, headers, body: p.body });
      const json = (await r.json()) as { lease?: { fencingToken?: number } };
      return { ok: r.ok, token: json.lease?.fencingToken };
    },
    async close() {
      await fetch(`${baseUrl}/v1/agents/${body.agent.id}`, { method: "DELETE", headers });
    },
  };
}

async function mcpAgent(name: string): Promise<Agent> {
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), { requestInit: { headers: { "x-kxm-project": project, "x-kxm-agent": name } } });
  const client = new Client({ name: "bench", version: "1.0.0" });
  await client.connect(transport);
  return {
    async call(tool, args) {
      const r = (await client.callTool({ name: tool, arguments: args })) as { isError?: boolean; structuredContent?: { lease?: { fencingToken?: number } } };
      return { ok: !r.isError, token: r.structuredContent?.lease?.fencingToken };
    },
    async close() {
      await transport.terminateSession();
      await client.close();
    },
  };
}

async function run(s: Scenario): Promise<ScenarioResult> {
  round++;
  const agents = await Promise.all(Array.from({ length: s.conc }, (_, i) => (s.face === "rest" ? restAgent : mcpAgent)(`${s.face}-${round}-${i}`)));
  // Each agent has its own lease: the figure is the face's cost, not a queue.
  const names = agents.map((_, i) => `bench/${round}/${i}`);
  // A read finds a lease: each agent holds its own for the scenario.
  const held = s.op === "get" ? await Promise.all(agents.map((a, i) => a.call("acquire_lease", { name: names[i], ttl_ms: 600_000 }))) : [];
  const samples = new Samples();
  let calls = 0;
  let errors = 0;
  let measuring = false;
  let stop = false;
  const once = async (a: Agent, name: string) => {
    if (s.op === "get") {
      const t0 = monoMs();
      const r = await a.call("get_lease", { name });
      if (measuring) {
        samples.push(monoMs() - t0);
        calls++;
        if (!r.ok) errors++;
      }
      return;
    }
    const t0 = monoMs();
    const got = await a.call("acquire_lease", { name, ttl_ms: 30_000 });
    const t1 = monoMs();
    const released = got.token === undefined ? { ok: false } : await a.call("release_lease", { name, fencing_token: got.token });
    if (measuring) {
      samples.push(t1 - t0);
      samples.push(monoMs() - t1);
      calls += 2;
      if (!got.ok) errors++;
      if (!released.ok) errors++;
    }
  };
  const loops = agents.map(async (a, i) => {
    while (!stop) await once(a, names[i]!);
  });
  await new Promise((r) => setTimeout(r, s.warmupSeconds * 1_000));
  measuring = true;
  parentPort!.postMessage({ kind: "begin" } satisfies WorkerMessage);
  const t0 = monoMs();
  await new Promise((r) => setTimeout(r, s.seconds * 1_000));
  measuring = false;
  const wall = monoMs() - t0;
  parentPort!.postMessage({ kind: "end" } satisfies WorkerMessage);
  stop = true;
  await Promise.all(loops);
  await Promise.all(held.map((h, i) => agents[i]!.call("release_lease", { name: names[i], fencing_token: h.token })));
  await Promise.all(agents.map((a) => a.close()));
  const sorted = samples.sorted();
  return { calls, errors, callsPerSec: (calls / wall) * 1_000, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
}

parentPort!.on("message", (m: Scenario | { done: true }) => {
  if ("done" in m) return parentPort!.postMessage({ kind: "done" } satisfies WorkerMessage);
  run(m).then(
    (result) => parentPort!.postMessage({ kind: "result", result } satisfies WorkerMessage),
    (e: unknown) => {
      throw e;
    },
  );
});
