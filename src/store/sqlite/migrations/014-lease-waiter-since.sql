-- A lease's waiters are shown (GetLease, ListLeases, WatchLeases, the operator page): when each
-- joined its queue. Waiters from before this version (none survive a restart) read as 0.
ALTER TABLE lease_waiters ADD COLUMN since_ms INTEGER NOT NULL DEFAULT 0;
