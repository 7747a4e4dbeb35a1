import { CommandError, exitCodes, usageError, write } from "./command-error.js";
import { acceptedToken, RecordError, recordFileName, withAccepted, withFenceRecord, type FenceRecord } from "./guard-git-record.js";
import { configValue, configValues, gitDirOf, namespacePrefix, symbolicTarget } from "./guard-git-repo.js";
import { leaseFor, parseRule, RuleError, type ProtectRule } from "./guard-git-rules.js";
import { callHub, segment, type HubTarget } from "./hub-client.js";
import { readHubTls, TlsFileError, type TlsSettingNames } from "./tls-client.js";

/**
 * `kxm-hub guard git`: a git `pre-receive` hook that refuses a push to a protected ref unless it
 * carries the push option `kxm-fence=<lease>:<token>` naming the ref's lease, the hub says that
 * token is the current one of that lease (CheckFence), and it is no lower than the highest token
 * this repository accepted for that lease (guard-git-record.ts). A pushed ref that is a symbolic
 * ref is guarded as the refs it points to as well, since git moves those. Fails closed: an
 * unreachable hub, a refused credential, a missing or broken configuration, a record it cannot
 * read all refuse the push.
 */

export const guardGitExitCodes = {
  /** The push is refused (every reason on stderr, one line each). */
  refused: exitCodes.refused,
  usage: exitCodes.usage,
} as const;

export const fenceOption = "kxm-fence";

/** The git config keys of the hook's TLS files, by the command line's flag. */
export const guardTlsKeys: TlsSettingNames = { "tls-ca": "kxm.tlsCa", "tls-client-cert": "kxm.tlsClientCert", "tls-client-key": "kxm.tlsClientKey" };

export const guardGitHelp = `Usage: kxm-hub guard git                 (as a repository's pre-receive hook)
       kxm-hub guard git --install <repo> --url <url> [--token <token>] --project <project> --protect <rule> [--protect <rule>...]
                         [--tls-ca <file>] [--tls-client-cert <file> --tls-client-key <file>]

A pre-receive hook for a repository (bare or not): a push that updates or deletes a protected ref
must carry the push option ${fenceOption}=<lease>:<token>, the ref's lease and its fencing token:

    git push -o ${fenceOption}=$KXM_FENCE origin HEAD:main     (inside kxm-hub lease run)

The push is accepted only when every protected ref it updates maps to that lease, the hub says the
token is the lease's current one (CheckFence: valid, reason current), and it is at least the
highest token this repository has accepted for that lease, which it keeps in
<GIT_DIR>/${recordFileName} (under a lock file; it only grows), so a hub restored from an older
backup cannot let an older writer in. Tokens are numbered per lease, so the fence names its lease:
one lease's token never moves another lease's refs. One lease per push: a push whose protected
refs map to different leases needs one push per lease. A pushed symbolic ref is guarded as the
refs it points to as well (git moves those). Refs no rule protects pass untouched, and a push of
only those never calls the hub.

Configuration (git config in the repository; --install writes it):
  kxm.url        the hub's base URL (required once a protected ref is pushed)
  kxm.token      the project's token, sent as Authorization: Bearer (unset: none)
  kxm.project    the project the leases belong to (required once a protected ref is pushed)
  kxm.tlsCa      for an https:// kxm.url: PEM file of the CA that signed the hub's certificate
                 (unset: the system's CAs); the user git runs the hook as must be able to read it
  kxm.tlsClientCert, kxm.tlsClientKey   PEM client certificate and key for a hub with mutual TLS
  kxm.protect    multi-valued, <ref pattern>=<lease pattern>, tried in order, the first match wins:
                 refs/heads/main=repo/main   one ref, one lease
                 refs/heads/*=repo/*         refs/heads/main -> lease repo/main, refs/heads/a/b -> repo/a/b
                 refs/tags/*=releases        every tag under one lease
                 A ref pattern is a full ref name with at most one *, matching one or more
                 characters, / included (as in a refspec); a * in the lease pattern is replaced by
                 what it matched. No kxm.protect at all, or one that does not parse, refuses every
                 push: remove the hook to stop guarding.
  receive.advertisePushOptions true   (needed for git push -o)

Every refusal is one line on stderr, shown by git as remote: kxm-hub: <code>: <message>:
  fence_refused        a protected ref without a valid ${fenceOption} option, of another lease than the
                       option names, with a token the hub does not say is current (superseded,
                       expired, released, unknown), below the recorded one, or that could not be
                       checked (hub_unreachable, invalid_auth, ... in the message)
  guard_misconfigured  kxm.url, kxm.project or kxm.protect missing or wrong, a kxm.tls* file unusable
  fence_record_busy, fence_record_unreadable   the record's lock or file (the message names it)
A hub restored from a backup must hand out tokens above the recorded ones (kxm-hub restore and
kxm-hub raise-fence raise every fence by --bump-fence); raise them rather than edit ${recordFileName}.

--install <repo> writes <repo>'s hooks/pre-receive (running this node and this checkout's
bin/kxm-hub.mjs; a hook not written by --install is left alone and the install refused), sets
receive.advertisePushOptions and the kxm.* keys (--protect replaces every kxm.protect).
--url, --token and --project default to KXM_URL, KXM_TOKEN and KXM_PROJECT; --tls-ca, --tls-client-cert
and --tls-client-key (KXM_TLS_CA, KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY) are checked and written
as kxm.tlsCa, kxm.tlsClientCert and kxm.tlsClientKey, absolute.

Exit codes: 0 the push may go on (installed); ${guardGitExitCodes.refused} refused; ${guardGitExitCodes.usage} usage error.`;

