import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The package's root folder: the nearest folder above this module that holds package.json. The
 * hub runs from its build (dist/kxm-hub.mjs, scripts/build.mjs) and, in tests, from its sources
 * (src/…); files it reads at run time (migrations, the operator page, package.json, bin/) are
 * found from here, the same way from both.
 */
export const packageRoot = findRoot(path.dirname(fileURLToPath(import.meta.url)));

/** A path inside the package: `packagePath("src", "store", "sqlite", "migrations")`. */
export const packagePath = (...parts: string[]): string => path.join(packageRoot, ...parts);

/** Whether this code runs from its TypeScript sources rather than from the build. */
export const fromSources = import.meta.url.endsWith(".ts");

function findRoot(dir: string): string {
  for (let d = dir; ; d = path.dirname(d)) {
    if (fs.existsSync(path.join(d, "package.json"))) return d;
    if (path.dirname(d) === d) throw new Error(`no package.json above ${dir}`);
  }
}
