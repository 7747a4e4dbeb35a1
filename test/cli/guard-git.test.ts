import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { leaseFor, parseRule } from "../../src/cli/guard-git-rules.js";
import { runCli } from "../fixtures/cli.js";
import { jsonOf, startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub guard git` (issue 22, item 4) as git runs it: a real bare repository with the hook
 * installed by `--install`, pushes from a clone over the local transport (which runs pre-receive),
 * leases on a real hub. A refused push leaves the remote ref where it was and shows one
 * `remote: kxm-hub: ...` line per refusal.
 */

const PROJECT = "org/repo";
const seg = encodeURIComponent;
const testTimeoutMs = 60_000;

interface Repo {
  bare: string;
  clone: string;
  /** The environment git runs with: a HOME of its own, no system config, no KXM_ or GIT_ variables. */
  env: Record<string, string>;
}

interface GitResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs git to its end, asynchronously: the hook it starts calls the hub in this very process. */
function git(repo: Repo, args: string[], cwd = repo.clone): Promise<GitResult> {
  const child = spawn("git", args, { cwd, env: repo.env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`git ${args.join(" ")} did not finish: ${stderr}`));
    }, 30_000);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

async function ok(repo: Repo, args: string[], cwd?: string): Promise<string> {
  const r = await git(repo, args, cwd);
  if (r.code !== 0) throw new Error(`git ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return r.stdout.trim();
}

/** A bare repository whose main has one commit, and a clone of it; not guarded yet. */
async function makeRepo(): Promise<Repo> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-guard-git-"));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_") && !k.startsWith("GIT_"))) as Record<string, string>;
  fs.mkdirSync(path.join(dir, "home"));
  const repo: Repo = {
    bare: path.join(dir, "origin.git"),
    clone: path.join(dir, "clone"),
    env: {
      ...base,
      HOME: path.join(dir, "home"),
      XDG_CONFIG_HOME: path.join(dir, "home"),
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_AUTHOR_NAME: "Test",
      GIT_AUTHOR_EMAIL: "test@example.com",
      GIT_COMMITTER_NAME: "Test",
      GIT_COMMITTER_EMAIL: "test@example.com",
      GIT_TERMINAL_PROMPT: "0",
    },
  };
  await ok(repo, ["init", "--quiet", "--bare", "--initial-branch", "main", repo.bare], dir);
  await ok(repo, ["clone", "--quiet", repo.bare, repo.clone], dir);
  await commit(repo, "initial");
  await ok(repo, ["push", "--quiet", "origin", "HEAD:main"]);
  return repo;
}

/** A new commit in the clone; answers its sha. */
async function commit(repo: Repo, message: string): Promise<string> {
  await ok(repo, ["commit", "--quiet", "--allow-empty", "-m", message]);
  return ok(repo, ["rev-parse", "HEAD"]);
}

const remoteRef = (repo: Repo, ref = "refs/heads/main") => git(repo, ["--git-dir", repo.bare, "rev-parse", "--verify", "--quiet", ref], repo.bare).then((r) => r.stdout.trim());

/** Guards the repository with `kxm-hub guard git --install`. */
async function install(repo: Repo, url: string, protect: string[], extra: string[] = []): Promise<void> {
  const r = await runCli(["guard", "git", "--install", repo.bare, "--url", url, "--project", PROJECT, ...protect.flatMap((p) => ["--protect", p]), ...extra], {
    env: { HOME: repo.env.HOME!, XDG_CONFIG_HOME: repo.env.XDG_CONFIG_HOME!, GIT_CONFIG_NOSYSTEM: "1" },
  });
  expect(r.code, r.stderr).toBe(0);
}

/**
 * `git push [-o kxm-fence=<lease>:<token>] origin <refspec...>`; answers git's result and the
 * `remote:` lines. A number is a token of `lease`; a string is the option's value as given.
 */
