import { AcquireLeaseResponseSchema, LeaseSchema, RenewLeaseResponseSchema, type Lease, type Session } from "../../clients/ts/src/index.js";
import { agentFlags, agentTarget, asAgent, durationMs, parseFlags, agentFlagOptions, protoJson, restTarget, write } from "./agent-target.js";
import { agentExitCodesText, helpOf, type Parsed } from "./agent.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";
import { callHub, segment } from "./hub-client.js";
import { leasesText, type LeaseJson } from "./ops-output.js";

/**
 * `kxm-hub lease <subcommand>`: a lease from a shell. `run` holds one across a command (see
 * lease-run.ts). The one-shot `acquire`, `renew` and `release` act as KXM_AGENT (registered or
 * resumed, then unregistered: a lease stays with the agent's id while it is offline, so the next
 * command, resuming the same agent, can renew or release it); nothing renews a lease between
 * them, so it lapses at its TTL. `get`, `list` and `check` read with the project's token alone.
 */

/** `lease check`'s answer for a token that must not be accepted. */
export const fenceRejectedExitCode = 4;

const ttlFlag = { ttl: { value: "duration", meaning: "time to live, 5s..10m (30s, 5m, 1500ms, or bare milliseconds)", default: "5m, the hub's" } };
const waitFlag = { wait: { value: "duration", meaning: "how long to wait for a lease another agent holds, 0..10m", default: "0: lease_held at once" } };
const tokenNote = "<token> defaults to the token the agent holds the lease with now.";

const help = {
  acquire: helpOf(
    "kxm-hub lease acquire <name> [--ttl <duration>] [--wait <duration>] [--json]",
    "Acquires lease <name> as KXM_AGENT and prints its fencing token. Nothing renews it: it lapses at its\n" +
      "TTL unless renewed (lease renew) or released (lease release) by the same agent. To hold a lease while\n" +
      "a command runs, use kxm-hub lease run. --json prints the hub's answer (ProtoJSON).",
    { ...ttlFlag, ...waitFlag, ...agentFlags },
  ),
  renew: helpOf(
    "kxm-hub lease renew <name> [<token>] [--ttl <duration>] [--json]",
    `Renews lease <name>, held by KXM_AGENT, for another TTL from now. ${tokenNote}`,
    { ...ttlFlag, ...agentFlags },
  ),
  release: helpOf("kxm-hub lease release <name> [<token>] [--json]", `Releases lease <name>, held by KXM_AGENT. ${tokenNote}`, agentFlags),
  get: helpOf("kxm-hub lease get <name> [--json]", "Shows lease <name>: holder, fencing token, expiry, waiters (the project's token).", agentFlags),
  list: helpOf("kxm-hub lease list [--json]", "Lists the project's live leases (the project's token).", agentFlags),
  check: helpOf(
    "kxm-hub lease check <name> <token> [--json]",
    "Asks the hub whether <token> is lease <name>'s current token, as a resource the lease guards would\n" +
      `before accepting a write (the project's token). Exit 0 when valid; ${fenceRejectedExitCode} when not, with\n` +
      "`kxm-hub: fence_rejected: ... <reason>` on stderr (superseded, expired, released or unknown).",
    agentFlags,
  ),
};

export const leaseHelp = `Usage: kxm-hub lease run <name> [--ttl <d>] [--wait <d>] [--grace <d>] -- <command> [args...]
       ${Object.values(help)
         .map((h) => h.split("\n")[0]!.replace(/^Usage: /, ""))
         .join("\n       ")}
       kxm-hub lease <subcommand> --help

Leases from a shell, as agent KXM_AGENT of project KXM_PROJECT at KXM_URL (token KXM_TOKEN).
\`lease run\` holds a lease while a command runs, renewed, and stops the command if it is lost:
the way to hold a lease across a command. \`acquire\`, \`renew\` and \`release\` are one-shot: each
registers the agent (or resumes it, offline, with its leases), calls and unregisters; nothing
renews the lease between them.

${agentExitCodesText} lease check: ${fenceRejectedExitCode} the token is not valid. lease run: see kxm-hub lease run --help.`;

const leaseLine = (l: Lease) => `${l.name}  token ${l.fencingToken}  held by ${l.holderAgentName} (${l.holderAgentId})\n`;

function tokenOf(raw: string): bigint {
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || !Number.isSafeInteger(Number(raw))) throw usageError(`<token> must be an integer in 1..${Number.MAX_SAFE_INTEGER}, got ${JSON.stringify(raw)}`);
  return BigInt(raw);
}

/**
 * The token the session's agent holds `name` with, lapsed or not (the hub releases a lapsed lease
 * of its holder, and answers a renewal of one with lease_expired); lease_not_held when another
 * agent holds it, or nobody does.
 */
async function heldToken(s: Session, name: string): Promise<bigint> {
  const { lease } = await s.leases.getLease({ name });
  if (!lease || lease.holderAgentId !== s.agent.id) {
    throw new CommandError("lease_not_held", `${s.agent.name} does not hold lease ${name}; pass its <token> to act on it anyway`, exitCodes.refused);
  }
  return lease.fencingToken;
}

type Run = (argv: string[]) => Promise<void>;