interface RefUpdate {
  oldSha: string;
  newSha: string;
  ref: string;
}

/** A protected ref a push moves: the pushed name, or a ref a pushed symbolic ref points to (`via`). */
interface Guarded {
  ref: string;
  via?: string;
  lease: string;
}

/** How a refusal names a guarded ref: `refs/heads/main (pushed as refs/heads/master)`. */
const named = (g: Guarded) => (g.via === undefined ? g.ref : `${g.ref} (pushed as ${g.via})`);

/** The pushed updates, from the hook's stdin: `<old-sha> <new-sha> <refname>` per line. */
function parseUpdates(text: string): RefUpdate[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [oldSha, newSha, ref] = line.trim().split(" ");
      if (!oldSha || !newSha || !ref) throw new CommandError("guard_misconfigured", `unexpected line on stdin ${JSON.stringify(line)}: run kxm-hub guard git as a pre-receive hook`, guardGitExitCodes.refused);
      return { oldSha, newSha, ref };
    });
}

/** The hook's stdin as text, decoded whole: a character split between two reads stays one. */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** The values of the push option `kxm-fence`, from GIT_PUSH_OPTION_COUNT and GIT_PUSH_OPTION_<n>. */
function fenceOptions(env: NodeJS.ProcessEnv): string[] {
  const count = Number(env.GIT_PUSH_OPTION_COUNT ?? 0);
  const values: string[] = [];
  for (let i = 0; i < count; i++) {
    const option = env[`GIT_PUSH_OPTION_${i}`] ?? "";
    if (option.startsWith(`${fenceOption}=`)) values.push(option.slice(fenceOption.length + 1));
  }
  return values;
}

function rulesOf(gitDir: string): ProtectRule[] {
  // The repository's own rules only: a user's or the system's kxm.protect would come first in
  // git's order and could map a ref to another lease, one that anybody may take.
  const raw = configValues(gitDir, "kxm.protect", true);
  if (raw.length === 0) throw new CommandError("guard_misconfigured", `no kxm.protect rule in ${gitDir}: every push is refused until one is set (or the hook removed)`, guardGitExitCodes.refused);
  try {
    return raw.map(parseRule);
  } catch (e) {
    if (e instanceof RuleError) throw new CommandError("guard_misconfigured", `kxm.protect ${e.message}`, guardGitExitCodes.refused);
    throw e;
  }
}

