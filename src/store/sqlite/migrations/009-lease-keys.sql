-- Leases keyed by (project, name) instead of the joined string `<project>/<name>` (decision D44).
-- Up to version 8, project `alpha/repo` with lease name `main` and project `alpha` with lease
-- name `repo/main` made the same key, so the two projects shared one row: one fence, one holder.
--
-- So that no fencing token is handed out again for anything it was handed out for (decision D43),
-- every pair an old key could stand for gets the row's token: the row's own (project, name), and
-- (P, rest) for every known project P (one with an agent or a lease) where
-- resource = P || '/' || rest. The holder goes with the pair of its own project, which is the
-- lease it believes it holds (its renewals keep working, same token); the other pairs keep the
-- token as a released floor, so each one's next grant is token + 1. Released floors (no holder)
-- are copied to every pair the same way.
--
-- Nothing is dropped silently: two rows claiming one pair can only come from a hand-edited
-- file, and then the INSERT fails and the whole migration rolls back (the file stays at 8).
CREATE TABLE leases_by_key (
  project TEXT NOT NULL,
  name TEXT NOT NULL,
  holder_agent_id TEXT,
  holder_agent_name TEXT,
  fencing_token INTEGER NOT NULL CHECK (fencing_token >= 1),
  acquired_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (project, name)
);

WITH
  known (project) AS (SELECT project FROM agents UNION SELECT project FROM leases),
  pairs (resource, project, name) AS (
    SELECT resource, project, name FROM leases
    UNION
    SELECT l.resource, k.project, substr(l.resource, length(k.project) + 2)
    FROM leases l JOIN known k
      ON length(l.resource) > length(k.project) + 1
     AND substr(l.resource, 1, length(k.project) + 1) = k.project || '/'
  ),
  -- The project of the pair that keeps each holder: the holder agent's own, when the key could
  -- stand for a lease of that project; else the row's (an unknown agent, or no alias).
  holders (resource, project) AS (
    SELECT l.resource, coalesce(
      (SELECT a.project FROM agents a JOIN pairs q ON q.project = a.project
        WHERE a.id = l.holder_agent_id AND q.resource = l.resource),
      l.project)
    FROM leases l WHERE l.holder_agent_id IS NOT NULL
  )
INSERT INTO leases_by_key (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at)
SELECT p.project, p.name,
  CASE WHEN h.resource IS NOT NULL THEN l.holder_agent_id END,
  CASE WHEN h.resource IS NOT NULL THEN l.holder_agent_name END,
  l.fencing_token, l.acquired_at, l.expires_at
FROM pairs p
JOIN leases l ON l.resource = p.resource
LEFT JOIN holders h ON h.resource = p.resource AND h.project = p.project;

DROP TABLE leases;
ALTER TABLE leases_by_key RENAME TO leases;
-- The primary key's index serves the per-project listing by name (the old leases_project_name).
CREATE INDEX leases_expires ON leases (expires_at) WHERE holder_agent_id IS NOT NULL;
