-- Peer messages and each agent's inbox stream, as on SQLite (migration 007 there).
CREATE TABLE messages (
  id text COLLATE "C" PRIMARY KEY,
  project text COLLATE "C" NOT NULL,
  from_id text COLLATE "C" NOT NULL,
  from_name text NOT NULL,
  to_id text COLLATE "C" NOT NULL,
  to_name text NOT NULL,
  content text NOT NULL,
  delivery text NOT NULL,
  hops integer NOT NULL,
  max_hops integer NOT NULL,
  seq bigint NOT NULL,
  correlation_id text,
  reply_to text,
  idempotency_key text COLLATE "C",
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  delivered_at bigint,
  replied_at bigint,
  cancelled_at bigint,
  status text NOT NULL,
  reply_content text,
  reply_created_at bigint,
  error text
);
CREATE UNIQUE INDEX messages_idempotency ON messages (from_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX messages_to ON messages (to_id, created_at);
CREATE INDEX messages_from ON messages (from_id, created_at);
CREATE INDEX messages_open ON messages (expires_at) WHERE status IN ('queued', 'delivered');
CREATE INDEX messages_project_open ON messages (project, created_at) WHERE status IN ('queued', 'delivered');

-- Every event of an agent's stream, numbered per agent from 1. The stream's row in
-- inbox_streams is locked by the decision that numbers an event, so numbers are handed out in
-- commit order on every replica.
CREATE TABLE inbox_events (
  agent_id text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  kind text NOT NULL,
  message_id text COLLATE "C" NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (agent_id, seq)
);
CREATE INDEX inbox_events_message ON inbox_events (message_id);

CREATE TABLE inbox_streams (
  agent_id text COLLATE "C" PRIMARY KEY,
  next_seq bigint NOT NULL,
  acked_cursor bigint NOT NULL,
  purged_through bigint NOT NULL
);