async function push(repo: Repo, refspec: string | string[], fence?: number | string, lease = "repo/main") {
  const option = typeof fence === "number" ? `${lease}:${fence}` : fence;
  const r = await git(repo, ["push", ...(option === undefined ? [] : ["-o", `kxm-fence=${option}`]), "origin", ...[refspec].flat()]);
  // git pads what it relays with spaces (to clear a terminal's line).
  const remote = r.stderr.split("\n").filter((l) => l.startsWith("remote: ")).map((l) => l.trimEnd());
  return { ...r, remote };
}

/** Expects the push refused by the guard with exactly one `remote: kxm-hub: <code>: ...` line matching `line`. */
function expectRefused(r: Awaited<ReturnType<typeof push>>, line: RegExp): void {
  expect(r.code, r.stderr).not.toBe(0);
  expect(r.stderr).toContain("pre-receive hook declined");
  expect(r.remote, r.stderr).toHaveLength(1);
  expect(r.remote[0]).toMatch(line);
}

const records = (repo: Repo) => JSON.parse(fs.readFileSync(path.join(repo.bare, "kxm-fences.json"), "utf8")) as { projects: Record<string, Record<string, { fencingToken: number; ref: string }>> };

async function acquire(t: TestHub, agent: AgentCreds, name: string, ttlMs = 5_000): Promise<number> {
  const res = await t.rest(`/v1/leases/${seg(name)}/acquire`, { headers: agent.headers, json: { ttlMs } });
  expect(res.status).toBe(200);
  return (await jsonOf(res)).lease.fencingToken as number;
}

async function release(t: TestHub, agent: AgentCreds, name: string, fencingToken: number): Promise<void> {
  expect((await t.rest(`/v1/leases/${seg(name)}/release`, { headers: agent.headers, json: { fencingToken } })).status).toBe(200);
}

/** A URL nothing listens on: a port just let go. */
async function closedPortUrl(): Promise<string> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

