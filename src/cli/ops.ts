import { flagHelp, type FlagDoc } from "../config.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";
import { callHub, callTimeoutMs, segment, type HubTarget } from "./hub-client.js";
import { hubTls, tlsFlags } from "./tls-client.js";
import { defaultHubUrl, hubUrl, parseFlags, write } from "./agent-target.js";
import {
  auditText,
  createdTokenText,
  evictedText,
  leasesText,
  releasedText,
  revokedTokenText,
  tokensText,
  type AgentJson,
  type AuditJson,
  type LeaseJson,
  type TokenJson,
} from "./ops-output.js";

/**
 * `kxm-hub ops`: the operator's hands on a running hub (issue 20), through its REST face, so they
 * work against any hub the operator can reach, replicas on PostgreSQL included. Each subcommand
 * is one documented call (docs/api.md, Errors, and docs/security.md, Authentication, hold for it).
 */

const commonFlags = {
  project: { value: "project", meaning: "the project the lease or agent belongs to", default: "none, required" },
  url: { env: "KXM_URL", value: "url", meaning: "the hub's base URL", default: defaultHubUrl },
  token: {
    env: "KXM_TOKEN",
    value: "token",
    meaning: "sent as Authorization: Bearer: the admin token, or the project's own token",
    default: "none (a loopback hub without KXM_AUTH_TOKEN trusts its callers as admin)",
  },
  ...tlsFlags,
} satisfies Record<string, FlagDoc>;

const fencingTokenFlag = {
  "fencing-token": {
    value: "n",
    meaning: "release only while this is the current token (what you looked at), else lease_superseded",
    default: "none: whatever is held",
  },
} satisfies Record<string, FlagDoc>;

const trailer = `  --json
      print the hub's JSON answer (also a refusal's) instead of the summary
  --help, -h
      this text

Exit codes: 0 done; 1 refused by the hub (\`kxm-hub: <code>: <message>\` on stderr); 2 usage error;
3 hub unreachable (no answer within ${callTimeoutMs / 1000} s, or not a kxm hub at --url), or its TLS
handshake failed (tls_failed: the TLS code and what to do on stderr).`;

const tokenFlags = {
  scope: { value: "agent|read|check", meaning: "what the token may do: everything, operator reads and CheckFence, or CheckFence only", default: "agent" },
  label: { value: "text", meaning: "for people: what or who the token is for", default: "none" },
  ttl: { value: "ms", meaning: "the token stops working this long after its creation (1000..315360000000)", default: "never" },
} satisfies Record<string, FlagDoc>;

const optionalProject = {
  ...commonFlags,
  project: { value: "project", meaning: "only this project's entries", default: "every entry" },
} satisfies Record<string, FlagDoc>;

interface Subcommand {
  usage: string;
  what: string;
  /** The subcommand runs without --project (then `project` is ""). */
  projectOptional?: boolean;
  /** The name of the one positional argument, if the subcommand takes one. */
  positional?: string;
  flags: Record<string, FlagDoc>;
  run(target: HubTarget, project: string, arg: string | undefined, flags: Record<string, string | undefined>): Promise<{ json: unknown; text: string }>;
}

