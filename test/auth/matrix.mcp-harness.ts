import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { listeningFetch, notifications } from "../fixtures/mcp.js";
import { accepts, ADMIN, PROJECTS, TARGET, type AuthEnv, type Json, type Seed } from "./matrix.cases.js";
import { changes, cut, fingerprint, type MatrixHub } from "./matrix.seed.js";

/**
 * The authorization matrix over the MCP face (`/mcp`): the session classes, the model of what
 * each must get, the tool rows, and the runner of one step (an initialize, a tool call, the
 * DELETE that ends a session). matrix.mcp.test.ts runs the tables.
 *
 * A session carries no agent id or key: its headers (`Authorization`, `X-Kxm-Project`, and
 * optionally `X-Kxm-Agent`) are checked at initialize with RegisterAgent's rule (the project's
 * token; the admin token only for a project without one). With X-Kxm-Agent the session is bound
 * at once to that agent, registered with takeover; without it the session opens unbound, refuses
 * every tool but `register` (invalid_agent_identity) and every resource read and subscription,
 * until `register` binds it, once, to an agent of its project. So the MCP caller classes are
 * header sets, not the RPC matrix's identities.
 *
 * A bound session then calls every tool (aimed at alpha's seeded data), reads every resource the
 * face lists, subscribes to them while alpha changes, and ends with DELETE; each step is judged on
 * its answer, on what it says of other projects, and on the state of other projects. An unbound
 * session first goes through the same tools and resources unbound (refused, changing nothing
 * anywhere), then `register`s, and goes on as a bound session.
 */

// --- the hub's auth configuration, as the matrix seeds it --------------------------------------

/** What matrix.seed.ts configures every (admin) hub with; the test checks the seeded hub agrees. */
export const mcpEnv: AuthEnv = {
  tokens: Object.fromEntries(PROJECTS.flatMap((p) => ("token" in p ? [[p.name, p.token]] : []))),
  admin: ADMIN,
  loopback: true,
};

// --- session classes --------------------------------------------------------------------------

export interface McpClass {
  name: string;
  bearer?: string;
  /** `X-Kxm-Project` (absent: unset). */
  project?: string;
  /** `X-Kxm-Agent` (absent: unset: the session opens unbound, `register` names its agent). Seeded agents are `<code>-one`, `<code>-two`, alpha's `xa-gone`. */
  agent?: string;
  /** An unbound session: the name its `register` call binds (default `<project code>-mcp`, a new name in its project). */
  registers?: string;
}

