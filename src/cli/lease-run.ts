import { spawn, type ChildProcess } from "node:child_process";
import os from "node:os";
import { HubError, type HeldLease, type Session } from "../../clients/ts/src/index.js";
import { flagHelp, type FlagDoc } from "../config.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";
import { agentFlagOptions, agentFlags, agentTarget, bounded, closeSession, durationMs, openSession, parseFlags, refusalOf, write, type AgentTarget } from "./agent-target.js";

/**
 * `kxm-hub lease run NAME -- COMMAND ARGS...`: holds a lease for as long as a command runs. The
 * agent registers, waits for the lease, starts the command in a process group of its own with the
 * fencing token in its environment, keeps the lease renewed (the client library's keeper) and
 * releases it when the command ends. When the lease is lost the command's group is terminated,
 * then killed after a grace, so it stops before another holder can exist; a guard process does the
 * same when lease run itself dies or is stopped (guardProgram).
 */

/** lease run's own exit codes; any other code is the command's (128 + n: killed by signal n). */
export const leaseRunExitCodes = {
  refused: exitCodes.refused,
  usage: exitCodes.usage,
  unreachable: exitCodes.unreachable,
  /** The lease was not had within --wait: nothing ran (EX_TEMPFAIL). */
  leaseHeld: 75,
  /** The lease was lost while the command ran; the command was terminated. */
  leaseLost: 76,
  /** COMMAND could not be started: not executable (126), not found (127), as a shell says. */
  notExecutable: 126,
  notFound: 127,
} as const;

const defaultTtlMs = 30_000;
const defaultWaitMs = 600_000;

const runFlags = {
  ttl: { value: "duration", meaning: "the lease's time to live on the hub, 5s..10m; renewed every third of it", default: "30s" },
  wait: { value: "duration", meaning: "how long to wait for a lease another agent holds, 0..10m (0: do not wait)", default: "10m" },
  grace: {
    value: "duration",
    meaning: "after the lease is lost, how long the command has between SIGTERM and SIGKILL",
    default: "min(5s, ttl/10): SIGTERM comes a fifth of the TTL before the lease can lapse, so the command ends inside it",
  },
  ...agentFlags,
} satisfies Record<string, FlagDoc>;

export const leaseRunHelp = `Usage: kxm-hub lease run <name> [--ttl <duration>] [--wait <duration>] [--grace <duration>] -- <command> [args...]

Holds lease <name> while <command> runs. Registers the agent (KXM_AGENT; resumes it if offline),
waits for the lease, then starts <command> in a process group of its own (run from a terminal, in
lease run's group instead, so that it keeps the terminal for a prompt), stdio inherited, with
KXM_FENCING_TOKEN, KXM_LEASE_NAME, KXM_LEASE_RESOURCE and KXM_FENCE (<name>:<token>, what a
guarded repository's push option takes) added to its environment. The lease is
renewed every third of its TTL; SIGINT, SIGTERM and SIGHUP are passed on to the command's group.
When the command ends the lease is released at once, the agent unregisters, and lease run exits
with the command's exit code (128 + n if a signal n killed it).

If the lease is lost (taken by an operator or another holder after it lapsed: lease_superseded,
lease_expired, lease_not_found; or renewals not confirmed a fifth of the TTL before it can lapse:
lease_unconfirmed, also when this process was stopped or the hub answers too slowly), the
command's group gets SIGTERM, then SIGKILL after --grace, and lease run exits ${leaseRunExitCodes.leaseLost}. If lease run
itself is killed outright (SIGKILL, the OOM killer) or stopped past that deadline (SIGSTOP), a guard
process it starts beside the command does the same to the command's group.
Durations: 30s, 5m, 1500ms, 1h, or a bare number of milliseconds.

This is how a lease is held across a command. \`kxm-hub lease acquire\` holds one only until its
TTL runs out, with nothing renewing it.

${flagHelp(runFlags)}
  --help, -h
      this text

Exit codes: the command's own (128 + n: killed by signal n; also a signal n while waiting for the
lease, when nothing ran); otherwise
  ${leaseRunExitCodes.usage}    usage error
  ${leaseRunExitCodes.refused}    refused by the hub before the command started (kxm-hub: <code>: ... on stderr)
  ${leaseRunExitCodes.unreachable}    hub unreachable, or its TLS handshake failed (tls_failed)
  ${leaseRunExitCodes.leaseHeld}   lease_held: not had within --wait; nothing ran
  ${leaseRunExitCodes.leaseLost}   lease_lost: the lease was lost and the command terminated (the reason on stderr)
  ${leaseRunExitCodes.notExecutable}  <command> not executable; ${leaseRunExitCodes.notFound} <command> not found`;

const forwarded = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

