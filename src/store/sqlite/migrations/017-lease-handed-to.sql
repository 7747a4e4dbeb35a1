-- The waiting call the queue handed a lease to (its waiter id), kept while the lease is renewed
-- and replaced by every other write of a holder: a waiting call takes a lease for its own only
-- when it was handed it (decision D64). Rows from before this version read as handed to nobody.
ALTER TABLE leases ADD COLUMN handed_to TEXT;
