-- The changes WatchPresence and WatchLeases send, stored with the decision that made them, so a
-- watcher resumes from its cursor after a dropped connection or a restart (docs/streams.md).
-- Each (project, stream) numbers its changes without gaps; watch_heads holds the newest number.
-- A stream without a head row starts at the fence base, which a restore raises, so a cursor
-- from before a restore is never taken for a change made after it.
CREATE TABLE watch_heads (
  project TEXT NOT NULL,
  stream TEXT NOT NULL,
  head INTEGER NOT NULL,
  PRIMARY KEY (project, stream)
) WITHOUT ROWID;

CREATE TABLE watch_changes (
  project TEXT NOT NULL,
  stream TEXT NOT NULL,
  seq INTEGER NOT NULL,
  at_ms INTEGER NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (project, stream, seq)
) WITHOUT ROWID;

-- A runtime's lapse is announced once (by whichever sweep sees it first); a heartbeat clears it.
ALTER TABLE runtime_presence ADD COLUMN expiry_noted INTEGER NOT NULL DEFAULT 0;