const signalCode = (signal: NodeJS.Signals) => 128 + (os.constants.signals[signal] ?? 0);

/**
 * Where the command's signals go: its whole process group (a negative id) when it runs in one of
 * its own, else the command alone (its pid).
 */
type SignalTarget = number;

/** Sends `signal` to the command (signalTarget); one already gone is not an error. */
function signalCommand(target: SignalTarget, signal: NodeJS.Signals): void {
  try {
    process.kill(target, signal);
  } catch {
    // ESRCH: nothing left of it.
  }
}

interface RunOptions {
  name: string;
  ttlMs: number;
  waitMs: number;
  graceMs: number;
  command: string;
  args: string[];
}

/** Waits for the lease; a signal meanwhile gives it up. Throws lease_held (exit 75) or the hub's refusal. */
async function acquire(session: Session, o: RunOptions, target: AgentTarget): Promise<HeldLease> {
  const giveUp = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => giveUp.abort(signal);
  for (const s of forwarded) process.on(s, onSignal);
  try {
    return await session.acquire(o.name, { ttlMs: o.ttlMs, waitMs: o.waitMs, signal: giveUp.signal });
  } catch (e) {
    if (giveUp.signal.aborted) {
      const signal = giveUp.signal.reason as NodeJS.Signals;
      throw new CommandError("interrupted", `${signal} while waiting for lease ${o.name}; nothing ran`, signalCode(signal));
    }
    const err = HubError.from(e);
    if (err.code === "lease_held") {
      const holder = err.lease ? ` held by ${err.lease.holderAgentName} (token ${err.lease.fencingToken})` : "";
      throw new CommandError("lease_held", `lease ${o.name}${holder} was not had within --wait ${o.waitMs} ms; nothing ran`, leaseRunExitCodes.leaseHeld);
    }
    throw refusalOf(e, target);
  } finally {
    for (const s of forwarded) process.off(s, onSignal);
  }
}

/**
 * The guard's program (`node -e`; argv: the command's pid, the grace in ms, and whether its
 * signals go to the pid's process group or to it alone: signalCommand). Its stdin
 * is a pipe whose only writer is lease run, so the kernel closes it when lease run ends in any
 * way, SIGKILL and the OOM killer included. Down the pipe, lease run writes its local deadline
 * (a line of milliseconds on the system's monotonic clock, `process.hrtime`) whenever it moves.
 * When the pipe closes, or the deadline passes without a newer one (lease run stopped with
 * SIGSTOP, or starved), the guard does what a lost lease does: SIGTERM to the group, SIGKILL
 * after the grace unless the group is gone by then (it looks every 50 ms, and leaves as soon as
 * it is: a group number, once free, can be another's). Signals meant for a terminal's or a
 * supervisor's group do not reach it (a group of its own), and the ones lease run passes on are
 * ignored.
 */
const guardProgram = `
const [pid, graceMs] = process.argv.slice(1, 3).map(Number);
const target = process.argv[3] === "group" ? -pid : pid;
for (const s of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(s, () => {});
const signal = (s) => { try { process.kill(target, s); return true; } catch { return false; } };
const nowMs = () => Number(process.hrtime.bigint() / 1000000n);
let deadline = Infinity;
let text = "";
let ending = false;
function end() {
  if (ending) return;
  ending = true;
  if (!signal("SIGTERM")) process.exit(0);
  const until = nowMs() + graceMs;
  setInterval(() => {
    if (!signal(0)) process.exit(0);
    if (nowMs() >= until) { signal("SIGKILL"); process.exit(0); }
  }, Math.min(50, graceMs));
}
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  text += chunk;
  const lines = text.split("\\n");
  text = lines.pop();
  for (const line of lines) if (line !== "") deadline = Number(line);
});
process.stdin.on("end", end);
setInterval(() => { if (nowMs() >= deadline) end(); }, 50);
`;

/** Milliseconds on the system's monotonic clock, which every process reads alike (the guard's deadline). */
const systemMonotonicMs = () => Number(process.hrtime.bigint() / 1_000_000n);

/** The guard of a command's group: stand it down, or move its deadline. */
interface Guard {
  standDown(): void;
  /** The local deadline, as `performance.now()` counts it in this process. */
  deadline(atPerformanceMs: number): void;
}

const noGuard: Guard = { standDown() {}, deadline() {} };

/**
 * Starts the guard of the command's group (guardProgram): without it a lease run killed outright
 * would leave the command running on a lease nobody renews, past the moment another holder can
 * have it, and one stopped would leave it running until it is continued. A guard that cannot
 * start, or ends while it should stand, is said on stderr, and lease run goes on as it did
 * without one.
 */
