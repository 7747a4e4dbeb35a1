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
