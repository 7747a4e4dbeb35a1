-- The operator's views list and count a project's open messages (WatchOpenMessages,
-- ListProjects): one index over the open ones only, by project and age.
CREATE INDEX messages_project_open ON messages (project, created_at) WHERE status IN ('queued', 'delivered');
