import type Database from "better-sqlite3";
import type { StoreAccess } from "./batch.js";
import { auditFromDb, tokenFromDb, tokenToDb, type AuditDb, type TokenDb } from "../rows.js";
import type { TokenStore } from "../token-store.js";
import type { AuditRecord, ProjectTokenRow } from "../../domain.js";

/**
 * The credentials concern of the SQLite store: project tokens and the audit trail. A token decision
 * writes its row, its change and its audit entry in one savepoint of a batch, all or nothing.
 */
export function createSqliteTokens(
  db: Database.Database,
  { tx, changeTx, read, peek, now }: StoreAccess,
): { store: TokenStore; hasTokens(project: string): boolean; hasTokensInDecision(project: string): boolean } {
  const q = {
    byId: db.prepare<[string], TokenDb>("SELECT * FROM project_tokens WHERE id = ?"),
    live: db.prepare<[string, number], { n: number }>(
      "SELECT count(*) AS n FROM project_tokens WHERE project = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
    ),
    upsert: db.prepare(
      `INSERT INTO project_tokens (id, project, scope, label, hash, created_at, expires_at, revoked_at, expiry_noted)
       VALUES (@id, @project, @scope, @label, @hash, @created_at, @expires_at, @revoked_at, @expiry_noted)
       ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at, expiry_noted = excluded.expiry_noted`,
    ),
    ofProject: db.prepare<[string, number], TokenDb>(
      "SELECT * FROM project_tokens WHERE project = ? ORDER BY created_at DESC, id DESC LIMIT ?",
    ),
    any: db.prepare<[string], { n: number }>("SELECT 1 AS n FROM project_tokens WHERE project = ? LIMIT 1"),
    projects: db.prepare<[], { project: string }>("SELECT DISTINCT project FROM project_tokens"),
    due: db.prepare<[number], TokenDb>(
      "SELECT * FROM project_tokens WHERE expiry_noted = 0 AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at",
    ),
    markNoted: db.prepare<[string], TokenDb>(
      "UPDATE project_tokens SET expiry_noted = 1 WHERE id = ? AND expiry_noted = 0 RETURNING *",
    ),
    append: db.prepare("INSERT INTO audit_events (at_ms, project, kind, detail) VALUES (?, ?, ?, ?)"),
    auditAll: db.prepare<[number, number], AuditDb>("SELECT * FROM audit_events WHERE seq < ? ORDER BY seq DESC LIMIT ?"),
    auditOf: db.prepare<[string, number, number], AuditDb>(
      "SELECT * FROM audit_events WHERE project = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
    ),
    purgeOld: db.prepare<[number]>("DELETE FROM audit_events WHERE at_ms < ?"),
    purgeBeyond: db.prepare<[number]>(
      "DELETE FROM audit_events WHERE seq <= coalesce((SELECT seq FROM audit_events ORDER BY seq DESC LIMIT 1 OFFSET ?), 0)",
    ),
  };
  const appendOne = (r: AuditRecord, atMs: number) => q.append.run(atMs, r.project, r.kind, JSON.stringify(r.detail));
  const row = (id: string) => {
    const r = q.byId.get(id);
    return r && tokenFromDb(r);
  };
  /**
   * The projects with a token row, kept in memory so that a call of a project without one (the
   * question every authenticated call asks) reads nothing: rows are never deleted and only this
   * store writes the file. A project is added when its row is written, before the batch commits;
   * should the batch not commit, the yes stays, and a yes is only ever a reason to read the
   * durable row (src/auth/authenticate.ts), so it is never wrong, only a read.
   */
  const withTokens = new Set(q.projects.all().map((r) => r.project));

  const store: TokenStore = {
    decideToken: (project, id, decide) =>
      changeTx((record) => {
        const nowMs = now();
        const found = row(id);
        const d = decide(found, q.live.get(project, nowMs)!.n, nowMs);
        if (d.write) {
          q.upsert.run(tokenToDb(d.write));
          withTokens.add(d.write.project);
        }
        if (d.change) record(project, d.change.stream, d.change.body, nowMs);
        if (d.audit) appendOne(d.audit, nowMs);
        return d.result;
      }),
    peekToken: (id) => peek(() => row(id)),
    getToken: (id) => read(() => row(id)),
    listTokens: (project, limit) => read(() => q.ofProject.all(project, limit).map(tokenFromDb)),
    projectHasTokens: (project, durable) =>
      durable ? read(() => q.any.get(project) !== undefined) : peek(() => withTokens.has(project)),
    async noteExpiredTokens(note) {
      const due = await read(() => q.due.all(now()).map(tokenFromDb));
      const noted: ProjectTokenRow[] = [];
      for (const t of due) {
        const done = await changeTx((record) => {
          const r = q.markNoted.get(t.id);
          if (!r) return undefined; // noted meanwhile
          const nowMs = now();
          const n = note(tokenFromDb(r), nowMs);
          record(r.project, n.change.stream, n.change.body, nowMs);
          appendOne(n.audit, nowMs);
          return tokenFromDb(r);
        });
        if (done) noted.push(done);
      }
      return noted;
    },
    appendAudit: (records) =>
      tx(() => {
        const atMs = now();
        for (const r of records) appendOne(r, atMs);
      }),
    listAudit: ({ project, beforeSeq, limit }) =>
      read(() => {
        const before = beforeSeq ?? Number.MAX_SAFE_INTEGER;
        return (project === undefined ? q.auditAll.all(before, limit) : q.auditOf.all(project, before, limit)).map(auditFromDb);
      }),
    purgeAudit: (retainMs, keep) =>
      tx(() => q.purgeOld.run(now() - retainMs).changes + q.purgeBeyond.run(keep).changes),
  };
  return {
    store,
    hasTokens: (project) => withTokens.has(project),
    /** Inside a decision, as its transaction reads it: the memory's no, or a yes found on the row. */
    hasTokensInDecision: (project) => withTokens.has(project) && q.any.get(project) !== undefined,
  };
}