const subcommands: Record<string, Subcommand> = {
  leases: {
    usage: "kxm-hub ops leases --project <project> [--json]",
    what: "Lists the project's live leases: holder, fencing token, expiry, and who waits for each, first in line first.",
    flags: commonFlags,
    async run(target, project) {
      // Every page, so the operator sees all of them; --json prints them as one answer.
      const leases: LeaseJson[] = [];
      let pageToken = "";
      do {
        const query = new URLSearchParams({ project, includeExpired: "false", pageSize: "1000", ...(pageToken && { pageToken }) });
        const page = (await callHub(target, "GET", `/v1/leases?${query}`)) as { leases?: LeaseJson[]; nextPageToken?: string };
        leases.push(...(page.leases ?? []));
        pageToken = page.nextPageToken ?? "";
      } while (pageToken !== "");
      return { json: { leases }, text: leasesText(project, leases) };
    },
  },
  "release-lease": {
    usage: "kxm-hub ops release-lease --project <project> <name> [--fencing-token <n>] [--json]",
    what:
      "Force-releases a lease whoever holds it. Its token stays the resource's floor: the holder's next\n" +
      "renew is lease_superseded, and the first waiter, if any, is granted it at once with a higher token.",
    positional: "name",
    flags: { ...commonFlags, ...fencingTokenFlag },
    async run(target, project, name, flags) {
      const raw = flags["fencing-token"];
      if (raw !== undefined && (!/^\d+$/.test(raw) || Number(raw) < 1 || !Number.isSafeInteger(Number(raw)))) {
        throw usageError(`--fencing-token must be an integer in 1..${Number.MAX_SAFE_INTEGER}`);
      }
      const body = raw === undefined ? {} : { fencingToken: Number(raw) };
      const answer = (await callHub(target, "POST", `/v1/ops/projects/${segment(project)}/leases/${segment(name!)}/release`, body)) as {
        lease: LeaseJson;
        next?: LeaseJson;
      };
      return { json: answer, text: releasedText(answer) };
    },
  },
  evict: {
    usage: "kxm-hub ops evict --project <project> <agent-id> [--json]",
    what:
      "Evicts an agent: offline at once, its key refused (its streams end), its leases released and its\n" +
      "waiting acquires dropped. Its messages stay; it comes back by registering again.",
    positional: "agent-id",
    flags: commonFlags,
    async run(target, project, agentId) {
      const answer = (await callHub(target, "DELETE", `/v1/ops/projects/${segment(project)}/agents/${segment(agentId!)}`)) as {
        agent: AgentJson;
        releasedLeases?: LeaseJson[];
      };
      return { json: answer, text: evictedText(answer) };
    },
  },
  tokens: {
    usage: "kxm-hub ops tokens --project <project> [--json]",
    what: "Lists the project's managed tokens, live, expired and revoked, newest first; never their secrets. Admin only.",
    flags: commonFlags,
    async run(target, project) {
      const answer = (await callHub(target, "GET", `/v1/ops/projects/${segment(project)}/tokens`)) as { tokens?: TokenJson[] };
      return { json: answer, text: tokensText(project, answer.tokens ?? []) };
    },
  },
  "create-token": {
    usage: "kxm-hub ops create-token --project <project> [--scope agent|read|check] [--label <text>] [--ttl <ms>] [--json]",
    what:
      "Creates a project token and prints its secret, the one time it is shown (the hub keeps only its hash).\n" +
      "A project may hold several: rotate by creating the new one, moving the callers, revoking the old. Admin only.",
    flags: { ...commonFlags, ...tokenFlags },
    async run(target, project, _arg, flags) {
      const scope = flags.scope ?? "agent";
      if (!["agent", "read", "check"].includes(scope)) throw usageError("--scope must be agent, read or check");
      const ttl = flags.ttl;
      if (ttl !== undefined && !/^\d{1,15}$/.test(ttl)) throw usageError("--ttl must be a number of milliseconds");
      const body = { scope, ...(flags.label !== undefined && { label: flags.label }), ...(ttl !== undefined && { ttlMs: Number(ttl) }) };
      const answer = (await callHub(target, "POST", `/v1/ops/projects/${segment(project)}/tokens`, body)) as { token: TokenJson; secret: string };
      return { json: answer, text: createdTokenText(answer) };
    },
  },
  "revoke-token": {
    usage: "kxm-hub ops revoke-token --project <project> <token-id> [--json]",
    what: "Revokes a project token: refused at once on every face and replica, and the streams opened with it end. Admin only.",
    positional: "token-id",
    flags: commonFlags,
    async run(target, project, tokenId) {
      const answer = (await callHub(target, "DELETE", `/v1/ops/projects/${segment(project)}/tokens/${segment(tokenId!)}`)) as { token: TokenJson };
      return { json: answer, text: revokedTokenText(answer) };
    },
  },
  audit: {
    usage: "kxm-hub ops audit [--project <project>] [--json]",
    what:
      "Prints the audit trail, newest first (up to 1,000 entries): tokens created, revoked and expired, restores\n" +
      "and fence raises, security alerts. Admin only.",
    projectOptional: true,
    flags: optionalProject,
    async run(target, project) {
      const query = new URLSearchParams({ pageSize: "1000", ...(project && { project }) });
      const answer = (await callHub(target, "GET", `/v1/ops/audit?${query}`)) as { events?: AuditJson[] };
      return { json: answer, text: auditText(answer.events ?? []) };
    },
  },
};