export const mcpClasses: McpClass[] = [
  // Refused at initialize.
  { name: "no token, alpha", project: "alpha", agent: "xa-mcp" },
  { name: "wrong token, alpha", bearer: "tok-wrong", project: "alpha", agent: "xa-mcp" },
  { name: "beta token, alpha, alpha's agent one", bearer: "tok-beta", project: "alpha", agent: "xa-one" },
  { name: "alpha/repo token (extension), alpha, alpha's agent one", bearer: "tok-alpha-repo", project: "alpha", agent: "xa-one" },
  { name: "alpha token, alpha/repo (extension), its agent one", bearer: "tok-alpha", project: "alpha/repo", agent: "xr-one" },
  { name: "alpha token, alpha2 (alpha is its prefix), its agent one", bearer: "tok-alpha", project: "alpha2", agent: "x2-one" },
  { name: "alpha token, alph (prefix of alpha), its agent one", bearer: "tok-alpha", project: "alph", agent: "xp-one" },
  { name: "admin token, alpha (a project with its own token)", bearer: ADMIN, project: "alpha", agent: "xa-one" },
  { name: "alpha token, no project header", bearer: "tok-alpha", agent: "xa-one" },
  // Refused at initialize, without X-Kxm-Agent: the token is checked with RegisterAgent's rule all the same.
  { name: "unbound: no token, alpha", project: "alpha" },
  { name: "unbound: wrong token, alpha", bearer: "tok-wrong", project: "alpha" },
  { name: "unbound: beta token, alpha", bearer: "tok-beta", project: "alpha" },
  { name: "unbound: alpha/repo token (extension), alpha", bearer: "tok-alpha-repo", project: "alpha" },
  { name: "unbound: alpha token, alpha/repo (extension)", bearer: "tok-alpha", project: "alpha/repo" },
  { name: "unbound: alpha token, alph (prefix of alpha)", bearer: "tok-alpha", project: "alph" },
  { name: "unbound: alpha token, alpha2 (alpha is its prefix)", bearer: "tok-alpha", project: "alpha2" },
  { name: "unbound: admin token, alpha (a project with its own token)", bearer: ADMIN, project: "alpha" },
  { name: "unbound: alpha token, no project header", bearer: "tok-alpha" },
  { name: "unbound: no headers at all" },
  // Opened.
  { name: "owner: alpha token, alpha, alpha's agent one (takeover)", bearer: "tok-alpha", project: "alpha", agent: "xa-one" },
  { name: "alpha token, alpha, a new agent", bearer: "tok-alpha", project: "alpha", agent: "xa-mcp" },
  { name: "alpha token, alpha, beta's agent name", bearer: "tok-alpha", project: "alpha", agent: "xb-one" },
  { name: "alpha token, alpha, alpha's unregistered agent (resumed)", bearer: "tok-alpha", project: "alpha", agent: "xa-gone" },
  { name: "beta identity: beta token, beta, its agent one (takeover)", bearer: "tok-beta", project: "beta", agent: "xb-one" },
  { name: "beta token, beta, alpha's agent name", bearer: "tok-beta", project: "beta", agent: "xa-one" },
  { name: "alpha/repo identity (extension): its token, its agent one (takeover)", bearer: "tok-alpha-repo", project: "alpha/repo", agent: "xr-one" },
  { name: "alpha/repo token, alpha/repo, a new agent", bearer: "tok-alpha-repo", project: "alpha/repo", agent: "xr-mcp" },
  { name: "admin token, alph (prefix, no token of its own), its agent one (takeover)", bearer: ADMIN, project: "alph", agent: "xp-one" },
  { name: "admin token, alpha2 (no token of its own), alpha's agent name", bearer: ADMIN, project: "alpha2", agent: "xa-one" },
  { name: "admin token, a project nobody seeded, alpha's agent name", bearer: ADMIN, project: "gamma", agent: "xa-one" },
  // Opened unbound (no X-Kxm-Agent): nothing but `register` until it binds the session's agent.
  // Unbound classes name a seeded project (their `register` rows count on its agent `one`).
  { name: "unbound: alpha token, alpha", bearer: "tok-alpha", project: "alpha", registers: "xa-mcp" },
  { name: "unbound: beta token, beta, registers alpha's agent name", bearer: "tok-beta", project: "beta", registers: "xa-one" },
  { name: "unbound: admin token, alph (prefix, no token of its own)", bearer: ADMIN, project: "alph", registers: "xp-mcp" },
];

export const sessionHeaders = (c: McpClass): Record<string, string> => ({
  ...(c.bearer !== undefined && { authorization: `Bearer ${c.bearer}` }),
  ...(c.project !== undefined && { "x-kxm-project": c.project }),
  ...(c.agent !== undefined && { "x-kxm-agent": c.agent }),
});

// --- the model ------------------------------------------------------------------------------------

/**
 * The initialize refused (HTTP status, the hub's code in the JSON-RPC error's data), or a session
 * in `project`: bound to the agent its X-Kxm-Agent names, or `unbound` until `register`.
 */
export type Opening = { refused: { status: number; code: string } } | { opens: { project: string; unbound: boolean } };

/**
 * docs/security.md (Authentication) and docs/agents.md (Agents as MCP clients): X-Kxm-Project, then RegisterAgent's rule
 * (the project's token; the admin token only for a project without one), with or without
 * X-Kxm-Agent; without it the session opens unbound.
 */
export function openingOf(c: McpClass, env: AuthEnv = mcpEnv): Opening {
  if (c.project === undefined) return { refused: { status: 400, code: "protocol_error" } };
  if (!accepts(env, c.project, c.bearer)) return { refused: { status: 401, code: "invalid_auth" } };
  return { opens: { project: c.project, unbound: c.agent === undefined } };
}

/** Who an opened session is: its project, and whether it took over that project's seeded `one`. */
export interface Session {
  project: string;
  name: string;
  /** `one`: the project's seeded agent one (its leases force-released by the takeover); `other`: any other agent. */
  role: "one" | "other";
  /** The seeded agent of that project its name takes over or resumes (case-insensitive), if any. */
  resumes?: string;
  /** The id the session's agent must have (whoami), once known. */
  agentId?: string;
}

/** The agent named `name` in `project` (registered with takeover): who the session acts as. */
export function sessionAs(project: string, name: string, seed: Seed): Session {
  const same = [...seed.agents.values()].find((a) => a.project === project && a.name.toLowerCase() === name.toLowerCase());
  const role = same && same.id === seed.projects[project]?.one.id ? "one" : "other";
  return { project, name, role, ...(same && { resumes: same.id }) };
}

