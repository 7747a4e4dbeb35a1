-- As on SQLite (migration 014 there): when each waiter joined its lease's queue, for the views.
ALTER TABLE lease_waiters ADD COLUMN since_ms bigint NOT NULL DEFAULT 0;
