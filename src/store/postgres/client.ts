import pg from "pg";

/**
 * The PostgreSQL store's connections: `pg.Client`, except that a statement asked for without a
 * callback (for a promise) is handed to `pg.Client` with one, and the promise is made here.
 *
 * node-postgres answers such a statement by making its query object first and giving it its
 * callback afterwards. Made that way, each statement's objects (the query, its rows, the promise
 * chain back to the caller) outlived the hub's young-generation collections and were promoted,
 * though none was alive by then: a full collection frees them all, so what held them was already
 * dead in the old generation, as with D88's Set. A hub on PostgreSQL promoted about 3.6 KB a REST
 * send (26 MB in 8 s at 900 sends a second), and its young collections took about 5 ms each
 * copying it, against 0.6 MB and under 1 ms with the callback given. One client alone running
 * statements one after another does the same (test/store/postgres-client.test.ts). The contract
 * is node-postgres' own: the promise resolves with the result, or rejects with the error, whose
 * stack is taken again where the promise settles, as node-postgres does.
 * @NOTE decision D89.
 */
export class StoreClient extends pg.Client {}

const query = pg.Client.prototype.query as (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) => unknown;

/** A statement's error with its stack from where its promise settles (node-postgres does the same). */
function withStackHere(e: unknown): never {
  if (e instanceof Error) Error.captureStackTrace(e);
  throw e;
}

StoreClient.prototype.query = function (this: pg.Client, config: unknown, values?: unknown, callback?: unknown): unknown {
  // With a callback, a query object of the caller's own (a cursor, say), or none at all (which
  // node-postgres refuses at once), as node-postgres has it.
  if (config == null || typeof callback === "function" || typeof values === "function" || typeof (config as { submit?: unknown }).submit === "function") {
    return query.call(this, config, values, callback);
  }
  return new Promise((resolve, reject) => {
    query.call(this, config, values, (e: unknown, result: unknown) => (e ? reject(e) : resolve(result)));
  }).catch(withStackHere);
} as typeof pg.Client.prototype.query;
