-- Each inbox event remembers the transaction that wrote it, so every replica can tail the events
-- other replicas commit: all transactions below a snapshot's xmin have ended, so the events
-- with xid in [the last xmin read, the current xmin) are exactly the ones committed in between.
ALTER TABLE inbox_events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX inbox_events_xid ON inbox_events (xid);