function guard(target: SignalTarget, graceMs: number): Guard {
  let standing = true;
  const unguarded = (why: string) => {
    if (standing) process.stderr.write(`kxm-hub: warning: the command runs without its guard (${why}): if lease run is killed outright, nothing ends it\n`);
    standing = false;
  };
  let g: ChildProcess;
  try {
    // The target as a pid and a word: a negative number would be taken for one of node's options.
    g = spawn(process.execPath, ["-e", guardProgram, String(Math.abs(target)), String(Math.max(1, Math.round(graceMs))), target < 0 ? "group" : "pid"], {
      detached: true,
      stdio: ["pipe", "ignore", "ignore"],
      env: {},
    });
  } catch (e) {
    unguarded((e as Error).message);
    return noGuard;
  }
  g.once("error", (e) => unguarded(e.message));
  // Exit 0 is a guard that did its work (the group ended, or it ended it): nothing to warn of.
  g.once("exit", (code, signal) => (code === 0 ? void (standing = false) : unguarded(signal ? `it was killed by ${signal}` : `it exited ${code}`)));
  g.unref();
  const pipe = g.stdin;
  if (!pipe) {
    // The spawn failed: "error" comes next.
    return { standDown: () => void (standing = false), deadline() {} };
  }
  pipe.on("error", () => {});
  (pipe as unknown as { unref?: () => void }).unref?.();
  let sent = Number.NaN;
  return {
    standDown() {
      standing = false;
      g.kill("SIGKILL");
      pipe.destroy();
    },
    deadline(atPerformanceMs) {
      const at = Math.floor(systemMonotonicMs() + (atPerformanceMs - performance.now()));
      if (!standing || Math.abs(at - sent) < 5) return; // the two clocks' floors differ by a millisecond
      sent = at;
      pipe.write(`${at}\n`);
    },
  };
}

/**
 * Runs the command under the held lease. Resolves with lease run's exit code once the command
 * has ended; rejects with lease_lost (exit 76) when the lease was lost while it ran.
 */
function supervise(held: HeldLease, o: RunOptions): Promise<number> {
  // In a terminal the command stays in lease run's session and process group, so that it keeps
  // the terminal (a password or passphrase prompt opens /dev/tty: `git push` over https or ssh);
  // a group of its own would be a session of its own too (Node's detached is setsid), without
  // one. Its signals then go to it alone. Elsewhere it runs in a group of its own, which every
  // signal reaches, its children's processes included.
  const ownGroup = process.stdin.isTTY !== true;
  const child = spawn(o.command, o.args, {
    detached: ownGroup,
    stdio: "inherit",
    env: {
      ...process.env,
      KXM_FENCING_TOKEN: String(held.token),
      KXM_LEASE_NAME: held.name,
      KXM_LEASE_RESOURCE: held.lease.resource,
      // The push option of a repository guarded by kxm-hub guard git: the token with its lease.
      KXM_FENCE: `${held.name}:${held.token}`,
    },
  });
  // Signals are passed on from the command's first moment: its spawn returns while it already
  // runs, and starting the guard takes a spawn more.
  const target: SignalTarget = ownGroup ? -child.pid! : child.pid!;
  // In a terminal a Ctrl-C is the kernel's SIGINT to the foreground group, the command among
  // its members: passed on, it would reach the command twice, and a second interrupt is "force
  // quit" to many tools (terraform, docker compose). It is only waited out.
  const onSignal = (signal: NodeJS.Signals) => {
    if (!ownGroup && signal === "SIGINT") return;
    signalCommand(target, signal);
  };
  for (const s of forwarded) process.on(s, onSignal);
  // Then the guard, in the same turn: it watches from the start.
  const guarded = child.pid === undefined ? noGuard : guard(target, o.graceMs);
  /** The local deadline, on the monotonic clock the keeper counts with (below). */
  const deadline = () => held.validUntilMs - o.ttlMs / 5;
  const checkEveryMs = Math.min(250, o.ttlMs / 20);
  // The guard's deadline comes later than this process's own by a slack: a renewal confirmed
  // just before the deadline reaches the guard only at the watchdog's next tick, and a guard that
  // acted on the older deadline would end a command whose lease is fine. It is the backstop of a
  // lease run that cannot act; with the default grace (a tenth of the TTL) its SIGKILL still comes
  // before the lease can lapse.
  const guardSlackMs = checkEveryMs + 100;
  const guardDeadline = () => deadline() + guardSlackMs;
  guarded.deadline(guardDeadline());
  return new Promise((resolve, reject) => {
    let loss: HubError | undefined;
    let killTimer: NodeJS.Timeout | undefined;

    // The local deadline, on the monotonic clock the keeper counts with: a fifth of the TTL before
    // the lease can lapse, counted from the last confirmed renewal's send time. A stopped process
    // (SIGSTOP) or a hub answering slowly cannot push it back: this timer fires late after a stop,
    // and acts at once, before any answer comes.
    // The guard holds it too (with its slack), so a lease run that is stopped, and cannot act,
    // still has the command ended before the lease can lapse.
    const unconfirmed = () => new HubError("lease_unconfirmed", `lease ${o.name} was not confirmed in time: it may lapse on the hub`, {}, held.lease, true);
    const watchdog = setInterval(() => {
      if (performance.now() >= deadline()) lose(unconfirmed());
      else guarded.deadline(guardDeadline());
    }, checkEveryMs);

    function lose(reason: HubError) {
      if (loss || child.exitCode !== null || child.signalCode !== null) return;
      loss = reason;
      signalCommand(target, "SIGTERM");
      killTimer = setTimeout(() => signalCommand(target, "SIGKILL"), o.graceMs);
    }
    const onLost = () => lose(held.lost.reason as HubError);
    held.lost.addEventListener("abort", onLost, { once: true });

    const done = () => {
      guarded.standDown();
      clearInterval(watchdog);
      clearTimeout(killTimer);
      held.lost.removeEventListener("abort", onLost);
      for (const s of forwarded) process.off(s, onSignal);
    };

    child.once("error", (e: NodeJS.ErrnoException) => {
      done();
      const notFound = e.code === "ENOENT";
      reject(
        new CommandError(
          notFound ? "command_not_found" : "command_not_executable",
          `cannot start ${JSON.stringify(o.command)}: ${e.message}`,
          notFound ? leaseRunExitCodes.notFound : leaseRunExitCodes.notExecutable,
        ),
      );
    });
    child.once("exit", (code, signal) => {
      done();
      // Ended past the deadline before this process acted (the guard ended it while this process
      // was stopped): the lease was as good as lost.
      const sentTerm = loss !== undefined;
      if (!loss && performance.now() >= deadline()) loss = unconfirmed();
      if (loss) {
        // Nothing in the group may go on writing with a lost lease: whatever the leader left is killed.
        signalCommand(target, "SIGKILL");
        const how = signal ? `was killed by ${signal}` : `exited ${code}`;
        reject(
          new CommandError(
            "lease_lost",
            `${loss.code}: lease ${o.name} (token ${held.token}) was lost (${loss.message}); the command ${sentTerm ? "was sent SIGTERM and " : "ended past the deadline: it "}${how}`,
            leaseRunExitCodes.leaseLost,
          ),
        );
        return;
      }
      resolve(signal ? signalCode(signal) : (code ?? 1));
    });
  });
}

