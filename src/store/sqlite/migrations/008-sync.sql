-- Run facts pushed by workflow runtimes, stored once under (project_id, run_id, sequence).
CREATE TABLE sync_events (
  project_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  hub_project TEXT NOT NULL,
  home_runtime_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  occurred_at TEXT NOT NULL,
  run_status TEXT,
  workflow_id TEXT,
  display_title TEXT,
  record TEXT NOT NULL,
  PRIMARY KEY (project_id, run_id, sequence)
);

-- The first hub project to push a projectId owns it.
CREATE TABLE sync_projects (
  project_id TEXT PRIMARY KEY,
  hub_project TEXT NOT NULL
);

-- One row per run: its home runtime (from its first stored event) and its gapless cursor.
CREATE TABLE sync_runs (
  project_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  hub_project TEXT NOT NULL,
  home_runtime_id TEXT NOT NULL,
  cursor INTEGER NOT NULL,
  stored INTEGER NOT NULL,
  PRIMARY KEY (project_id, run_id)
);
CREATE INDEX sync_runs_hub_project ON sync_runs (hub_project);
