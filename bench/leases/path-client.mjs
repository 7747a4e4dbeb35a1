// The load of bench/leases/path.ts, on a worker thread of its own: `conc` loops of REST acquire
// then release (the calls ../shared/bench/lease-compare.mjs makes), each on its own name, over
// keep-alive HTTP/1.1, until `cycles` cycles are done. Posts {cycles, errors, ms} when finished.
import http from "node:http";
import { parentPort, workerData } from "node:worker_threads";

const { port, agents, cycles, conc, token } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: conc });

function post(path, headers, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, method: "POST", path, agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("error", (e) => resolve({ status: 0, text: String(e) }));
    req.end(body);
  });
}

let done = 0;
let errors = 0;
const start = performance.now();
await Promise.all(
  Array.from({ length: conc }, async (_, w) => {
    const a = agents[w];
    const h = { authorization: `Bearer ${token}`, "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key, "content-type": "application/json" };
    while (done < cycles) {
      done++;
      const r = await post(`/v1/leases/u-${w}/acquire`, h, '{"ttlMs":30000}');
      if (r.status !== 200) { errors++; continue; }
      const t = JSON.parse(r.text).lease.fencingToken;
      const q = await post(`/v1/leases/u-${w}/release`, h, `{"fencingToken":${JSON.stringify(t)}}`);
      if (q.status !== 200) errors++;
    }
  }),
);
agent.destroy();
parentPort.postMessage({ cycles: done, errors, ms: performance.now() - start });
