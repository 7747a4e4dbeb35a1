/**
 * What `kxm-hub ops` prints by default: a summary for a person, built from the hub's REST JSON
 * (`--json` prints that JSON instead). Times are the hub's, as it sent them (ISO 8601, UTC): the
 * operator's clock may differ, so nothing here is computed from the local time.
 */

/**
 * `text` as it may reach an operator's terminal: every control character but the line feed (an
 * escape sequence, a carriage return, BEL) and every bidi control is written as `\uXXXX`. Agents
 * choose their names and their leases' names, and a name holding `ESC]52;...` would otherwise
 * write the operator's clipboard, `ESC[2J` clear the screen, a carriage return forge a row.
 */
export function terminalText(text: string): string {
  return text.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

export interface LeaseJson {
  project: string;
  name: string;
  holderAgentId: string;
  holderAgentName: string;
  fencingToken: number | string;
  expiresAt?: string;
  waiters?: { agentId: string; agentName: string; since?: string; waitUntil?: string }[];
}

export interface AgentJson {
  id: string;
  name: string;
  project: string;
  presence?: string;
}

const who = (name: string, id: string) => `${name} (${id})`;

/** One row per lease (name, holder, token, expiry, waiters), each waiter on a line below it. */
export function leasesText(project: string, leases: LeaseJson[]): string {
  if (leases.length === 0) return `no live leases in project ${project}\n`;
  const rows = [
    ["NAME", "HOLDER", "TOKEN", "EXPIRES", "WAITERS"],
    ...leases.map((l) => [l.name, who(l.holderAgentName, l.holderAgentId), String(l.fencingToken), l.expiresAt ?? "-", String(l.waiters?.length ?? 0)]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const out = [line(rows[0]!)];
  leases.forEach((l, i) => {
    out.push(line(rows[i + 1]!));
    for (const [n, w] of (l.waiters ?? []).entries()) {
      out.push(`  waiter ${n + 1}: ${who(w.agentName, w.agentId)} since ${w.since ?? "-"}, waits until ${w.waitUntil ?? "-"}`);
    }
  });
  return `${out.join("\n")}\n`;
}

/** The lease as it was, and whom it went to in the same transaction, if anyone waited. */
export function releasedText(answer: { lease: LeaseJson; next?: LeaseJson }): string {
  const { lease, next } = answer;
  const first = `released ${lease.name} in ${lease.project}: token ${lease.fencingToken}, held by ${who(lease.holderAgentName, lease.holderAgentId)}`;
  const then = next
    ? `granted to the first waiter, ${who(next.holderAgentName, next.holderAgentId)}: token ${next.fencingToken}, expires ${next.expiresAt ?? "-"}`
    : "no one was waiting: it is free";
  return `${first}\n${then}\n`;
}

/** The agent now offline, and the leases it lost. */
export function evictedText(answer: { agent: AgentJson; releasedLeases?: LeaseJson[] }): string {
  const { agent, releasedLeases = [] } = answer;
  const first = `evicted ${who(agent.name, agent.id)} from ${agent.project}: ${agent.presence ?? "offline"}, its key is refused from now on`;
  const leases = releasedLeases.map((l) => `${l.name} (token ${l.fencingToken})`);
  const then = leases.length === 0 ? "it held no leases" : `released ${leases.length === 1 ? "1 lease" : `${leases.length} leases`}: ${leases.join(", ")}`;
  return `${first}\n${then}\n`;
}

export interface TokenJson {
  tokenId: string;
  project: string;
  scope: string;
  label?: string;
  createdAt?: string;
  expiresAt?: string;
  revokedAt?: string;
  state: string;
}

export interface AuditJson {
  seq: string | number;
  at?: string;
  project?: string;
  kind: string;
  detail?: Record<string, string>;
}

/** Rows as aligned columns under a header. */
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return `${rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
}

/** One row per token: id, scope, state, expiry, label. Never a secret (the hub sends none). */
export function tokensText(project: string, tokens: TokenJson[]): string {
  if (tokens.length === 0) return `no tokens in project ${project}\n`;
  return table([
    ["TOKEN", "SCOPE", "STATE", "CREATED", "EXPIRES", "LABEL"],
    ...tokens.map((t) => [t.tokenId, t.scope, t.state, t.createdAt ?? "-", t.expiresAt ?? "never", t.label ?? ""]),
  ]);
}

/** The new token and its secret, the one time it is shown. */
export function createdTokenText(answer: { token: TokenJson; secret: string }): string {
  const t = answer.token;
  return (
    `created ${t.tokenId} in ${t.project}: scope ${t.scope}, expires ${t.expiresAt ?? "never"}\n` +
    `secret (shown this once; the hub keeps only its hash):\n${answer.secret}\n`
  );
}

export function revokedTokenText(answer: { token: TokenJson }): string {
  const t = answer.token;
  return `revoked ${t.tokenId} in ${t.project} at ${t.revokedAt ?? "-"}: refused from now on, and the streams opened with it end\n`;
}

/** One line per audit entry, newest first: time, kind, project, facts. */
export function auditText(events: AuditJson[]): string {
  if (events.length === 0) return "the audit trail is empty\n";
  return table([
    ["SEQ", "AT", "KIND", "PROJECT", "DETAIL"],
    ...events.map((e) => [
      String(e.seq),
      e.at ?? "-",
      e.kind,
      e.project || "-",
      Object.entries(e.detail ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(" "),
    ]),
  ]);
}
