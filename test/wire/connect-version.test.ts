import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { heldToConnect } from "../../src/wire/adapter.js";

const require = createRequire(import.meta.url);
const root = path.resolve(import.meta.dirname, "../..");

/** The version of `name` that is installed, read from its package.json. */
function installed(name: string): string {
  const main = require.resolve(name);
  let dir = path.dirname(main);
  while (!fs.existsSync(path.join(dir, "package.json")) || JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).name !== name) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`no package.json for ${name}`);
    dir = up;
  }
  return JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
}

const upgradeSteps =
  "src/wire serves plain Connect calls on connect's protocol internals, which do not follow semantic versioning. " +
  "After an upgrade: run `FUZZ_RUNS=x10 npx vitest run test/fuzz/differential.fuzz.test.ts` and the protocol suites with " +
  "`KXM_TEST_WIRE=connect` (scripts/test.sh), fix what differs, then set heldToConnect in src/wire/adapter.ts.";

describe("the wire layer is held to the connect it was checked against", () => {
  it.each(Object.entries(heldToConnect))("%s is the version the differential suite passed with", (name, held) => {
    expect(installed(name), `${name} is no longer ${held}. ${upgradeSteps}`).toBe(held);
  });

  it("package.json pins those versions exactly", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
    for (const [name, held] of Object.entries(heldToConnect)) {
      expect(pkg.dependencies[name], `${name} in package.json. ${upgradeSteps}`).toBe(held);
    }
  });
});
