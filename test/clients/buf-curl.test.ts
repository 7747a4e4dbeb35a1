import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");

/** The `npx buf curl` commands of the README's buf curl section, continuation lines joined. */
function readmeCommands(): string[] {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Take a lease with `buf curl`"), readme.indexOf("## Configuration"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .filter((line) => line.startsWith("npx buf curl"));
}

describe("the README's buf curl examples", () => {
  it("register, acquire over Connect and gRPC, use reflection, and read as an operator against a running hub", async () => {
    await using t = await startTestHub();
    const commands = readmeCommands();
    expect(commands).toHaveLength(8);
    const env: NodeJS.ProcessEnv = { ...process.env };
    const sh = async (command: string) => {
      const { stdout } = await run("bash", ["-c", command.replaceAll("http://127.0.0.1:7331", t.baseUrl)], {
        cwd: root,
        env,
      });
      return stdout;
    };

    const registered = JSON.parse(await sh(commands[0]!)) as { agent: { id: string }; agentKey: string };
    env.AGENT_ID = registered.agent.id;
    env.AGENT_KEY = registered.agentKey;

    const acquired = JSON.parse(await sh(commands[1]!));
    expect(acquired.lease).toMatchObject({ resource: "demo/repo/main", fencingToken: "1", holderAgentName: "builder" });

    const read = JSON.parse(await sh(commands[2]!));
    expect(read).toMatchObject({ lease: { name: "repo/main", fencingToken: "1" } });

    const services = (await sh(commands[3]!)).trim().split("\n");
    expect(services).toEqual([
      "grpc.reflection.v1.ServerReflection",
      "kxm.hub.v1.LeaseService",
      "kxm.hub.v1.OpsService",
      "kxm.hub.v1.PeerService",
      "kxm.hub.v1.PresenceService",
      "kxm.hub.v1.SyncService",
    ]);

    const listed = JSON.parse(await sh(commands[4]!));
    expect(listed.leases).toEqual([expect.objectContaining({ name: "repo/main", holderAgentId: registered.agent.id })]);

    // Operator reads: no agent identity (a loopback hub without an admin token trusts its callers).
    const held = JSON.parse(await sh(commands[5]!));
    expect(held).toMatchObject({ lease: { project: "demo", name: "repo/main", holderAgentName: "builder" } });
    const agents = JSON.parse(await sh(commands[6]!));
    expect(agents.agents).toEqual([expect.objectContaining({ id: registered.agent.id, name: "builder" })]);
    const projects = JSON.parse(await sh(commands[7]!));
    expect(projects.projects).toEqual([{ project: "demo", agents: 1, onlineAgents: 1, heldLeases: 1 }]);
  }, 60_000);
});
