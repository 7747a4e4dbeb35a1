/// <reference lib="dom" />
// A browser page that talks to kxm-hub with Connect-Web. The test (../browser.test.ts) bundles it
// with esbuild, serves it from its own origin and drives it through `window.kxm`.
// Query string: ?hub=<hub base url>&transport=connect|grpc-web
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { ErrorInfoSchema } from "../../../gen/ts/google/rpc/error_details_pb.js";
import { LeaseService } from "../../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService, PresenceState, type Agent } from "../../../gen/ts/kxm/hub/v1/presence_pb.js";

const PROJECT = "clients";
const TOKEN = "tok-clients";
const LEASE = "deploy-web";

const params = new URLSearchParams(location.search);
const hubUrl = params.get("hub") ?? "";
const transportName = params.get("transport") === "grpc-web" ? "grpc-web" : "connect";
document.getElementById("hub")!.textContent = hubUrl;
document.getElementById("transport")!.textContent = transportName;

/** A transport to the hub that adds fixed headers (bearer token, agent identity) to every call. */
function transport(headers: Record<string, string>): Transport {
  const addHeaders: Interceptor = (next) => (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  const options = { baseUrl: hubUrl, interceptors: [addHeaders] };
  return transportName === "grpc-web"
    ? createGrpcWebTransport(options)
    : createConnectTransport({ ...options, useBinaryFormat: false });
}

interface AgentSession {
  id: string;
  name: string;
  presence: Client<typeof PresenceService>;
  leases: Client<typeof LeaseService>;
}

const tokenOnly = createClient(PresenceService, transport({ authorization: `Bearer ${TOKEN}` }));

async function register(name: string): Promise<AgentSession> {
  const res = await tokenOnly.registerAgent({ name, project: PROJECT });
  const t = transport({ authorization: `Bearer ${TOKEN}`, "x-kxm-agent-id": res.agent!.id, "x-kxm-agent-key": res.agentKey });
  return { id: res.agent!.id, name, presence: createClient(PresenceService, t), leases: createClient(LeaseService, t) };
}

/** What a refused call carried: Connect code name and the ErrorInfo reason. */
interface Refusal {
  code: string;
  reason: string;
  message: string;
}

function refusalOf(e: unknown): Refusal {
  const err = ConnectError.from(e);
  const info = err.findDetails(ErrorInfoSchema)[0];
  return { code: Code[err.code], reason: info?.reason ?? "", message: err.message };
}

async function refused(call: Promise<unknown>): Promise<Refusal> {
  try {
    await call;
  } catch (e) {
    return refusalOf(e);
  }
  throw new Error("expected a refusal, the call succeeded");
}

function log(text: string, ok = true): void {
  const li = document.createElement("li");
  li.className = ok ? "ok" : "fail";
  li.textContent = text;
  document.getElementById("log")!.append(li);
}

/** Runs `step`, logs its outcome in the page, and hands back the result (or the refusal). */
async function step<T>(name: string, fn: () => Promise<T>): Promise<T> {
  try {
    const out = await fn();
    log(`${name}: ${JSON.stringify(out)}`);
    return out;
  } catch (e) {
    const r = refusalOf(e);
    log(`${name} failed: ${r.code} ${r.message}`, false);
    throw e;
  }
}

let agent1: AgentSession | undefined;
let agent2: AgentSession | undefined;
let token1 = 0n;

/** Unary part, before the clock moves: register two agents, lease, renew, refused acquire. */
async function leasePhase1() {
  return step("phase 1", async () => {
    agent1 = await register("web-agent-1");
    agent2 = await register("web-agent-2");
    const acquired = await agent1.leases.acquireLease({ name: LEASE, ttlMs: 5000 });
    token1 = acquired.lease!.fencingToken;
    const renewed = await agent1.leases.renewLease({ name: LEASE, fencingToken: token1, ttlMs: 5000 });
    const held = await refused(agent2.leases.acquireLease({ name: LEASE, ttlMs: 5000 }));
    return {
      token1: Number(token1),
      holder: acquired.lease!.holderAgentName,
      renewed: renewed.renewed,
      renewedToken: Number(renewed.lease!.fencingToken),
      held: { code: held.code, reason: held.reason },
    };
  });
}

/** Unary part, after the test advanced the hub clock past the lease: takeover, stale renew. */
async function leasePhase2() {
  return step("phase 2", async () => {
    const taken = await agent2!.leases.acquireLease({ name: LEASE, ttlMs: 5000 });
    const superseded = await refused(agent1!.leases.renewLease({ name: LEASE, fencingToken: token1, ttlMs: 5000 }));
    return {
      token2: Number(taken.lease!.fencingToken),
      holder: taken.lease!.holderAgentName,
      superseded: { code: superseded.code, reason: superseded.reason },
    };
  });
}

/** Renders one agent into <ul id="agents">, keyed by its id. */
function renderAgent(a: Agent): void {
  const list = document.getElementById("agents")!;
  let li = list.querySelector<HTMLLIElement>(`li[data-id="${a.id}"]`);
  if (!li) {
    li = document.createElement("li");
    li.dataset.id = a.id;
    list.append(li);
  }
  const state = PresenceState[a.presence].toLowerCase();
  li.className = state;
  li.textContent = `${a.name} (${state})`;
}

let frames = 0;

/** Opens WatchPresence as agent 1 and renders every agent frame; resolves after the snapshot. */
async function watchPresence(): Promise<{ snapshotAgents: string[] }> {
  agent1 ??= await register("web-agent-1");
  const stream = agent1.presence.watchPresence({ project: PROJECT });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done || first.value.event.case !== "snapshot") throw new Error("expected a snapshot frame first");
  frames++;
  const snapshot = first.value.event.value;
  snapshot.agents.forEach(renderAgent);
  log(`watching presence: ${snapshot.agents.length} agent(s) in the snapshot`);
  void (async () => {
    try {
      for (let r = await it.next(); !r.done; r = await it.next()) {
        frames++;
        if (r.value.event.case === "agent") renderAgent(r.value.event.value);
      }
      log("presence stream ended", false);
    } catch (e) {
      log(`presence stream failed: ${refusalOf(e).message}`, false);
    }
  })();
  return { snapshotAgents: snapshot.agents.map((a) => a.name) };
}

/** One RegisterAgent call whose outcome is reported rather than thrown (for the CORS refusal). */
async function tryRegister(name: string): Promise<{ ok: true; id: string } | { ok: false; code: string; message: string }> {
  try {
    const s = await register(name);
    log(`registered ${name}`);
    return { ok: true, id: s.id };
  } catch (e) {
    const r = refusalOf(e);
    log(`register ${name} failed: ${r.code} ${r.message}`, false);
    return { ok: false, code: r.code, message: r.message };
  }
}

const kxm = { leasePhase1, leasePhase2, watchPresence, tryRegister, frames: () => frames };
declare global {
  interface Window {
    kxm: typeof kxm;
  }
}
window.kxm = kxm;
document.body.dataset.ready = "true";
