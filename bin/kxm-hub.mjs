#!/usr/bin/env node
// The `kxm-hub` command: the hub's build (dist/kxm-hub.mjs, written by scripts/build.mjs on
// `npm ci` and `npm start`), which reads process.argv.
import fs from "node:fs";

// Node 22 and 24 are the lines the hub runs on (package.json `engines`). On an older one its
// SQLite driver can crash the process instead of failing to load, so it is refused first.
const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 12)) {
  process.stderr.write(
    `kxm-hub: Node ${process.versions.node} is not supported: it needs Node 22.12 or newer (24 is the line it is tested on). ` +
      "`npm start` in the hub's folder installs Node 24 from the npm registry into .tools/ and runs on it.\n",
  );
  process.exit(2);
}

const built = new URL("../dist/kxm-hub.mjs", import.meta.url);
if (!fs.existsSync(built)) {
  process.stderr.write("kxm-hub: not built: run `npm ci` or `node scripts/build.mjs` in the hub's folder\n");
  process.exit(2);
}
await import(built.href);
