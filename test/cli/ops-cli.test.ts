import net from "node:net";
import { describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../fixtures/cli.js";
import { jsonOf, startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub ops` (issue 20): the operator's hands on the command line, run as the command against
 * a real hub. A project and a lease name holding `/` show that path segments are encoded.
 * Exit codes: 0 done, 1 refused by the hub (its code on stderr), 2 usage, 3 unreachable.
 */

const PROJECT = "org/repo";
const LEASE = "repo/main";
const seg = encodeURIComponent;

const ops = (t: TestHub, args: string[], env: Record<string, string> = {}) => runCli(["ops", ...args, "--url", t.baseUrl], { env });

/** The one stderr line of a refusal: `kxm-hub: <code>: <message>`, nothing on stdout unless --json. */
function expectFailure(r: CliResult, exitCode: number, code: string): void {
  expect(r.code, r.stderr).toBe(exitCode);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^kxm-hub: ${code}: \\S`));
}

const acquire = (t: TestHub, as: AgentCreds, body: Record<string, unknown>) =>
  t.rest(`/v1/leases/${seg(LEASE)}/acquire`, { headers: as.headers, json: { ttlMs: 60_000, ...body } });

interface LeaseJson {
  holderAgentId: string;
  fencingToken: number;
  expiresAt: string;
  waiters: { agentId: string; since: string }[];
}

const leases = async (t: TestHub): Promise<LeaseJson[]> => (await jsonOf(await t.rest(`/v1/leases?project=${seg(PROJECT)}`))).leases;

/** Waits (no sleeps: asks the hub) until the lease has `n` waiters. */
async function waitersReach(t: TestHub, n: number): Promise<LeaseJson> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const lease = (await leases(t))[0];
    if (lease && lease.waiters.length === n) return lease;
    if (Date.now() > deadline) throw new Error(`the lease never had ${n} waiters: ${JSON.stringify(lease)}`);
  }
}

/** alpha holds repo/main (token 1); beta waits for it, its acquire still in flight. */
async function heldWithWaiter(t: TestHub) {
  const alpha = await t.register("alpha", PROJECT);
  const beta = await t.register("beta", PROJECT);
  expect((await acquire(t, alpha, {})).status).toBe(200);
  const waiting = acquire(t, beta, { waitMs: 600_000 });
  waiting.catch(() => undefined); // a test that does not await it ends with the hub, not an unhandled rejection
  const lease = await waitersReach(t, 1);
  return { alpha, beta, waiting, lease };
}

