#!/usr/bin/env node
// Builds the hub for running: src/main.ts bundled into dist/kxm-hub.mjs (with a chunk per
// command in dist/chunks), and the sync prepare pool's worker into dist/prepare-worker.mjs
// (src/sync/prepare-pool.ts loads it from there). Packages stay outside the bundle and load from node_modules as usual. Files the hub
// reads at run time (migrations, the operator page, package.json) are not bundled: they are found
// from the package's root (src/package-root.ts), the same from the sources and from here.
// Runs on `npm ci` (the `prepare` script), on `npm start` when a source is newer than the build
// (--if-stale), and before the test suites
// (test/fixtures/build.global.ts); takes about a second. Why a bundle: docs/decisions.md D52.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "dist");
const quiet = process.argv.includes("--quiet");
const entry = path.join(out, "kxm-hub.mjs");

// --if-stale (npm start): nothing to do when the build is newer than every source it comes from.
if (process.argv.includes("--if-stale") && fs.existsSync(entry)) {
  const builtAt = fs.statSync(entry).mtimeMs;
  const newest = (dir) =>
    fs.readdirSync(dir, { withFileTypes: true, recursive: true }).reduce((m, f) => (f.isFile() ? Math.max(m, fs.statSync(path.join(f.parentPath, f.name)).mtimeMs) : m), 0);
  const sourcesAt = Math.max(newest(path.join(root, "src")), newest(path.join(root, "gen", "ts")), fs.statSync(path.join(root, "package-lock.json")).mtimeMs);
  if (sourcesAt < builtAt) process.exit(0);
}

const started = performance.now();
const { build } = await import("esbuild");
// Each build writes to a folder of its own, then moves its files in one by one (a rename over a
// file is atomic): two builds at once (two `npm start`, the test suites' setup) never see each
// other's half-written files, and a hub starting meanwhile loads a whole file, old or new.
const next = path.join(root, `dist.next-${process.pid}`);
await build({
  absWorkingDir: root,
  entryPoints: { "kxm-hub": "src/main.ts", "prepare-worker": "src/sync/prepare-worker.ts" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node22.12",
  packages: "external",
  // The commands main.ts imports when they run become chunks of their own, so `kxm-hub lease
  // check` does not load the server, the MCP SDK or the PostgreSQL driver.
  splitting: true,
  chunkNames: "chunks/[name]-[hash]",
  sourcemap: "linked",
  sourcesContent: false,
  outExtension: { ".js": ".mjs" },
  outdir: next,
  logLevel: "warning",
});
// The entry last: --if-stale reads its time as the build's, and the chunks it names are in place.
const files = fs.readdirSync(next, { recursive: true }).filter((f) => fs.statSync(path.join(next, f)).isFile());
files.sort((a, b) => Number(a === "kxm-hub.mjs") - Number(b === "kxm-hub.mjs"));
for (const f of files) {
  fs.mkdirSync(path.dirname(path.join(out, f)), { recursive: true });
  fs.renameSync(path.join(next, f), path.join(out, f));
}
fs.rmSync(next, { recursive: true, force: true });
// Chunks are named by their content: an older build's are removed once no start can still be
// loading them (a minute).
const built = new Set(files);
for (const f of fs.readdirSync(path.join(out, "chunks"))) {
  const file = path.join(out, "chunks", f);
  if (!built.has(path.join("chunks", f)) && Date.now() - fs.statSync(file).mtimeMs > 60_000) fs.rmSync(file, { force: true });
}
if (!quiet) console.log(`build: dist/kxm-hub.mjs ${(fs.statSync(entry).size / 1024).toFixed(0)} KiB in ${Math.round(performance.now() - started)} ms`);
