import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { bin, repo } from "../fixtures/cli.js";
import { jsonOf, startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub lease run NAME -- COMMAND` (issue 22, item 2) against a real hub: the command gets the
 * fencing token, runs holding the lease, gives its exit code back, and is terminated when the
 * lease is lost, including after lease run was stopped (SIGSTOP) past its TTL. The hub's clock is
 * the test's; lease run renews on its own monotonic clock, so TTLs are a few seconds. Every wait
 * is for an event (a file the command writes, the process's exit, the hub's state), bounded.
 */

const PROJECT = "org/repo";
const LEASE = "repo/main";
const seg = encodeURIComponent;
const waitBoundMs = 15_000;

/**
 * The command lease run starts: writes its environment to argv[1], then waits for argv[2] to
 * appear and exits with the number in it. On SIGTERM it writes "SIGTERM" to argv[3] and exits 143.
 */
const commandScript = `
const fs = require("node:fs");
const [envFile, goFile, termFile] = process.argv.slice(1);
process.on("SIGTERM", () => { fs.writeFileSync(termFile, "SIGTERM"); process.exit(143); });
fs.writeFileSync(envFile, JSON.stringify({
  token: process.env.KXM_FENCING_TOKEN, name: process.env.KXM_LEASE_NAME,
  resource: process.env.KXM_LEASE_RESOURCE, pid: process.pid,
}));
setInterval(() => { if (fs.existsSync(goFile)) process.exit(Number(fs.readFileSync(goFile, "utf8"))); }, 20);
`;

interface Run {
  child: ChildProcess;
  files: { env: string; go: string; term: string };
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
  /** What lease run has written on stderr so far. */
  stderr(): string;
}

/** Starts `kxm-hub lease run` as `agent` in a process group of its own (kept from vitest's signals). */
function leaseRun(t: TestHub, agent: string, flags: string[], url = t.baseUrl, script = commandScript): Run {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-lease-run-"));
  const files = { env: path.join(dir, "env.json"), go: path.join(dir, "go"), term: path.join(dir, "term") };
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
  const child = spawn(
    process.execPath,
    [bin, "lease", "run", LEASE, ...flags, "--", process.execPath, "-e", script, files.env, files.go, files.term],
    {
      cwd: repo,
      env: { ...base, KXM_URL: url, KXM_PROJECT: PROJECT, KXM_AGENT: agent },
      stdio: ["ignore", "ignore", "pipe"],
      detached: true,
    },
  );
  let stderr = "";
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) =>
    child.once("close", (code, signal) => resolve({ code, signal, stderr })),
  );
  onTestFinished(() => {
    // Whatever a failed test left: lease run and the command's group.
    for (const pid of [child.pid!, commandPid(files)]) {
      try {
        if (pid) process.kill(-pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { child, files, exited, stderr: () => stderr };
}

function commandPid(files: Run["files"]): number | undefined {
  try {
    return (JSON.parse(fs.readFileSync(files.env, "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

/** Whether process `pid` still runs (a zombie nobody reaped counts as ended). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true; // no /proc: the signal's answer stands
  }
}

/** The pid of the guard lease run started for the command's group `group` (`node -e <program> <group> <grace>`). */
function guardOf(group: number): number | undefined {
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // ended meanwhile
    }
    if (argv[1] === "-e" && argv[3] === String(group)) return Number(entry);
  }
  return undefined;
}

/** Resolves once `check` answers something, checking again on every turn of a short timer; bounded. */
async function until<T>(what: string, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + waitBoundMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), waitBoundMs)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const envOf = (run: Run) =>
  until("the command's environment file", () => {
    if (!fs.existsSync(run.files.env)) return undefined;
    try {
      return JSON.parse(fs.readFileSync(run.files.env, "utf8")) as { token: string; name: string; resource: string; pid: number };
    } catch {
      return undefined; // being written
    }
  });

interface LeaseJson {
  holderAgentName: string;
  fencingToken: number;
  resource: string;
}

/**
 * A TCP relay to the hub that can stop relaying: the hub then answers nothing, however long the
 * caller waits (a hub that answers too slowly).
 */
async function stallableRelay(t: TestHub) {
  const hub = new URL(t.baseUrl);
  const sockets = new Set<net.Socket>();
  let stalled = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(hub.port), hub.hostname);
    for (const [from, to] of [[client, upstream], [upstream, client]] as const) {
      sockets.add(from);
      from.on("data", (b) => void (stalled || to.write(b)));
      from.on("error", () => to.destroy());
      from.on("close", () => to.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  onTestFinished(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    stall: () => void (stalled = true),
  };
}

const liveLeases = async (t: TestHub): Promise<LeaseJson[]> => (await jsonOf(await t.rest(`/v1/leases?project=${seg(PROJECT)}`))).leases;

describe("kxm-hub lease run", () => {
  it("gives the command its token, name and resource, holds the lease while it runs, releases it at once and passes its exit code", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s"]);
    const env = await envOf(run);
    const [lease] = await liveLeases(t);
    expect(lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1 });
    expect(env).toMatchObject({ token: "1", name: LEASE, resource: lease!.resource });

    // Written whole, then renamed into place: the command polls for the file, and one that saw it
    // created but not yet written would read "" and exit 0.
    fs.writeFileSync(`${run.files.go}.part`, "7");
    fs.renameSync(`${run.files.go}.part`, run.files.go);
    const { code, stderr } = await within(run.exited, "lease run's exit");
    expect(code, stderr).toBe(7);
    expect(stderr).toBe("");
    // Released, not left to lapse: the hub's clock has not moved.
    expect(await liveLeases(t)).toEqual([]);
    const agents = (await jsonOf(await t.rest(`/v1/agents?project=${seg(PROJECT)}&includeOffline=true`))).agents as { name: string; online: boolean }[];
    expect(agents).toMatchObject([{ name: "alpha", online: false }]);
  });

  it("passes SIGINT on to the command's process group and exits 128 + 2 when it dies of it", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s"]);
    await envOf(run);
    run.child.kill("SIGINT");
    const { code, stderr } = await within(run.exited, "lease run's exit");
    expect(code, stderr).toBe(130);
    expect(await liveLeases(t)).toEqual([]);
  });

  it("killed outright (SIGKILL), it still ends the command: the command gets SIGTERM, as when the lease is lost", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s", "--grace", "300ms"]);
    const env = await envOf(run);
    run.child.kill("SIGKILL");
    await until("the command's end", () => (alive(env.pid) ? undefined : true));
    expect(fs.readFileSync(run.files.term, "utf8")).toBe("SIGTERM");
    expect((await within(run.exited, "lease run's streams to close")).signal).toBe("SIGKILL");
  });

  it("killed outright, it ends even a command that ignores SIGTERM, after --grace", async () => {
    await using t = await startTestHub();
    const stubborn = `
const [envFile] = process.argv.slice(1);
process.on("SIGTERM", () => {});
require("node:fs").writeFileSync(envFile, JSON.stringify({ pid: process.pid }));
setInterval(() => {}, 1000);
`;
    const run = leaseRun(t, "alpha", ["--ttl", "5s", "--grace", "300ms"], t.baseUrl, stubborn);
    const { pid } = await envOf(run);
    run.child.kill("SIGKILL");
    await until("the command's end", () => (alive(pid) ? undefined : true));
  });

  it("killed outright, its guard leaves as soon as the command's group has ended, not at the end of --grace", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s", "--grace", "10m"]);
    const env = await envOf(run);
    const guard = await until("the guard", () => guardOf(env.pid));
    run.child.kill("SIGKILL");
    await until("the command's end", () => (alive(env.pid) ? undefined : true));
    // The group's number is free again: a SIGKILL to it at the end of the grace could reach another's.
    await until("the guard's end", () => (alive(guard) ? undefined : true));
  });

  it("says on stderr when the command's guard ends while it runs, and goes on", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s"]);
    const env = await envOf(run);
    process.kill(await until("the guard", () => guardOf(env.pid)), "SIGKILL");
    // The command ends only once lease run has seen its guard go: a command that ended first
    // would have its guard ended by lease run, with nothing to say.
    await until("the warning", () => run.stderr().includes("without its guard") || undefined);
    fs.writeFileSync(`${run.files.go}.part`, "0");
    fs.renameSync(`${run.files.go}.part`, run.files.go);
    const { code, stderr } = await within(run.exited, "lease run's exit");
    expect(code, stderr).toBe(0);
    expect(stderr).toBe("kxm-hub: warning: the command runs without its guard (it was killed by SIGKILL): if lease run is killed outright, nothing ends it\n");
  });

  it("runs nothing when the lease is not had within --wait and exits 75 with lease_held", async () => {
    await using t = await startTestHub();
    const beta = await t.register("beta", PROJECT);
    expect((await t.rest(`/v1/leases/${seg(LEASE)}/acquire`, { headers: beta.headers, json: { ttlMs: 60_000 } })).status).toBe(200);
    const run = leaseRun(t, "alpha", ["--wait", "2s"]);
    // Waiting in the hub's queue, on the hub's clock: move it past the wait.
    await until("lease run in the queue", async () => ((await liveLeases(t))[0] as { waiters?: unknown[] }).waiters?.length === 1 || undefined);
    t.clock.advance(2_500);
    const { code, stderr } = await within(run.exited, "lease run's exit");
    expect(code, stderr).toBe(75);
    expect(stderr).toMatch(/^kxm-hub: lease_held: lease repo\/main held by beta \(token 1\) .*nothing ran\n$/);
    expect(fs.existsSync(run.files.env)).toBe(false);
    expect((await liveLeases(t))[0]).toMatchObject({ holderAgentName: "beta", fencingToken: 1 });
  });

  it("stopped past its TTL while another agent took the lease: once resumed it terminates the command and exits 76 with lease_lost", async () => {
    await using t = await startTestHub();
    const run = leaseRun(t, "alpha", ["--ttl", "5s"]);
    const env = await envOf(run);
    expect(env.token).toBe("1");

    run.child.kill("SIGSTOP");
    onTestFinished(() => void run.child.kill("SIGCONT"));
    t.clock.advance(6_000); // past the TTL on the hub
    const beta = await t.register("beta", PROJECT);
    const taken = await t.rest(`/v1/leases/${seg(LEASE)}/acquire`, { headers: beta.headers, json: { ttlMs: 60_000 } });
    expect((await jsonOf(taken)).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
    run.child.kill("SIGCONT");

    const { code, stderr } = await within(run.exited, "lease run's exit after SIGCONT");
    expect(code, stderr).toBe(76);
    expect(stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(stderr).toMatch(/^kxm-hub: lease_lost: (lease_superseded|lease_unconfirmed): lease repo\/main \(token 1\) was lost/);
    expect(fs.readFileSync(run.files.term, "utf8")).toBe("SIGTERM");
    // The new holder keeps it: lease run released nothing of beta's.
    expect((await liveLeases(t))[0]).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
  });

  it("stopped past its local deadline with the hub answering nothing: its guard ends the command meanwhile, and once resumed it exits lease_unconfirmed", async () => {
    await using t = await startTestHub();
    const relay = await stallableRelay(t);
    const run = leaseRun(t, "alpha", ["--ttl", "5s"], relay.url);
    const env = await envOf(run);
    run.child.kill("SIGSTOP");
    onTestFinished(() => void run.child.kill("SIGCONT"));
    relay.stall();
    // The deadline is on the monotonic clock (a fifth of the TTL before the lease can lapse, from
    // the last renewal sent): real time passes it while lease run is stopped, and the guard, which
    // holds the same deadline, ends the command without it.
    await until("the command's end while lease run is stopped", () => (alive(env.pid) ? undefined : true));
    expect(fs.readFileSync(run.files.term, "utf8")).toBe("SIGTERM");
    run.child.kill("SIGCONT");

    const { code, stderr } = await within(run.exited, "lease run's exit after SIGCONT");
    expect(code, stderr).toBe(76);
    expect(stderr).toMatch(/^kxm-hub: lease_lost: lease_unconfirmed: lease repo\/main \(token 1\) was lost/);
    expect(fs.readFileSync(run.files.term, "utf8")).toBe("SIGTERM");
  });
});
