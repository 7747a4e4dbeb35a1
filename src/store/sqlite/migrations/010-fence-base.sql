-- The fence floor of a resource that has no row yet (decision D45: restore never reissues a token).
-- A resource's first grant is floor + 1; until now the floor of an unknown resource was 0. After
-- a restore, a resource first leased after the backup was taken has no row in the restored file,
-- yet tokens were handed out for it: restore raises this floor by its margin exactly as it raises
-- every row's token, so that resource's next grant is above them too. One row, never deleted.
CREATE TABLE fence_base (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  floor INTEGER NOT NULL CHECK (floor >= 0)
);
INSERT INTO fence_base (id, floor) VALUES (1, 0);
