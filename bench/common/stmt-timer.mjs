// A preload that times every SQLite statement the process runs, for finding the expensive ones
// under a real load: wraps better-sqlite3's prepare so each statement's run/get/all adds its
// time to the statement's text, and prints the costliest at exit (to STMT_TIMER_OUT, else
// stderr). Its own timing inflates every figure: the list ranks statements, it does not measure
// them. bench/steps.md.
//
//   node --import ./bench/common/stmt-timer.mjs --import tsx bench/messages/run.ts --parts messages
//   HUB_START='exec node --import ./bench/common/stmt-timer.mjs bin/kxm-hub.mjs serve' node ../shared/bench/lease-compare.mjs ...
import fs from "node:fs";
import { createRequire } from "node:module";

const Database = createRequire(import.meta.url)("better-sqlite3");
const stats = new Map();
const prepare = Database.prototype.prepare;
Database.prototype.prepare = function (sql) {
  const statement = prepare.call(this, sql);
  for (const verb of ["run", "get", "all"]) {
    const original = statement[verb];
    statement[verb] = function (...args) {
      const start = process.hrtime.bigint();
      try {
        return original.apply(this, args);
      } finally {
        let s = stats.get(sql);
        if (!s) stats.set(sql, (s = { n: 0, ns: 0 }));
        s.n++;
        s.ns += Number(process.hrtime.bigint() - start);
      }
    };
  }
  return statement;
};

process.on("exit", () => {
  const lines = [...stats]
    .sort((a, b) => b[1].ns - a[1].ns)
    .slice(0, 30)
    .map(([sql, s]) => `${(s.ns / 1e6).toFixed(0).padStart(7)} ms ${String(s.n).padStart(9)} x ${(s.ns / s.n / 1e3).toFixed(2).padStart(8)} us  ${sql.replace(/\s+/g, " ").slice(0, 160)}`);
  const text = `statements by total time:\n${lines.join("\n")}\n`;
  if (process.env.STMT_TIMER_OUT) fs.writeFileSync(process.env.STMT_TIMER_OUT, text);
  else process.stderr.write(text);
});
