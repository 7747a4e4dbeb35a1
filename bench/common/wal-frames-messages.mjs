// The messages load of wal-frames.ts, on a worker thread: `conc` loops, each sending REST messages
// to the next agent of the ring over keep-alive HTTP/1.1, until `cycles` are sent. Posts
// {cycles, errors} when finished.
import http from "node:http";
import { parentPort, workerData } from "node:worker_threads";

const { port, agents, cycles, conc, token } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: conc });

function post(path, headers, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, method: "POST", path, agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode));
    });
    req.on("error", () => resolve(0));
    req.end(body);
  });
}

let sent = 0;
let errors = 0;
await Promise.all(
  Array.from({ length: conc }, async (_, w) => {
    const from = agents[w % agents.length];
    const to = agents[(w + 1) % agents.length];
    const h = { authorization: `Bearer ${token}`, "x-kxm-agent-id": from.id, "x-kxm-agent-key": from.key, "content-type": "application/json" };
    while (sent < cycles) {
      sent++;
      const status = await post("/v1/messages", h, JSON.stringify({ target: to.id, content: `message ${sent} of the WAL frames load` }));
      if (status !== 202) errors++;
    }
  }),
);
agent.destroy();
parentPort.postMessage({ cycles: sent, errors });
