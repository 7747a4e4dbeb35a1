#!/usr/bin/env node
// Builds the operator page (ui/) ahead of time into ui/dist: one script and one stylesheet,
// minified, named by the hash of their content (the hub serves them as immutable), and the
// index.html that names them. Runs on `npm ci` (the `prepare` script) and before the browser
// test; takes well under a second.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

// esbuild is a development dependency: an install without them (npm ci --omit=dev) still
// succeeds, and the hub says at start that its page is not built (operator_page_missing).
let build;
try {
  ({ build } = await import("esbuild"));
} catch {
  console.log("build-ui: esbuild is not installed (an install without dev dependencies); the operator page is not built");
  process.exit(0);
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ui = path.join(root, "ui");
const out = path.join(ui, "dist");
const assets = path.join(out, "assets");

const result = await build({
  entryPoints: { app: path.join(ui, "src/main.tsx") },
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["chrome110", "firefox115", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  entryNames: "[name]-[hash]",
  outdir: path.join(out, ".next"),
  metafile: true,
  logLevel: "warning",
  write: true,
});

// Swap the new build in whole, so a hub serving the old one never sees half of the new one.
const built = Object.keys(result.metafile.outputs).map((f) => path.resolve(root, f));
const js = built.find((f) => f.endsWith(".js"));
const css = built.find((f) => f.endsWith(".css"));
if (!js || !css) throw new Error("build-ui: expected one .js and one .css output");
const html = fs
  .readFileSync(path.join(ui, "index.html"), "utf8")
  .replace("{{js}}", path.basename(js))
  .replace("{{css}}", path.basename(css));
fs.rmSync(assets, { recursive: true, force: true });
fs.mkdirSync(assets, { recursive: true });
for (const f of built) {
  const to = path.join(assets, path.basename(f));
  fs.renameSync(f, to);
  // Served as is to a browser that accepts gzip (every one does): compressed once, here.
  fs.writeFileSync(`${to}.gz`, zlib.gzipSync(fs.readFileSync(to), { level: 9 }));
}
fs.rmSync(path.join(out, ".next"), { recursive: true, force: true });
fs.writeFileSync(path.join(out, "index.html"), html);
const size = (f) => `${(fs.statSync(path.join(assets, f)).size / 1024).toFixed(1)} KiB`;
for (const f of [js, css].map((x) => path.basename(x))) console.log(`build-ui: ${f} ${size(f)} (gzip ${size(`${f}.gz`)})`);