function parse(argv: string[], sub: keyof typeof help, args: { required: string[]; optional?: string }, extra: Record<string, { type: "string" }> = {}): Parsed {
  const { values, positionals } = parseFlags(argv, { ...agentFlagOptions, json: { type: "boolean" }, ...extra });
  if (values.help) return { help: help[sub] };
  const max = args.required.length + (args.optional ? 1 : 0);
  if (positionals.length < args.required.length || positionals.length > max) {
    throw usageError(`expected ${args.required.map((a) => `<${a}>`).join(" ") || "no arguments"}${args.optional ? ` [<${args.optional}>]` : ""}, got ${positionals.length} argument(s); see kxm-hub lease ${sub} --help`);
  }
  return { help: undefined, values: values as Record<string, string | boolean | undefined>, positionals };
}

const subcommands: Record<string, Run> = {
  run: async (argv) => (await import("./lease-run.js")).leaseRunCommand(argv),

  async acquire(argv) {
    const p = parse(argv, "acquire", { required: ["name"] }, { ttl: { type: "string" }, wait: { type: "string" } });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, true);
    const ttlMs = p.values.ttl === undefined ? undefined : durationMs("ttl", p.values.ttl as string, 5_000, 600_000);
    const waitMs = p.values.wait === undefined ? undefined : durationMs("wait", p.values.wait as string, 0, 600_000);
    const answer = await asAgent(t, `kxm-hub lease acquire ${p.positionals[0]}`, (s) => s.leases.acquireLease({ name: p.positionals[0]!, ttlMs, waitMs }));
    await write(p.values.json ? `${JSON.stringify(protoJson(AcquireLeaseResponseSchema, answer), null, 2)}\n` : `${answer.lease!.fencingToken}\n`);
  },

  async renew(argv) {
    const p = parse(argv, "renew", { required: ["name"], optional: "token" }, { ttl: { type: "string" } });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, true);
    const [name, raw] = p.positionals as [string, string | undefined];
    const ttlMs = p.values.ttl === undefined ? undefined : durationMs("ttl", p.values.ttl as string, 5_000, 600_000);
    const answer = await asAgent(t, `kxm-hub lease renew ${name}`, async (s) =>
      s.leases.renewLease({ name, fencingToken: raw === undefined ? await heldToken(s, name) : tokenOf(raw), ttlMs }),
    );
    await write(p.values.json ? `${JSON.stringify(protoJson(RenewLeaseResponseSchema, answer), null, 2)}\n` : `renewed ${leaseLine(answer.lease!)}`);
  },

  async release(argv) {
    const p = parse(argv, "release", { required: ["name"], optional: "token" });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, true);
    const [name, raw] = p.positionals as [string, string | undefined];
    const answer = await asAgent(t, `kxm-hub lease release ${name}`, async (s) =>
      s.leases.releaseLease({ name, fencingToken: raw === undefined ? await heldToken(s, name) : tokenOf(raw) }),
    );
    const lease = answer.lease!;
    await write(p.values.json ? `${JSON.stringify({ released: answer.released, lease: protoJson(LeaseSchema, lease) }, null, 2)}\n` : `released ${leaseLine(lease)}`);
  },

  async get(argv) {
    const p = parse(argv, "get", { required: ["name"] });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, false);
    const answer = (await callHub(restTarget(t), "GET", `/v1/leases/${segment(p.positionals[0]!)}?${new URLSearchParams({ project: t.project })}`)) as {
      lease: LeaseJson;
      expired?: boolean;
    };
    await write(p.values.json ? `${JSON.stringify(answer, null, 2)}\n` : `${leasesText(t.project, [answer.lease]).trimEnd()}${answer.expired ? "\n(lapsed)" : ""}\n`);
  },

  async list(argv) {
    const p = parse(argv, "list", { required: [] });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, false);
    const leases: LeaseJson[] = [];
    let pageToken = "";
    do {
      const query = new URLSearchParams({ project: t.project, pageSize: "1000", ...(pageToken && { pageToken }) });
      const page = (await callHub(restTarget(t), "GET", `/v1/leases?${query}`)) as { leases?: LeaseJson[]; nextPageToken?: string };
      leases.push(...(page.leases ?? []));
      pageToken = page.nextPageToken ?? "";
    } while (pageToken !== "");
    await write(p.values.json ? `${JSON.stringify({ leases }, null, 2)}\n` : leasesText(t.project, leases));
  },

  async check(argv) {
    const p = parse(argv, "check", { required: ["name", "token"] });
    if (p.help !== undefined) return write(`${p.help}\n`);
    const t = agentTarget(p.values, false);
    const [name, raw] = p.positionals as [string, string];
    const fencingToken = Number(tokenOf(raw));
    const answer = (await callHub(restTarget(t), "POST", `/v1/leases/${segment(name)}/check`, { fencingToken, project: t.project })) as {
      valid: boolean;
      reason: string;
      lease?: LeaseJson;
    };
    if (p.values.json) await write(`${JSON.stringify(answer, null, 2)}\n`);
    if (!answer.valid) throw new CommandError("fence_rejected", `token ${fencingToken} of lease ${name} is not valid: ${answer.reason}`, fenceRejectedExitCode, answer);
    if (!p.values.json) await write(`valid: token ${fencingToken} is lease ${name}'s current token\n`);
  },
};

/** `kxm-hub lease <subcommand>`: see leaseHelp. */
export async function leaseCommand(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    await write(`${leaseHelp}\n`);
    if (name === undefined) throw usageError(`a subcommand is required: ${Object.keys(subcommands).join(", ")}`);
    return;
  }
  const run = subcommands[name];
  if (!run) throw usageError(`unknown lease subcommand ${JSON.stringify(name)}; see kxm-hub lease --help`);
  return run(rest);
}
