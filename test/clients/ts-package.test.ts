import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { makeCerts } from "../fixtures/certs.js";
import { repo, serveCli } from "../fixtures/cli.js";
import { startTestHub } from "../fixtures/hub.js";

/**
 * The TypeScript package as a user gets it: built and packed (`npm pack`), installed into a
 * project outside the repository, the examples type-checked against the package's declarations
 * and run against a hub (the TLS one against a hub with mutual TLS).
 */
describe("the TypeScript package", () => {
  it("installs from its packed tarball, and the example agent program runs on it", async () => {
    const pkg = path.join(repo, "clients", "ts");
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-ts-user-"));
    const run = (cmd: string, args: string[], cwd: string, env: Record<string, string> = {}) =>
      execFileSync(cmd, args, { cwd, env: { ...process.env, ...env }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
    try {
      run(process.execPath, ["scripts/build.mjs"], pkg);
      const tarball = run("npm", ["pack", "--silent", "--pack-destination", dir], pkg).trim().split("\n").at(-1)!;
      fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "agent", private: true, type: "module" }));
      run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", path.join(dir, tarball)], dir);
      fs.copyFileSync(path.join(repo, "examples", "ts", "agent.ts"), path.join(dir, "agent.ts"));
      fs.copyFileSync(path.join(repo, "examples", "ts", "tls.ts"), path.join(dir, "tls.ts"));

      // The example type-checks against the installed package's declarations.
      run(process.execPath, [
        path.join(repo, "node_modules", "typescript", "bin", "tsc"),
        "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
        "--types", "node", "--typeRoots", path.join(repo, "node_modules", "@types"), "agent.ts", "tls.ts",
      ], dir);

      const hub = await serveCli(["--port", "0", "--data-path", path.join(dir, "kxm.db"), "--log-path", "-"]);
      try {
        const out = run(process.execPath, ["--import", path.join(repo, "node_modules", "tsx", "dist", "esm", "index.mjs"), "agent.ts"], dir, {
          KXM_URL: hub.url,
          WORK_MS: "1500",
        });
        expect(out).toContain("commit to main with fencing token 1");
        expect(out).toContain('reviewer replied to "pushed main at token 1"');
        expect(out).toContain('builder read the reply "reviewed: pushed main at token 1"');
      } finally {
        await hub.stop();
      }

      // The TLS example against a hub in this process (so not run synchronously) with mutual TLS.
      const certs = makeCerts();
      try {
        await using t = await startTestHub({ config: { tlsCert: certs.server.cert, tlsKey: certs.server.key, tlsClientCa: certs.ca.cert } });
        const { stdout } = await promisify(execFile)(process.execPath, ["--import", path.join(repo, "node_modules", "tsx", "dist", "esm", "index.mjs"), "tls.ts"], {
          cwd: dir,
          env: { ...process.env, KXM_URL: t.baseUrl, KXM_TLS_CA: certs.ca.cert, KXM_TLS_CLIENT_CERT: certs.client.cert, KXM_TLS_CLIENT_KEY: certs.client.key },
          timeout: 60_000,
        });
        expect(stdout).toContain("deploying with fencing token 1");
      } finally {
        certs.remove();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