function hubOf(gitDir: string): { target: HubTarget; project: string } {
  const url = configValue(gitDir, "kxm.url");
  const project = configValue(gitDir, "kxm.project");
  const missing = [url === undefined && "kxm.url", project === undefined && "kxm.project"].filter(Boolean);
  if (missing.length > 0) throw new CommandError("guard_misconfigured", `${missing.join(" and ")} not set in ${gitDir}: protected refs cannot be checked`, guardGitExitCodes.refused);
  let parsed: URL;
  try {
    parsed = new URL(url!);
  } catch {
    throw new CommandError("guard_misconfigured", `kxm.url ${JSON.stringify(url)} is not a URL such as http://127.0.0.1:7331`, guardGitExitCodes.refused);
  }
  // fetch refuses a URL with a user name or password, and would put it, password included, into
  // the refusal every pusher reads; the credential the guard sends is kxm.token.
  if (parsed.username !== "" || parsed.password !== "") {
    throw new CommandError("guard_misconfigured", "kxm.url carries a user name or password, which is never sent: give the hub's token as kxm.token (--token) instead", guardGitExitCodes.refused);
  }
  let tls;
  try {
    tls = readHubTls(Object.fromEntries(Object.entries(guardTlsKeys).map(([flag, key]) => [flag, configValue(gitDir, key)])), guardTlsKeys);
  } catch (e) {
    if (e instanceof TlsFileError) throw new CommandError("guard_misconfigured", `${e.message} (${gitDir}): protected refs cannot be checked`, guardGitExitCodes.refused);
    throw e;
  }
  return { target: { url: parsed, token: configValue(gitDir, "kxm.token"), tls }, project: project! };
}

interface FenceAnswer {
  valid: boolean;
  reason: string;
  lease?: { holderAgentName?: string; fencingToken?: number };
}

/** Why `token` may not write under `lease`, or undefined when it may. Never throws: a failed check is a reason. */
async function refusalFor(hub: { target: HubTarget; project: string }, lease: string, token: number, record: FenceRecord): Promise<string | undefined> {
  let answer: FenceAnswer;
  try {
    answer = (await callHub(hub.target, "POST", `/v1/leases/${segment(lease)}/check`, { fencingToken: token, project: hub.project })) as FenceAnswer;
  } catch (e) {
    if (!(e instanceof CommandError)) throw e;
    return `lease ${lease} could not be checked (${e.code}: ${e.message}); nothing unfenced is let through`;
  }
  // Only a well-formed yes lets a push through: a body of another shape is a refusal.
  if (answer?.valid !== true || answer.reason !== "current") {
    // Who holds it, not with which token: a refused writer (an agent reading its stderr) must not
    // be handed the number that would pass.
    const holder = typeof answer?.lease?.holderAgentName === "string" ? `; ${answer.lease.holderAgentName} holds it now` : "";
    return `token ${token} of lease ${lease} is ${typeof answer?.reason === "string" ? answer.reason : "not confirmed"}, not current${holder}`;
  }
  const accepted = acceptedToken(record, hub.project, lease);
  if (token < accepted) return `token ${token} of lease ${lease} is below token ${accepted}, which this repository already accepted (a hub restored from an older backup?)`;
  return undefined;
}

const refusalLine = (code: string, message: string) => `kxm-hub: ${code}: ${message}\n`;

/**
 * The hook: answers the refusal lines for the push on stdin, none when it may go on. Records the
 * accepted token only when every ref passes.
 */
/**
 * The protected refs `updates` move: each pushed ref a rule matches, and each ref a pushed
 * symbolic ref points to (at any depth, existing yet or not) that one matches, since git
 * updates (or creates) those through it; inside the push's namespace (GIT_NAMESPACE) when it
 * has one.
 */
function guardedOf(gitDir: string, rules: ProtectRule[], updates: RefUpdate[], env: NodeJS.ProcessEnv): Guarded[] {
  const prefix = namespacePrefix(env.GIT_NAMESPACE);
  const guarded: Guarded[] = [];
  for (const u of updates) {
    const seen = new Set<string>();
    for (let ref: string | undefined = u.ref; ref !== undefined && !seen.has(ref); ref = symbolicTarget(gitDir, ref, prefix)) {
      seen.add(ref);
      const match = leaseFor(rules, ref);
      if (match) guarded.push({ ref, ...(ref !== u.ref && { via: u.ref }), lease: match.lease });
    }
  }
  return guarded;
}

