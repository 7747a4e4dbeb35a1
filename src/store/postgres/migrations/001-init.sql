-- kxm-hub on PostgreSQL, version 1: agents, runtimes, leases and the fence base. Times are
-- milliseconds since the epoch (bigint). Names are text in the "C" collation, whatever the
-- database's locale: compared and ordered by code point, as on SQLite (name_key is the
-- case-folded agent name).

CREATE TABLE agents (
  id text PRIMARY KEY,
  -- Registration order, across replicas.
  reg_seq bigserial NOT NULL,
  project text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  name_key text COLLATE "C" NOT NULL,
  purpose text NOT NULL,
  model text,
  host text,
  key_hash text NOT NULL,
  connected_at bigint NOT NULL,
  last_seen_at bigint NOT NULL,
  online boolean NOT NULL
);
CREATE UNIQUE INDEX agents_project_name ON agents (project, name_key);
CREATE INDEX agents_project_order ON agents (project, reg_seq);
CREATE INDEX agents_online_seen ON agents (last_seen_at) WHERE online;

CREATE TABLE runtime_presence (
  project text COLLATE "C" NOT NULL,
  runtime_id text COLLATE "C" NOT NULL,
  host text,
  registered_at bigint NOT NULL,
  heartbeat_at bigint NOT NULL,
  PRIMARY KEY (project, runtime_id)
);
CREATE INDEX runtime_presence_heartbeat ON runtime_presence (heartbeat_at);

-- One row per resource ever leased: a released or lapsed lease keeps its row (no holder) and
-- its token, the floor the next grant builds on.
CREATE TABLE leases (
  project text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  holder_agent_id text,
  holder_agent_name text,
  fencing_token bigint NOT NULL CHECK (fencing_token >= 1),
  acquired_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (project, name)
);
CREATE INDEX leases_expires ON leases (expires_at) WHERE holder_agent_id IS NOT NULL;

-- The floor of a resource that has no row yet (raised by a restore, as on SQLite).
CREATE TABLE fence_base (
  id integer PRIMARY KEY CHECK (id = 1),
  floor bigint NOT NULL CHECK (floor >= 0)
);
INSERT INTO fence_base (id, floor) VALUES (1, 0);
