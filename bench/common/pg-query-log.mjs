// A preload for a hub on PostgreSQL that logs, on the process's monotonic clock (ms), every
// statement it sends and every HTTP/2 stream it serves, for reading a run query by query:
//
//   BENCH_HUB_NODE_ARGS="--import ./bench/common/pg-query-log.mjs" npm run bench:replicas -- \
//     --targets postgres-1 --parts messages --seconds 5
//
// Each hub writes `pg-query-log-<pid>.txt` into PG_QUERY_LOG_DIR (default: the system's temporary
// directory) when it exits. Lines:
//   q <sent> <answered> c<connection> [cb] <the statement's first 60 characters>
//   h <opened> <closed> <path>
// `cb` marks a statement asked with a callback rather than for a promise: since D89 the store's
// connections (src/store/postgres/client.ts) ask every statement that way, so it marks them all.
// The statements are wrapped at `pg.Client.prototype.query`, the streams at the HTTP/2 server's
// `stream` event; nothing else of the hub changes. For measuring only: it keeps every line in memory.
import fs from "node:fs";
import http2 from "node:http2";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const require = createRequire(import.meta.url);
const pg = require("pg");

const lines = [];
const now = () => (Number(process.hrtime.bigint()) / 1e6).toFixed(3);
const connections = new WeakMap();
let nextConnection = 0;

const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (config, ...rest) {
  const text = (typeof config === "string" ? config : (config?.text ?? "")).replace(/\s+/g, " ").slice(0, 60);
  if (!connections.has(this)) connections.set(this, ++nextConnection);
  const connection = connections.get(this);
  const sent = now();
  const done = (mark) => lines.push(`q ${sent} ${now()} c${connection}${mark} ${text}`);
  const callback = rest.findIndex((a) => typeof a === "function");
  if (callback >= 0) {
    const answer = rest[callback];
    rest[callback] = function (...args) {
      done(" cb");
      return answer.apply(this, args);
    };
  }
  const result = query.call(this, config, ...rest);
  if (result && typeof result.then === "function") result.then(() => done(""), () => done(" failed"));
  return result;
};

const createServer = http2.createServer;
http2.createServer = function (...args) {
  const server = createServer.apply(this, args);
  server.on("stream", (stream, headers) => {
    const opened = now();
    stream.once("close", () => lines.push(`h ${opened} ${now()} ${headers[":path"]}`));
  });
  return server;
};

let written = false;
const write = () => {
  if (written) return;
  written = true;
  const dir = process.env.PG_QUERY_LOG_DIR ?? os.tmpdir();
  fs.writeFileSync(path.join(dir, `pg-query-log-${process.pid}.txt`), lines.join("\n") + "\n");
};
process.on("exit", write);
