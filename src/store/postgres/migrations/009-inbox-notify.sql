-- A statement that adds inbox events tells the replicas listening on kxm_inbox, once its
-- transaction commits, so that their tails look at once instead of at their next tick (a
-- message's frame on another replica's Subscribe stream). The payload names the replica that
-- wrote them (its connections' application_name), which skips its own: it hands its events over
-- at commit.
CREATE FUNCTION kxm_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('kxm_inbox', current_setting('application_name'));
  RETURN NULL;
END
$$;
CREATE TRIGGER inbox_events_notify AFTER INSERT ON inbox_events FOR EACH STATEMENT EXECUTE FUNCTION kxm_inbox_notify();
