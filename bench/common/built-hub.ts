/**
 * `createHub` as the build runs it: src/hub.ts bundled by esbuild with scripts/build.mjs's
 * settings, loaded once per process. The benchmarks measure the hub this way because `tsx`,
 * which runs their own TypeScript, also names every function the sources create (esbuild's
 * keepNames), a cost per closure the build does not have: figures from the sources were up to a
 * tenth slower on the request path. The bundle goes under dist/, so that it finds the package's
 * files (migrations) as the build does, and is removed once loaded.
 * KXM_BENCH_HUB=sources loads src/hub.ts as it is instead.
 */
import fs from "node:fs";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import { packagePath } from "../../src/package-root.js";

type HubModule = typeof import("../../src/hub.js");

let loaded: Promise<HubModule> | undefined;

function load(): Promise<HubModule> {
  loaded ??= (async () => {
    if (process.env.KXM_BENCH_HUB === "sources") return import("../../src/hub.js");
    const bundle = packagePath("dist", "bench", `hub-${process.pid}.mjs`);
    await build({
      entryPoints: [packagePath("src", "hub.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node22.12",
      packages: "external",
      outfile: bundle,
      logLevel: "warning",
    });
    try {
      return (await import(pathToFileURL(bundle).href)) as HubModule;
    } finally {
      fs.rmSync(bundle, { force: true });
    }
  })();
  return loaded;
}

export const createHub: HubModule["createHub"] = async (...args) => (await load()).createHub(...args);
