import { describe, expect, it } from "vitest";
import { errors } from "../../src/errors.js";
import { StoreUnavailable } from "../../src/store/store.js";
import { storeError } from "../../src/store/postgres/transaction.js";

describe("what the PostgreSQL store reports as unreachable", () => {
  const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });

  it("a connection refused, reset or lost, or a server shutting down or starting", () => {
    for (const e of [
      withCode("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"),
      withCode("read ECONNRESET", "ECONNRESET"),
      new Error("Connection terminated unexpectedly"),
      new Error("timeout exceeded when trying to connect"),
      withCode("terminating connection due to administrator command", "57P01"),
      withCode("the database system is starting up", "57P03"),
      withCode("connection failure", "08006"),
    ]) {
      expect(storeError(e), e.message).toBeInstanceOf(StoreUnavailable);
    }
  });

  it("never a decision's own refusal or a SQL error", () => {
    const refusal = errors.leaseHeld({ resource: "p/x", project: "p", name: "x", holderAgentId: "a", holderAgentName: "a", fencingToken: 1, acquiredAtMs: 0, expiresAtMs: 1 });
    expect(storeError(refusal)).toBe(refusal);
    const unique = withCode("duplicate key value violates unique constraint", "23505");
    expect(storeError(unique)).toBe(unique);
    const bug = new TypeError("x is undefined");
    expect(storeError(bug)).toBe(bug);
  });
});
