-- Run facts pushed by workflow runtimes, as on SQLite (migration 008 there).
CREATE TABLE sync_events (
  project_id text COLLATE "C" NOT NULL,
  run_id text COLLATE "C" NOT NULL,
  sequence bigint NOT NULL,
  hub_project text COLLATE "C" NOT NULL,
  home_runtime_id text NOT NULL,
  event_type text NOT NULL,
  content_hash text NOT NULL,
  received_at bigint NOT NULL,
  occurred_at text NOT NULL,
  run_status text,
  workflow_id text,
  display_title text,
  record text NOT NULL,
  PRIMARY KEY (project_id, run_id, sequence)
);

-- The first hub project to push a projectId owns it.
CREATE TABLE sync_projects (
  project_id text COLLATE "C" PRIMARY KEY,
  hub_project text COLLATE "C" NOT NULL
);

-- One row per run: its home runtime (from its first stored event) and its gapless cursor. A push
-- locks the rows of its runs, so pushes to one run take turns on every replica.
CREATE TABLE sync_runs (
  project_id text COLLATE "C" NOT NULL,
  run_id text COLLATE "C" NOT NULL,
  hub_project text COLLATE "C" NOT NULL,
  home_runtime_id text NOT NULL,
  cursor bigint NOT NULL,
  stored bigint NOT NULL,
  PRIMARY KEY (project_id, run_id)
);
CREATE INDEX sync_runs_hub_project ON sync_runs (hub_project);
