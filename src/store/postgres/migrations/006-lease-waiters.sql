-- Blocking acquire, as on SQLite (migration 012 there). A waiter is queued by a decision that
-- holds the lease row's lock, so the queue order (seq) is the order the waiters came in, on
-- every replica.
CREATE TABLE lease_waiters (
  project text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  id text COLLATE "C" NOT NULL UNIQUE,
  agent_id text NOT NULL,
  agent_name text NOT NULL,
  ttl_ms bigint NOT NULL,
  deadline_ms bigint NOT NULL,
  PRIMARY KEY (project, name, seq)
);
