-- As on SQLite (migration 017 there): the waiting call the queue handed a lease to (D64).
ALTER TABLE leases ADD COLUMN handed_to text;
