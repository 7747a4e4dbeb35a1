import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { startControl } from "../fixtures/control.js";
import { serveCli } from "../fixtures/cli.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

// The issue #5 scenario in Python: the generated package (gen/python, kxm-hub-proto) and the
// library (clients/python, kxm-hub-client), pip-installed into .venv-clients by
// test/clients/python/setup.sh, against an in-process test hub, under pytest; test_tls.py against
// two more, one with TLS and one with mutual TLS.

const root = path.resolve(import.meta.dirname, "../..");
const python = path.join(root, ".venv-clients", "bin", "python");

interface Run {
  code: number | null;
  output: string;
  ms: number;
}

/** Runs a command to completion without blocking the event loop (the hub lives in this process). */
function run(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000, cwd = root): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`${cmd}: ${e.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output, ms: Date.now() - started });
    });
  });
}

describe("python client (kxm-hub-client + connectrpc)", () => {
  let t: TestHub;
  let control: Awaited<ReturnType<typeof startControl>>;
  let certs: TestCerts;
  let tlsHub: TestHub;
  let mtlsHub: TestHub;

  beforeAll(async () => {
    const probe = await run("python3", ["--version"]).catch((e: Error) => ({ code: -1, output: e.message, ms: 0 }));
    if (probe.code !== 0) throw new Error(`python3 is required for the Python client tests: ${probe.output.trim()}`);
    const setup = await run("bash", ["test/clients/python/setup.sh"], {}, 300_000);
    console.log(`setup.sh (${setup.ms} ms)${setup.output ? `:\n${setup.output}` : ""}`);
    if (setup.code !== 0) throw new Error(`test/clients/python/setup.sh exited ${setup.code}:\n${setup.output}`);
    t = await startTestHub({ config: { projectTokens: { clients: "tok-clients" } } });
    control = await startControl(t);
    certs = makeCerts();
    const tls = { tlsCert: certs.server.cert, tlsKey: certs.server.key, projectTokens: { clients: "tok-clients" }, cleanupIntervalMs: 3_600_000 };
    tlsHub = await startTestHub({ config: tls });
    mtlsHub = await startTestHub({ config: { ...tls, tlsClientCa: certs.ca.cert } });
  }, 330_000);

  afterAll(async () => {
    await control?.close();
    await t?.close();
    await tlsHub?.close();
    await mtlsHub?.close();
    certs?.remove();
  });

  const tlsFiles = () => ({ KXM_TLS_CA: certs.ca.cert, KXM_TLS_CLIENT_CERT: certs.client.cert, KXM_TLS_CLIENT_KEY: certs.client.key });

  it("runs the scenario under pytest", async () => {
    const res = await run(
      python,
      ["-m", "pytest", "-v", "-p", "no:cacheprovider", "test/clients/python"],
      {
        KXM_HUB_URL: t.baseUrl,
        KXM_CONTROL_URL: control.url,
        KXM_PROJECT_TOKEN: "tok-clients",
        KXM_TLS_HUB_URL: tlsHub.baseUrl,
        KXM_MTLS_HUB_URL: mtlsHub.baseUrl,
        ...tlsFiles(),
        // The outage tests start, SIGKILL and restart `kxm-hub serve` themselves.
        KXM_NODE: process.execPath,
        KXM_HUB_BIN: path.join(root, "bin", "kxm-hub.mjs"),
        NO_PROXY: "127.0.0.1,localhost",
        PYTHONDONTWRITEBYTECODE: "1",
      },
      150_000,
    );
    console.log(`pytest (${res.ms} ms, exit ${res.code}):\n${res.output}`);
    expect(res.code, res.output).toBe(0);
    expect(res.output).toMatch(/test_scenario\.py::test_scenario\[connect\] PASSED/);
    expect(res.output).toMatch(/test_scenario\.py::test_scenario\[grpc\] PASSED/);
    expect(res.output).toMatch(/test_scenario\.py::test_scenario\[grpc_web\] PASSED/);
    for (const name of [
      "test_renewals_keep_a_lease_through_three_ttls",
      "test_a_superseded_holder_is_told_it_lost_the_lease",
      "test_blocking_acquire_hands_over_to_five_waiters_in_order_with_one_call_each",
      "test_typed_errors_carry_the_code_and_the_lease",
      "test_the_session_is_lost_when_the_hub_refuses_its_heartbeat",
      "test_inbox_acks_replies_and_ends_on_cancel_without_reconnecting",
      "test_outage.py::test_lease_through_a_short_outage_and_lost_before_its_ttl_in_a_long_one",
      "test_outage.py::test_inbox_loses_and_repeats_nothing_through_subscriber_too_slow_and_a_restart",
      "test_outage.py::test_inbox_resumes_where_its_stream_stood_not_after_its_last_message",
      "test_a_waiter_granted_after_more_than_two_ttls_keeps_the_lease_renewed",
      "test_await_reply_returns_a_reply_that_came_before_the_call",
      "test_await_reply_waits_for_a_reply_that_comes_after_the_call",
      "test_await_reply_reads_again_after_a_dropped_stream",
      "test_await_reply_ends_without_a_reply_and_closes_its_stream_on_cancel",
      "test_takeover_replaces_an_online_instance_at_once",
      "test_ttl_and_wait_errors_speak_in_seconds",
      "test_a_second_acquire_of_a_held_lease_is_refused",
      "test_a_lease_granted_to_an_acquire_whose_answer_never_came_is_released",
      "test_an_unanswered_acquire_leaves_no_orphan_when_another_acquire_of_the_name_was_in_flight",
      "test_an_acquire_that_waited_for_a_look_counts_its_ttl_from_its_send",
      "test_close_while_another_task_reads_the_inbox_ends_that_read_and_unregisters",
      "test_a_lease_is_lost_with_its_session_when_the_agent_is_taken_over",
      "test_tls.py::test_tls_hub_with_its_ca[connect]",
      "test_tls.py::test_tls_hub_with_its_ca[grpc]",
      "test_tls.py::test_tls_hub_without_its_ca_or_with_an_unreadable_one",
      "test_tls.py::test_mutual_tls_hub_served_with_its_client_certificate_only",
      "test_tls.py::test_tls_files_with_an_http_url_are_refused",
      "test_answers.py::test_a_hub_refusal_naming_a_corruptmessage_lease_is_not_taken_for_a_tls_failure",
      "test_answers.py::test_await_reply_on_a_message_this_agent_did_not_send_is_forbidden",
      "test_answers.py::test_payload_too_large_is_not_transient",
      "test_answers.py::test_retrying_an_acquire_whose_answer_was_lost_never_renews_an_orphan_forever",
      "test_answers.py::test_a_session_whose_connection_went_silent_is_lost_after_three_unanswered_heartbeats",
      "test_answers.py::test_a_rate_limited_renewal_waits_out_retry_after_ms",
      "test_answers.py::test_calls_and_inboxes_of_a_closed_session_raise_closed_not_transient",
      "test_answers.py::test_a_call_cut_as_canceled_from_the_hubs_side_is_transient_and_the_inbox_reads_on",
      "test_back_off_pauses_are_jittered_between_half_and_all_of_the_pause",
    ]) {
      expect(res.output).toContain(`${name.includes("::") ? name : `test_library.py::${name}`} PASSED`);
    }
    expect(res.output).toMatch(/=+ 40 passed in [\d.]+s/);
  }, 180_000);

  it("builds the two packages as wheels, installs them into a fresh venv outside the repository and runs the example on them", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-py-user-"));
    const hub = await serveCli(["--port", "0", "--data-path", path.join(dir, "kxm.db"), "--log-path", "-"]);
    try {
      // Copies of gen/python (kxm-hub-proto) and clients/python (kxm-hub-client), so no build
      // byproducts land in the repository.
      const noByproducts = (f: string) => !/__pycache__|\.egg-info|\/build$/.test(f);
      const sources = [path.join(dir, "src", "proto"), path.join(dir, "src", "client")];
      fs.cpSync(path.join(root, "gen", "python"), sources[0], { recursive: true, filter: noByproducts });
      fs.cpSync(path.join(root, "clients", "python"), sources[1], { recursive: true, filter: noByproducts });
      const wheel = await run(python, ["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", path.join(dir, "dist"), ...sources], {}, 300_000);
      expect(wheel.code, wheel.output).toBe(0);
      const built = fs.readdirSync(path.join(dir, "dist")).filter((f) => f.endsWith(".whl")).sort();
      expect(built).toEqual([expect.stringMatching(/^kxm_hub_client-/), expect.stringMatching(/^kxm_hub_proto-/)]);
      const venv = path.join(dir, "venv");
      expect((await run("python3", ["-m", "venv", venv], {}, 120_000, dir)).code).toBe(0);
      const userPython = path.join(venv, "bin", "python");
      // Both wheels in one install: kxm-hub-client's requirement on kxm-hub-proto is met by the
      // other wheel, its other dependencies come from the index.
      const wheels = built.map((f) => path.join(dir, "dist", f));
      const install = await run(userPython, ["-m", "pip", "install", "-q", "--disable-pip-version-check", ...wheels], {}, 300_000, dir);
      expect(install.code, install.output).toBe(0);
      // What the library imports, each from a distribution it declares (not one that another
      // dependency happens to bring).
      const declared = await run(userPython, [path.join(root, "test", "clients", "python", "check_declared.py")], {}, 60_000, dir);
      expect(declared.code, declared.output).toBe(0);
      expect(declared.output).toContain("pyqwest: pyqwest");
      fs.copyFileSync(path.join(root, "examples", "python", "agent.py"), path.join(dir, "agent.py"));
      const r = await run(userPython, ["agent.py"], { KXM_URL: hub.url, WORK_S: "1.5" }, 60_000, dir);
      expect(r.code, r.output).toBe(0);
      expect(r.output).toContain("commit to main with fencing token 1");
      expect(r.output).toContain('reviewer replied to "pushed main at token 1"');
      expect(r.output).toContain('builder read the reply "reviewed: pushed main at token 1"');

      // The TLS example against the hub with mutual TLS.
      fs.copyFileSync(path.join(root, "examples", "python", "tls.py"), path.join(dir, "tls.py"));
      const tls = await run(userPython, ["tls.py"], { KXM_URL: mtlsHub.baseUrl, KXM_TOKEN: "", ...tlsFiles() }, 60_000, dir);
      expect(tls.code, tls.output).toBe(0);
      expect(tls.output).toContain("deploying with fencing token 1");
    } finally {
      await hub.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});
