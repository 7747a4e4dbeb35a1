import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProjectTokens, TokenView } from "../auth/project-tokens.js";
import type { TokenState as DomainTokenState } from "../auth/tokens.js";
import { errors } from "../errors.js";
import type { Audit } from "../auth/audit.js";
import {
  AuditKind,
  ProjectTokenSchema,
  TokenScope,
  TokenState,
  type AuditEventSchema,
  type CreateProjectTokenRequest,
  type ListAuditEventsRequest,
} from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import type { AuditKind as DomainAuditKind, AuditRow, TokenScope as DomainTokenScope } from "../domain.js";

const scopeToProto: Record<DomainTokenScope, TokenScope> = {
  agent: TokenScope.AGENT,
  read: TokenScope.READ,
  check: TokenScope.CHECK,
};

const stateToProto: Record<DomainTokenState, TokenState> = {
  live: TokenState.LIVE,
  expired: TokenState.EXPIRED,
  revoked: TokenState.REVOKED,
};

/** A requested scope: unset is `agent`; a number the schema does not name is refused. */
function scopeOf(s: TokenScope): DomainTokenScope {
  switch (s) {
    case TokenScope.UNSPECIFIED:
    case TokenScope.AGENT:
      return "agent";
    case TokenScope.READ:
      return "read";
    case TokenScope.CHECK:
      return "check";
    default:
      throw errors.protocol("scope must be agent, read or check", "scope");
  }
}

function tokenToProto(t: TokenView): MessageInitShape<typeof ProjectTokenSchema> {
  return {
    tokenId: t.tokenId,
    project: t.project,
    scope: scopeToProto[t.scope],
    label: t.label,
    createdAt: timestampFromMs(t.createdAtMs),
    ...(t.expiresAtMs !== undefined && { expiresAt: timestampFromMs(t.expiresAtMs) }),
    ...(t.revokedAtMs !== undefined && { revokedAt: timestampFromMs(t.revokedAtMs) }),
    state: stateToProto[t.state],
  };
}

const kindToProto: Record<DomainAuditKind, AuditKind> = {
  token_created: AuditKind.TOKEN_CREATED,
  token_revoked: AuditKind.TOKEN_REVOKED,
  token_expired: AuditKind.TOKEN_EXPIRED,
  restore: AuditKind.RESTORE,
  fence_raised: AuditKind.FENCE_RAISED,
  sync_conflict: AuditKind.SYNC_CONFLICT,
  auth_refusals: AuditKind.AUTH_REFUSALS,
};

/** An entry's facts as strings (the API's map): strings as they are, anything else as JSON. */
const detailToProto = (d: Record<string, unknown>): Record<string, string> =>
  Object.fromEntries(Object.entries(d).filter(([, v]) => v !== undefined).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]));

function auditToProto(e: AuditRow): MessageInitShape<typeof AuditEventSchema> {
  return { seq: BigInt(e.seq), at: timestampFromMs(e.atMs), project: e.project, kind: kindToProto[e.kind] ?? AuditKind.UNSPECIFIED, detail: detailToProto(e.detail) };
}

/**
 * OpsService's project tokens (auth/project-tokens.ts) and audit trail (auth/audit.ts): the
 * security half of the operator's calls.
 */
export function securityHandlers(tokens: ProjectTokens, audit: Audit) {
  return {
    async listAuditEvents(req: ListAuditEventsRequest) {
      const page = await audit.list({ project: req.project, pageSize: req.pageSize, pageToken: req.pageToken });
      return { events: page.events.map(auditToProto), nextPageToken: page.nextBeforeSeq === undefined ? "" : String(page.nextBeforeSeq) };
    },
    async createProjectToken(req: CreateProjectTokenRequest) {
      const r = await tokens.create({ project: req.project, scope: scopeOf(req.scope), label: req.label, ttlMs: req.ttlMs });
      return { token: tokenToProto(r.token), secret: r.secret };
    },
    async listProjectTokens(req: { project: string }) {
      return { tokens: (await tokens.list(req.project)).map(tokenToProto) };
    },
    async revokeProjectToken(req: { project: string; tokenId: string }) {
      return { token: tokenToProto(await tokens.revoke(req.project, req.tokenId)) };
    },
  };
}
