import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repo } from "../fixtures/cli.js";

/**
 * Signals reach the hub through its launchers (issue 20, item 3): `docker stop`, systemd and
 * Kubernetes signal the process they started, `npm start` or `npx kxm-hub serve`, never the hub
 * below it. The signal goes to the launcher alone, and by the time the launcher exits the hub has
 * stopped gracefully: `hub_stopped` logged, its port closed, its process gone. (Debian's sh left
 * between npm and node dies of the signal npm forwards and leaves the hub serving.)
 * Linux only: a process's children are read from /proc.
 */

/** Each wait's bound; a test makes three (start, exit, output), under vitest's own per-test bound. */
const timeoutMs = 20_000;
const testTimeoutMs = 3 * timeoutMs;

/** Rejects when `p` has not settled within timeoutMs: events are awaited, never slept for. */
function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Every process below `pid` (the shell npm runs a command in, if one is left, and the hub). */
function descendants(pid: number): number[] {
  const children = fs
    .readdirSync(`/proc/${pid}/task`)
    .flatMap((task) => fs.readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim().split(/\s+/))
    .filter(Boolean)
    .map(Number);
  return children.flatMap((c) => [c, ...descendants(c)]);
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const cmdline = (pid: number) => fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");

/** Whether something accepts connections on the port. */
const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
  });

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The launcher's descendants still alive when its exit was seen. */
  leftAtExit: number[];
}

/**
 * Starts a launcher in a process group of its own (as a supervisor would; also kept away from
 * the test runner's signals), its environment without KXM_ or npm_ variables so npm reads the
 * checkout's .npmrc as a user's shell would. Resolves once the hub has printed its start-up line.
 */
async function launch(command: string, args: string[], onTestFinished: (fn: () => void) => void) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-signals-"));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_") && !k.startsWith("npm_")));
  const child = spawn(command, [...args, "--port", "0", "--data-path", path.join(dir, "kxm.db"), "--log-path", "-"], {
    cwd: repo,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = child.pid!;
  onTestFinished(() => {
    // Whatever is left (a hub the launcher lost) is still in the group: end it, then its files.
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // the group is gone
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (b: Buffer) => (stdout += b.toString()));
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  let watched: number[] = [];
  // The hub's and the shell's liveness is read in the exit callback itself, before anything else runs.
  const exited = new Promise<Outcome>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal, leftAtExit: watched.filter(alive) })),
  );
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const url = await within(
    new Promise<string>((resolve, reject) => {
      child.stdout!.on("data", () => {
        const m = /kxm hub listening at (\S+);/.exec(stdout);
        if (m) resolve(m[1]!);
      });
      void exited.then((o) => reject(new Error(`${command} exited with ${o.code}: ${stderr}`)));
    }),
    `${command} ${args.join(" ")} to start the hub`,
  );
  watched = descendants(pid);
  expect(watched.some((p) => cmdline(p).includes("kxm-hub") && cmdline(p).includes("serve")), "the hub is below the launcher").toBe(true);
  return {
    pid,
    port: Number(new URL(url).port),
    exited,
    closed,
    /** The hub's log events (`--log-path -`: JSON lines on stdout). */
    events: () =>
      stdout
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { event: string; signal?: string; forced?: boolean }),
  };
}

const launchers: [string, string, string[]][] = [
  ["npm start", "npm", ["start", "--"]],
  ["npx kxm-hub serve", "npx", ["--no-install", "kxm-hub", "serve"]],
];

describe.concurrent("signals reach the hub through its launcher", { timeout: testTimeoutMs }, () => {
  for (const [name, command, args] of launchers) {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      it(`${signal} to the ${name} process alone stops the hub gracefully before it exits`, async ({ onTestFinished }) => {
        const l = await launch(command, args, onTestFinished);
        process.kill(l.pid, signal);
        const outcome = await within(l.exited, `${name} to exit`);
        expect(outcome.leftAtExit.map(cmdline), "processes left when the launcher exited").toEqual([]);
        expect(await accepts(l.port), "the port accepts connections").toBe(false);
        expect(outcome).toMatchObject({ code: 0, signal: null });
        await within(l.closed, "the launcher's output to end");
        const events = l.events();
        expect(events.find((e) => e.event === "hub_stopping")?.signal).toBe(signal);
        expect(events.at(-1)).toMatchObject({ event: "hub_stopped", forced: false });
      });
    }
  }

  // Ctrl-C signals the terminal's whole process group, and npm forwards its own copy: the hub gets
  // SIGINT twice, and the second must not cut its graceful stop short (it did, once in two tries).
  it("Ctrl-C under npm start (SIGINT to the whole group, twice to the hub) still stops it gracefully", async ({ onTestFinished }) => {
    const l = await launch("npm", ["start", "--"], onTestFinished);
    process.kill(-l.pid, "SIGINT");
    const outcome = await within(l.exited, "npm start to exit");
    expect(outcome).toMatchObject({ code: 0, signal: null, leftAtExit: [] });
    expect(await accepts(l.port)).toBe(false);
    await within(l.closed, "npm's output to end");
    expect(l.events().at(-1)).toMatchObject({ event: "hub_stopped", forced: false });
  });
});
