#!/usr/bin/env node
// The `kxm-hub` command: the hub's build (dist/kxm-hub.mjs, written by scripts/build.mjs on
// `npm ci` and `npm start`), which reads process.argv.
import fs from "node:fs";

const built = new URL("../dist/kxm-hub.mjs", import.meta.url);
if (!fs.existsSync(built)) {
  process.stderr.write("kxm-hub: not built: run `npm ci` or `node scripts/build.mjs` in the hub's folder\n");
  process.exit(2);
}
await import(built.href);
