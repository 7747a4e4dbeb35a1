import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { startControl } from "../fixtures/control.js";
import { serveCli } from "../fixtures/cli.js";
import { startTestHub } from "../fixtures/hub.js";

/**
 * Issue #5's scenario through the generated Go client (gen/go), and the library's tests
 * (clients/go), both taken through the replace directives of test/clients/go/go.mod, once over
 * Connect and once over gRPC (h2c). The hub runs here in-process; the Go tests move its clock
 * through the control port. Two more in-process hubs, one with TLS and one with mutual TLS, serve
 * the library's TLS tests (tls_test.go).
 */
const goDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "go");

/** The first run downloads Go modules (connect-go, protobuf, genproto) into the module cache. */
const GO_TIMEOUT_MS = 280_000;

function goVersion(): string {
  const r = spawnSync("go", ["version"], { encoding: "utf8" });
  if (r.error || r.status !== 0) {
    throw new Error(
      `the Go client tests need the \`go\` command (Go >= 1.26) on PATH: ${r.error?.message ?? r.stderr}`.trim(),
    );
  }
  return r.stdout.trim();
}

/** Hubs with TLS and with mutual TLS (client CA: the same CA), and the variables that name them and the files. */
async function tlsHubs(certs: TestCerts) {
  const config = { tlsCert: certs.server.cert, tlsKey: certs.server.key, projectTokens: { clients: "tok-clients" }, cleanupIntervalMs: 3_600_000 };
  const tls = await startTestHub({ config });
  const mtls = await startTestHub({ config: { ...config, tlsClientCa: certs.ca.cert } });
  return {
    env: { KXM_TLS_HUB_URL: tls.baseUrl, KXM_MTLS_HUB_URL: mtls.baseUrl, KXM_TLS_CA: certs.ca.cert, KXM_TLS_CLIENT_CERT: certs.client.cert, KXM_TLS_CLIENT_KEY: certs.client.key },
    mtls,
    [Symbol.asyncDispose]: async () => {
      await Promise.all([tls.close(), mtls.close()]);
    },
  };
}

/** Runs a command to its end (never blocking the event loop: the hub answers from this process). */
function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number }) {
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, timeout: opts.timeoutMs, killSignal: "SIGKILL" });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, output }));
  });
}