/** A session bound by its headers. */
export const sessionOf = (c: McpClass, seed: Seed): Session => sessionAs(c.project!, c.agent!, seed);

/** The name an unbound session of `c` registers. */
export const registeredName = (c: McpClass, seed: Seed): string => c.registers ?? `${seed.projects[c.project!]?.code ?? "x"}-mcp`;

/**
 * What a session of `c` itself says, which no leak check counts: its headers, and the name its
 * `register` gives (an unbound class may register a name another project holds too).
 */
export const sessionSupplied = (c: McpClass, seed: Seed): string =>
  JSON.stringify(sessionHeaders(c)) + (c.agent === undefined ? JSON.stringify(registeredName(c, seed)) : "");

// --- tool rows ------------------------------------------------------------------------------------

export interface ToolRow {
  tool: string;
  variant?: string;
  /** The arguments (by proto name): always aimed at alpha's seeded data, or at a name every project has. */
  args(s: Seed): Record<string, unknown>;
  /** "ok" or the hub's code, for this session; rows run in order, so it may count on the rows before it. */
  expect(x: Session, s: Seed): string;
  /** Extra checks of the structured answer (ok or not); returns problems. */
  check?(x: Session, out: Json, s: Seed): string[];
  /** The call must change nothing at all, the session's own project included. */
  changesNothing?: boolean;
}

const inAlpha = (x: Session) => x.project === TARGET;
/** alpha's messages: its agent one is a party to both; another alpha agent is refused; elsewhere they do not exist. */
const alphaMessage = (x: Session) => (inAlpha(x) ? (x.role === "one" ? "ok" : "message_forbidden") : "message_not_found");
/** Every lease the answer names belongs to the session's project. */
const leasesOf = (x: Session, out: Json) =>
  [out?.lease, ...(out?.leases ?? [])].filter((l) => l && l.project !== x.project).map((l) => `lease of project ${l.project} (${l.name}) answered to ${x.project}`);
const messagesOf = (x: Session, list: Json[]) =>
  list.filter((m) => m && m.project !== x.project).map((m) => `message of project ${m.project} answered to ${x.project}`);
const heldBySession = (x: Session, out: Json) =>
  out?.lease && out.lease.holderAgentId !== x.agentId ? [`lease answered with holder ${out.lease.holderAgentId}, not the session's ${x.agentId}`] : [];

/**
 * The tools in the order a session calls them: reads first, then writes. What each answers
 * follows from the seed and the session: a takeover of `one` force-released its leases (`main`,
 * and alpha's `repo/main` on token 2); alpha's messages (two → one, one → two) exist only in alpha.
 */
