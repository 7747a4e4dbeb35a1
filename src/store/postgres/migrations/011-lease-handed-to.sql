-- As on SQLite (migration 017 there): the waiting call the queue handed a lease to, and the
-- fencing token of the write that recorded it (D64). An older hub still serving during a rolling
-- upgrade writes neither, and the token it writes next tells its rows apart.
ALTER TABLE leases ADD COLUMN handed_to text;
ALTER TABLE leases ADD COLUMN handed_token bigint;
