-- kxm-hub's first layout. Versions 1..5 are the reference hub's layouts, which kxm-hub refuses
-- as outdated rather than migrating.
CREATE TABLE agents (
  id TEXT PRIMARY KEY,
  project TEXT NOT NULL,
  name TEXT NOT NULL,
  name_key TEXT NOT NULL,
  purpose TEXT NOT NULL,
  model TEXT,
  host TEXT,
  key_hash TEXT NOT NULL,
  connected_at INTEGER NOT NULL,
  last_seen_at INTEGER NOT NULL,
  online INTEGER NOT NULL
);
CREATE UNIQUE INDEX agents_project_name ON agents (project, name_key);
CREATE INDEX agents_online_seen ON agents (online, last_seen_at);

CREATE TABLE leases (
  resource TEXT PRIMARY KEY,
  project TEXT NOT NULL,
  name TEXT NOT NULL,
  holder_agent_id TEXT,
  holder_agent_name TEXT,
  fencing_token INTEGER NOT NULL CHECK (fencing_token >= 1),
  acquired_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE INDEX leases_project_name ON leases (project, name);
CREATE INDEX leases_expires ON leases (expires_at) WHERE holder_agent_id IS NOT NULL;

CREATE TABLE runtime_presence (
  project TEXT NOT NULL,
  runtime_id TEXT NOT NULL,
  host TEXT,
  registered_at INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL,
  PRIMARY KEY (project, runtime_id)
);