export const toolRows: ToolRow[] = [
  {
    tool: "whoami",
    args: () => ({}),
    expect: () => "ok",
    check: (x, out, s) => {
      const a = out?.agent ?? {};
      const p: string[] = [];
      if (a.project !== x.project || a.name !== x.name) p.push(`whoami answered ${a.name} in ${a.project}, want ${x.name} in ${x.project}`);
      if (x.resumes !== undefined && a.id !== x.resumes) p.push(`whoami id ${a.id}, want the taken-over ${x.resumes}`);
      if (x.resumes === undefined && s.agents.has(a.id)) p.push(`a new agent answered as the seeded ${a.id}`);
      return p;
    },
  },
  {
    tool: "list_agents",
    args: () => ({ include_offline: true }),
    expect: () => "ok",
    check: (x, out, s) => {
      const agents: Json[] = out?.agents ?? [];
      const p = agents.filter((a) => a.project !== x.project).map((a) => `agent of project ${a.project} listed to ${x.project}`);
      const own = s.projects[x.project];
      if (own && !agents.some((a) => a.id === own.two.id)) p.push(`its own project's agent ${own.two.name} not listed`);
      if (!agents.some((a) => a.id === x.agentId)) p.push("the session's own agent not listed");
      return p;
    },
  },
  { tool: "list_leases", args: () => ({ include_expired: true }), expect: () => "ok", check: leasesOf },
  {
    tool: "get_lease",
    variant: "alpha's repo/main",
    args: () => ({ name: "repo/main" }),
    expect: (x) => (inAlpha(x) && x.role === "other" ? "ok" : "lease_not_found"),
    check: leasesOf,
  },
  {
    tool: "get_lease",
    variant: "main (every seeded project has one)",
    args: () => ({ name: "main" }),
    expect: (x, s) => (s.projects[x.project] && x.role === "other" ? "ok" : "lease_not_found"),
    check: (x, out, s) =>
      out?.lease && out.lease.holderAgentId !== s.projects[x.project]?.one.id ? [`main answered with holder ${out.lease.holderAgentId}`, ...leasesOf(x, out)] : leasesOf(x, out),
  },
  { tool: "get_message", variant: "alpha's two → one", args: (s) => ({ message_id: s.projects.alpha!.message }), expect: alphaMessage, check: (x, o) => messagesOf(x, [o?.message]) },
  { tool: "get_message", variant: "alpha's one → two", args: (s) => ({ message_id: s.sentByOne }), expect: alphaMessage, check: (x, o) => messagesOf(x, [o?.message]) },
  {
    tool: "read_inbox",
    args: () => ({ after_cursor: 0, limit: 100 }),
    expect: () => "ok",
    check: (x, out, s) => {
      const events: Json[] = out?.events ?? [];
      const p = messagesOf(x, events.map((e) => e.message ?? e.reply ?? e.cancelled ?? e.expired));
      const own = s.projects[x.project];
      if (own && x.role === "one" && !events.some((e) => e.message?.id === own.message)) p.push(`its own project's message ${own.message} not in the inbox`);
      return p;
    },
  },
  {
    tool: "send_message",
    variant: "to alpha's two by name",
    args: (s) => ({ target: s.projects.alpha!.two.name, content: "mcp matrix hello" }),
    expect: (x) => (inAlpha(x) ? "ok" : "target_not_found"),
    check: (x, out, s) => [...messagesOf(x, [out?.message]), ...(out?.message && out.message.to !== s.projects.alpha!.two.id ? [`sent to ${out.message.to}`] : [])],
  },
  {
    tool: "send_message",
    variant: "to alpha's two by id",
    args: (s) => ({ target: s.projects.alpha!.two.id, content: "mcp matrix hello by id" }),
    expect: (x) => (inAlpha(x) ? "ok" : "target_not_found"),
    check: (x, out) => messagesOf(x, [out?.message]),
  },
  { tool: "ack_message", args: (s) => ({ message_id: s.projects.alpha!.message }), expect: alphaMessage, check: (x, o) => messagesOf(x, [o?.message]) },
  {
    tool: "reply_message",
    args: (s) => ({ message_id: s.projects.alpha!.message, content: "mcp matrix reply" }),
    expect: alphaMessage,
    check: (x, o) => messagesOf(x, [o?.message]),
  },
  { tool: "cancel_message", args: (s) => ({ message_id: s.sentByOne }), expect: alphaMessage, check: (x, o) => messagesOf(x, [o?.message]) },
  {
    tool: "renew_lease",
    variant: "alpha's repo/main on token 2",
    args: () => ({ name: "repo/main", fencing_token: 2, ttl_ms: 60_000 }),
    // Another alpha agent is told who holds it (alpha's own data); the taken-over one finds it released.
    expect: (x) => (inAlpha(x) && x.role === "other" ? "lease_superseded" : "lease_not_found"),
    check: leasesOf,
  },
  {
    tool: "release_lease",
    variant: "alpha's repo/main on token 2",
    args: () => ({ name: "repo/main", fencing_token: 2 }),
    expect: (x) => (inAlpha(x) && x.role === "other" ? "lease_superseded" : "lease_not_found"),
    check: leasesOf,
  },
  {
    tool: "acquire_lease",
    variant: "repo/main",
    args: () => ({ name: "repo/main", ttl_ms: 60_000 }),
    expect: (x) => (inAlpha(x) && x.role === "other" ? "lease_held" : "ok"),
    check: (x, out) => [...leasesOf(x, out), ...(out?.code ? [] : heldBySession(x, out))],
  },
  {
    tool: "acquire_lease",
    variant: "main",
    args: () => ({ name: "main", ttl_ms: 60_000 }),
    expect: (x, s) => (s.projects[x.project] && x.role === "other" ? "lease_held" : "ok"),
    check: (x, out) => [...leasesOf(x, out), ...(out?.code ? [] : heldBySession(x, out))],
  },
  {
    // A session bound to its agent (by its headers, or by an earlier `register`) refuses
    // `register` with protocol_error (docs/agents.md, "Agents as MCP clients": the tool names the agent of
    // a session opened without X-Kxm-Agent, once). Aimed at alpha's agent one with takeover:
    // nothing anywhere changes, alpha's `one` least of all.
    tool: "register",
    variant: "alpha's agent one, with takeover, in a session already bound",
    args: (s) => ({ name: s.projects.alpha!.one.name, takeover: true }),
    expect: () => "protocol_error",
    changesNothing: true,
  },
];

