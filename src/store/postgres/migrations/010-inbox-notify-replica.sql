-- The notification of migration 009 names the replica by a setting of its own, `kxm.replica`,
-- which every hub sets on each connection of its pool (postgres-store.ts): an `application_name`
-- in the database URL overrides the one a hub gives its connections, and the same name on every
-- hub made each one skip the others' wakes. A connection without the setting (a hub of the
-- release before) is still named by its application_name.
CREATE OR REPLACE FUNCTION kxm_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('kxm_inbox', coalesce(nullif(current_setting('kxm.replica', true), ''), current_setting('application_name')));
  RETURN NULL;
END
$$;
