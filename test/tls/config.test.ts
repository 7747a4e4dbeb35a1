import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, defaultConfig, loadConfig, type HubConfig } from "../../src/config.js";
import { createHub } from "../../src/hub.js";
import { loadTlsMaterial } from "../../src/http/tls.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { expectRefusal, runCli, serveCli } from "../fixtures/cli.js";
import { httpsGet, trusting } from "./tls.helpers.js";

/**
 * TLS settings: KXM_TLS_CERT, KXM_TLS_KEY and KXM_TLS_CLIENT_CA (and their flags); a pair that is
 * missing a half, a file that cannot be read or a pair Node refuses stops the start with
 * invalid_config naming the file, before anything is created. The start-up line says https, and
 * a plaintext port beyond loopback is warned about.
 */

let certs: TestCerts;
let dir: string;
beforeAll(() => {
  certs = makeCerts();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-tls-config-"));
});
afterAll(() => {
  certs?.remove();
  fs.rmSync(dir, { recursive: true, force: true });
});

const refusalOf = (f: () => unknown): ConfigError => {
  try {
    f();
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error("expected a ConfigError");
};

describe("loadConfig", () => {
  it("reads the TLS files from the environment, and a flag wins", () => {
    const c = loadConfig(["--tls-key", "flag.key"], { KXM_TLS_CERT: " a.pem ", KXM_TLS_KEY: "env.key", KXM_TLS_CLIENT_CA: "ca.pem" });
    expect([c.tlsCert, c.tlsKey, c.tlsClientCa, c.tlsReloadIntervalMs]).toEqual(["a.pem", "flag.key", "ca.pem", 1_000]);
    const plain = loadConfig([], { KXM_TLS_CERT: "" });
    expect([plain.tlsCert, plain.tlsKey, plain.tlsClientCa]).toEqual([undefined, undefined, undefined]);
  });

  it.each([
    [{ KXM_TLS_CERT: "a.pem" }, "KXM_TLS_CERT (a.pem) needs KXM_TLS_KEY"],
    [{ KXM_TLS_KEY: "a.key" }, "KXM_TLS_KEY (a.key) needs KXM_TLS_CERT"],
    [{ KXM_TLS_CLIENT_CA: "ca.pem" }, "KXM_TLS_CLIENT_CA (ca.pem) needs KXM_TLS_CERT and KXM_TLS_KEY"],
  ])("refuses %o as invalid_config", (env, message) => {
    const e = refusalOf(() => loadConfig([], env));
    expect(e.code).toBe("invalid_config");
    expect(e.message).toContain(message);
  });
});

describe("createHub refuses TLS files it cannot serve, before creating the store", () => {
  const garbage = () => {
    const f = path.join(dir, `garbage-${Math.random().toString(16).slice(2)}.pem`);
    fs.writeFileSync(f, "not a pem\n");
    return f;
  };
  const encryptedKey = () => {
    const f = path.join(dir, "encrypted.key");
    execFileSync("openssl", ["pkcs8", "-topk8", "-in", certs.server.key, "-out", f, "-v2", "aes-256-cbc", "-passout", "pass:secret"]);
    return f;
  };
  /** Each case: the TLS settings and what the refusal must say (built when the test runs). */
  const cases: [string, () => [Partial<HubConfig>, string[]]][] = [
    ["a certificate without its key", () => [{ tlsCert: certs.server.cert }, ["needs KXM_TLS_KEY"]]],
    ["a missing certificate file", () => [{ tlsCert: path.join(dir, "nope.pem"), tlsKey: certs.server.key }, [`cannot read KXM_TLS_CERT ${path.join(dir, "nope.pem")}: ENOENT`]]],
    ["a missing key file", () => [{ tlsCert: certs.server.cert, tlsKey: path.join(dir, "nope.key") }, [`cannot read KXM_TLS_KEY ${path.join(dir, "nope.key")}: ENOENT`]]],
    ["a directory as the certificate", () => [{ tlsCert: dir, tlsKey: certs.server.key }, [`cannot read KXM_TLS_CERT ${dir}: EISDIR`]]],
    ["a key that does not match", () => [{ tlsCert: certs.server.cert, tlsKey: certs.server2.key }, [`KXM_TLS_KEY ${certs.server2.key} is not the private key of the certificate in KXM_TLS_CERT ${certs.server.cert}`]]],
    ["a certificate that is no PEM", () => [{ tlsCert: garbage(), tlsKey: certs.server.key }, ["holds no PEM certificate"]]],
    ["a key that is no key", () => [{ tlsCert: certs.server.cert, tlsKey: garbage() }, ["holds no usable PEM private key"]]],
    ["an encrypted key", () => [{ tlsCert: certs.server.cert, tlsKey: encryptedKey() }, ["encrypted.key holds no usable PEM private key: it is encrypted"]]],
    ["the key given as the certificate", () => [{ tlsCert: certs.server.key, tlsKey: certs.server.key }, ["holds no PEM certificate"]]],
    ["a client CA that holds no certificate", () => [{ ...pairOf(certs), tlsClientCa: garbage() }, ["KXM_TLS_CLIENT_CA", "holds no PEM certificate"]]],
    // A client's own certificate given as the CA: a leaf verifies no client, so every handshake would fail.
    ["a client CA bundle of leaves only", () => [{ ...pairOf(certs), tlsClientCa: certs.client.cert }, ["KXM_TLS_CLIENT_CA", "holds no CA certificate"]]],
    ["a missing client CA", () => [{ ...pairOf(certs), tlsClientCa: path.join(dir, "nope-ca.pem") }, [`cannot read KXM_TLS_CLIENT_CA ${path.join(dir, "nope-ca.pem")}: ENOENT`]]],
  ];
  it.each(cases)("%s", async (_name, given) => {
    const [tls, messages] = given();
    const dataPath = path.join(dir, `never-${Math.random().toString(16).slice(2)}.db`);
    const config: HubConfig = { ...defaultConfig, port: 0, dataPath, logPath: undefined, ...tls };
    const e = await createHub(config, { log: false }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).code).toBe("invalid_config");
    for (const m of messages) expect((e as ConfigError).message).toContain(m);
    expect((e as ConfigError).message).not.toContain("PRIVATE KEY");
    expect(fs.existsSync(dataPath)).toBe(false);
  });
});