/** Splits `lease run`'s own arguments from the command after `--`. */
function splitAtDashes(argv: string[]): [string[], string[]] {
  const at = argv.indexOf("--");
  return at < 0 ? [argv, []] : [argv.slice(0, at), argv.slice(at + 1)];
}

/**
 * `kxm-hub lease run`: see leaseRunHelp. Exits with the command's code; throws CommandError for
 * everything else (usage_error 2, a refusal 1, hub_unreachable or tls_failed 3, lease_held 75, lease_lost 76).
 */
export async function leaseRunCommand(argv: string[]): Promise<void> {
  const [own, commandLine] = splitAtDashes(argv);
  const { values, positionals } = parseFlags(own, {
    ...agentFlagOptions,
    ttl: { type: "string" },
    wait: { type: "string" },
    grace: { type: "string" },
  });
  if (values.help) return write(`${leaseRunHelp}\n`);
  if (positionals.length !== 1) throw usageError(`expected one <name> before --, got ${positionals.length}; see kxm-hub lease run --help`);
  if (commandLine.length === 0) throw usageError("a command is required after --; see kxm-hub lease run --help");
  const target = agentTarget(values, true);
  const ttlMs = values.ttl === undefined ? defaultTtlMs : durationMs("ttl", values.ttl as string, 5_000, 600_000);
  const o: RunOptions = {
    name: positionals[0]!,
    ttlMs,
    waitMs: values.wait === undefined ? defaultWaitMs : durationMs("wait", values.wait as string, 0, 600_000),
    graceMs: values.grace === undefined ? Math.min(5_000, ttlMs / 10) : durationMs("grace", values.grace as string, 0, 600_000),
    command: commandLine[0]!,
    args: commandLine.slice(1),
  };

  const session = await openSession(target, `lease run ${o.name}`);
  let exitCode: number;
  try {
    const held = await acquire(session, o, target);
    try {
      exitCode = await supervise(held, o);
    } finally {
      // Released at once (a lost lease is not), whatever became of the command.
      await bounded(held.release());
    }
  } finally {
    await closeSession(session);
  }
  await write("");
  process.exit(exitCode);
}