const helpOf = (s: Subcommand) => `Usage: ${s.usage}\n\n${s.what}\n\n${flagHelp(s.flags)}\n${trailer}`;

export const opsHelp = `Usage: ${Object.values(subcommands)
  .map((s) => s.usage)
  .join("\n       ")}
       kxm-hub ops <subcommand> --help

The operator's hands on a running hub, over its REST face (docs/security.md: the admin token,
or the project's own token). Prints a summary; --json prints the hub's JSON answer.

${flagHelp(commonFlags)}
${trailer}`;


/**
 * `kxm-hub ops <subcommand>`: parses the flags (a flag wins over its variable; an empty variable
 * counts as unset), makes the one call and prints its outcome. Throws CommandError: usage_error
 * (exit 2), the hub's refusal (exit 1), hub_unreachable (exit 3).
 */
export async function opsCommand(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    await write(`${opsHelp}\n`);
    if (name === undefined) throw usageError(`a subcommand is required: ${Object.keys(subcommands).join(", ")}`);
    return;
  }
  const sub = subcommands[name];
  if (!sub) throw usageError(`unknown ops subcommand ${JSON.stringify(name)}; see kxm-hub ops --help`);
  const { values, positionals } = parseFlags(rest, {
    ...Object.fromEntries(Object.keys(sub.flags).map((f) => [f, { type: "string" as const }])),
    json: { type: "boolean" },
  }) as { values: Record<string, string | boolean | undefined>; positionals: string[] };
  if (values.help) return write(`${helpOf(sub)}\n`);
  const flags: Record<string, string | undefined> = {};
  for (const [flag, doc] of Object.entries(sub.flags)) {
    const v = (values[flag] as string | undefined) ?? (doc.env ? process.env[doc.env] : undefined);
    flags[flag] = v === undefined || v.trim() === "" ? undefined : v.trim();
  }
  const wanted = sub.positional ? 1 : 0;
  if (positionals.length !== wanted) {
    throw usageError(sub.positional ? `expected one <${sub.positional}>, got ${positionals.length}; usage: ${sub.usage}` : `unexpected argument ${JSON.stringify(positionals[0])}`);
  }
  // The project is taken as written (names may hold spaces at no end, `/`): the hub judges it.
  const project = (values.project as string | undefined) ?? "";
  if (project === "" && !sub.projectOptional) throw usageError(`--project is required; usage: ${sub.usage}`);
  // A token a header cannot carry would fail inside fetch, and look like an unreachable hub.
  if (flags.token !== undefined && /[^\x20-\x7e]/.test(flags.token)) throw usageError("--token (KXM_TOKEN) must be printable ASCII");
  const target: HubTarget = { url: hubUrl(flags.url ?? defaultHubUrl, "--url"), token: flags.token, tls: hubTls(flags) };
  try {
    const { json, text } = await sub.run(target, project, positionals[0], flags);
    await write(values.json ? `${JSON.stringify(json, null, 2)}\n` : text);
  } catch (e) {
    if (values.json && e instanceof CommandError && e.exitCode === exitCodes.refused) await write(`${JSON.stringify(e.answer, null, 2)}\n`);
    throw e;
  }
}