describe("kxm-hub guard git", () => {
  it("refuses a push to a protected ref without the kxm-fence option and leaves the ref where it was", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const before = await remoteRef(repo);
    await commit(repo, "unfenced");

    const r = await push(repo, "HEAD:main");
    expectRefused(r, /^remote: kxm-hub: fence_refused: refs\/heads\/main needs the push option kxm-fence=<lease>:<token> of lease repo\/main \(git push -o kxm-fence=\$KXM_FENCE\)$/);
    expect(await remoteRef(repo)).toBe(before);
    expect(fs.existsSync(path.join(repo.bare, "kxm-fences.json"))).toBe(false);
  });

  it("lets the holder's current token through and records it in the repository", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await t.register("alpha", PROJECT);
    const token = await acquire(t, alpha, "repo/main");
    const sha = await commit(repo, "fenced");

    const r = await push(repo, "HEAD:main", token);
    expect(r.code, r.stderr).toBe(0);
    expect(r.remote).toEqual([]);
    expect(await remoteRef(repo)).toBe(sha);
    expect(records(repo)).toEqual({ version: 1, projects: { [PROJECT]: { "repo/main": { fencingToken: token, ref: "refs/heads/main" } } } });
    // No lock file left behind.
    expect(fs.readdirSync(repo.bare).filter((f) => f.startsWith("kxm-fences"))).toEqual(["kxm-fences.json"]);
  });

  it("refuses a token superseded after the holder's TTL lapsed and another agent took the lease, even forced", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await t.register("alpha", PROJECT);
    const beta = await t.register("beta", PROJECT);
    const stale = await acquire(t, alpha, "repo/main");
    t.clock.advance(6_000); // past alpha's TTL on the hub
    const current = await acquire(t, beta, "repo/main");
    expect(current).toBeGreaterThan(stale);
    const before = await remoteRef(repo);
    await commit(repo, "stale writer");

    const r = await push(repo, "+HEAD:main", stale);
    expectRefused(r, new RegExp(`^remote: kxm-hub: fence_refused: refs/heads/main: token ${stale} of lease repo/main is superseded, not current; beta holds it now$`));
    expect(await remoteRef(repo)).toBe(before);

    expect((await push(repo, "HEAD:main", current)).code).toBe(0);
  });

  it("refuses a token released by its holder and regranted to another agent", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main"]);
    const alpha = await t.register("alpha", PROJECT);
    const beta = await t.register("beta", PROJECT);
    const stale = await acquire(t, alpha, "repo/main");
    await release(t, alpha, "repo/main", stale);
    // Released and not regranted yet: no holder, nobody may write.
    await commit(repo, "after release");
    expectRefused(await push(repo, "HEAD:main", stale), /^remote: kxm-hub: fence_refused: refs\/heads\/main: token 1 of lease repo\/main is released, not current$/);
    await acquire(t, beta, "repo/main");
    expectRefused(await push(repo, "HEAD:main", stale), /^remote: kxm-hub: fence_refused: refs\/heads\/main: token 1 of lease repo\/main is superseded, not current; beta holds it now$/);
  });

  it("refuses a token below the one the repository recorded, even when a hub restored to an older state says it is current", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    {
      await using t = await startTestHub();
      await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
      const alpha = await t.register("alpha", PROJECT);
      // Tokens 1 and 2 released, 3 held.
      for (let released = 0; released < 2; released++) await release(t, alpha, "repo/main", await acquire(t, alpha, "repo/main"));
      expect(await acquire(t, alpha, "repo/main")).toBe(3);
      await commit(repo, "token 3");
      expect((await push(repo, "HEAD:main", 3)).code).toBe(0);
      expect(records(repo).projects[PROJECT]!["repo/main"]!.fencingToken).toBe(3);
    }
    // A hub whose token counter went back (restored from an old backup): token 1 is current there.
    await using older = await startTestHub();
    await install(repo, older.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await older.register("alpha", PROJECT);
    expect(await acquire(older, alpha, "repo/main")).toBe(1);
    const before = await remoteRef(repo);
    await commit(repo, "older writer");

    const r = await push(repo, "HEAD:main", 1);
    expectRefused(r, /^remote: kxm-hub: fence_refused: refs\/heads\/main: token 1 of lease repo\/main is below token 3, which this repository already accepted/);
    expect(await remoteRef(repo)).toBe(before);
    expect(records(repo).projects[PROJECT]!["repo/main"]!.fencingToken).toBe(3);
  });

  it("refuses when the hub cannot be reached", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    await install(repo, await closedPortUrl(), ["refs/heads/*=repo/*"]);
    const before = await remoteRef(repo);
    await commit(repo, "hub down");
    expectRefused(await push(repo, "HEAD:main", 1), /^remote: kxm-hub: fence_refused: refs\/heads\/main: lease repo\/main could not be checked \(hub_unreachable: cannot reach the hub at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
    expect(await remoteRef(repo)).toBe(before);
  });

  it("refuses when the hub refuses the configured token (invalid_auth), though the lease's token is current", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub({ config: { projectTokens: { [PROJECT]: "tok-p" }, authToken: "tok-admin" } });
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"], ["--token", "not-the-token"]);
    const alpha = await t.register("alpha", PROJECT, "tok-p");
    const token = await acquire(t, alpha, "repo/main");
    await commit(repo, "wrong credential");
    expectRefused(await push(repo, "HEAD:main", token), /^remote: kxm-hub: fence_refused: refs\/heads\/main: lease repo\/main could not be checked \(invalid_auth: /);

    // The right one lets the same push through.
    expect((await git(repo, ["--git-dir", repo.bare, "config", "kxm.token", "tok-p"], repo.bare)).code).toBe(0);
    expect((await push(repo, "HEAD:main", token)).code).toBe(0);
  });

  it("lets refs no rule protects through without a token and without a hub", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    // Nothing listens at the hub's URL: a push that needed it would be refused.
    await install(repo, await closedPortUrl(), ["refs/heads/main=repo/main", "refs/heads/release/*=release/*"]);
    const sha = await commit(repo, "feature work");
    for (const ref of ["refs/heads/feature", "refs/heads/release", "refs/tags/v1"]) {
      const r = await push(repo, `HEAD:${ref}`);
      expect(r.code, r.stderr).toBe(0);
      expect(r.remote).toEqual([]);
      expect(await remoteRef(repo, ref)).toBe(sha);
    }
    // A push touching a protected ref too is refused as a whole: the unprotected ref does not move either.
    const bothAtOnce = await git(repo, ["push", "origin", "HEAD:refs/heads/feature2", "HEAD:refs/heads/main"]);
    expect(bothAtOnce.code).not.toBe(0);
    expect(bothAtOnce.stderr).toContain("remote: kxm-hub: fence_refused: refs/heads/main needs the push option");
    expect(await remoteRef(repo, "refs/heads/feature2")).toBe("");
  });

  it("needs the fence to delete a protected ref; a * rule maps refs/heads/release/1 to lease release/1", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/release/*=release/*"]);
    const sha = await commit(repo, "release 1");
    const alpha = await t.register("alpha", PROJECT);
    const token = await acquire(t, alpha, "release/1");
    expect((await push(repo, "HEAD:refs/heads/release/1", token, "release/1")).code).toBe(0);

    expectRefused(await push(repo, ":refs/heads/release/1"), /^remote: kxm-hub: fence_refused: refs\/heads\/release\/1 needs the push option kxm-fence=<lease>:<token> of lease release\/1 /);
    expect(await remoteRef(repo, "refs/heads/release/1")).toBe(sha);
    const r = await push(repo, ":refs/heads/release/1", token, "release/1");
    expect(r.code, r.stderr).toBe(0);
    expect(await remoteRef(repo, "refs/heads/release/1")).toBe("");
  });

  it("refuses pushes to protected refs while kxm.url is missing, and every push while no kxm.protect rule is set", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    await install(repo, await closedPortUrl(), ["refs/heads/main=repo/main"]);
    const config = (...args: string[]) => git(repo, ["--git-dir", repo.bare, "config", ...args], repo.bare);
    await config("--unset", "kxm.url");
    await commit(repo, "misconfigured");
    expectRefused(await push(repo, "HEAD:main", 1), /^remote: kxm-hub: guard_misconfigured: kxm\.url not set in .*: protected refs cannot be checked$/);
    expect((await push(repo, "HEAD:refs/heads/feature")).code).toBe(0);

    await config("--unset-all", "kxm.protect");
    expectRefused(await push(repo, "HEAD:refs/heads/other"), /^remote: kxm-hub: guard_misconfigured: no kxm\.protect rule in /);
    await config("--add", "kxm.protect", "heads/main=repo/main");
    expectRefused(await push(repo, "HEAD:refs/heads/other"), /^remote: kxm-hub: guard_misconfigured: kxm\.protect rule "heads\/main=repo\/main": the ref pattern must be a full ref name/);
  });

  it("refuses at once when the record's lock was left by a process that is gone", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await t.register("alpha", PROJECT);
    const token = await acquire(t, alpha, "repo/main");
    const gone = spawn(process.execPath, ["-e", ""]);
    await new Promise((resolve) => gone.once("exit", resolve));
    fs.writeFileSync(path.join(repo.bare, "kxm-fences.json.lock"), `${gone.pid}\n`);
    await commit(repo, "locked out");
    expectRefused(await push(repo, "HEAD:main", token), new RegExp(`^remote: kxm-hub: fence_record_busy: .*kxm-fences\\.json\\.lock was left by process ${gone.pid}, which is gone`));
  });

  it("--install writes an executable hook and the config, and will not replace a hook it did not write", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    await install(repo, "http://127.0.0.1:7331/", ["refs/heads/*=repo/*", "refs/tags/*=releases"]);
    const hook = path.join(repo.bare, "hooks", "pre-receive");
    expect(fs.statSync(hook).mode & 0o111).toBe(0o111);
    expect(fs.readFileSync(hook, "utf8")).toContain("guard git");
    const list = await ok(repo, ["--git-dir", repo.bare, "config", "--get-regexp", "^(kxm|receive)\\."], repo.bare);
    expect(list.split("\n")).toEqual([
      "receive.advertisepushoptions true",
      "kxm.url http://127.0.0.1:7331",
      `kxm.project ${PROJECT}`,
      "kxm.protect refs/heads/*=repo/*",
      "kxm.protect refs/tags/*=releases",
    ]);
    // Installing again replaces its own hook and rules.
    await install(repo, "http://127.0.0.1:7331", ["refs/heads/main=repo/main"]);
    expect(await ok(repo, ["--git-dir", repo.bare, "config", "--get-all", "kxm.protect"], repo.bare)).toBe("refs/heads/main=repo/main");

    fs.writeFileSync(hook, "#!/bin/sh\nexit 0\n");
    const r = await runCli(["guard", "git", "--install", repo.bare, "--url", "http://127.0.0.1:7331", "--project", PROJECT, "--protect", "refs/heads/*=repo/*"], {
      env: { HOME: repo.env.HOME!, GIT_CONFIG_NOSYSTEM: "1" },
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^kxm-hub: hook_exists: .*pre-receive exists and was not written by kxm-hub guard git --install/);

    const bad = await runCli(["guard", "git", "--install", repo.bare, "--project", PROJECT, "--protect", "refs/heads/main=repo/*"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^kxm-hub: usage_error: --protect rule "refs\/heads\/main=repo\/\*": the lease pattern has a \* but the ref pattern has none/);
  });

  it("--help documents the pattern language, the record and the refusals", async () => {
    const r = await runCli(["guard", "git", "--help"]);
    expect(r.code).toBe(0);
    for (const text of ["kxm.protect", "refs/heads/*=repo/*", "kxm-fences.json", "fence_refused", "git push -o kxm-fence=$KXM_FENCE"]) expect(r.stdout).toContain(text);
  });
});

/** An HTTP server that takes every request and never answers: a hub that hangs. */
async function hangingHub(): Promise<{ url: string; seen: () => number }> {
  let seen = 0;
  const server = http.createServer(() => {
    seen++;
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  onTestFinished(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, seen: () => seen };
}

/** Polls `check` until it answers something (an event outside this process: a file, a request). */
async function until<T>(what: string, check: () => T | undefined): Promise<T> {
  const deadline = performance.now() + 20_000;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("kxm-hub guard git against pushes that go around it", () => {
  it("guards the ref a pushed symbolic ref points to: a push to an alias of main needs main's fence", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main"]);
    await ok(repo, ["--git-dir", repo.bare, "symbolic-ref", "refs/heads/master", "refs/heads/main"], repo.bare);
    const before = await remoteRef(repo);
    await commit(repo, "through the alias");

    expectRefused(await push(repo, "HEAD:refs/heads/master"), /^remote: kxm-hub: fence_refused: refs\/heads\/main \(pushed as refs\/heads\/master\) needs the push option kxm-fence=<lease>:<token> of lease repo\/main /);
    expect(await remoteRef(repo)).toBe(before);
    const alpha = await t.register("alpha", PROJECT);
    const token = await acquire(t, alpha, "repo/main");
    const r = await push(repo, "HEAD:refs/heads/master", token);
    expect(r.code, r.stderr).toBe(0);
    expect(await remoteRef(repo)).not.toBe(before);
  });

  it("lets one lease's token move only that lease's refs, though another lease's current token has the same number", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await ok(repo, ["push", "--quiet", "origin", "HEAD:refs/heads/release"]);
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await t.register("alpha", PROJECT);
    const beta = await t.register("beta", PROJECT);
    const tokenA = await acquire(t, alpha, "repo/main");
    expect(await acquire(t, beta, "repo/release")).toBe(tokenA);
    const before = { main: await remoteRef(repo), release: await remoteRef(repo, "refs/heads/release") };
    await commit(repo, "alpha's work");

    // Both refs in one push with alpha's fence: release is beta's.
    expectRefused(await push(repo, ["HEAD:main", "HEAD:release"], tokenA), /^remote: kxm-hub: fence_refused: refs\/heads\/release is guarded by lease repo\/release, not repo\/main, which the push's fence names/);
    // release alone with alpha's fence.
    expectRefused(await push(repo, "HEAD:release", tokenA), /^remote: kxm-hub: fence_refused: refs\/heads\/release is guarded by lease repo\/release, not repo\/main/);
    // A bare token names no lease.
    expectRefused(await push(repo, "HEAD:release", String(tokenA)), /^remote: kxm-hub: fence_refused: push option kxm-fence=1 names no lease: give kxm-fence=<lease>:<token> /);
    expect({ main: await remoteRef(repo), release: await remoteRef(repo, "refs/heads/release") }).toEqual(before);
    // alpha's fence moves main.
    expect((await push(repo, "HEAD:main", tokenA)).code).toBe(0);
  });

  it("refuses a fence that is not <lease>:<token>", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    await install(repo, await closedPortUrl(), ["refs/heads/*=repo/*"]);
    await commit(repo, "odd fences");
    for (const fence of ["repo/main:", ":1", "repo/main:0", "repo/main:+1", "repo/main:1e3", "repo/main:9007199254740993", "repo/main: 1"]) {
      expectRefused(await push(repo, "HEAD:main", fence), /^remote: kxm-hub: fence_refused: push option kxm-fence=.* is not <lease>:<token> with a fencing token 1\.\./);
    }
  });

  it("lets the record's lock go when the push is ended by SIGTERM while it holds it", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    const slow = await hangingHub();
    await install(repo, slow.url, ["refs/heads/*=repo/*"]);
    await commit(repo, "pushed while the hub hangs");
    const lockFile = path.join(repo.bare, "kxm-fences.json.lock");
    const child = spawn("git", ["push", "-o", "kxm-fence=repo/main:1", "origin", "HEAD:main"], { cwd: repo.clone, env: repo.env, stdio: "ignore", detached: true });
    const closed = new Promise((resolve) => child.once("close", resolve));
    onTestFinished(() => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // gone
      }
    });
    await until("the hook holding the lock and calling the hub", () => (fs.existsSync(lockFile) && slow.seen() > 0 ? true : undefined));
    process.kill(-child.pid!, "SIGTERM");
    await closed;
    // git itself may end before its hook has let the lock go: the hook's own end is what counts.
    await until("the hook letting the lock go", () => (fs.existsSync(lockFile) ? undefined : true));

    await ok(repo, ["--git-dir", repo.bare, "config", "kxm.url", t.baseUrl], repo.bare);
    const beta = await t.register("beta", PROJECT);
    const r = await push(repo, "HEAD:main", await acquire(t, beta, "repo/main"));
    expect(r.code, r.stderr).toBe(0);
  });

  it("refuses a push when an entry of the record cannot be read, instead of taking it for no floor", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    const alpha = await t.register("alpha", PROJECT);
    expect(await acquire(t, alpha, "repo/main")).toBe(1);
    const before = await remoteRef(repo);
    await commit(repo, "token 1 under an entry that is no entry");
    for (const entry of [3, { fencingToken: null, ref: "refs/heads/main" }, { fencingToken: "x", ref: "refs/heads/main" }, { fencingToken: 3 }, null]) {
      fs.writeFileSync(path.join(repo.bare, "kxm-fences.json"), JSON.stringify({ version: 1, projects: { [PROJECT]: { "repo/main": entry } } }));
      expectRefused(await push(repo, "HEAD:main", 1), /^remote: kxm-hub: fence_record_unreadable: .*kxm-fences\.json is not a fence record \(the entry of lease "repo\/main" is not \{fencingToken, ref\}\)/);
      expect(await remoteRef(repo)).toBe(before);
    }
  });

  it("keeps the floor of a lease named __proto__ like any other", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/*=*"]);
    const alpha = await t.register("alpha", PROJECT);
    for (let i = 0; i < 2; i++) await release(t, alpha, "__proto__", await acquire(t, alpha, "__proto__"));
    expect(await acquire(t, alpha, "__proto__")).toBe(3);
    await commit(repo, "token 3");
    expect((await push(repo, "HEAD:refs/heads/__proto__", 3, "__proto__")).code).toBe(0);
    const entries = Object.entries(records(repo).projects[PROJECT]!);
    expect(entries).toEqual([["__proto__", { fencingToken: 3, ref: "refs/heads/__proto__" }]]);
  });

  it("refuses a hub URL with a user name or password, at --install and in the hook, and never shows it", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    const url = new URL(t.baseUrl);
    url.username = "kxm";
    url.password = "s3cret-proxy-pass";
    const installed = await runCli(["guard", "git", "--install", repo.bare, "--url", url.href, "--project", PROJECT, "--protect", "refs/heads/*=repo/*"], {
      env: { HOME: repo.env.HOME!, XDG_CONFIG_HOME: repo.env.XDG_CONFIG_HOME!, GIT_CONFIG_NOSYSTEM: "1" },
    });
    expect(installed.code).toBe(2);
    expect(installed.stderr).toMatch(/--url.* carries a user name or password/);
    expect(installed.stderr).not.toContain("s3cret-proxy-pass");

    await install(repo, t.baseUrl, ["refs/heads/*=repo/*"]);
    await ok(repo, ["--git-dir", repo.bare, "config", "kxm.url", url.href], repo.bare);
    await commit(repo, "any push");
    const r = await push(repo, "HEAD:main", 1);
    expectRefused(r, /^remote: kxm-hub: guard_misconfigured: kxm\.url carries a user name or password/);
    expect(r.stderr).not.toContain("s3cret-proxy-pass");
  });
});

describe("kxm.protect rules", () => {
  const rules = ["refs/heads/main=main-lease", "refs/heads/*=repo/*", "refs/tags/v*=releases", "refs/notes/*-draft=notes/*"].map(parseRule);

  it.each([
    ["refs/heads/main", "main-lease"], // the first matching rule wins
    ["refs/heads/dev", "repo/dev"],
    ["refs/heads/feature/x", "repo/feature/x"], // * takes / too, as in a refspec
    ["refs/tags/v1.2", "releases"],
    ["refs/notes/a-draft", "notes/a"],
    ["refs/tags/x", undefined],
    ["refs/heads/", undefined], // * matches one character at least
    ["refs/notes/-draft", undefined],
    ["refs/heads", undefined],
  ])("%s -> %s", (ref, lease) => {
    expect(leaseFor(rules, ref)?.lease).toBe(lease);
  });

  it.each([
    ["refs/heads/main", "is not <ref pattern>=<lease pattern>"],
    ["heads/*=repo/*", "must be a full ref name starting with refs/"],
    ["refs/heads/*=", "the lease pattern is empty"],
    ["refs/*/*=x", "the ref pattern may hold one * at most"],
    ["refs/heads/*=a/*/*", "the lease pattern may hold one * at most"],
    ["refs/heads/main=repo/*", "the lease pattern has a * but the ref pattern has none"],
    // Patterns no ref name can match (git check-ref-format) would protect nothing, silently.
    ["refs/heads/release-[0-9]*=release", "no ref name can match the ref pattern"],
    ["refs/heads/ma?n=main", "no ref name can match the ref pattern"],
    ["refs/heads/release/=release", "no ref name can match the ref pattern"],
    ["refs/heads/a b=x", "no ref name can match the ref pattern"],
    ["refs/heads/a..b=x", "no ref name can match the ref pattern"],
    ["refs/heads/x.lock=x", "no ref name can match the ref pattern"],
    ["refs/heads/.hidden/*=x/*", "no ref name can match the ref pattern"],
  ])("refuses %s", (raw, message) => {
    expect(() => parseRule(raw)).toThrow(message);
  });

  it("keeps = and $ in the lease pattern literal after the first =", () => {
    expect(leaseFor([parseRule(" refs/heads/* = a=$&/* ")], "refs/heads/x")?.lease).toBe("a=$&/x");
  });
});

