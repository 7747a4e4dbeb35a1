// The floor under the hub's lease path: a bare node:http server that answers the three calls
// ../shared/bench/lease-compare.mjs makes (register, acquire, release) by parsing each JSON body
// and writing a small JSON answer, storing and checking nothing. Run under lease-compare
// in place of the hub, it says what Node's HTTP/1.1 server alone costs per cycle on this machine,
// and, with --threads 2, what a second thread serving the same port gives (each thread listens
// with `reusePort`, so the kernel spreads the connections). bench/README.md "Against etcd".
//
//   HUB_START='node bench/leases/floor.mjs --threads 2' HUB_ACQUIRE_PATH=... node ../shared/bench/lease-compare.mjs --targets hub
import http from "node:http";
import { parseArgs } from "node:util";
import { isMainThread, Worker, workerData } from "node:worker_threads";

const { values } = parseArgs({
  options: { threads: { type: "string", default: "1" }, port: { type: "string" }, host: { type: "string", default: "127.0.0.1" } },
  strict: false,
});
const port = Number(workerData?.port ?? values.port ?? process.env.KXM_PORT ?? 8787);
const host = workerData?.host ?? values.host;
const threads = Number(workerData?.threads ?? values.threads);

let token = 0;
function answer(req, res) {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const text = Buffer.concat(chunks).toString("utf8");
    const body = text ? JSON.parse(text) : {};
    let out;
    if (req.url.endsWith("/register")) out = { agent: { id: `agt_${++token}`, name: body.name ?? "" }, agentKey: `key_${token}` };
    else out = { lease: { resource: req.url, fencingToken: ++token, expiresAt: new Date().toISOString() } };
    const json = JSON.stringify(out);
    res.writeHead(req.url.endsWith("/register") ? 201 : 200, { "content-type": "application/json", "content-length": Buffer.byteLength(json) });
    res.end(json);
  });
}

function serve() {
  http.createServer(answer).listen({ port, host, reusePort: threads > 1 });
}

if (isMainThread) {
  for (let i = 1; i < threads; i++) new Worker(new URL(import.meta.url), { workerData: { port, host, threads } });
  serve();
  console.log(`floor: listening on http://${host}:${port} with ${threads} thread(s)`);
} else {
  serve();
}
