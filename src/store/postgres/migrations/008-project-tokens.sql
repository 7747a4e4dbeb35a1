-- Project tokens managed through OpsService (the secret only as its SHA-256 hash), and the audit
-- trail operators read, as on SQLite (migration 015 there). Token rows are never deleted.
CREATE TABLE project_tokens (
  id text COLLATE "C" PRIMARY KEY,
  project text COLLATE "C" NOT NULL,
  scope text NOT NULL CHECK (scope IN ('agent', 'read', 'check')),
  label text NOT NULL,
  hash text NOT NULL,
  created_at bigint NOT NULL,
  expires_at bigint,
  revoked_at bigint,
  expiry_noted boolean NOT NULL DEFAULT false
);
CREATE INDEX project_tokens_project ON project_tokens (project, created_at);
CREATE INDEX project_tokens_due ON project_tokens (expires_at) WHERE NOT expiry_noted AND expires_at IS NOT NULL;

CREATE TABLE audit_events (
  seq bigserial PRIMARY KEY,
  at_ms bigint NOT NULL,
  project text COLLATE "C" NOT NULL,
  kind text NOT NULL,
  detail text NOT NULL
);
CREATE INDEX audit_events_project ON audit_events (project, seq);
CREATE INDEX audit_events_at ON audit_events (at_ms);
