import { fc, test } from "@fast-check/vitest";
import { expect } from "vitest";
import { isLoopback } from "../../src/config.js";
import { loopbackAuthority } from "../../src/http/cors.js";
import { hostnameOf } from "../../src/http/target.js";

/** What the WHATWG URL parser makes of an authority, parsed afresh. */
function parsedAfresh(authority: string): string | undefined {
  try {
    const url = new URL(`http://${authority}`);
    return url.host === "" ? undefined : url.hostname;
  } catch {
    return undefined;
  }
}

const authority = fc.oneof(
  fc.constantFrom("127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:9", "a.localhost", "evil.example:80", "[::1", "", "@", "x y", "h:99999", "%", "[::ffff:127.0.0.1]"),
  fc.string({ maxLength: 12 }),
  fc.webAuthority({ withPort: true, withIPv6: true }),
  fc.constantFrom(`${"a".repeat(300)}.localhost`, `${"b".repeat(400)}:1`),
);

// The hub parses each distinct authority once and keeps the last ones parsed: whatever the order
// and however many distinct ones a client sends (more than it keeps), each answer is the parser's.
test.prop([fc.array(authority, { minLength: 1, maxLength: 700 })], { numRuns: 60 })(
  "an authority's host name and whether it is loopback are what a fresh parse says, however many came before",
  (authorities) => {
    for (const a of [...authorities, ...authorities]) {
      const host = parsedAfresh(a);
      expect(hostnameOf(a)).toBe(host);
      const bare = host?.replace(/^\[(.*)\]$/, "$1");
      expect(loopbackAuthority(a)).toBe(bare !== undefined && (isLoopback(bare) || bare.endsWith(".localhost")));
    }
  },
);