/**
 * The fence a push option gives: `<lease>:<token>`, split at the last colon (a lease name may hold
 * one); a refusal line when it is not one.
 */
function fenceOf(raw: string): { lease: string; token: number } | { refused: string } {
  const at = raw.lastIndexOf(":");
  if (at < 0) {
    return { refused: `push option ${fenceOption}=${raw} names no lease: give ${fenceOption}=<lease>:<token> (git push -o ${fenceOption}=$KXM_FENCE under kxm-hub lease run)` };
  }
  const lease = raw.slice(0, at);
  const digits = raw.slice(at + 1);
  if (lease === "" || !/^\d+$/.test(digits) || !Number.isSafeInteger(Number(digits)) || Number(digits) < 1) {
    return { refused: `push option ${fenceOption}=${raw} is not <lease>:<token> with a fencing token 1..${Number.MAX_SAFE_INTEGER}` };
  }
  return { lease, token: Number(digits) };
}

async function guard(updates: RefUpdate[], env: NodeJS.ProcessEnv): Promise<string[]> {
  if (updates.length === 0) return [];
  const gitDir = gitDirOf();
  const guarded = guardedOf(gitDir, rulesOf(gitDir), updates, env);
  if (guarded.length === 0) return [];

  const options = fenceOptions(env);
  if (options.length === 0) {
    return guarded.map((g) =>
      refusalLine("fence_refused", `${named(g)} needs the push option ${fenceOption}=<lease>:<token> of lease ${g.lease} (git push -o ${fenceOption}=$KXM_FENCE)`),
    );
  }
  const raw = options[0]!;
  if (options.some((o) => o !== raw)) return [refusalLine("fence_refused", `more than one ${fenceOption} push option (${options.join(", ")}): give one per push`)];
  const fence = fenceOf(raw);
  if ("refused" in fence) return [refusalLine("fence_refused", fence.refused)];
  // Tokens are numbered per lease: one lease's token says nothing of another's refs.
  const elsewhere = guarded.filter((g) => g.lease !== fence.lease);
  if (elsewhere.length > 0) {
    return elsewhere.map((g) => refusalLine("fence_refused", `${named(g)} is guarded by lease ${g.lease}, not ${fence.lease}, which the push's fence names: push each lease's refs with its own fence`));
  }
  const { lease, token } = fence;
  const hub = hubOf(gitDir);

  return withFenceRecord(gitDir, async (record) => {
    const why = await refusalFor(hub, lease, token, record);
    if (why !== undefined) return { result: guarded.map((g) => refusalLine("fence_refused", `${named(g)}: ${why}`)) };
    if (acceptedToken(record, hub.project, lease) >= token) return { result: [] };
    return { result: [], next: withAccepted(record, hub.project, lease, { fencingToken: token, ref: guarded[0]!.ref }) };
  });
}

/** Writes the refusal lines and exits 1; returns (exit 0) when there are none. */
async function runHook(): Promise<void> {
  let lines: string[];
  try {
    lines = await guard(parseUpdates(await readStdin()), process.env);
  } catch (e) {
    if (e instanceof RecordError) lines = [refusalLine(e.code, e.message)];
    else if (e instanceof CommandError) lines = [refusalLine(e.code, e.message)];
    else throw e;
  }
  if (lines.length === 0) return;
  await new Promise<void>((resolve) => process.stderr.write(lines.join(""), () => resolve()));
  process.exit(guardGitExitCodes.refused);
}

/** `kxm-hub guard <kind>`: see guardGitHelp. */
export async function guardCommand(argv: string[]): Promise<void> {
  const [kind, ...rest] = argv;
  if (kind === undefined || kind === "--help" || kind === "-h" || kind === "help") {
    await write(`${guardGitHelp}\n`);
    if (kind === undefined) throw usageError("a kind is required: git");
    return;
  }
  if (kind !== "git") throw usageError(`unknown guard ${JSON.stringify(kind)}; only git is guarded (kxm-hub guard git --help)`);
  if (rest.length === 0) return runHook();
  if (rest.includes("--help") || rest.includes("-h")) return write(`${guardGitHelp}\n`);
  return (await import("./guard-git-install.js")).guardGitInstall(rest);
}
