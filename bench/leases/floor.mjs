// The floor under the hub's lease path: a bare node:http server that answers the three calls
// ../shared/bench/lease-compare.mjs makes (register, acquire, release) by parsing each JSON body
// and writing a small JSON answer, storing and checking nothing. Run under lease-compare
// in place of the hub, it says what Node's HTTP/1.1 server alone costs per cycle on this machine,
// and, with --threads 2, what a second thread serving the same port gives (each thread listens
// with `reusePort`, so the kernel spreads the connections). bench/steps.md "The floor, and a second thread".
// With --like-hub its answers are the hub's, header for header and of the same length (the
// request id, the rate-limit and security headers, the lease as the hub writes it), so that the
// load generator parses what it parses from the hub: the hub's wire with nothing behind it.
//
//   HUB_START='node bench/leases/floor.mjs --threads 2' HUB_ACQUIRE_PATH=... node ../shared/bench/lease-compare.mjs --targets hub
import http from "node:http";
import { parseArgs } from "node:util";
import { isMainThread, Worker, workerData } from "node:worker_threads";

const { values } = parseArgs({
  options: { threads: { type: "string", default: "1" }, port: { type: "string" }, host: { type: "string", default: "127.0.0.1" }, "like-hub": { type: "boolean" } },
  strict: false,
});
const port = Number(workerData?.port ?? values.port ?? process.env.KXM_PORT ?? 8787);
const host = workerData?.host ?? values.host;
const threads = Number(workerData?.threads ?? values.threads);
const likeHub = Boolean(workerData?.likeHub ?? values["like-hub"]);

let ids = 0;
/** 32 hex digits, as the hub's ids have: a counter, since the floor makes nothing it need not. */
const hex = () => (++ids).toString(16).padStart(32, "0");
/** An acquire's or a release's answer as the hub writes it (src/lease, the REST face). */
function hubLease(url, n) {
  const name = decodeURIComponent(url.split("/")[3] ?? "");
  const now = Date.now();
  const lease = {
    resource: `bench/${name}`, project: "bench", name, holderAgentId: `agt_${hex()}`, holderAgentName: "bench-w0",
    fencingToken: n, acquiredAt: new Date(now).toISOString(), expiresAt: new Date(now + 30_000).toISOString(), waiters: [],
  };
  return url.endsWith("/release") ? { released: true, lease } : { lease, renewed: false, waitedMs: 0 };
}

let token = 0;
function answer(req, res) {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const text = Buffer.concat(chunks).toString("utf8");
    const body = text ? JSON.parse(text) : {};
    let out;
    if (req.url.endsWith("/register")) out = { agent: { id: `agt_${++token}`, name: body.name ?? "" }, agentKey: `key_${token}` };
    else if (likeHub) out = hubLease(req.url, ++token);
    else out = { lease: { resource: req.url, fencingToken: ++token, expiresAt: new Date().toISOString() } };
    const json = JSON.stringify(out);
    const status = req.url.endsWith("/register") ? 201 : 200;
    if (likeHub) {
      res.writeHead(status, {
        "x-request-id": `req_${hex()}`, "referrer-policy": "no-referrer", "cache-control": "no-store",
        "x-ratelimit-limit": "100000000", "x-ratelimit-remaining": "99999999",
        "content-type": "application/json; charset=utf-8", "content-length": String(Buffer.byteLength(json)), "x-content-type-options": "nosniff",
      });
    } else {
      res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(json) });
    }
    res.end(json);
  });
}

function serve() {
  http.createServer(answer).listen({ port, host, reusePort: threads > 1 });
}

if (isMainThread) {
  for (let i = 1; i < threads; i++) new Worker(new URL(import.meta.url), { workerData: { port, host, threads, likeHub } });
  serve();
  console.log(`floor: listening on http://${host}:${port} with ${threads} thread(s)`);
} else {
  serve();
}