export const toolRowName = (r: ToolRow) => `${r.tool}${r.variant ? ` (${r.variant})` : ""}`;

// --- running ----------------------------------------------------------------------------------------

type ToolResult = { isError?: boolean; structuredContent?: Json; content?: { type: string; text?: string }[] };

export interface OpenSession {
  client: Client;
  transport: StreamableHTTPClientTransport;
  call(tool: string, args: Record<string, unknown>): Promise<ToolResult>;
  /** Every notifications/resources/updated the session got (its URI), in order. */
  seen: string[];
  /** Resolves once the session's GET stream (which carries notifications) is open; rejects if it could not open. */
  listening: Promise<void>;
  /** Resolves once `uri` is in `seen` at or after index `from`; rejects after `ms`. */
  notified(uri: string, from: number, ms?: number): Promise<void>;
}

/** What one step answered: "ok" or a code (initialize: `<status> <code>`), and all it said. */
export interface StepAnswer {
  answer: string;
  text: string;
  out?: Json;
}

/** Opens a session with the official client; a refusal is the HTTP status and the error's `data.code`. */
export async function openSession(baseUrl: string, c: McpClass): Promise<{ session?: OpenSession; got: StepAnswer }> {
  const stream = listeningFetch();
  const listening = stream.listening;
  // The GET that carries notifications is sent once the session is initialized; the stream is
  // open once its response (the event stream's head) is in.
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), { requestInit: { headers: sessionHeaders(c) }, fetch: stream.fetch });
  const client = new Client({ name: "kxm-matrix", version: "1.0.0" });
  const { seen, notified: told } = notifications(client);
  const notified = (uri: string, from: number, ms = 10_000) => told(uri, from, ms);
  try {
    await client.connect(transport);
  } catch (e) {
    await client.close().catch(() => undefined);
    const data = (e as { data?: { status?: number; text?: string | null } }).data;
    if (typeof data?.status !== "number") throw e;
    const text = data.text ?? "";
    let code = "(no code)";
    try {
      code = JSON.parse(text)?.error?.data?.code ?? code;
    } catch {
      // not JSON: no code
    }
    return { got: { answer: `${data.status} ${code}`, text } };
  }
  const call = async (tool: string, args: Record<string, unknown>) => (await client.callTool({ name: tool, arguments: args }, { timeout: 20_000 })) as ToolResult;
  return { session: { client, transport, call, seen, listening, notified }, got: { answer: "ok", text: "" } };
}

/** One tool call: "ok" or the hub's code (a thrown error is `thrown: <message>`). */
export async function callTool(s: OpenSession, tool: string, args: Record<string, unknown>): Promise<StepAnswer> {
  try {
    const r = await s.call(tool, args);
    const text = JSON.stringify(r.structuredContent ?? null) + (r.content ?? []).map((c) => c.text ?? "").join("\n");
    return { answer: r.isError ? String(r.structuredContent?.code ?? "(no code)") : "ok", text, out: r.structuredContent };
  } catch (e) {
    return { answer: `thrown: ${e instanceof Error ? e.message : String(e)}`, text: String(e) };
  }
}

export interface McpVerdict {
  answer: string;
  /** Other projects' secrets found in what the session got. */
  leaks: string[];
  /** Projects whose state changed though they are not the session's. */
  changed: string[];
  problems: string[];
}

/**
 * Judges one step: the answer against `want`, the secrets of every project but `visible` in what
 * was said (strings the caller itself supplied excepted), and the state of every project but
 * `visible` against the seeded baseline.
 */
export async function judge(h: MatrixHub, got: StepAnswer, want: string, visible: string[], supplied: string, problems: string[] = [], before?: Map<string, string[]>) {
  const after = await fingerprint(h.t, h.seed);
  const leaks = Object.values(h.seed.projects)
    .filter((p) => !visible.includes(p.name))
    .flatMap((p) => p.secrets.filter((x) => x && !supplied.includes(x) && got.text.includes(x)).map((x) => `${p.name}: ${x}`));
  const changed = [...changes(h.baseline, after, visible), ...(before ? changes(before, after, []).map((x) => `(during the call) ${x}`) : [])];
  const actual: McpVerdict = { answer: got.answer, leaks, changed, problems: [...problems] };
  if (leaks.length || actual.answer !== want || problems.length || changed.length) actual.problems.push(`hub said: ${cut(`${got.answer} ${got.text}`, 600)}`);
  const expected: McpVerdict = { answer: want, leaks: [], changed: [], problems: [] };
  return { actual, expected, after };
}

