// The fuzz properties once more against a hub that speaks TLS (FUZZ_TLS=1, harness.ts): the
// same hostile requests on HTTP/1.1 and HTTP/2 by ALPN, the same assertions (no 5xx, typed
// refusals, no crash or hang, nothing changed). A fifth of each property's default runs, unless
// FUZZ_RUNS says otherwise, and the HTTP-level, REST and MCP families (the RPC family's bytes
// are read above the transport, by the same code on either kind of port): the TLS layer sits
// below every face, so its share of the suite is what it adds, not all of it again.
process.env.FUZZ_TLS = "1";
process.env.FUZZ_RUNS ??= "x0.2";

await import("./wire.fuzz.test.js");
await import("./rest.fuzz.test.js");
await import("./mcp.fuzz.test.js");
