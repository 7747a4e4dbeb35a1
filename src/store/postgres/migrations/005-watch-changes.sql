-- The changes WatchPresence and WatchLeases send, as on SQLite (migration 011 there). The head
-- row of a (project, stream) is locked by the decision that numbers a change, at the end of its
-- transaction, so numbers are handed out in commit order on every replica and without gaps.
-- Each change remembers its transaction (xid) and the store that wrote it (origin), so every
-- replica tails the changes the others commit, as for inbox events (migration 004).
CREATE TABLE watch_heads (
  project text COLLATE "C" NOT NULL,
  stream text COLLATE "C" NOT NULL,
  head bigint NOT NULL,
  PRIMARY KEY (project, stream)
);

CREATE TABLE watch_changes (
  project text COLLATE "C" NOT NULL,
  stream text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  at_ms bigint NOT NULL,
  body text NOT NULL,
  origin text NOT NULL,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  PRIMARY KEY (project, stream, seq)
);
CREATE INDEX watch_changes_xid ON watch_changes (xid);

ALTER TABLE runtime_presence ADD COLUMN expiry_noted boolean NOT NULL DEFAULT false;
