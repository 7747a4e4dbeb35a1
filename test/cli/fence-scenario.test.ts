import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { expect, it, onTestFinished } from "vitest";
import { bin, repo as checkout, runCli } from "../fixtures/cli.js";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

/**
 * Issue 22's must-show, end to end with real processes: agent A holds lease repo/main through
 * `kxm-hub lease run`, is frozen (SIGSTOP) past its TTL, B takes the lease over and pushes through
 * the repository's guard; A's command, still running, pushes with its stale token and is refused,
 * and the remote keeps B's commit; resumed, A's lease run ends its command and exits 76
 * (lease_lost). That a lease run which cannot get its lease within --wait runs nothing is shown in
 * lease-run.test.ts ("runs nothing when the lease is not had within --wait ...").
 *
 * Every wait is for an event (a file, a process state, a process's exit), bounded. No real time
 * has to pass: after SIGCONT lease run's keeper renews and the hub answers lease_superseded (its
 * local deadline may fire first, lease_unconfirmed: either is lease_lost).
 */

const PROJECT = "org/repo";
const waitBoundMs = 20_000;

/**
 * A's command: writes its fencing token, waits for the go file, force-pushes its clone's HEAD to
 * main with that token (a stale writer overwriting whatever is there), writes git's exit code,
 * then goes on running as a writer would until lease run ends it. Its pid (its process group's, as
 * lease run starts it) goes to $1/pid. $1: the files' directory; $2: the clone.
 */
const commandScript = `#!/bin/sh
echo $$ > "$1/pid"
echo "$KXM_FENCING_TOKEN" > "$1/token.tmp" && mv "$1/token.tmp" "$1/token"
while [ ! -e "$1/go" ]; do sleep 0.05; done
git -C "$2" push --force -o "kxm-fence=$KXM_FENCE" origin HEAD:main 2> "$1/push.err"
echo $? > "$1/push.code.tmp" && mv "$1/push.code.tmp" "$1/push.code"
while :; do sleep 0.05; done
`;

