/**
 * CPU time of other processes, read from Linux's /proc (user + system, in ms): what a benchmark
 * needs to say where a machine's cores went (the hubs, PostgreSQL, its own load). Elsewhere, or
 * for a process that is gone, the figures are NaN.
 */
import fs from "node:fs";

/** Clock ticks per second of /proc's times (USER_HZ: 100 on every Linux the project runs on). */
const ticksPerSecond = 100;

interface ProcStat {
  ppid: number;
  cpuMs: number;
}

function stat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name is in parentheses and may hold spaces: the fields start after its last ")".
  const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { ppid: Number(f[1]), cpuMs: ((Number(f[11]) + Number(f[12])) * 1_000) / ticksPerSecond };
}

/** The CPU time of `pids` together, in ms (NaN when one cannot be read). */
export function cpuMsOf(pids: number[]): number {
  let sum = 0;
  for (const pid of pids) sum += stat(pid)?.cpuMs ?? NaN;
  return sum;
}

/** `root` and every process whose parent it is (a PostgreSQL server and its backends), in ms. */
export function treeCpuMs(root: number): number {
  const own = stat(root);
  if (!own) return NaN;
  let sum = own.cpuMs;
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const s = stat(Number(name));
    if (s?.ppid === root) sum += s.cpuMs;
  }
  return sum;
}

/** The pid of the process whose command line holds every one of `parts`, if exactly one does. */
export function findProcess(parts: string[]): number | undefined {
  const found: number[] = [];
  for (const name of fs.existsSync("/proc") ? fs.readdirSync("/proc") : []) {
    if (!/^\d+$/.test(name)) continue;
    let cmd: string;
    try {
      cmd = fs.readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ");
    } catch {
      continue;
    }
    if (parts.every((p) => cmd.includes(p))) found.push(Number(name));
  }
  return found.length === 1 ? found[0] : undefined;
}