/** Every `project` the answer names (at any depth) that is not the session's. */
export function foreignProjects(x: { project: string }, v: Json, at = "$"): string[] {
  if (Array.isArray(v)) return v.flatMap((e, i) => foreignProjects(x, e, `${at}[${i}]`));
  if (!v || typeof v !== "object") return [];
  return Object.entries(v).flatMap(([k, e]) =>
    k === "project" && typeof e === "string" && e !== x.project ? [`${at}.project is ${e}, not ${x.project}`] : foreignProjects(x, e, `${at}.${k}`),
  );
}

/** Runs one tool row in an open session and judges it. */
export async function runTool(h: MatrixHub, s: OpenSession, x: Session, row: ToolRow, c: McpClass) {
  const args = row.args(h.seed);
  const before = row.changesNothing ? await fingerprint(h.t, h.seed) : undefined;
  const got = await callTool(s, row.tool, args);
  const want = row.expect(x, h.seed);
  const problems = [...(row.check && got.out ? row.check(x, got.out, h.seed) : []), ...foreignProjects(x, got.out)];
  return judge(h, got, want, [x.project], JSON.stringify(args) + sessionSupplied(c, h.seed), [...new Set(problems)], before);
}

// --- unbound sessions -------------------------------------------------------------------------------

/** What an unbound session gets for every tool but `register`, and for every resource read and subscription. */
export const UNBOUND = "invalid_agent_identity";

/** A session's supplied strings (its headers and the call's arguments), which no leak check counts. */
const suppliedBy = (c: McpClass, args: Record<string, unknown>, seed: Seed) => JSON.stringify(args) + sessionSupplied(c, seed);

/**
 * One tool row's call in an unbound session: refused with invalid_agent_identity, changing
 * nothing anywhere (its own project included) and saying nothing of any project's data.
 */
export async function runUnbound(h: MatrixHub, s: OpenSession, project: string, row: ToolRow, c: McpClass) {
  const args = row.args(h.seed);
  const before = await fingerprint(h.t, h.seed);
  const got = await callTool(s, row.tool, args);
  return judge(h, got, UNBOUND, [], suppliedBy(c, args, h.seed), foreignProjects({ project }, got.out), before);
}

/**
 * Reads, then subscribes to, every resource the face lists in an unbound session: each must be
 * a JSON-RPC error whose data carries invalid_agent_identity (the answer is UNBOUND when all are,
 * else each odd one).
 */
export async function unboundResources(s: OpenSession): Promise<StepAnswer> {
  if (!s.client.getServerCapabilities()?.resources) return { answer: "(no resources offered)", text: "" };
  const answers: string[] = [];
  let text = "";
  for (const { uri } of (await s.client.listResources()).resources) {
    const steps = [
      ["read", () => s.client.readResource({ uri }, { cacheMode: "bypass" })],
      ["subscribe", () => s.client.subscribeResource({ uri })],
    ] as const;
    for (const [verb, step] of steps) {
      try {
        text += JSON.stringify(await step());
        answers.push(`${verb} ${uri}: ok`);
      } catch (e) {
        const data = (e as { data?: Json }).data;
        text += JSON.stringify(data ?? String(e));
        answers.push(`${verb} ${uri}: ${data?.code ?? `thrown: ${e instanceof Error ? e.message : String(e)}`}`);
      }
    }
  }
  const odd = answers.filter((a) => !a.endsWith(`: ${UNBOUND}`));
  return { answer: answers.length === 0 ? "(no resources listed)" : odd.length ? odd.join("; ") : UNBOUND, text };
}

/** A `register` call of an unbound session that is refused (it binds nothing and changes nothing anywhere). */
export interface RegisterRefusal {
  variant: string;
  args(project: string, s: Seed): Record<string, unknown>;
  expect: string;
}

/** The refused `register` calls an unbound session makes, in order, before the one that binds it. */
export const registerRefusals: RegisterRefusal[] = [
  {
    // The project is the session's X-Kxm-Project: the tool takes no `project` to name another one.
    variant: "naming another project (a project argument)",
    args: (p) => ({ name: "mcp-elsewhere", project: p === TARGET ? "beta" : TARGET }),
    expect: "protocol_error",
  },
  {
    variant: "its project's online agent one, without takeover",
    args: (p, s) => ({ name: s.projects[p]!.one.name }),
    expect: "duplicate_agent_name",
  },
  {
    variant: "its project's online agent one in upper case, without takeover",
    args: (p, s) => ({ name: s.projects[p]!.one.name.toUpperCase() }),
    expect: "duplicate_agent_name",
  },
];

