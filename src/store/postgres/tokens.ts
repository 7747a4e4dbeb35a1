import { auditFromDb, tokenFromDb, tokenToDb, type AuditDb, type TokenDb } from "../rows.js";
import { auditColumns, tokenColumns } from "./rows.js";
import type { TokenStore } from "../token-store.js";
import type { PgAccess, PgTx } from "./transaction.js";
import type { AuditRecord, ProjectTokenRow } from "../../domain.js";

const columns = Object.keys(tokenToDb({} as ProjectTokenRow));
const upsertToken = `INSERT INTO project_tokens (${columns.join(", ")})
  VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})
  ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at, expiry_noted = excluded.expiry_noted`;

/** Serialises the token decisions of one project across hubs (its live-token count is read under it). */
const lockProject = "SELECT pg_advisory_xact_lock(hashtextextended('kxm-tokens:' || $1, 0))";

/**
 * The credentials concern of the PostgreSQL store, the same decisions as on SQLite (sqlite/tokens.ts).
 * A token decision takes its project's advisory lock first, then writes its row, its change and
 * its audit entry in one transaction.
 */
export function createPostgresTokens({ tx, changeTx, rows, now }: PgAccess): TokenStore {
  const appendOne = (t: PgTx, r: AuditRecord, atMs: number) =>
    t.query("INSERT INTO audit_events (at_ms, project, kind, detail) VALUES ($1, $2, $3, $4)", [atMs, r.project, r.kind, JSON.stringify(r.detail)]);
  const getToken = async (id: string) => {
    const [r] = await rows<TokenDb>(`SELECT ${tokenColumns} FROM project_tokens WHERE id = $1`, [id]);
    return r && tokenFromDb(r);
  };

  return {
    decideToken: (project, id, decide) =>
      changeTx(project, async (t, record) => {
        await t.query(lockProject, [project]);
        const [found] = (await t.query<TokenDb>(`SELECT ${tokenColumns} FROM project_tokens WHERE id = $1 FOR UPDATE`, [id])).rows;
        const nowMs = await now(t);
        const live = await t.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM project_tokens WHERE project = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)",
          [project, nowMs],
        );
        const d = decide(found && tokenFromDb(found), live.rows[0]!.n, nowMs);
        if (d.write) await t.query(upsertToken, Object.values(tokenToDb(d.write)));
        if (d.audit) await appendOne(t, d.audit, nowMs);
        if (d.change) await record(project, d.change.stream, d.change.body, nowMs);
        return d.result;
      }),
    // What PostgreSQL has committed is durable.
    peekToken: getToken,
    getToken,
    async listTokens(project, limit) {
      const r = await rows<TokenDb>(`SELECT ${tokenColumns} FROM project_tokens WHERE project = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, [project, limit]);
      return r.map(tokenFromDb);
    },
    async projectHasTokens(project) {
      return (await rows("SELECT 1 FROM project_tokens WHERE project = $1 LIMIT 1", [project])).length > 0;
    },
    async noteExpiredTokens(note) {
      const due = await tx(async (t) => {
        const nowMs = await now(t);
        const sql = `SELECT ${tokenColumns} FROM project_tokens WHERE NOT expiry_noted AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at`;
        return (await t.query<TokenDb>(sql, [nowMs])).rows;
      });
      const noted: ProjectTokenRow[] = [];
      for (const d of due) {
        const done = await changeTx(d.project, async (t, record) => {
          const [r] = (await t.query<TokenDb>(`UPDATE project_tokens SET expiry_noted = true WHERE id = $1 AND NOT expiry_noted RETURNING ${tokenColumns}`, [d.id])).rows;
          if (!r) return undefined; // another hub noted it meanwhile
          const nowMs = await now(t);
          const n = note(tokenFromDb(r), nowMs);
          await appendOne(t, n.audit, nowMs);
          await record(r.project, n.change.stream, n.change.body, nowMs);
          return tokenFromDb(r);
        });
        if (done) noted.push(done);
      }
      return noted;
    },
    appendAudit: (records) =>
      tx(async (t) => {
        const atMs = await now(t);
        for (const r of records) await appendOne(t, r, atMs);
      }),
    async listAudit({ project, beforeSeq, limit }) {
      const before = beforeSeq ?? Number.MAX_SAFE_INTEGER;
      const r =
        project === undefined
          ? await rows<AuditDb>(`SELECT ${auditColumns} FROM audit_events WHERE seq < $1 ORDER BY seq DESC LIMIT $2`, [before, limit])
          : await rows<AuditDb>(`SELECT ${auditColumns} FROM audit_events WHERE project = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`, [project, before, limit]);
      return r.map(auditFromDb);
    },
    purgeAudit: (retainMs, keep) =>
      tx(async (t) => {
        const nowMs = await now(t);
        const old = await t.query("DELETE FROM audit_events WHERE at_ms < $1", [nowMs - retainMs]);
        const beyond = await t.query(
          "DELETE FROM audit_events WHERE seq <= coalesce((SELECT seq FROM audit_events ORDER BY seq DESC LIMIT 1 OFFSET $1), 0)",
          [keep],
        );
        return (old.rowCount ?? 0) + (beyond.rowCount ?? 0);
      }),
  };
}