/** Resolves once `check` answers something, checking again every 20 ms; bounded. */
async function until<T>(what: string, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + waitBoundMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const fileText = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").trim() : undefined);

/** The process's state letter from /proc (T: stopped). */
const stateOf = (pid: number) => /^\d+ \(.*\) (\S)/.exec(fs.readFileSync(`/proc/${pid}/stat`, "utf8"))?.[1];

it("a frozen holder's stale push is refused by the repository's guard after another agent took the lease and pushed; resumed, its lease run exits 76", { timeout: 120_000 }, async () => {
  await using t = await startTestHub();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-fence-scenario-"));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_") && !k.startsWith("GIT_"))) as Record<string, string>;
  fs.mkdirSync(path.join(dir, "home"));
  const gitEnv: Record<string, string> = {
    HOME: path.join(dir, "home"),
    XDG_CONFIG_HOME: path.join(dir, "home"),
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_AUTHOR_NAME: "Test",
    GIT_AUTHOR_EMAIL: "test@example.com",
    GIT_COMMITTER_NAME: "Test",
    GIT_COMMITTER_EMAIL: "test@example.com",
    GIT_TERMINAL_PROMPT: "0",
  };
  /** git, asynchronously: the hooks it runs call the hub in this process. */
  const git = (args: string[], cwd = dir) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn("git", args, { cwd, env: { ...base, ...gitEnv }, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
      child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
      child.once("close", (code) => resolve({ code, stdout: stdout.trim(), stderr }));
    });
  const ok = async (args: string[], cwd?: string) => {
    const r = await git(args, cwd);
    if (r.code !== 0) throw new Error(`git ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
    return r.stdout;
  };
  const commit = async (clone: string, message: string) => {
    await ok(["commit", "--quiet", "--allow-empty", "-m", message], clone);
    return ok(["rev-parse", "HEAD"], clone);
  };
  const remoteMain = () => ok(["--git-dir", bare, "rev-parse", "refs/heads/main"]);

  // The repository, guarded: refs/heads/main needs a current token of lease repo/main.
  const bare = path.join(dir, "origin.git");
  const [cloneA, cloneB] = [path.join(dir, "a"), path.join(dir, "b")];
  await ok(["init", "--quiet", "--bare", "--initial-branch", "main", bare]);
  await ok(["clone", "--quiet", bare, cloneA]);
  await commit(cloneA, "initial");
  await ok(["push", "--quiet", "origin", "HEAD:main"], cloneA);
  await ok(["clone", "--quiet", bare, cloneB]);
  const installed = await runCli(["guard", "git", "--install", bare, "--url", t.baseUrl, "--project", PROJECT, "--protect", "refs/heads/*=repo/*"], { env: gitEnv });
  expect(installed.code, installed.stderr).toBe(0);
  const shaA = await commit(cloneA, "A's work");

  // A: lease run holding repo/main around its command, in a process group of its own.
  const script = path.join(dir, "command.sh");
  fs.writeFileSync(script, commandScript, { mode: 0o755 });
  const files = path.join(dir, "files");
  fs.mkdirSync(files);
  const a = spawn(process.execPath, [bin, "lease", "run", "repo/main", "--ttl", "5s", "--", "/bin/sh", script, files, cloneA], {
    cwd: checkout,
    env: { ...base, ...gitEnv, KXM_URL: t.baseUrl, KXM_PROJECT: PROJECT, KXM_AGENT: "alpha" },
    stdio: ["ignore", "ignore", "pipe"],
    detached: true,
  });
  let stderrA = "";
  let commandPid = 0;
  a.stderr!.on("data", (b: Buffer) => (stderrA += b.toString()));
  const exitedA = new Promise<number | null>((resolve) => a.once("close", (code) => resolve(code)));
  onTestFinished(() => {
    // Whatever a failed test left: lease run (resumed, so SIGKILL reaches a stopped one) and its command's group.
    for (const [pid, signal] of [[a.pid!, "SIGCONT"], [a.pid!, "SIGKILL"], [commandPid, "SIGKILL"]] as const) {
      try {
        if (pid > 0) process.kill(-pid, signal);
      } catch {
        // gone already
      }
    }
  });
  const tokenA = await until("A's command's token", () => fileText(path.join(files, "token")) || undefined);
  expect(tokenA).toBe("1");
  commandPid = Number(fileText(path.join(files, "pid")));

  // Freeze A's lease run (not its command), then let the lease lapse on the hub.
  process.kill(a.pid!, "SIGSTOP");
  await until("A's lease run stopped", () => (stateOf(a.pid!) === "T" ? true : undefined));
  // A renewal sent just before the stop may land after it: move the clock past the expiry the hub now has.
  const held = (await jsonOf(await t.rest(`/v1/leases/${encodeURIComponent("repo/main")}?project=${encodeURIComponent(PROJECT)}`))).lease;
  t.clock.advance(Date.parse(held.expiresAt) - t.clock.now() + 1_000);

  // B takes the lease over and pushes through the guard.
  const beta = await t.register("beta", PROJECT);
  const taken = await jsonOf(await t.rest(`/v1/leases/${encodeURIComponent("repo/main")}/acquire`, { headers: beta.headers, json: { ttlMs: 60_000 } }));
  expect(taken.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
  const shaB = await commit(cloneB, "B's work");
  const pushB = await git(["push", "-o", "kxm-fence=repo/main:2", "origin", "HEAD:main"], cloneB);
  expect(pushB.code, pushB.stderr).toBe(0);
  expect(await remoteMain()).toBe(shaB);

  // A's command, still running while its lease run is frozen, pushes with its stale token: refused.
  fs.writeFileSync(path.join(files, "go"), "");
  const pushCodeA = await until("A's push's exit code", () => fileText(path.join(files, "push.code")) || undefined);
  const pushErrA = fs.readFileSync(path.join(files, "push.err"), "utf8");
  expect(pushCodeA, pushErrA).not.toBe("0");
  const remoteLines = pushErrA.split("\n").filter((l) => l.startsWith("remote: ")).map((l) => l.trimEnd());
  expect(remoteLines).toEqual(["remote: kxm-hub: fence_refused: refs/heads/main: token 1 of lease repo/main is superseded, not current; beta holds it now"]);
  expect(await remoteMain()).toBe(shaB);
  expect(shaA).not.toBe(shaB);

  // Resumed, A's lease run learns the lease is lost, terminates its command and exits 76.
  process.kill(a.pid!, "SIGCONT");
  let timer: NodeJS.Timeout | undefined;
  const codeA = await Promise.race([exitedA, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("timed out waiting for A's lease run")), waitBoundMs)))]).finally(() =>
    clearTimeout(timer),
  );
  expect(codeA, stderrA).toBe(76);
  expect(stderrA).toMatch(/^kxm-hub: lease_lost: (lease_superseded|lease_unconfirmed): lease repo\/main \(token 1\) was lost .*SIGTERM/);
  expect(stderrA.trimEnd().split("\n")).toHaveLength(1);
  // B still holds the lease; the remote still has B's commit.
  const after = (await jsonOf(await t.rest(`/v1/leases/${encodeURIComponent("repo/main")}?project=${encodeURIComponent(PROJECT)}`))).lease;
  expect(after).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
  expect(await remoteMain()).toBe(shaB);
});
