-- Peer messages and each agent's inbox stream.
CREATE TABLE messages (
  id TEXT PRIMARY KEY,
  project TEXT NOT NULL,
  from_id TEXT NOT NULL,
  from_name TEXT NOT NULL,
  to_id TEXT NOT NULL,
  to_name TEXT NOT NULL,
  content TEXT NOT NULL,
  delivery TEXT NOT NULL,
  hops INTEGER NOT NULL,
  max_hops INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  correlation_id TEXT,
  reply_to TEXT,
  idempotency_key TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  delivered_at INTEGER,
  replied_at INTEGER,
  cancelled_at INTEGER,
  status TEXT NOT NULL,
  reply_content TEXT,
  reply_created_at INTEGER,
  error TEXT
);
CREATE UNIQUE INDEX messages_idempotency ON messages (from_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX messages_to ON messages (to_id, created_at);
CREATE INDEX messages_from ON messages (from_id, created_at);
CREATE INDEX messages_open ON messages (expires_at) WHERE status IN ('queued', 'delivered');

-- Every event for an agent's stream, numbered per agent from 1 (a message's seq is the number of
-- its `message` event in the recipient's stream). Rows go with retention; `purged_through`
-- remembers how far, so an older resume cursor is refused as expired.
CREATE TABLE inbox_events (
  agent_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (agent_id, seq)
);
CREATE INDEX inbox_events_message ON inbox_events (message_id);

CREATE TABLE inbox_streams (
  agent_id TEXT PRIMARY KEY,
  next_seq INTEGER NOT NULL,
  acked_cursor INTEGER NOT NULL,
  purged_through INTEGER NOT NULL
);
