import fs from "node:fs";

/**
 * The hub's version: package.json's `version`, the one place it is written (`kxm-hub --version`,
 * backup manifests). Read from the checkout the command runs from, so it never drifts from it.
 */
export function hubVersion(): string {
  const pkg = JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}
