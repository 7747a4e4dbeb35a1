import { spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

// The MCP face (/mcp) through clients that are not the hub's own: the Python `mcp` SDK (under
// pytest, in .venv-clients made by test/clients/python/setup.sh) and the MCP inspector's CLI
// (@modelcontextprotocol/inspector-cli, built on the TypeScript SDK v1), against an in-process
// test hub whose project has a token.

const root = path.resolve(import.meta.dirname, "../..");
const python = path.join(root, ".venv-clients", "bin", "python");
const project = "p";
const token = "tok-mcp";

const tools = ["ack_message", "acquire_lease", "cancel_message", "get_lease", "get_message", "list_agents", "list_leases", "release_lease", "renew_lease", "reply_message", "send_message", "whoami"];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved, for failure messages. */
  output: string;
  ms: number;
}

/** Runs a command to completion without blocking the event loop (the hub lives in this process). */
function run(cmd: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000, cwd = root): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let output = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c.toString();
      output += c.toString();
    });
    child.stderr.on("data", (c: Buffer) => {
      stderr += c.toString();
      output += c.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`${cmd}: ${e.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, output, ms: Date.now() - started });
    });
  });
}

describe("MCP face through the Python SDK and the inspector CLI", () => {
  let t: TestHub;

  beforeAll(async () => {
    const probe = await run("python3", ["--version"]).catch((e: Error) => ({ code: -1, output: e.message }));
    if (probe.code !== 0) throw new Error(`python3 is required for the Python MCP client test: ${probe.output.trim()}`);
    // The first run makes the venv and installs the pins (mcp and its dependencies among them).
    const setup = await run("bash", ["test/clients/python/setup.sh"], {}, 300_000);
    console.log(`setup.sh (${setup.ms} ms)${setup.output ? `:\n${setup.output}` : ""}`);
    if (setup.code !== 0) throw new Error(`test/clients/python/setup.sh exited ${setup.code}:\n${setup.output}`);
    t = await startTestHub({ config: { projectTokens: { [project]: token } } });
  }, 330_000);

  afterAll(async () => {
    await t?.close();
  });

  it("runs the Python MCP scenario under pytest", async () => {
    const res = await run(
      python,
      ["-m", "pytest", "-v", "-p", "no:cacheprovider", "test/clients/python/test_mcp.py"],
      {
        KXM_MCP_URL: `${t.baseUrl}/mcp`,
        KXM_MCP_PROJECT: project,
        KXM_MCP_TOKEN: token,
        NO_PROXY: "127.0.0.1,localhost",
        PYTHONDONTWRITEBYTECODE: "1",
      },
      150_000,
    );
    console.log(`pytest (${res.ms} ms, exit ${res.code}):\n${res.output}`);
    expect(res.code, res.output).toBe(0);
    for (const name of [
      "test_tools_are_listed",
      "test_lease_handover_stale_token_and_mail",
      "test_closing_a_session_releases_its_agents_leases_at_once",
      "test_a_wrong_token_is_refused_at_initialize_with_http_401",
      "test_a_negotiating_client_lands_on_2026_07_28_and_acts_as_its_headers_agent",
    ]) {
      expect(res.output).toContain(`test_mcp.py::TestMcpFace::${name} PASSED`);
    }
    expect(res.output).toMatch(/=+ 5 passed in [\d.]+s/);
  }, 180_000);

  it("lists the tools to the MCP inspector's CLI", async () => {
    // The devDependency's bin (npx finds it in node_modules/.bin). The inspector ends without
    // DELETE: its agent stays online until the session idles out.
    // It runs from test/: inspector-cli 1.0.3 reads its own package.json with
    // `import(fs.existsSync("../package.json") ? "../package.json" : "../../package.json")`, where
    // existsSync looks from the working directory but import resolves from its build/ directory.
    // From the repository root the check fails (unless the checkout's parent has a package.json)
    // and the import looks for node_modules/@modelcontextprotocol/package.json, which does not
    // exist; from test/ the check finds the repository's package.json and the import loads the
    // inspector's own.
    const res = await run(
      "npx",
      [
        "mcp-inspector-cli",
        "--cli",
        `${t.baseUrl}/mcp`,
        "--transport",
        "http",
        "--method",
        "tools/list",
        "--header",
        `Authorization: Bearer ${token}`,
        "--header",
        `X-Kxm-Project: ${project}`,
        "--header",
        "X-Kxm-Agent: inspector",
      ],
      {},
      120_000,
      path.join(root, "test"),
    );
    expect(res.code, res.output).toBe(0);
    const listed = JSON.parse(res.stdout) as { tools: { name: string; inputSchema: { type: string } }[] };
    // The twelve tools of the face's first part, among whatever later parts add.
    expect(listed.tools.map((x) => x.name)).toEqual(expect.arrayContaining(tools));
    for (const tool of listed.tools) expect(tool.inputSchema.type, tool.name).toBe("object");

    // The inspector's session acts as its agent, in the project of its headers.
    const agents = await t.rest(`/v1/agents?project=${project}`, { headers: { authorization: `Bearer ${token}` } });
    expect(agents.status).toBe(200);
    const online = ((await agents.json()) as { agents?: { name: string }[] }).agents ?? [];
    expect(online.map((a) => a.name)).toContain("inspector");
  }, 150_000);
});
