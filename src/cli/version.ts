import fs from "node:fs";
import { packagePath } from "../package-root.js";

/**
 * The hub's version: package.json's `version`, the one place it is written (`kxm-hub --version`,
 * backup manifests). Read from the checkout the command runs from, so it never drifts from it.
 */
export function hubVersion(): string {
  const pkg = JSON.parse(fs.readFileSync(packagePath("package.json"), "utf8")) as { version: string };
  return pkg.version;
}
