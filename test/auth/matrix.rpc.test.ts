import { afterAll, describe, expect, it } from "vitest";
import { authRules } from "../../src/auth/rules.js";
import { servedServices } from "../../src/server/routes.js";
import { protocols } from "../fixtures/clients.js";
import { callers, methodRows, rowName, type CallerClass, type MethodRow } from "./matrix.cases.js";
import { runCase, type Face } from "./matrix.harness.js";
import { dropMatrixSeeds, HubPool } from "./matrix.seed.js";

// The seeded state the file's hubs restore (matrix.seed.ts).
afterAll(dropMatrixSeeds);

/**
 * The authorization matrix over the RPC face: every served RPC × every caller class over
 * Connect JSON, a sample over gRPC, and the matrix again on a loopback hub without an admin
 * token. Each case asserts the answer the documented rules give, that nothing of another
 * project leaks into the answer (frames included), that no managed token's secret does, and
 * that no other project's state changed.
 */

const connectJson: Face = { kind: "rpc", make: protocols[0].make };
const grpc: Face = { kind: "rpc", make: protocols[2].make };

describe("authorization matrix: coverage", () => {
  it("has a row for every method of every served service", () => {
    const served = servedServices.flatMap((s) => s.methods.map((m) => `${s.typeName}/${m.name}`));
    const rows = new Set(methodRows.map((r) => r.rpc));
    expect(served.filter((m) => !rows.has(m))).toEqual([]);
    expect([...rows].filter((m) => !served.includes(m))).toEqual([]);
  });

  it("documents the same auth rule per method as src/auth/rules.ts", () => {
    const differ = methodRows.filter((r) => JSON.stringify(authRules[r.rpc]) !== JSON.stringify(r.rule));
    expect(differ.map((r) => `${r.rpc}: matrix ${JSON.stringify(r.rule)}, hub ${JSON.stringify(authRules[r.rpc])}`)).toEqual([]);
  });
});

function matrix(face: Face, rows: MethodRow[], who: CallerClass[], pool: HubPool) {
  afterAll(() => pool.discard());

  it("seeds every project, colliding lease names included", async () => {
    const { problems } = (await pool.get()).seed;
    expect(problems, problems.join("\n")).toEqual([]);
  });

  for (const row of rows) {
    describe(rowName(row), () => {
      for (const caller of who) {
        it(caller.name, async () => {
          const { actual, expected } = await runCase(pool, face, row, caller);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }
    });
  }
}

const postgres = process.env.KXM_TEST_STORE === "postgres";

/**
 * The caller classes of the PostgreSQL pass: the auth rules do not depend on the store, and each
 * reseed there is a fresh database; what does depend on it (isolation, no change by a refusal,
 * managed tokens read from the store, a revoked one refused) shows with these.
 */
const postgresSample = [
  "owner (alpha token + alpha agent)",
  "no credentials",
  "alpha token + beta agent",
  "admin token",
  "alpha/repo identity (extension)",
  "alpha managed read token",
  "beta managed agent token",
  "alpha revoked managed token",
];
const unknownSampled = postgresSample.filter((n) => !callers.some((c) => c.name === n));
if (unknownSampled.length) throw new Error(`the PostgreSQL sample names no caller class ${JSON.stringify(unknownSampled)}`);

describe("authorization matrix: Connect JSON", () => {
  matrix(connectJson, methodRows, postgres ? callers.filter((c) => postgresSample.includes(c.name)) : callers, new HubPool());
});

// The wire and the hub's auth configuration do not depend on the store: on PostgreSQL (the suites'
// second pass) the matrix runs once, over Connect JSON with the sample above, for what does.
if (!postgres) {
  describe("authorization matrix: gRPC (sample)", () => {
    const sample = ["owner (alpha token + alpha agent)", "no credentials", "alpha token + beta agent", "admin token", "alpha/repo identity (extension)"];
    matrix(grpc, methodRows, callers.filter((c) => sample.includes(c.name)), new HubPool());
  });

  describe("authorization matrix: loopback hub without an admin token (Connect JSON)", () => {
    const skip = [
      "admin token + alpha agent", // the same as "alpha agent, no token" here
      // alpha's agent with a managed token of scope agent: the same as the owner here (a call
      // that reads the token finds it allows what alpha's own token allows).
      "alpha managed agent token + alpha agent",
    ];
    matrix(connectJson, methodRows, callers.filter((c) => !skip.includes(c.name)), new HubPool(false));
  });
}
