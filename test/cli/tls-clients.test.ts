import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { bin, repo, runCli, type CliResult } from "../fixtures/cli.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * Every command that calls the hub follows it to https:// (KXM_TLS_CA) and through mutual TLS
 * (KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY, or their flags; kxm.tls* for the git guard): the agent
 * commands (through the client library and through REST), `ops`, `lease run`, the MCP bridge with
 * the official MCP client, and the guard in a real repository. A failed handshake says so, with
 * its TLS code (exit 3); a TLS file that cannot be read is a usage error (exit 2). Processes run
 * side by side where they do not depend on each other: each spawn costs about a second and a half.
 */

const PROJECT = "p";
const run = promisify(execFile);

let certs: TestCerts;
let tlsHub: TestHub;
let mtlsHub: TestHub;

beforeAll(async () => {
  certs = makeCerts();
  const config = { tlsCert: certs.server.cert, tlsKey: certs.server.key, authToken: "admin", projectTokens: { [PROJECT]: "tok-p" }, cleanupIntervalMs: 3_600_000 };
  tlsHub = await startTestHub({ config, ca: certs.ca.certPem });
  mtlsHub = await startTestHub({ config: { ...config, tlsClientCa: certs.ca.cert } });
});

afterAll(async () => {
  await tlsHub?.close();
  await mtlsHub?.close();
  certs?.remove();
});

/** The variables of an agent of project p at `t`, trusting the test CA; `client` adds the client certificate. */
const agentEnv = (t: TestHub, agent: string | undefined, o: { ca?: boolean; client?: boolean } = {}): Record<string, string> => ({
  KXM_URL: t.baseUrl,
  KXM_TOKEN: "tok-p",
  KXM_PROJECT: PROJECT,
  ...(agent && { KXM_AGENT: agent }),
  ...(o.ca !== false && { KXM_TLS_CA: certs.ca.cert }),
  ...(o.client && { KXM_TLS_CLIENT_CERT: certs.client.cert, KXM_TLS_CLIENT_KEY: certs.client.key }),
});

function ok(r: CliResult): string {
  expect(r.code, r.stderr).toBe(0);
  return r.stdout;
}

