import { spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControl } from "../fixtures/control.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

// The issue #5 scenario in Python: the generated package (gen/python, pip-installed into
// .venv-clients by test/clients/python/setup.sh) against an in-process test hub, under pytest.

const root = path.resolve(import.meta.dirname, "../..");
const python = path.join(root, ".venv-clients", "bin", "python");

interface Run {
  code: number | null;
  output: string;
  ms: number;
}

/** Runs a command to completion without blocking the event loop (the hub lives in this process). */
function run(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
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

  beforeAll(async () => {
    const probe = await run("python3", ["--version"]).catch((e: Error) => ({ code: -1, output: e.message, ms: 0 }));
    if (probe.code !== 0) throw new Error(`python3 is required for the Python client tests: ${probe.output.trim()}`);
    const setup = await run("bash", ["test/clients/python/setup.sh"], {}, 300_000);
    console.log(`setup.sh (${setup.ms} ms)${setup.output ? `:\n${setup.output}` : ""}`);
    if (setup.code !== 0) throw new Error(`test/clients/python/setup.sh exited ${setup.code}:\n${setup.output}`);
    t = await startTestHub({ config: { projectTokens: { clients: "tok-clients" } } });
    control = await startControl(t);
  }, 330_000);

  afterAll(async () => {
    await control?.close();
    await t?.close();
  });

  it("runs the scenario under pytest", async () => {
    const res = await run(
      python,
      ["-m", "pytest", "-v", "-p", "no:cacheprovider", "test/clients/python"],
      {
        KXM_HUB_URL: t.baseUrl,
        KXM_CONTROL_URL: control.url,
        KXM_PROJECT_TOKEN: "tok-clients",
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
      "test_inbox_acks_replies_and_ends_on_cancel_without_reconnecting",
    ]) {
      expect(res.output).toContain(`test_library.py::${name} PASSED`);
    }
    expect(res.output).toMatch(/=+ 8 passed in [\d.]+s/);
  }, 180_000);
});
