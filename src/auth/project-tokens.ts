import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import type { Observer } from "../observe.js";
import type { TokenStore } from "../store/token-store.js";
import { intInRange, projectName } from "../validate.js";
import {
  decideCreate,
  decideRevoke,
  expiryNote,
  maxLabelChars,
  newTokenSecret,
  tokenIdPattern,
  tokenState,
  ttlRange,
  type TokenState,
} from "./tokens.js";
import type { ProjectTokenRow, TokenScope } from "../domain.js";

/** A token as operators see it: never its secret or hash. */
export interface TokenView {
  tokenId: string;
  project: string;
  scope: TokenScope;
  label: string;
  createdAtMs: number;
  expiresAtMs?: number;
  revokedAtMs?: number;
  state: TokenState;
}

export interface ProjectTokensDeps {
  tokens: TokenStore;
  clock: Clock;
  observer: Observer;
}

/**
 * What a label may not hold: any C0 or C1 control character (DEL included), the line and
 * paragraph separators, and the bidi controls (U+061C, U+200E, U+200F, U+202A..U+202E,
 * U+2066..U+2069), which make a label in a log line or on the operator page read as other text.
 */
const misleadingCharacter = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/;

/**
 * OpsService's project tokens: create (the secret once), list, revoke, and the sweep's note of
 * expired ones. Each change is one store decision with its audit entry; the log names the
 * token by its id, never by its secret.
 */
export function createProjectTokens({ tokens, clock, observer }: ProjectTokensDeps) {
  const view = (t: ProjectTokenRow, nowMs: number): TokenView => ({
    tokenId: t.id,
    project: t.project,
    scope: t.scope,
    label: t.label,
    createdAtMs: t.createdAtMs,
    ...(t.expiresAtMs !== undefined && { expiresAtMs: t.expiresAtMs }),
    ...(t.revokedAtMs !== undefined && { revokedAtMs: t.revokedAtMs }),
    state: tokenState(t, nowMs),
  });

  return {
    async create(input: { project: string; scope: TokenScope; label?: string; ttlMs?: bigint }): Promise<{ token: TokenView; secret: string }> {
      const project = projectName("project", input.project);
      const label = (input.label ?? "").trim();
      if (label.length > maxLabelChars) throw errors.protocol(`label exceeds ${maxLabelChars} characters`, "label");
      if (misleadingCharacter.test(label)) throw errors.protocol("label cannot contain control, line separator or bidi characters", "label");
      const ttlMs = input.ttlMs === undefined ? undefined : intInRange("ttlMs", input.ttlMs, ttlRange.min, ttlRange.max, 0);
      const fresh = newTokenSecret();
      const row = await tokens.decideToken(project, fresh.id, (current, live, nowMs) =>
        decideCreate({ project, scope: input.scope, label, ...(ttlMs !== undefined && { ttlMs }) }, fresh, current, live, nowMs),
      );
      observer.log("project_token_created", { project, tokenId: row.id, scope: row.scope, expiresAtMs: row.expiresAtMs });
      return { token: view(row, clock.now()), secret: fresh.secret };
    },

    async list(projectInput: string): Promise<TokenView[]> {
      const project = projectName("project", projectInput);
      const nowMs = clock.now();
      return (await tokens.listTokens(project, 1_000)).map((t) => view(t, nowMs));
    },

    async revoke(projectInput: string, tokenId: string): Promise<TokenView> {
      const project = projectName("project", projectInput);
      if (!tokenIdPattern.test(tokenId)) throw errors.protocol("tokenId must be pt_ and 16 hex digits", "tokenId");
      let revoked = false;
      const row = await tokens.decideToken(project, tokenId, (current, _live, nowMs) => {
        const d = decideRevoke(project, tokenId, current, nowMs);
        revoked = d.write !== undefined;
        return d;
      });
      if (revoked) observer.log("project_token_revoked", { project, tokenId: row.id, scope: row.scope });
      return view(row, clock.now());
    },

    /** The sweep: each token past its expiry is noted once (audit entry, its streams end). */
    async noteExpired(): Promise<number> {
      const noted = await tokens.noteExpiredTokens((t) => expiryNote(t));
      for (const t of noted) observer.log("project_token_expired", { project: t.project, tokenId: t.id, scope: t.scope });
      return noted.length;
    },
  };
}

export type ProjectTokens = ReturnType<typeof createProjectTokens>;