/** One refusal line `kxm-hub: <code>: ...` and the exit code; answers the line. */
function refused(r: CliResult, exitCode: number, code: string): string {
  expect(r.code, `${r.stderr}${r.stdout}`).toBe(exitCode);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^kxm-hub: ${code}: \\S`));
  return lines[0]!;
}

describe("over https (KXM_TLS_CA)", () => {
  it("the agent commands and ops reach the hub; without the CA, or with an unreadable one, they say why", async () => {
    const [acquired, noCa, noCaRest, unreadable] = await Promise.all([
      runCli(["lease", "acquire", "repo/tls", "--ttl", "30s"], { env: agentEnv(tlsHub, "alice") }),
      runCli(["lease", "acquire", "repo/other"], { env: agentEnv(tlsHub, "bob", { ca: false }) }),
      runCli(["ops", "leases", "--project", PROJECT, "--url", tlsHub.baseUrl, "--token", "admin"]),
      runCli(["ops", "leases", "--project", PROJECT, "--url", tlsHub.baseUrl, "--tls-ca", path.join(certs.dir, "missing.pem")]),
    ]);
    expect(ok(acquired).trim()).toBe("1");
    // Through the client library (HTTP/2) and through REST (fetch): the same TLS code.
    for (const r of [noCa, noCaRest]) {
      expect(refused(r, 3, "tls_failed")).toMatch(/UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate; .*KXM_TLS_CA \(--tls-ca\)/);
    }
    expect(refused(unreadable, 2, "usage_error")).toContain(`cannot read KXM_TLS_CA (--tls-ca) ${path.join(certs.dir, "missing.pem")}: ENOENT`);

    // REST with the CA as a variable, ops with it as a flag.
    const [listed, ops] = await Promise.all([
      runCli(["lease", "list", "--json"], { env: agentEnv(tlsHub, undefined) }),
      runCli(["ops", "leases", "--project", PROJECT, "--url", tlsHub.baseUrl, "--token", "admin", "--tls-ca", certs.ca.cert]),
    ]);
    expect(JSON.parse(ok(listed)).leases).toEqual([expect.objectContaining({ name: "repo/tls", holderAgentName: "alice", fencingToken: 1 })]);
    expect(ok(ops)).toMatch(/repo\/tls.*alice/);
  }, 60_000);
});

/** A bare repository whose main has one commit, and a clone; git with a HOME of its own. */
async function makeRepo(dir: string) {
  const home = path.join(dir, "home");
  fs.mkdirSync(home);
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_") && !k.startsWith("GIT_")));
  const env = {
    ...base,
    HOME: home,
    XDG_CONFIG_HOME: home,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_AUTHOR_NAME: "Test",
    GIT_AUTHOR_EMAIL: "test@example.com",
    GIT_COMMITTER_NAME: "Test",
    GIT_COMMITTER_EMAIL: "test@example.com",
  } as Record<string, string>;
  const bare = path.join(dir, "origin.git");
  const clone = path.join(dir, "clone");
  const git = (args: string[], cwd = clone) => run("git", args, { cwd, env }).then((r) => r.stdout.trim());
  await git(["init", "--quiet", "--bare", "--initial-branch", "main", bare], dir);
  await git(["clone", "--quiet", bare, clone], dir);
  await git(["commit", "--quiet", "--allow-empty", "-m", "initial"]);
  await git(["push", "--quiet", "origin", "HEAD:main"]);
  await git(["commit", "--quiet", "--allow-empty", "-m", "fenced"]);
  return { bare, clone, env, git };
}

describe("over mutual TLS (KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY)", () => {
  it("lease run holds a lease while its command checks the fence and pushes through the guard, which reads kxm.tls*", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-tls-guard-"));
    try {
      const r = await makeRepo(dir);
      const [install, noCert, stranger] = await Promise.all([
        runCli(
          ["guard", "git", "--install", r.bare, "--url", mtlsHub.baseUrl, "--token", "tok-p", "--project", PROJECT, "--protect", "refs/heads/main=repo/main",
            "--tls-ca", certs.ca.cert, "--tls-client-cert", certs.client.cert, "--tls-client-key", certs.client.key],
          { env: { HOME: r.env.HOME!, XDG_CONFIG_HOME: r.env.HOME!, GIT_CONFIG_NOSYSTEM: "1" } },
        ),
        runCli(["lease", "list"], { env: agentEnv(mtlsHub, undefined) }),
        runCli(["agents"], { env: { ...agentEnv(mtlsHub, undefined), KXM_TLS_CLIENT_CERT: certs.strangerClient.cert, KXM_TLS_CLIENT_KEY: certs.strangerClient.key } }),
      ]);
      ok(install);
      // A certificate another CA signed: the hub drops the connection after the handshake, without an alert.
      expect(refused(stranger, 3, "tls_failed")).toMatch(/ECONNRESET: the hub closed the connection right after the TLS handshake; the hub refuses a client certificate/);
      expect(await r.git(["--git-dir", r.bare, "config", "kxm.tlsClientCert"], r.bare)).toBe(certs.client.cert);
      expect(refused(noCert, 3, "tls_failed")).toMatch(/ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED: tlsv13 alert certificate required; the hub wants a client certificate/);

      // The command checks its token (a nested kxm-hub, the variables inherited) and pushes; the
      // hook checks it again over mutual TLS with the files git config names.
      const command = `"$KXM_NODE" "$KXM_BIN" lease check repo/main "$KXM_FENCING_TOKEN" && git push --quiet -o "kxm-fence=$KXM_FENCE" origin HEAD:main`;
      const held = await runCli(["lease", "run", "repo/main", "--ttl", "30s", "--", "sh", "-c", command], {
        cwd: r.clone,
        env: { ...r.env, ...agentEnv(mtlsHub, "pusher", { client: true }), KXM_NODE: process.execPath, KXM_BIN: bin },
      });
      expect(held.code, held.stderr).toBe(0);
      expect(held.stdout).toContain("valid: token 1 is lease repo/main's current token");
      expect(await r.git(["--git-dir", r.bare, "rev-parse", "main"], r.bare)).toBe(await r.git(["rev-parse", "HEAD"]));
      const record = JSON.parse(fs.readFileSync(path.join(r.bare, "kxm-fences.json"), "utf8"));
      expect(record.projects[PROJECT]["repo/main"]).toEqual({ fencingToken: 1, ref: "refs/heads/main" });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("the MCP bridge relays a session, its event stream included, and ops sees its lease; without a certificate the client is told why", async () => {
    const bridge = (env: Record<string, string>) => {
      const transport = new StdioClientTransport({ command: process.execPath, args: [bin, "mcp"], env, cwd: repo, stderr: "pipe" });
      let stderr = "";
      transport.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
      return { transport, client: new Client({ name: "tls-test", version: "1.0.0" }), stderr: () => stderr };
    };
    const a = bridge(agentEnv(mtlsHub, "mcp-agent", { client: true }));
    const refusedBridge = bridge(agentEnv(mtlsHub, "mcp-nocert"));
    let told!: () => void;
    const updated = new Promise<void>((resolve) => (told = resolve));
    a.client.setNotificationHandler("notifications/resources/updated", (n) => {
      if (n.params.uri === "kxm://leases") told();
    });
    const [, noCert] = await Promise.all([a.client.connect(a.transport), refusedBridge.client.connect(refusedBridge.transport).then(() => undefined, (e: unknown) => e as Error)]);
    expect(noCert?.message).toMatch(/TLS with the hub at https:\/\/127\.0\.0\.1:\d+ failed: ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED/);
    expect(refusedBridge.stderr()).toContain("kxm-hub: tls_failed: ");
    await refusedBridge.client.close();

    await a.client.subscribeResource({ uri: "kxm://leases" });
    // The event stream (GET) opens on its own after initialize: a change before it is open is not
    // told, so acquire until one is (each wait bounded).
    for (let i = 0; ; i++) {
      const r = (await a.client.callTool({ name: "acquire_lease", arguments: { name: `deploy/${i}`, ttl_ms: 60_000 } })) as { isError?: boolean };
      expect(r.isError, JSON.stringify(r)).toBeFalsy();
      if (await Promise.race([updated.then(() => true), new Promise<false>((res) => setTimeout(() => res(false), 1_000))])) break;
      if (i === 10) throw new Error(`no resource update through the bridge: ${a.stderr()}`);
    }
    const ops = await runCli(["ops", "leases", "--project", PROJECT, "--url", mtlsHub.baseUrl, "--token", "admin", "--tls-ca", certs.ca.cert, "--tls-client-cert", certs.client.cert, "--tls-client-key", certs.client.key]);
    expect(ok(ops)).toMatch(/deploy\/0.*mcp-agent/);
    await a.client.close();
  }, 60_000);
});
