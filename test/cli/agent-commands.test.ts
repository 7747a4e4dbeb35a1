import { spawn } from "node:child_process";
import net from "node:net";
import { describe, expect, it } from "vitest";
import { bin, repo, runCli, type CliResult } from "../fixtures/cli.js";
import { jsonOf, startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * The agent commands (issue 22, item 3) run as the command against a real hub: `agents`, `send`,
 * `inbox`, `reply` and the one-shot `lease` subcommands, configured by KXM_ variables, each
 * one-shot command registering (or resuming) its agent and unregistering it at its end.
 * Exit codes: 0 done, 1 refused by the hub, 2 usage, 3 unreachable, 4 a fence token not valid.
 */

const PROJECT = "org/repo";
const LEASE = "repo/main";

const as = (t: TestHub, agent: string | undefined, args: string[]) =>
  runCli(args, { env: { KXM_URL: t.baseUrl, KXM_PROJECT: PROJECT, ...(agent !== undefined && { KXM_AGENT: agent }) } });

/** The one stderr line of a refusal: `kxm-hub: <code>: <message>`. */
function expectFailure(r: CliResult, exitCode: number, code: string): void {
  expect(r.code, r.stderr).toBe(exitCode);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^kxm-hub: ${code}: \\S`));
}

function ok(r: CliResult): string {
  expect(r.code, r.stderr).toBe(0);
  return r.stdout;
}

describe("kxm-hub agent commands", () => {
  it("agents lists the project's agents; --all adds offline ones; --json is the hub's answer", async () => {
    await using t = await startTestHub();
    const alpha = await t.register("alpha", PROJECT);
    ok(await as(t, "beta", ["inbox"])); // beta registers, then goes offline
    const text = ok(await as(t, undefined, ["agents"]));
    expect(text.split("\n")[0]).toMatch(/^NAME\s+PRESENCE\s+HOST\s+PURPOSE\s+ID$/);
    expect(text).toMatch(new RegExp(`^alpha\\s+online\\s+.*${alpha.id}$`, "m"));
    expect(text).not.toContain("beta");
    const all = JSON.parse(ok(await as(t, undefined, ["agents", "--all", "--json"]))) as { agents: { name: string; online: boolean }[] };
    expect(all.agents.map((a) => [a.name, a.online])).toEqual([
      ["alpha", true],
      ["beta", false],
    ]);
  });

  it("inbox reads on past a page of events that are no longer pending: mail after 100 replied messages is listed", async () => {
    await using t = await startTestHub();
    const alpha = await t.register("alpha", PROJECT);
    const beta = await t.register("beta", PROJECT);
    for (let i = 0; i < 100; i++) {
      const sent = await jsonOf(await t.rest("/v1/messages", { json: { target: "beta", content: `m${i}` }, headers: alpha.headers }));
      // A reply does not acknowledge: the message's event stays in the inbox, no longer pending.
      expect((await t.rest(`/v1/messages/${sent.message.id}/reply`, { json: { content: "ok" }, headers: beta.headers })).status).toBe(200);
    }
    await t.rest("/v1/messages", { json: { target: "beta", content: "the new one" }, headers: alpha.headers });
    expect((await t.rest(`/v1/agents/${beta.id}`, { method: "DELETE", headers: beta.headers })).status).toBeLessThan(300);
    expect(ok(await as(t, "beta", ["inbox"]))).toMatch(/message .*the new one/);
  });

  it("send, inbox --ack, reply: a round trip between two agent names", async () => {
    await using t = await startTestHub();
    expect(ok(await as(t, "beta", ["inbox"]))).toBe("no pending mail\n");

    const sent = JSON.parse(ok(await as(t, "alpha", ["send", "beta", "please review", "--json"]))) as { id: string; status: string };
    expect(sent).toMatchObject({ status: "MESSAGE_STATUS_QUEUED" });

    const events = ok(await as(t, "beta", ["inbox", "--ack", "--json"]))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { kind: string; message: { id: string; fromName: string; content: string } });
    expect(events).toMatchObject([{ kind: "message", message: { id: sent.id, fromName: "alpha", content: "please review" } }]);
    // Acknowledged: not listed again.
    expect(ok(await as(t, "beta", ["inbox"]))).toBe("no pending mail\n");

    expect(ok(await as(t, "beta", ["reply", sent.id, "looks good"]))).toBe(`replied to ${sent.id} from alpha\n`);
    const mail = ok(await as(t, "alpha", ["inbox"]));
    expect(mail).toMatch(new RegExp(`^\\d+  reply  ${sent.id}  reply from beta to "please review": looks good$`, "m"));

    // A second reply is the hub's refusal, as one line with exit 1.
    expectFailure(await as(t, "beta", ["reply", sent.id, "again"]), 1, "duplicate_reply");
  });

  it("lease acquire prints the token; get and list show it; release frees it (--json parsed)", async () => {
    await using t = await startTestHub();
    expect(ok(await as(t, "alpha", ["lease", "acquire", LEASE, "--ttl", "1m"]))).toBe("1\n");

    const got = JSON.parse(ok(await as(t, undefined, ["lease", "get", LEASE, "--json"]))) as { lease: { holderAgentName: string; fencingToken: number }; expired: boolean };
    expect(got).toMatchObject({ lease: { holderAgentName: "alpha", fencingToken: 1 }, expired: false });
    const listed = JSON.parse(ok(await as(t, undefined, ["lease", "list", "--json"]))) as { leases: { name: string; fencingToken: number }[] };
    expect(listed.leases).toMatchObject([{ name: LEASE, fencingToken: 1 }]);

    // Held by alpha while it is offline: another agent is refused, alpha's next command renews it.
    expectFailure(await as(t, "beta", ["lease", "acquire", LEASE]), 1, "lease_held");
    const renewed = JSON.parse(ok(await as(t, "alpha", ["lease", "renew", LEASE, "--json"]))) as { lease: { fencingToken: string }; renewed: boolean };
    expect(renewed).toMatchObject({ lease: { fencingToken: "1" }, renewed: true });

    const released = JSON.parse(ok(await as(t, "alpha", ["lease", "release", LEASE, "--json"]))) as { released: boolean };
    expect(released.released).toBe(true);
    expect(JSON.parse(ok(await as(t, undefined, ["lease", "list", "--json"])))).toEqual({ leases: [] });
    expectFailure(await as(t, "alpha", ["lease", "release", LEASE]), 1, "lease_not_found");
    // The fence never restarts: the next grant is token 2.
    expect(ok(await as(t, "beta", ["lease", "acquire", LEASE]))).toBe("2\n");
  });

  it("lease release frees the agent's own lapsed lease without a token; lease renew of one says it lapsed", async () => {
    await using t = await startTestHub();
    expect(ok(await as(t, "alpha", ["lease", "acquire", LEASE, "--ttl", "5s"]))).toBe("1\n");
    t.clock.advance(6_000);
    expectFailure(await as(t, "alpha", ["lease", "renew", LEASE]), 1, "lease_expired");
    expect(JSON.parse(ok(await as(t, "alpha", ["lease", "release", LEASE, "--json"])))).toMatchObject({ released: true });
    expect(ok(await as(t, "beta", ["lease", "acquire", LEASE]))).toBe("2\n");
    // Another agent's lapsed lease is not alpha's to release without its token.
    t.clock.advance(3_600_000);
    expectFailure(await as(t, "alpha", ["lease", "release", LEASE]), 1, "lease_not_held");
  });

  it("lease check exits 0 for the current token and 4 with fence_rejected for a stale one", async () => {
    await using t = await startTestHub();
    // CheckFence is new; skip quietly on a hub that does not serve it yet.
    const probe = await t.rest(`/v1/leases/${encodeURIComponent(LEASE)}/check`, { json: { fencingToken: 1, project: PROJECT } });
    if (probe.status === 404 && (await jsonOf(probe)).code !== "lease_not_found") return;
    expect(ok(await as(t, "alpha", ["lease", "acquire", LEASE]))).toBe("1\n");
    expect(ok(await as(t, undefined, ["lease", "check", LEASE, "1"]))).toContain("valid");
    const stale = await as(t, undefined, ["lease", "check", LEASE, "2", "--json"]);
    expectFailure(stale, 4, "fence_rejected");
    expect(JSON.parse(stale.stdout)).toMatchObject({ valid: false, reason: "unknown" });
  });

  it("refuses a bad command line (exit 2) and an unreachable hub (exit 3), one stderr line each", async () => {
    await using t = await startTestHub();
    expectFailure(await as(t, "alpha", ["send", "beta"]), 2, "usage_error");
    expectFailure(await as(t, undefined, ["send", "beta", "hi"]), 2, "usage_error");
    expectFailure(await as(t, "alpha", ["lease", "acquire", LEASE, "--ttl", "soon"]), 2, "usage_error");
    const closed = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const env = { KXM_URL: `http://127.0.0.1:${closed}`, KXM_PROJECT: PROJECT, KXM_AGENT: "alpha" };
    expectFailure(await runCli(["send", "beta", "hi"], { env }), 3, "hub_unreachable");
    expectFailure(await runCli(["agents"], { env }), 3, "hub_unreachable");
    // --help on each command, with its exit codes.
    for (const args of [["agents"], ["send"], ["inbox"], ["reply"], ["lease", "acquire"], ["lease", "run"]]) {
      expect(ok(await as(t, undefined, [...args, "--help"]))).toMatch(/Exit codes/);
    }
  });

  it("a waiting lease acquire interrupted by SIGINT unregisters its agent first: the next command as it is not refused", async () => {
    await using t = await startTestHub();
    const holder = await t.register("holder", "p");
    expect((await t.rest("/v1/leases/L/acquire", { headers: holder.headers, json: { ttlMs: 300_000 } })).status).toBe(200);
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
    const env = { ...base, KXM_URL: t.baseUrl, KXM_PROJECT: "p", KXM_AGENT: "beta" };
    const child = spawn(process.execPath, [bin, "lease", "acquire", "L", "--wait", "60s"], { cwd: repo, env, stdio: ["ignore", "pipe", "pipe"] });
    const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
    // Until beta's call waits in the lease's queue.
    const deadline = performance.now() + 20_000;
    for (;;) {
      const leases = (await jsonOf(await t.rest("/v1/leases?project=p"))).leases as { name: string; waiters: unknown[] }[];
      if ((leases.find((l) => l.name === "L")?.waiters.length ?? 0) > 0) break;
      if (performance.now() > deadline) throw new Error("beta never waited");
      await new Promise((r) => setTimeout(r, 20));
    }
    child.kill("SIGINT");
    expect(await exited).toBe(130);
    const agents = (await jsonOf(await t.rest("/v1/agents?project=p&includeOffline=true"))).agents as { name: string; online?: boolean }[];
    expect(agents.find((a) => a.name === "beta")?.online ?? false).toBe(false);
    const next = await runCli(["inbox"], { env: { KXM_URL: t.baseUrl, KXM_PROJECT: "p", KXM_AGENT: "beta" } });
    expect({ code: next.code, stderr: next.stderr }).toEqual({ code: 0, stderr: "" });
  });
});

