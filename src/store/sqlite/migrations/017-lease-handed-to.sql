-- The waiting call the queue handed a lease to (its waiter id), kept while the lease is renewed
-- and replaced by every other write of a holder: a waiting call takes a lease for its own only
-- when it was handed it (decision D64). handed_token stamps the row's holder as written by a
-- release that records hand-overs: it is the fencing token then written. A row whose token
-- differs (written before this version, or by an older hub sharing a database) records nothing,
-- and any call of its holder may take it as handed to it, the rule before D64.
ALTER TABLE leases ADD COLUMN handed_to TEXT;
ALTER TABLE leases ADD COLUMN handed_token INTEGER;
