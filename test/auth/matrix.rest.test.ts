import { afterAll, describe, expect, it } from "vitest";
import { servedServices } from "../../src/server/routes.js";
import { callers, methodRows, opsRows, rowName } from "./matrix.cases.js";
import { restRouteOf, runCase } from "./matrix.harness.js";
import { dropMatrixSeeds, HubPool } from "./matrix.seed.js";

// The seeded state the file's hubs restore (matrix.seed.ts).
afterAll(dropMatrixSeeds);

/**
 * The authorization matrix over the REST face: every route derived from the google.api.http
 * annotations of the served services (plus /metrics, /health, /ready) × every caller class,
 * with the same assertions as the RPC face: the status and code the rules give, no other
 * project's data in the body, no other project's state changed.
 */

const restRows = methodRows.filter((r) => restRouteOf(r.rpc));

describe("authorization matrix over REST: coverage", () => {
  it("has a row for every annotated REST route", () => {
    const routed = servedServices.flatMap((s) => s.methods.map((m) => `${s.typeName}/${m.name}`)).filter((m) => restRouteOf(m));
    const rows = new Set(restRows.map((r) => r.rpc));
    expect(routed.filter((m) => !rows.has(m))).toEqual([]);
    expect(routed.length).toBeGreaterThan(0);
  });
});

// On PostgreSQL (the suites' second pass) only the coverage above: the REST face's translation
// (routes, statuses, codes) does not depend on the store, and the RPC matrix covers isolation there.
describe.skipIf(process.env.KXM_TEST_STORE === "postgres")("authorization matrix over REST", () => {
  const pool = new HubPool();
  afterAll(() => pool.discard());

  for (const row of restRows) {
    const route = restRouteOf(row.rpc)!;
    describe(`${route.verb} ${route.template} — ${rowName(row)}`, () => {
      for (const caller of callers) {
        it(caller.name, async () => {
          const { actual, expected } = await runCase(pool, { kind: "rest" }, row, caller);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }
    });
  }

  for (const row of opsRows) {
    describe(`GET ${row.path}`, () => {
      for (const caller of callers) {
        it(caller.name, async () => {
          const { actual, expected } = await runCase(pool, { kind: "rest" }, row, caller);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }
    });
  }
});