const pairOf = (c: TestCerts) => ({ tlsCert: c.server.cert, tlsKey: c.server.key });

describe("a certificate outside its validity", () => {
  // The test certificates are valid from now for two days (fixtures/certs.ts); the check is made
  // at the time given, the wall clock's by default, as every client's TLS stack makes it.
  const day = 86_400_000;
  const files = () => ({ cert: certs.server.cert, key: certs.server.key });
  it("is refused once expired, naming the file and its end", () => {
    const e = refusalOf(() => loadTlsMaterial(files(), Date.now() + 3 * day));
    expect(e.code).toBe("invalid_config");
    expect(e.message).toContain(`KXM_TLS_CERT ${certs.server.cert} expired (valid to ${new X509Certificate(certs.server.certPem).validTo})`);
  });
  it("is refused before it is valid", () => {
    const e = refusalOf(() => loadTlsMaterial(files(), Date.now() - day));
    expect(e.message).toContain(`KXM_TLS_CERT ${certs.server.cert} is not valid yet`);
  });
  it("is served within it", () => {
    expect(loadTlsMaterial(files()).fingerprint256).toBe(certs.server.fingerprint256);
  });
});

describe.concurrent("kxm-hub serve", () => {
  const env = (d: string) => ({ KXM_PORT: "0", KXM_DATA_PATH: path.join(d, "state", "kxm.db"), KXM_LOG_PATH: "-" });
  const fresh = () => fs.mkdtempSync(path.join(dir, "serve-"));
  const eventsOf = (stdout: string) =>
    stdout
      .trim()
      .split("\n")
      .slice(1)
      .map((l) => JSON.parse(l) as { event: string } & Record<string, unknown>);

  it("--help documents the three TLS flags with their variables and defaults", async () => {
    const r = await runCli(["serve", "--help"]);
    expect(r.code).toBe(0);
    const lines = r.stdout.split("\n");
    for (const [flag, env] of [["tls-cert", "KXM_TLS_CERT"], ["tls-key", "KXM_TLS_KEY"], ["tls-client-ca", "KXM_TLS_CLIENT_CA"]]) {
      const i = lines.findIndex((l) => new RegExp(`^ {2}--${flag} <file>\\s+${env}$`).test(l));
      expect(i, flag).toBeGreaterThan(0);
      expect(lines[i + 1], flag).toMatch(/^ {6}\S.* \(default: .+\)$/);
    }
  });

  it("with TLS: the start-up line has the https URL, and the port serves it", async () => {
    const d = fresh();
    const hub = await serveCli([], { env: { ...env(d), KXM_TLS_CERT: certs.server.cert, KXM_TLS_KEY: certs.server.key }, cwd: d });
    try {
      expect(hub.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      expect(hub.output().stdout.split("\n")[0]).toMatch(/; auth=none; tls=on$/);
      expect(await httpsGet(`${hub.url}/ready`, trusting(certs))).toMatchObject({ status: 200 });
    } finally {
      expect(await hub.stop()).toBe(0);
    }
    expect(eventsOf(hub.output().stdout).find((e) => e.event === "hub_started")).toMatchObject({ url: hub.url, tls: "on" });
  });

  it("with mutual TLS the start-up line says so", async () => {
    const d = fresh();
    const hub = await serveCli(["--tls-cert", certs.server.cert, "--tls-key", certs.server.key, "--tls-client-ca", certs.ca.cert], { env: env(d), cwd: d });
    try {
      expect(hub.output().stdout.split("\n")[0]).toMatch(/^kxm hub listening at https:\/\/.*; tls=mutual$/);
      expect(await httpsGet(`${hub.url}/ready`, trusting(certs, certs.client))).toMatchObject({ status: 200 });
    } finally {
      expect(await hub.stop()).toBe(0);
    }
  });

  it("refuses a key that does not match: one invalid_config line naming the files, nothing created", async () => {
    const d = fresh();
    const r = await runCli([], { env: { ...env(d), KXM_LOG_PATH: path.join(d, "logs", "hub.jsonl"), KXM_TLS_CERT: certs.server.cert, KXM_TLS_KEY: certs.server2.key }, cwd: d });
    expectRefusal(r, "invalid_config");
    expect(r.stderr).toContain(certs.server2.key);
    expect(r.stderr).toContain(certs.server.cert);
    expect(fs.readdirSync(d)).toEqual([]);
  });

  it("refuses a missing certificate file", async () => {
    const d = fresh();
    const r = await runCli([], { env: { ...env(d), KXM_TLS_CERT: path.join(d, "missing.pem"), KXM_TLS_KEY: certs.server.key }, cwd: d });
    expectRefusal(r, "invalid_config");
    expect(r.stderr).toContain(`cannot read KXM_TLS_CERT ${path.join(d, "missing.pem")}: ENOENT`);
  });

  it("warns when it listens beyond loopback without TLS, on stderr and in the log", async () => {
    const d = fresh();
    const hub = await serveCli([], { env: { ...env(d), KXM_HOST: "0.0.0.0", KXM_AUTH_TOKEN: "admin" }, cwd: d });
    expect(await hub.stop()).toBe(0);
    expect(hub.output().stderr).toContain("warning: 0.0.0.0 is beyond loopback and the port speaks plaintext");
    expect(eventsOf(hub.output().stdout).find((e) => e.event === "plaintext_beyond_loopback")).toMatchObject({ host: "0.0.0.0" });
  });

  it("does not warn beyond loopback with TLS, nor on loopback", async () => {
    const d = fresh();
    const tls = await serveCli([], { env: { ...env(d), KXM_HOST: "0.0.0.0", KXM_AUTH_TOKEN: "admin", KXM_TLS_CERT: certs.server.cert, KXM_TLS_KEY: certs.server.key }, cwd: d });
    expect(await tls.stop()).toBe(0);
    const d2 = fresh();
    const loopback = await serveCli([], { env: env(d2), cwd: d2 });
    expect(await loopback.stop()).toBe(0);
    for (const hub of [tls, loopback]) {
      expect(hub.output().stderr).not.toContain("beyond loopback");
      expect(eventsOf(hub.output().stdout).map((e) => e.event)).not.toContain("plaintext_beyond_loopback");
    }
  });
});
