-- Blocking acquire (AcquireLease with waitMs): the calls waiting for a held lease, first come
-- first served. A resource that becomes free (released, or lapsed when the next decision looks)
-- goes straight to the first waiter whose wait has not run out, in the same transaction.
CREATE TABLE lease_waiters (
  project TEXT NOT NULL,
  name TEXT NOT NULL,
  -- Queue order within the resource.
  seq INTEGER NOT NULL,
  id TEXT NOT NULL UNIQUE,
  agent_id TEXT NOT NULL,
  agent_name TEXT NOT NULL,
  ttl_ms INTEGER NOT NULL,
  deadline_ms INTEGER NOT NULL,
  PRIMARY KEY (project, name, seq)
) WITHOUT ROWID;