describe("Go client (gen/go, clients/go)", () => {
  it(
    "runs the scenario over Connect and gRPC",
    async () => {
      const version = goVersion();
      await using t = await startTestHub({ config: { projectTokens: { clients: "tok-clients" } } });
      const certs = makeCerts();
      await using tls = await tlsHubs(certs);
      const control = await startControl(t);
      try {
        const started = Date.now();
        const r = await run("go", ["test", "-count=1", "-v", "./..."], {
          cwd: goDir,
          env: {
            ...process.env,
            KXM_HUB_URL: t.baseUrl,
            KXM_CONTROL_URL: control.url,
            KXM_PROJECT_TOKEN: "tok-clients",
            ...tls.env,
            // The outage tests start, SIGKILL and restart `kxm-hub serve` themselves.
            KXM_NODE: process.execPath,
            KXM_HUB_BIN: path.resolve(goDir, "../../../bin/kxm-hub.mjs"),
            // Only this module's go.mod (and its replaces of gen/go and clients/go) decides the build.
            GOWORK: "off",
          },
          timeoutMs: GO_TIMEOUT_MS,
        });
        const secs = ((Date.now() - started) / 1000).toFixed(1);
        console.log(`${version}\n$ go test -count=1 -v ./...  (in test/clients/go, ${secs}s)\n${r.output}`);
        if (r.signal) throw new Error(`go test was killed (${r.signal}) after ${secs}s; limit ${GO_TIMEOUT_MS / 1000}s`);
        expect(r.code, "go test exit code").toBe(0);
        expect(r.output).toContain("--- PASS: TestScenarioConnect");
        expect(r.output).toContain("--- PASS: TestScenarioGRPC");
        for (const name of [
          "TestLibraryRenewalsKeepALeaseThroughThreeTTLs",
          "TestLibrarySupersededHolderIsToldItLostTheLease",
          "TestLibraryHandsOverToFiveWaitersInOrder",
          "TestLibraryTypedErrorsCarryTheCodeAndTheLease",
          "TestLibrarySessionLostWhenTheHubRefusesItsHeartbeat",
          "TestLibraryInboxAcksAndReplies",
          "TestLibraryLeaseThroughAShortOutageAndLostBeforeItsTTLInALongOne",
          "TestLibraryInboxThroughSubscriberTooSlowAndARestart",
          "TestLibraryInboxResumesWhereTheStreamStoodNotFromItsLastMessage",
          "TestLibraryLeaseGrantedAfterAWaitLongerThanItsTTLStaysRenewed",
          "TestLibraryLeaseGrantedAfterAWaitIsLostBeforeItCanLapseWhenRenewalsFail",
          "TestLibraryAwaitReplyReturnsAReplyMadeBeforeTheCall",
          "TestLibraryAwaitReplyReturnsAReplyMadeDuringTheWait",
          "TestLibraryAwaitReplyReconnectsAndReadsAReplyMadeWhileItsStreamWasDown",
          "TestLibraryAwaitReplySaysWhenTheMessageEndedWithoutAReply",
          "TestLibraryTakeoverRestartsAnAgentAtOnce",
          "TestLibrarySecondAcquireOfAHeldLeaseIsRefused",
          "TestLibraryReleasesALeaseGrantedToAnAcquireWhoseAnswerNeverCame",
          "TestAnUnansweredAcquireLeavesNoOrphanWhenAnotherAcquireOfTheNameWasInFlight",
          "TestCloseDoesNotWaitForAHeartbeatTheHubNeverAnswers",
          "TestOptionsNeverPrintTheToken",
          "TestLibraryOverTLSWithItsCAOverConnectAndGRPC",
          "TestLibraryOverMutualTLSServedWithItsClientCertificateOnly",
        ]) {
          expect(r.output).toContain(`--- PASS: ${name}`);
        }
      } finally {
        await control.close();
        certs.remove();
      }
    },
    300_000,
  );

  it(
    "runs the example agent program from a module outside the repository (clients/go and gen/go through replaces)",
    async () => {
      goVersion();
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-go-user-"));
      const hub = await serveCli(["--port", "0", "--data-path", path.join(dir, "kxm.db"), "--log-path", "-"]);
      try {
        fs.copyFileSync(path.join(goDir, "../../../examples/go/main.go"), path.join(dir, "main.go"));
        fs.writeFileSync(
          path.join(dir, "go.mod"),
          // As clients/go/README.md tells a user: require the library, replace both modules (the
          // library's own replace of gen/go is ignored outside its module).
          `module agent\n\ngo 1.26.0\n\nrequire github.com/kxm-dev/kxm-hub/clients/go v0.0.0\n\n` +
            `replace github.com/kxm-dev/kxm-hub/clients/go => ${path.resolve(goDir, "../../../clients/go")}\n\n` +
            `replace github.com/kxm-dev/kxm-hub/gen/go => ${path.resolve(goDir, "../../../gen/go")}\n`,
        );
        const env = { ...process.env, GOWORK: "off", GOFLAGS: "-mod=mod" };
        const tidy = await run("go", ["mod", "tidy"], { cwd: dir, env, timeoutMs: GO_TIMEOUT_MS });
        expect(tidy.code, tidy.output).toBe(0);
        const r = await run("go", ["run", "."], { cwd: dir, env: { ...env, KXM_URL: hub.url, WORK: "1500ms" }, timeoutMs: GO_TIMEOUT_MS });
        expect(r.code, r.output).toBe(0);
        expect(r.output).toContain("commit to main with fencing token 1");
        expect(r.output).toContain('reviewer replied to "pushed main at token 1"');
        expect(r.output).toContain('builder read the reply "reviewed: pushed main at token 1"');

        // The TLS example (examples/go/tls) against a hub with mutual TLS.
        fs.mkdirSync(path.join(dir, "tls"));
        fs.copyFileSync(path.join(goDir, "../../../examples/go/tls/main.go"), path.join(dir, "tls", "main.go"));
        const certs = makeCerts();
        try {
          await using hubs = await tlsHubs(certs);
          const { KXM_MTLS_HUB_URL, ...files } = hubs.env;
          const tls = await run("go", ["run", "./tls"], { cwd: dir, env: { ...env, ...files, KXM_URL: KXM_MTLS_HUB_URL }, timeoutMs: GO_TIMEOUT_MS });
          expect(tls.code, tls.output).toBe(0);
          expect(tls.output).toContain("deploying with fencing token 1");
        } finally {
          certs.remove();
        }
      } finally {
        await hub.stop();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
    300_000,
  );
});
