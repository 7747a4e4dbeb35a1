-- Project tokens managed through OpsService (the secret only as its SHA-256 hash), and the audit
-- trail operators read. Token rows are never deleted: a project that ever had a token of its own
-- stays closed to callers without one after its tokens are revoked.
CREATE TABLE project_tokens (
  id TEXT PRIMARY KEY,
  project TEXT NOT NULL,
  scope TEXT NOT NULL CHECK (scope IN ('agent', 'read', 'check')),
  label TEXT NOT NULL,
  hash TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  revoked_at INTEGER,
  expiry_noted INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX project_tokens_project ON project_tokens (project, created_at);
CREATE INDEX project_tokens_due ON project_tokens (expires_at) WHERE expiry_noted = 0 AND expires_at IS NOT NULL;

CREATE TABLE audit_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL,
  project TEXT NOT NULL,
  kind TEXT NOT NULL,
  detail TEXT NOT NULL
);
CREATE INDEX audit_events_project ON audit_events (project, seq);
CREATE INDEX audit_events_at ON audit_events (at_ms);
