import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repo, runCli } from "../fixtures/cli.js";

/** `kxm-hub --version` (issue 20): package.json's version, for scripts and bug reports. */
const version = (JSON.parse(fs.readFileSync(path.join(repo, "package.json"), "utf8")) as { version: string }).version;

describe("kxm-hub --version", () => {
  it.each(["--version", "-v"])("%s prints package.json's version and exits 0", async (flag) => {
    const r = await runCli([flag]);
    expect(r).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
  });

  it("is in kxm-hub --help", async () => {
    const r = await runCli(["--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ +kxm-hub --version, -v +the version/m);
  });
});

/** D53: the command refuses a Node older than the lines it runs on, before anything loads. */
describe("kxm-hub on an unsupported Node", () => {
  const asNode = (v: string) =>
    `--import=data:text/javascript,${encodeURIComponent(`Object.defineProperty(process, "versions", { value: { ...process.versions, node: "${v}" } });`)}`;

  it.each(["20.20.2", "22.11.0", "18.20.8"])("Node %s: exit 2, naming the version, what it needs and how to get it", async (v) => {
    const r = await runCli(["--version"], { env: { NODE_OPTIONS: asNode(v) } });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      `kxm-hub: Node ${v} is not supported: it needs Node 22.12 or newer (24 is the line it is tested on). ` +
        "`npm start` in the hub's folder installs Node 24 from the npm registry into .tools/ and runs on it.\n",
    );
  });

  it.each(["22.12.0", "24.22.3", "26.1.0"])("Node %s runs it", async (v) => {
    const r = await runCli(["--version"], { env: { NODE_OPTIONS: asNode(v) } });
    expect(r).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
  });
});