/**
 * Configuration the repository does not choose: the installing user's or the pushing user's own
 * git config (over the local transport, git-receive-pack runs as the pusher and reads theirs)
 * neither moves the hook nor its rules. --install writes the repository's own hooks directory
 * and pins core.hooksPath in the repository's config; the guard reads only the repository's own
 * kxm.protect.
 */
describe("configuration outside the repository", () => {
  it("a pusher's own core.hooksPath does not skip the guard", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main"]);
    const before = await remoteRef(repo);
    await commit(repo, "unfenced, hooks elsewhere");
    // The pusher's ~/.gitconfig points hooks elsewhere (a global hook manager, say).
    fs.mkdirSync(path.join(repo.env.HOME!, "my-hooks"));
    fs.writeFileSync(path.join(repo.env.HOME!, ".gitconfig"), `[core]\n\thooksPath = ${path.join(repo.env.HOME!, "my-hooks")}\n`);
    expectRefused(await push(repo, "HEAD:main"), /^remote: kxm-hub: fence_refused: /);
    expect(await remoteRef(repo)).toBe(before);
  });

  it("--install under the installing user's core.hooksPath writes the repository's own hook, not the shared one", { timeout: testTimeoutMs }, async () => {
    const repo = await makeRepo();
    const globalHooks = path.join(repo.env.HOME!, "global-hooks");
    fs.mkdirSync(globalHooks);
    fs.writeFileSync(path.join(repo.env.HOME!, ".gitconfig"), `[core]\n\thooksPath = ${globalHooks}\n`);
    await install(repo, "http://127.0.0.1:1", ["refs/heads/main=repo/main"]);
    expect(fs.existsSync(path.join(globalHooks, "pre-receive"))).toBe(false);
    expect(fs.existsSync(path.join(repo.bare, "hooks", "pre-receive"))).toBe(true);
  });

  it("a user-wide kxm.protect does not override the repository's own rule", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main"]);
    fs.writeFileSync(path.join(repo.env.HOME!, ".gitconfig"), `[kxm]\n\tprotect = refs/heads/*=scratch/*\n`);
    const mallory = await t.register("mallory", PROJECT);
    const token = await acquire(t, mallory, "scratch/main");
    const before = await remoteRef(repo);
    await commit(repo, "under the scratch lease");
    const r = await push(repo, "HEAD:main", token, "scratch/main");
    expect(r.code, r.stderr).not.toBe(0);
    expect(await remoteRef(repo)).toBe(before);
  });
});