describe("kxm-hub ops", () => {
  it("ops leases shows each lease's holder, token, expiry and waiters; --json the hub's JSON", async () => {
    await using t = await startTestHub();
    const { alpha, beta, lease } = await heldWithWaiter(t);
    const r = await ops(t, ["leases", "--project", PROJECT]);
    expect(r.code, r.stderr).toBe(0);
    const [head, row, waiter] = r.stdout.trimEnd().split("\n");
    expect(head).toMatch(/^NAME\s+HOLDER\s+TOKEN\s+EXPIRES\s+WAITERS$/);
    expect(row!.split(/\s{2,}/)).toEqual([LEASE, `alpha (${alpha.id})`, "1", lease.expiresAt, "1"]);
    expect(waiter).toMatch(new RegExp(`^ {2}waiter 1: beta \\(${beta.id}\\) since ${lease.waiters[0]!.since}, waits until \\S+$`));

    const json = await ops(t, ["leases", "--project", PROJECT, "--json"]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ leases: await leases(t) });
  });

  it("ops release-lease refuses a stale token (exit 1, the hub's code), then hands the lease to the waiter at token + 1", async () => {
    await using t = await startTestHub();
    const { alpha, beta, waiting } = await heldWithWaiter(t);

    const stale = await ops(t, ["release-lease", "--project", PROJECT, LEASE, "--fencing-token", "7"]);
    expectFailure(stale, 1, "lease_superseded");
    expect(stale.stdout).toBe("");
    const staleJson = await ops(t, ["release-lease", "--project", PROJECT, LEASE, "--fencing-token", "7", "--json"]);
    expectFailure(staleJson, 1, "lease_superseded");
    expect(JSON.parse(staleJson.stdout)).toMatchObject({ code: "lease_superseded", lease: { fencingToken: 1 } });
    expect((await leases(t))[0]).toMatchObject({ holderAgentId: alpha.id, fencingToken: 1 });

    const r = await ops(t, ["release-lease", "--project", PROJECT, LEASE, "--fencing-token", "1"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`released ${LEASE} in ${PROJECT}: token 1, held by alpha (${alpha.id})\n`);
    expect(r.stdout).toContain(`granted to the first waiter, beta (${beta.id}): token 2, expires `);
    const granted = await waiting;
    expect(granted.status).toBe(200);
    expect((await jsonOf(granted)).lease).toMatchObject({ holderAgentId: beta.id, fencingToken: 2 });
    // The old holder's next renew is refused: the floor stayed.
    const renew = await t.rest(`/v1/leases/${seg(LEASE)}/renew`, { headers: alpha.headers, json: { fencingToken: 1, ttlMs: 60_000 } });
    expect((await jsonOf(renew)).code).toBe("lease_superseded");

    // Nothing held any more once beta's lease is released too: lease_not_found, exit 1.
    expect((await ops(t, ["release-lease", "--project", PROJECT, LEASE, "--json"])).code).toBe(0);
    expectFailure(await ops(t, ["release-lease", "--project", PROJECT, LEASE]), 1, "lease_not_found");
  });

  it("ops evict takes an agent offline and its key is refused; its lease goes to the waiter", async () => {
    await using t = await startTestHub();
    const { alpha, beta, waiting } = await heldWithWaiter(t);
    const r = await ops(t, ["evict", "--project", PROJECT, alpha.id]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(
      `evicted alpha (${alpha.id}) from ${PROJECT}: offline, its key is refused from now on\nreleased 1 lease: ${LEASE} (token 1)\n`,
    );
    const agents = (await jsonOf(await t.rest(`/v1/agents?project=${seg(PROJECT)}&includeOffline=true`))).agents as { id: string; online: boolean }[];
    expect(agents.find((a) => a.id === alpha.id)?.online).toBe(false);
    const heartbeat = await t.rest(`/v1/agents/${alpha.id}/heartbeat`, { headers: alpha.headers, json: {} });
    expect(heartbeat.status).toBe(401);
    expect((await jsonOf(heartbeat)).code).toBe("invalid_agent_identity");
    expect((await jsonOf(await waiting)).lease).toMatchObject({ holderAgentId: beta.id, fencingToken: 2 });

    expectFailure(await ops(t, ["evict", "--project", PROJECT, "agt_nobody"]), 1, "target_not_found");
  });

  it("sends --token or KXM_TOKEN as the bearer token, and finds the hub through KXM_URL", async () => {
    await using t = await startTestHub({ config: { authToken: "admin-secret", projectTokens: { [PROJECT]: "project-secret" } } });
    await t.register("alpha", PROJECT, "project-secret");
    const list = (env: Record<string, string>, args: string[] = []) =>
      runCli(["ops", "leases", "--project", PROJECT, ...args], { env: { KXM_URL: t.baseUrl, ...env } });
    expectFailure(await list({}), 1, "invalid_auth");
    expectFailure(await list({ KXM_TOKEN: "wrong" }), 1, "invalid_auth");
    // An operator's call takes the admin token or the project's own.
    for (const token of ["admin-secret", "project-secret"]) {
      expect((await list({ KXM_TOKEN: token })).stdout, token).toBe(`no live leases in project ${PROJECT}\n`);
    }
    expect((await list({ KXM_TOKEN: "wrong" }, ["--token", "project-secret"])).code).toBe(0);
  });

  it.each([
    [["leases"], "--project is required"],
    [["release-lease", "--project", PROJECT], "expected one <name>, got 0"],
    [["release-lease", "--project", PROJECT, "a", "b"], "expected one <name>, got 2"],
    [["release-lease", "--project", PROJECT, "a", "--fencing-token", "0"], "--fencing-token must be an integer"],
    [["release-lease", "--project", PROJECT, "a", "--fencing-token", "x"], "--fencing-token must be an integer"],
    [["leases", "--project", PROJECT, "extra"], "unexpected argument"],
    [["leases", "--project", PROJECT, "--nope"], "--nope"],
    [["evict", "--project", PROJECT, "a", "--fencing-token", "1"], "--fencing-token"],
    [["purge", "--project", PROJECT], "unknown ops subcommand"],
    [["leases", "--project", PROJECT, "--url", "ftp://hub"], "--url must start with http"],
    [["leases", "--project", PROJECT, "--token", "t\u00e9"], "--token (KXM_TOKEN) must be printable ASCII"],
    [[], "a subcommand is required"],
  ])("refuses %j as a usage error (exit 2)", async (args, message) => {
    const r = await runCli(["ops", ...args]);
    expectFailure(r, 2, "usage_error");
    expect(r.stderr).toContain(message);
  });

  it("writes no control character an agent chose (escape sequences, carriage returns, BEL) to the operator's terminal", async () => {
    await using t = await startTestHub();
    // A name stored before names refused control characters (D74): written into the store.
    const evil = await t.register("evil", "p");
    (t.hub.store as unknown as { db: { prepare(q: string): { run(...p: unknown[]): unknown } } }).db
      .prepare("UPDATE agents SET name = ? WHERE id = ?")
      .run("evil\u001b[2J\u001b[H\rNAME  HOLDER", evil.id);
    const res = await t.rest(`/v1/leases/${encodeURIComponent("db\u001b]52;c;cm0gLXJmIH4K\u0007")}/acquire`, { headers: evil.headers, json: { ttlMs: 60_000 } });
    expect(res.status).toBe(200);
    const leases = await runCli(["ops", "leases", "--project", "p", "--url", t.baseUrl]);
    expect(leases.code, leases.stderr).toBe(0);
    expect(leases.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(leases.stdout).toContain("db\\u001b]52;c;cm0gLXJmIH4K\\u0007");
    const evicted = await runCli(["ops", "evict", "--project", "p", evil.id, "--url", t.baseUrl]);
    expect(evicted.code, evicted.stderr).toBe(0);
    expect(evicted.stdout).toMatch(/^evicted evil\\u001b\[2J\\u001b\[H\\u000dNAME  HOLDER \(/);
  });

  it("refuses a --url with a user name or password (exit 2) and never prints it", async () => {
    for (const args of [["ops", "leases", "--project", "p"], ["agents"]]) {
      const r = await runCli([...args, "--url", "http://operator:s3cret-proxy-pw@127.0.0.1:9/"], { env: { KXM_PROJECT: "p", KXM_AGENT: "a" } });
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(/--url.* carries a user name or password/);
      expect(r.stderr + r.stdout).not.toContain("s3cret-proxy-pw");
    }
  });

  it("exits 3 when no hub answers at the URL", async () => {
    // A port that was free a moment ago: nothing listens on it.
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const r = await runCli(["ops", "leases", "--project", PROJECT, "--url", `http://127.0.0.1:${port}`]);
    expectFailure(r, 3, "hub_unreachable");
    expect(r.stderr).toContain("ECONNREFUSED");
  });

  it("documents its subcommands, flags and exit codes", async () => {
    const r = await runCli(["ops", "--help"]);
    expect(r.code).toBe(0);
    for (const s of ["ops leases", "ops release-lease", "ops evict", "--url <url>", "KXM_URL", "KXM_TOKEN", "--json", "Exit codes"]) {
      expect(r.stdout).toContain(s);
    }
    expect((await runCli(["--help"])).stdout).toContain("kxm-hub ops leases|release-lease|evict");
  });
});
