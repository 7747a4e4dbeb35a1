import { afterAll, beforeAll } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { storeContract } from "./store.contract.js";

let pg: TestPostgres;
beforeAll(async () => {
  pg = await startPostgres();
});
afterAll(() => pg?.stop());

// Each test gets a database of its own.
storeContract("postgres", async (clock) => PostgresStore.open({ url: await pg.createDatabase(), clock }));