/** A push through a symbolic ref moves what it points to: that ref's fence is needed, whether it exists yet or not, and inside a namespace too. */
describe("symbolic refs the guard follows", () => {
  it("a push through a symbolic ref to a protected ref that does not exist yet needs that ref's fence", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main", "refs/heads/release=repo/release"]);
    // release is protected and not created yet; an alias of it exists already.
    await ok(repo, ["--git-dir", repo.bare, "symbolic-ref", "refs/heads/rel", "refs/heads/release"], repo.bare);
    await commit(repo, "through a dangling alias");
    expectRefused(await push(repo, "HEAD:refs/heads/rel"), /^remote: kxm-hub: fence_refused: refs\/heads\/release /);
    expect(await remoteRef(repo, "refs/heads/release")).toBe("");
  });

  it("a push in a GIT_NAMESPACE through a symbolic ref of main needs main's fence", { timeout: testTimeoutMs }, async () => {
    await using t = await startTestHub();
    const repo = await makeRepo();
    await install(repo, t.baseUrl, ["refs/heads/main=repo/main"]);
    const main = await remoteRef(repo);
    await ok(repo, ["--git-dir", repo.bare, "update-ref", "refs/namespaces/ns/refs/heads/main", main], repo.bare);
    await ok(repo, ["--git-dir", repo.bare, "symbolic-ref", "refs/namespaces/ns/refs/heads/master", "refs/namespaces/ns/refs/heads/main"], repo.bare);
    await commit(repo, "in a namespace");
    const inNamespace = { ...repo, env: { ...repo.env, GIT_NAMESPACE: "ns" } };
    expect((await push(inNamespace, "HEAD:main")).code).not.toBe(0);
    expectRefused(await push(inNamespace, "HEAD:refs/heads/master"), /^remote: kxm-hub: fence_refused: refs\/heads\/main /);
    expect(await remoteRef(repo, "refs/namespaces/ns/refs/heads/main")).toBe(main);
  });
});