/** One refused `register` of an unbound session: its answer, and nothing changed anywhere during the call. */
export async function runRegisterRefusal(h: MatrixHub, s: OpenSession, project: string, r: RegisterRefusal, c: McpClass) {
  const args = r.args(project, h.seed);
  const before = await fingerprint(h.t, h.seed);
  const got = await callTool(s, "register", args);
  return judge(h, got, r.expect, [project], suppliedBy(c, args, h.seed), [...agentKeysIn(got), ...foreignProjects({ project }, got.out)], before);
}

/** Agent keys in what a tool answered: a key field at any depth, or a key's text (`key_…`). */
export function agentKeysIn(got: StepAnswer): string[] {
  const fields = (v: Json, at: string): string[] =>
    Array.isArray(v)
      ? v.flatMap((e, i) => fields(e, `${at}[${i}]`))
      : v && typeof v === "object"
        ? Object.entries(v).flatMap(([k, e]) => [...(/key$|key_/i.test(k) ? [`${at}.${k} in the answer`] : []), ...fields(e, `${at}.${k}`)])
        : [];
  return [...fields(got.out, "$"), ...(/\bkey_[0-9a-f]/.test(got.text) ? ["an agent key (key_…) in the answer's text"] : [])];
}

/**
 * The `register` that binds an unbound session to `name` in its project (with `takeover`, the
 * project's agent of that name is taken over): ok, answered as that agent of the session's
 * project (the taken-over agent's own id; else a new one), without its key; no other project
 * changes. Returns the verdict and who the session now is.
 */
export async function registerAs(h: MatrixHub, s: OpenSession, project: string, name: string, c: McpClass, takeover = false) {
  const args = { name, purpose: "mcp matrix", model: "matrix-model", host: "matrix-host", ...(takeover && { takeover: true }) };
  const got = await callTool(s, "register", args);
  const x = sessionAs(project, name, h.seed);
  const a: Json = got.out?.agent ?? {};
  const p = [...agentKeysIn(got), ...foreignProjects({ project }, got.out)];
  if (got.answer === "ok") {
    if (a.project !== project || a.name !== name) p.push(`register answered ${a.name} in ${a.project}, want ${name} in ${project}`);
    if (a.purpose !== args.purpose || a.model !== args.model || a.host !== args.host) p.push(`register answered purpose/model/host ${a.purpose}/${a.model}/${a.host}`);
    if (x.resumes !== undefined && a.id !== x.resumes) p.push(`register id ${a.id}, want the taken-over ${x.resumes}`);
    if (x.resumes === undefined && h.seed.agents.has(a.id)) p.push(`a new agent answered as the seeded ${a.id}`);
    if (takeover && got.out?.takenOver !== true) p.push("a takeover of an online agent not answered takenOver");
  }
  const verdict = await judge(h, got, "ok", [project], suppliedBy(c, args, h.seed), p);
  return { ...verdict, x: { ...x, ...(typeof a.id === "string" && { agentId: a.id }) } as Session };
}

/**
 * Reads every resource the face lists (resources/list), if it offers resources: each must read
 * ("ok", else the hub's code from the JSON-RPC error's data) as the session's own project.
 */
export async function readResources(s: OpenSession, x: Session): Promise<{ got: StepAnswer; problems: string[] }> {
  if (!s.client.getServerCapabilities()?.resources) return { got: { answer: "ok", text: "" }, problems: [] };
  const answers: string[] = [];
  const problems: string[] = [];
  let text = "";
  for (const r of (await s.client.listResources()).resources) {
    try {
      const read = await s.client.readResource({ uri: r.uri }, { cacheMode: "bypass" });
      for (const c of read.contents) {
        const body = "text" in c && typeof c.text === "string" ? c.text : "";
        text += body;
        let json: Json;
        try {
          json = JSON.parse(body);
        } catch {
          problems.push(`${r.uri}: not JSON`);
        }
        problems.push(...foreignProjects(x, json, r.uri));
      }
      answers.push(`${r.uri} ok`);
    } catch (e) {
      const data = (e as { data?: Json }).data;
      text += JSON.stringify(data ?? String(e));
      answers.push(`${r.uri} ${data?.code ?? `thrown: ${e instanceof Error ? e.message : String(e)}`}`);
    }
  }
  const failed = answers.filter((a) => !a.endsWith(" ok"));
  return { got: { answer: failed.length ? failed.join("; ") : "ok", text }, problems };
}

