import { randomBytes } from "node:crypto";
import { errors } from "../errors.js";
import { sha256Hex } from "../ids.js";
import type { ChangeRecord } from "../store/change-feed.js";
import type { TokenDecision } from "../store/token-store.js";
import type { AuditRecord, ProjectTokenRow, TokenScope } from "../domain.js";

/**
 * The rules of managed project tokens, pure functions of what the store read: the secret's
 * form, the scopes, creation and revocation. project-tokens.ts runs them as store decisions.
 */

export const tokenScopes: readonly TokenScope[] = ["agent", "read", "check"];

const rank: Record<TokenScope, number> = { check: 1, read: 2, agent: 3 };

/** True when a token of scope `have` may make a call that needs `need`. */
export const scopeAllows = (have: TokenScope, need: TokenScope): boolean => rank[have] >= rank[need];

export type TokenState = "live" | "expired" | "revoked";

/** Where a token stands at `nowMs`: revoked wins over expired. */
export function tokenState(t: ProjectTokenRow, nowMs: number): TokenState {
  if (t.revokedAtMs !== undefined) return "revoked";
  if (t.expiresAtMs !== undefined && t.expiresAtMs <= nowMs) return "expired";
  return "live";
}

/** A project's live tokens at most: a rotation needs two, an automation a handful. */
export const maxLiveTokens = 100;
/** 200 characters of label, for people. */
export const maxLabelChars = 200;
/** An expiry from one second to ten years after creation. */
export const ttlRange = { min: 1_000, max: 315_360_000_000 } as const;

export const tokenIdPattern = /^pt_[0-9a-f]{16}$/;
/**
 * `kxmpt_`, the id's 16 hex digits, `_`, then 32 random bytes in base64url (256 bits): enough
 * entropy that a plain SHA-256 of it is a safe thing to store. The prefix lets secret scanners
 * find a leaked one, and the id in it names the token to revoke.
 */
const secretPattern = /^kxmpt_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

/** The id of the token a presented bearer claims to be, or undefined when it has not the form. */
export function tokenIdOfSecret(bearer: string): string | undefined {
  const m = secretPattern.exec(bearer);
  return m ? `pt_${m[1]}` : undefined;
}

/** A new token's id and secret (the secret names the id). */
export function newTokenSecret(): { id: string; secret: string } {
  const hex = randomBytes(8).toString("hex");
  return { id: `pt_${hex}`, secret: `kxmpt_${hex}_${randomBytes(32).toString("base64url")}` };
}

/** The change open streams follow: this token no longer works. */
export const tokenEndedChange = (tokenId: string, why: "revoked" | "expired"): ChangeRecord => ({
  stream: "tokens",
  body: { kind: why, tokenId },
});

/**
 * The change open streams of a project let in for having no token follow: it has one now. The
 * body names no token, so that a hub of a release before this one (replicas on one database)
 * does not read it as a token that ended.
 */
export const projectClosedChange = (): ChangeRecord => ({ stream: "tokens", body: { kind: "created" } });

/** What a tokens change says, or undefined when the body is not one. */
export function endedTokenOf(body: unknown): string | undefined {
  const b = body as { tokenId?: unknown } | null;
  return typeof b?.tokenId === "string" ? b.tokenId : undefined;
}

/** Whether a tokens change says its project got a token (projectClosedChange). */
export function closesProject(body: unknown): boolean {
  return (body as { kind?: unknown } | null)?.kind === "created";
}

export interface NewToken {
  project: string;
  scope: TokenScope;
  label: string;
  ttlMs?: number;
}

/**
 * Creates a token: refused (token_limit_reached) when the project already has maxLiveTokens
 * live ones. `current` is whatever row has the new id, which a fresh random id never has.
 */
export function decideCreate(
  input: NewToken,
  fresh: { id: string; secret: string },
  current: ProjectTokenRow | undefined,
  live: number,
  nowMs: number,
): TokenDecision<ProjectTokenRow> {
  if (current) throw errors.internal(new Error(`token id ${fresh.id} is taken`));
  if (live >= maxLiveTokens) throw errors.tokenLimitReached(input.project, maxLiveTokens);
  const row: ProjectTokenRow = {
    id: fresh.id,
    project: input.project,
    scope: input.scope,
    label: input.label,
    hash: sha256Hex(fresh.secret),
    createdAtMs: nowMs,
    ...(input.ttlMs !== undefined && { expiresAtMs: nowMs + input.ttlMs }),
    expiryNoted: false,
  };
  const audit: AuditRecord = {
    kind: "token_created",
    project: input.project,
    detail: { tokenId: row.id, scope: row.scope, label: row.label, ...(row.expiresAtMs !== undefined && { expiresAtMs: row.expiresAtMs }) },
  };
  return { write: row, change: projectClosedChange(), audit, result: row };
}

/**
 * Revokes a token of `project`: token_not_found when there is none (or it is another project's);
 * a token already revoked is answered as it is, and nothing is written.
 */
export function decideRevoke(project: string, tokenId: string, current: ProjectTokenRow | undefined, nowMs: number): TokenDecision<ProjectTokenRow> {
  if (!current || current.project !== project) throw errors.tokenNotFound(tokenId);
  if (current.revokedAtMs !== undefined) return { result: current };
  const row = { ...current, revokedAtMs: nowMs };
  return {
    write: row,
    change: tokenEndedChange(row.id, "revoked"),
    audit: { kind: "token_revoked", project, detail: { tokenId: row.id, scope: row.scope, label: row.label } },
    result: row,
  };
}

/** The sweep's note of a token past its expiry. */
export const expiryNote = (t: ProjectTokenRow): { change: ChangeRecord; audit: AuditRecord } => ({
  change: tokenEndedChange(t.id, "expired"),
  audit: { kind: "token_expired", project: t.project, detail: { tokenId: t.id, scope: t.scope, label: t.label, expiresAtMs: t.expiresAtMs } },
});
