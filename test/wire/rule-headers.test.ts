import { fc, test } from "@fast-check/vitest";
import { describe, expect } from "vitest";
import { headersOf, ruleHeadersOf } from "../../src/http/body.js";
import type { NodeRequest } from "../../src/http/types.js";

/**
 * A plain Connect unary call hands its rules only the headers they read (ruleHeadersOf), where
 * it handed them a Fetch API `Headers` of every header (headersOf). For each name the rules
 * read, the two must give the same value, whatever Node parsed: repeated headers (HTTP/2 gives
 * them as lists), values with whitespace at their edges, headers the rules do not read.
 */

const ruleNames = ["x-request-id", "content-length", "authorization", "x-kxm-agent-id", "x-kxm-agent-key"];
const names = fc.constantFrom(...ruleNames, "content-type", "x-other");
const value = fc
  .tuple(fc.constantFrom("", " ", "\t", "  \t"), fc.stringMatching(/^[!-~]([ -~]{0,10}[!-~])?$/), fc.constantFrom("", " ", "\t "))
  .map(([a, v, b]) => a + v + b);
const headerValue = fc.oneof(value, fc.array(value, { minLength: 1, maxLength: 3 }));

describe("the headers a unary call's rules read", () => {
  test.prop([fc.dictionary(names, headerValue)])("are what a Headers of every header gives", (headers) => {
    const req = { headers } as unknown as NodeRequest;
    const all = headersOf(req);
    const rules = ruleHeadersOf(req);
    for (const name of ruleNames) expect(rules.get(name)).toBe(all.get(name));
    const given: string[] = [];
    rules.forEach((_, k) => given.push(k));
    expect(given.every((k) => ruleNames.includes(k))).toBe(true);
  });
});