/**
 * What the agent commands print holds text other agents chose (lease names, purposes, hosts,
 * message content): control characters reach the terminal escaped (`\u001b`), as `kxm-hub ops`
 * writes them, never as a terminal's own escapes (a clipboard write, a cleared screen, a
 * carriage return forging a line).
 */
describe("kxm-hub agent commands and text other agents chose", () => {
  const ESC = "\u001b";
  const clipboard = `${ESC}]52;c;ZWNobyBwd25lZA==\u0007`;

  it("lease list and lease get escape a lease name's control characters", async () => {
    await using t = await startTestHub();
    const mallory = await t.register("mallory", PROJECT);
    const name = `x${clipboard}${ESC}[2J`;
    expect((await t.rest(`/v1/leases/${encodeURIComponent(name)}/acquire`, { headers: mallory.headers, json: { ttlMs: 60_000 } })).status).toBe(200);
    for (const args of [["lease", "list"], ["lease", "get", name]]) {
      const r = await as(t, undefined, args);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).not.toContain(ESC);
      expect(r.stdout).toContain("\\u001b");
    }
  });

  it("agents escapes a purpose's and a host's control characters", async () => {
    await using t = await startTestHub();
    const res = await t.rest("/v1/agents/register", { json: { name: "mallory", project: PROJECT, purpose: `p${clipboard}`, host: `h${ESC}[2J` } });
    expect(res.status).toBe(201);
    const r = await as(t, undefined, ["agents"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toContain(ESC);
    expect(r.stdout).toContain("\\u001b");
  });

  it("inbox escapes a message's control characters, a carriage return included", async () => {
    await using t = await startTestHub();
    const mallory = await t.register("mallory", PROJECT);
    const victim = await t.register("victim", PROJECT);
    expect((await t.rest(`/v1/agents/${victim.id}`, { method: "DELETE", headers: victim.headers })).status).toBeLessThan(300);
    const sent = await t.rest("/v1/messages", { json: { target: "victim", content: `hi\r${clipboard}forged line`, allowOffline: true }, headers: mallory.headers });
    expect(sent.status).toBe(202);
    const r = await as(t, "victim", ["inbox"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("forged line");
    expect(r.stdout).not.toContain(ESC);
    expect(r.stdout).not.toContain("\r");
  });
});
