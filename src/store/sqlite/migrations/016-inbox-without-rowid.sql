-- An agent's inbox stream and its events are found by their keys only, so they are kept in
-- their key's B-tree alone (WITHOUT ROWID): a sent message writes one B-tree fewer for its event
-- than with a rowid table beside its key's index (bench/README "Messages").
CREATE TABLE inbox_events_keyed (
  agent_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (agent_id, seq)
) WITHOUT ROWID;
INSERT INTO inbox_events_keyed (agent_id, seq, kind, message_id, created_at)
  SELECT agent_id, seq, kind, message_id, created_at FROM inbox_events;
DROP TABLE inbox_events;
ALTER TABLE inbox_events_keyed RENAME TO inbox_events;
CREATE INDEX inbox_events_message ON inbox_events (message_id);

CREATE TABLE inbox_streams_keyed (
  agent_id TEXT PRIMARY KEY,
  next_seq INTEGER NOT NULL,
  acked_cursor INTEGER NOT NULL,
  purged_through INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO inbox_streams_keyed (agent_id, next_seq, acked_cursor, purged_through)
  SELECT agent_id, next_seq, acked_cursor, purged_through FROM inbox_streams;
DROP TABLE inbox_streams;
ALTER TABLE inbox_streams_keyed RENAME TO inbox_streams;
