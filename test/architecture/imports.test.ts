import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

/**
 * Imports point one way: main|cli -> hub -> server|transcode|mcp|ops -> domain -> store interface
 * <- store/sqlite, store/postgres; the faces stand on the wire layer (wire/: connect's protocols
 * and the in-process calls), which stands on the HTTP floor (http/: listening, TLS, the request
 * target, bodies, request ids, CORS, the call record). Only the faces, the wire layer, the floor's
 * call record and the composition root talk Connect or use generated code; domain and store
 * never see a transport.
 */
const src = path.resolve(import.meta.dirname, "../../src");

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function importsOf(file: string): string[] {
  const text = fs.readFileSync(file, "utf8");
  return [...text.matchAll(/^\s*(?:import|export)[^"']*from\s+["']([^"']+)["']/gm)].map((m) => m[1]!);
}

/** The top-level area of a module: "lease", "store", "store/sqlite", "server", "hub.ts", ... */
function area(file: string): string {
  const rel = path.relative(src, file).split(path.sep);
  if (rel[0] === "store" && (rel[1] === "sqlite" || rel[1] === "postgres")) return `store/${rel[1]}`;
  return rel.length === 1 ? rel[0]! : rel[0]!;
}

const domain = ["lease", "presence", "auth", "peer", "sync", "operator"];
const shared = ["package-root.ts", "domain.ts", "clock.ts", "errors.ts", "observe.ts", "validate.ts", "ids.ts", "caller.ts", "config.ts", "in-flight.ts"];
/** What each area may import from src/. */
const allowed: Record<string, string[]> = {
  // The store keeps the domain's records (domain.ts, on the ground floor) and nothing else of it.
  // package-root.ts: where the migrations are, from the sources and from the build.
  // in-flight.ts: what is running now, for a close to wait for (D88).
  "store": ["store", "domain.ts", "package-root.ts", "in-flight.ts"],
  "store/sqlite": ["store", "store/sqlite", "domain.ts", "package-root.ts", "in-flight.ts"],
  "store/postgres": ["store", "store/postgres", "domain.ts", "package-root.ts", "in-flight.ts"],
  events: ["events", ...shared],
  ...Object.fromEntries(domain.map((d) => [d, [...domain, "events", "store", ...shared]])),
  ops: ["ops", "http", ...domain, "store", ...shared],
  http: ["http", ...shared],
  wire: ["wire", "http", ...shared],
  server: ["server", "wire", "http", ...domain, "events", "store", ...shared],
  transcode: ["transcode", "server", "wire", "http", "auth", ...shared],
  // The MCP face, like the REST face, calls the RPC handlers in-process and writes REST JSON.
  mcp: ["mcp", "server", "transcode", "wire", "http", "auth", ...shared],
  // The command line (serve, backup, restore, raise-fence) sits beside main.ts, above the
  // composition root: it starts the hub, backup/restore call the SQLite store's file operations
  // directly, and raise-fence the PostgreSQL store's fence step.
  cli: ["cli", "hub.ts", "ops", "store", "store/sqlite", "store/postgres", ...shared],
};
const connectUsers = new Set(["server", "transcode", "mcp", "wire", "http", "hub.ts"]);

describe("import direction", () => {
  const all = files(src);
  it("finds the source tree", () => expect(all.length).toBeGreaterThan(20));

  it("keeps the domain's records on the ground floor: domain.ts imports nothing", () => {
    expect(importsOf(path.join(src, "domain.ts"))).toEqual([]);
  });

  for (const file of all) {
    const from = area(file);
    it(`${path.relative(src, file)} imports only what its layer may`, () => {
      for (const spec of importsOf(file)) {
        if (spec.startsWith("@connectrpc/") || spec.includes("/gen/")) {
          expect(connectUsers.has(from), `${from} must not import ${spec}`).toBe(true);
          continue;
        }
        if (!spec.startsWith(".")) continue;
        const target = path.resolve(path.dirname(file), spec).replace(/\.js$/, ".ts");
        if (!target.startsWith(src)) continue;
        const to = area(target);
        if (to === from || shared.includes(from) || ["hub.ts", "main.ts"].includes(from)) continue;
        expect(allowed[from] ?? [], `${from} must not import ${to} (${spec})`).toContain(to);
      }
    });
  }
});

/**
 * The operator page (ui/src) is a client of the public API like any other: it may import its own
 * modules, the generated code and packages, never the hub's source.
 */
describe("the operator page talks to the hub through the API only", () => {
  const ui = path.resolve(import.meta.dirname, "../../ui/src");
  const gen = path.resolve(import.meta.dirname, "../../gen/ts");
  const uiFiles = fs.readdirSync(ui).filter((f) => /\.tsx?$/.test(f)).map((f) => path.join(ui, f));
  it("finds the page's source", () => expect(uiFiles.length).toBeGreaterThan(3));
  for (const file of uiFiles) {
    it(`ui/src/${path.basename(file)} imports only the page, gen/ts and packages`, () => {
      for (const spec of importsOf(file)) {
        if (!spec.startsWith(".")) continue;
        const target = path.resolve(path.dirname(file), spec);
        expect(target.startsWith(ui + path.sep) || target.startsWith(gen + path.sep), `${spec}`).toBe(true);
      }
    });
  }
});