/** A step of a session that is not there as the step needs it: for a row whose class should have opened (or bound, or left unbound) one. */
export const notOpened = (c: McpClass): never => {
  throw new Error(`no session for this step: "${c.name}" did not open one, or its register did not bind it as it should (see the steps before)`);
};

const uris = { inbox: "kxm://inbox", agents: "kxm://agents", leases: "kxm://leases" } as const;

/**
 * Subscribes to every resource the face lists, then changes alpha (probeAlpha: a lease, a new
 * agent, a message to alpha's `one`). A session of alpha is told of what it sees (the leases and
 * the agents; the inbox only as `one`). A session of another project is told nothing: after the
 * probe, a change of its own to each resource in turn (a lease it takes, an agent registered in
 * its project, a message from that agent to it) is each told once, and nothing came before or
 * between them. Returns the step's answer ("ok" or what went wrong) and the fingerprint taken
 * before the probe.
 */
export async function subscribeAndProbe(h: MatrixHub, s: OpenSession, x: Session, probe: () => Promise<void>): Promise<{ got: StepAnswer; mid?: Map<string, string[]> }> {
  const caps = s.client.getServerCapabilities()?.resources;
  if (!caps?.subscribe) return { got: { answer: "ok", text: "(no resource subscriptions offered)" } };
  const open = await within(s.listening, 5_000, "the notification stream (GET) did not open");
  if (open) return { got: { answer: open, text: "" } };
  const listed = (await s.client.listResources()).resources.map((r) => r.uri);
  const missing = Object.values(uris).filter((u) => !listed.includes(u));
  if (missing.length) return { got: { answer: `resources not listed: ${missing.join(", ")}`, text: "" } };
  for (const uri of listed) await s.client.subscribeResource({ uri });
  const mid = await fingerprint(h.t, h.seed);
  const from = s.seen.length;
  await probe();
  const problems: string[] = [];
  if (x.project === TARGET) {
    const want = [uris.leases, uris.agents, ...(x.role === "one" ? [uris.inbox] : [])];
    for (const uri of want) await s.notified(uri, from).catch((e: Error) => problems.push(e.message));
  } else {
    const p = h.seed.projects[x.project];
    const bearer = p ? (p.token ?? h.auth.admin) : h.auth.admin;
    const auth: Record<string, string> = bearer ? { authorization: `Bearer ${bearer}` } : {};
    const step = async (uri: string, change: () => Promise<unknown>) => {
      const at = s.seen.length;
      await change();
      await s.notified(uri, at).catch((e: Error) => problems.push(e.message));
    };
    await step(uris.leases, async () => {
      const r = await s.call("acquire_lease", { name: "mcp-barrier", ttl_ms: 60_000 });
      if (r.isError) problems.push(`barrier lease: ${JSON.stringify(r.structuredContent)}`);
    });
    let helper: { id: string; key: string } | undefined;
    await step(uris.agents, async () => {
      const res = await h.t.rest("/v1/agents/register", { json: { name: "mcp-barrier", project: x.project }, headers: auth });
      const body = (await res.json()) as Json;
      if (!res.ok) problems.push(`barrier agent: ${res.status} ${JSON.stringify(body)}`);
      else helper = { id: body.agent.id, key: body.agentKey };
    });
    if (helper) {
      const headers = { ...auth, "x-kxm-agent-id": helper.id, "x-kxm-agent-key": helper.key };
      await step(uris.inbox, async () => {
        const res = await h.t.rest("/v1/messages", { json: { target: x.agentId, content: "mcp barrier" }, headers });
        if (!res.ok) problems.push(`barrier message: ${res.status} ${await res.text()}`);
      });
    }
    const told = s.seen.slice(from);
    const want = [uris.leases, uris.agents, uris.inbox];
    if (JSON.stringify(told) !== JSON.stringify(want)) problems.push(`told ${JSON.stringify(told)} after alpha's changes and its own, want ${JSON.stringify(want)}`);
  }
  return { got: { answer: problems.length ? problems.join("; ") : "ok", text: JSON.stringify(s.seen) }, mid };
}

/** Undefined once `p` resolves within `ms`; else what went wrong. */
async function within(p: Promise<unknown>, ms: number, what: string): Promise<string | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`${what} in ${ms} ms`), ms)));
  try {
    return await Promise.race([p.then(() => undefined, (e: unknown) => `${what}: ${e instanceof Error ? e.message : String(e)}`), late]);
  } finally {
    clearTimeout(timer);
  }
}
