-- The replica that holds each waiting call (D79): the key of the advisory lock that replica holds
-- on its listening connection for as long as it lives (inbox-notify.ts). A waiter whose replica's
-- lock is not held is a call nobody will answer: a hand-over passes it over and drops it, and a
-- starting replica drops every such waiter. An older hub still serving during a rolling upgrade
-- writes none (NULL): its waiters count as live, as before.
ALTER TABLE lease_waiters ADD COLUMN replica integer;
