import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { TARGET } from "./matrix.cases.js";
import {
  agentKeysIn,
  callTool,
  judge,
  mcpClasses,
  mcpEnv,
  notOpened,
  openingOf,
  openSession,
  readResources,
  registerAs,
  registeredName,
  registerRefusals,
  runRegisterRefusal,
  runTool,
  runUnbound,
  subscribeAndProbe,
  sessionSupplied,
  sessionOf,
  toolRowName,
  toolRows,
  UNBOUND,
  unboundResources,
  type McpClass,
  type OpenSession,
  type Session,
} from "./matrix.mcp-harness.js";
import { changes, dropMatrixSeeds, fingerprint, HubPool, type MatrixHub, probeAlpha } from "./matrix.seed.js";

// The seeded state the file's hubs restore (matrix.seed.ts).
afterAll(dropMatrixSeeds);

/**
 * The authorization matrix over the MCP face (issue 21 item 8): every session class (a set of
 * session headers) × every tool, against the matrix's seeded look-alike projects. An initialize
 * is refused with the status and code the rules give, changing nothing; an opened session acts
 * in its header's project only: each tool, aimed at alpha's seeded leases, messages and agents,
 * answers what the model gives for that project, says nothing of another project, and changes no
 * other project's state; the DELETE that ends it changes no other project either. A session
 * opened without X-Kxm-Agent is first unbound (every tool but `register`, every resource read
 * and subscription refused, changing nothing anywhere), then `register` binds it and it goes
 * through the same steps as a bound session; a second unbound session then takes over its
 * project's agent `one` with `register`.
 */

describe("MCP authorization matrix: coverage", () => {
  it("has a row for every tool the face lists (tools/list), and no row for a tool it does not", async () => {
    await using t = await startTestHub();
    const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { "x-kxm-project": "p", "x-kxm-agent": "lister" } } });
    const client = new Client({ name: "kxm-matrix", version: "1.0.0" });
    await client.connect(transport);
    const listed = (await client.listTools()).tools.map((x) => x.name);
    await transport.terminateSession();
    await client.close();
    const rows = new Set(toolRows.map((r) => r.tool));
    expect(listed.filter((n) => !rows.has(n))).toEqual([]);
    expect([...rows].filter((n) => !listed.includes(n))).toEqual([]);
  });

  it("models every outcome of an initialize, and every seeded project from another project's session", () => {
    const opened = mcpClasses.filter((c) => "opens" in openingOf(c)).map((c) => c.project);
    expect(mcpClasses.some((c) => "refused" in openingOf(c))).toBe(true);
    for (const p of ["alpha", "beta", "alpha/repo", "alph", "alpha2"]) expect(opened).toContain(p);
    // Unbound sessions: opened in alpha (its token) and in alph (the admin token), refused in alpha for another token or none.
    const unbound = mcpClasses.filter((c) => c.agent === undefined).map((c) => [c.bearer, c.project, JSON.stringify(openingOf(c))]);
    expect(unbound).toContainEqual(["tok-alpha", "alpha", JSON.stringify({ opens: { project: "alpha", unbound: true } })]);
    expect(unbound).toContainEqual([mcpEnv.admin, "alph", JSON.stringify({ opens: { project: "alph", unbound: true } })]);
    expect(unbound).toContainEqual(["tok-beta", "alpha", JSON.stringify({ refused: { status: 401, code: "invalid_auth" } })]);
    expect(unbound).toContainEqual([undefined, "alpha", JSON.stringify({ refused: { status: 401, code: "invalid_auth" } })]);
  });
});

describe("MCP authorization matrix: controls (the checks can fail)", () => {
  it("finds an agent key in an answer, as a field or as text", () => {
    const key = `key_${"0123456789abcdef".repeat(2)}`;
    expect(agentKeysIn({ answer: "ok", out: { agent: { id: "agt_x" }, agentKey: key }, text: `you are x; ${key}` })).toHaveLength(2);
    expect(agentKeysIn({ answer: "ok", out: { agent: { id: "agt_x", name: "monkey_one" } }, text: "you are monkey_one" })).toEqual([]);
  });

  // The store does not change what these show: SQLite only.
  it.skipIf(process.env.KXM_TEST_STORE === "postgres")("sees a takeover in the state, and alpha's secrets in alpha's own answers", async () => {
    const pool = new HubPool();
    try {
      const h = await pool.get();
      const owner = mcpClasses.find((c) => c.name.startsWith("owner:"))!;
      const { session } = await openSession(h.t.baseUrl, owner);
      expect(session).toBeDefined();
      // The takeover rotated alpha's `one` and released its leases: the fingerprint shows it, in alpha only.
      const moved = changes(h.baseline, await fingerprint(h.t, h.seed), []);
      expect(moved.map((x) => x.split(":")[0])).toEqual([TARGET]);
      // What alpha's session reads would be a leak for any other project's session.
      const got = await callTool(session!, "get_message", { message_id: h.seed.sentByOne });
      expect(got.answer).toBe("ok");
      const asBeta = await judge(h, got, "ok", ["beta"], "");
      expect(asBeta.actual.leaks).toContain(`alpha: secret-xa-m2`);
      expect(asBeta.actual.changed.map((x) => x.split(":")[0])).toEqual([TARGET]);
      await session!.transport.terminateSession();
      await session!.client.close();
    } finally {
      await pool.discard();
    }
  });
});

describe("MCP unbound sessions: register binds once", () => {
  // A register call holds the session's turn from its check to its binding (src/mcp/calls.ts):
  // calls made at once bind one agent, the others are refused, and no agent is left behind.
  it.skipIf(process.env.KXM_TEST_STORE === "postgres")("register calls made at once: one binds, the others are refused, and DELETE leaves none of them online", async () => {
    await using t = await startTestHub({ config: { projectTokens: { alpha: "tok-alpha" } } });
    const problems: string[] = [];
    for (let round = 0; round < 4; round++) {
      const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { authorization: "Bearer tok-alpha", "x-kxm-project": "alpha" } } });
      const client = new Client({ name: "kxm-matrix", version: "1.0.0" });
      await client.connect(transport);
      const names = Array.from({ length: 8 }, (_, i) => `race-${round}-${i}`);
      const answers = await Promise.all(names.map((name) => client.callTool({ name: "register", arguments: { name } })));
      const ok = answers.filter((r) => !r.isError).length;
      if (ok !== 1) problems.push(`round ${round}: ${ok} register calls answered ok`);
      await transport.terminateSession();
      await client.close();
      const online = (await t.hub.store.agents.listAgents("alpha")).filter((a) => a.online && names.includes(a.name)).map((a) => a.name);
      if (online.length) problems.push(`round ${round}: online after DELETE: ${online.join(", ")}`);
    }
    expect(problems).toEqual([]);
  });
});

/** One opened session's state, shared by the steps of its class (vitest runs them in order). */
interface Run {
  h: MatrixHub;
  session?: OpenSession;
  /** Who the session acts as, once it is bound (by its headers, or by `register`). */
  x?: Session;
  /** An unbound class's second session, which takes over its project's agent `one`. */
  second?: OpenSession;
  secondX?: Session;
}

const closeQuietly = async (s: OpenSession | undefined) => {
  await s?.transport.terminateSession().catch(() => undefined);
  await s?.client.close().catch(() => undefined);
};

function mcpMatrix(classes: McpClass[]) {
  // Refusals change nothing: they share one hub. Each opened session gets a freshly seeded hub of
  // its own (its initialize or its register registers or takes over an agent).
  const shared = new HubPool();
  afterAll(() => shared.discard());

  it("seeds every project, with the configuration the model assumes", async () => {
    const h = await shared.get();
    expect(h.seed.problems, h.seed.problems.join("\n")).toEqual([]);
    expect(h.auth).toEqual(mcpEnv);
  });

  for (const c of classes) {
    const opening = openingOf(c);
    describe(c.name, () => {
      if ("refused" in opening) {
        it(`initialize is refused: ${opening.refused.status} ${opening.refused.code}, changing nothing`, async () => {
          const h = await shared.get();
          const { session, got } = await openSession(h.t.baseUrl, c);
          // Judged before a wrongly opened session is ended: the hub stays up to be looked at, and is discarded after.
          const { actual, expected } = await judge(h, got, `${opening.refused.status} ${opening.refused.code}`, [], sessionSupplied(c, h.seed));
          if (session) {
            await closeQuietly(session);
            await shared.discard();
          }
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
        return;
      }

      const pool = new HubPool();
      let run: Run | undefined;
      afterAll(async () => {
        await run?.session?.client.close().catch(() => undefined);
        await run?.second?.client.close().catch(() => undefined);
        await pool.discard();
      });
      const { project, unbound } = opening.opens;

      if (!unbound) {
        it(`initialize opens a session in ${project}, changing no other project`, async () => {
          const h = await pool.get();
          expect(h.seed.problems).toEqual([]);
          run = { h };
          const { session, got } = await openSession(h.t.baseUrl, c);
          const x = sessionOf(c, h.seed);
          if (session) {
            run.session = session;
            // Who the session is, from the hub's own answer (whoami's row checks it against the model).
            const who = await session.call("whoami", {});
            run.x = { ...x, agentId: who.structuredContent?.agent?.id };
          }
          const { actual, expected } = await judge(h, got, "ok", [project], sessionSupplied(c, h.seed));
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      } else {
        it(`initialize opens an unbound session in ${project}, changing nothing anywhere`, async () => {
          const h = await pool.get();
          expect(h.seed.problems).toEqual([]);
          // The register rows count on the project's seeded agent `one`.
          expect(Object.keys(h.seed.projects), "an unbound class names a seeded project").toContain(project);
          run = { h };
          const { session, got } = await openSession(h.t.baseUrl, c);
          if (session) run.session = session;
          const { actual, expected } = await judge(h, got, "ok", [], sessionSupplied(c, h.seed));
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });

        for (const row of toolRows.filter((r) => r.tool !== "register")) {
          it(`unbound: ${toolRowName(row)} → ${UNBOUND}, changing nothing anywhere`, async () => {
            if (!run?.session || run.x) return notOpened(c);
            const { actual, expected } = await runUnbound(run.h, run.session, project, row, c);
            expect(actual, JSON.stringify(actual)).toEqual(expected);
          });
        }

        it(`unbound: every resource's read and subscribe → JSON-RPC error ${UNBOUND}, changing nothing anywhere`, async () => {
          if (!run?.session || run.x) return notOpened(c);
          const before = await fingerprint(run.h.t, run.h.seed);
          const got = await unboundResources(run.session);
          const { actual, expected } = await judge(run.h, got, UNBOUND, [], sessionSupplied(c, run.h.seed), [], before);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });

        for (const r of registerRefusals) {
          it(`unbound: register (${r.variant}) → ${r.expect}, changing nothing anywhere`, async () => {
            if (!run?.session || run.x) return notOpened(c);
            const { actual, expected } = await runRegisterRefusal(run.h, run.session, project, r, c);
            expect(actual, JSON.stringify(actual)).toEqual(expected);
          });
        }

        it(`register (${c.registers ?? "a new name"}) binds the session in ${project}: ok, no agent key, changing no other project`, async () => {
          if (!run?.session || run.x) return notOpened(c);
          const { actual, expected, x } = await registerAs(run.h, run.session, project, registeredName(c, run.h.seed), c);
          if (actual.answer === "ok" && x.agentId) run.x = x;
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }

      // A bound session (by its headers, or by its register): every tool, the resources, DELETE.
      for (const row of toolRows) {
        it(toolRowName(row), async () => {
          if (!run?.session || !run.x) return notOpened(c);
          const { actual, expected } = await runTool(run.h, run.session, run.x, row, c);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }

      it("resources (every one resources/list names) read as its own project", async () => {
        if (!run?.session || !run.x) return notOpened(c);
        const { got, problems } = await readResources(run.session, run.x);
        const { actual, expected } = await judge(run.h, got, "ok", [project], sessionSupplied(c, run.h.seed), problems);
        expect(actual, JSON.stringify(actual)).toEqual(expected);
      });

      it("resource subscriptions: told of alpha's changes only in alpha", async () => {
        if (!run?.session || !run.x) return notOpened(c);
        const h = run.h;
        const { got, mid } = await subscribeAndProbe(h, run.session, run.x, () => probeAlpha(h));
        // Up to the probe only the session's project may change; from it on, alpha too (the probe's own changes).
        const before = mid ? changes(h.baseline, mid, [project]) : [];
        const { actual, expected, after } = await judge({ ...h, baseline: mid ?? h.baseline }, got, "ok", [project, TARGET], sessionSupplied(c, h.seed));
        actual.changed.unshift(...before);
        run.h = { ...h, baseline: after };
        expect(actual, JSON.stringify(actual)).toEqual(expected);
      });

      it("DELETE ends the session, changing no other project", async () => {
        if (!run?.session || !run.x) return notOpened(c);
        await run.session.transport.terminateSession();
        await run.session.client.close();
        const { actual, expected } = await judge(run.h, { answer: "ok", text: "" }, "ok", [project], "");
        run.session = undefined;
        expect(actual, JSON.stringify(actual)).toEqual(expected);
      });

      if (!unbound) return;

      // A second unbound session of the same headers takes over the project's seeded agent `one`
      // (online, holding `main`, and in alpha `repo/main`): the project changes, no other does.
      it(`second unbound session: register (its project's agent one, with takeover) → ok as that agent, changing no other project`, async () => {
        if (!run) return notOpened(c);
        const { session, got } = await openSession(run.h.t.baseUrl, c);
        expect(got.answer, got.text).toBe("ok");
        run.second = session;
        const { actual, expected, x } = await registerAs(run.h, session!, project, run.h.seed.projects[project]!.one.name, c, true);
        if (actual.answer === "ok" && x.agentId) run.secondX = x;
        expect(actual, JSON.stringify(actual)).toEqual(expected);
      });

      for (const row of toolRows.filter((r) => ["whoami", "list_agents", "get_lease"].includes(r.tool))) {
        it(`second session, as the taken-over agent one: ${toolRowName(row)}`, async () => {
          if (!run?.second || !run.secondX) return notOpened(c);
          const { actual, expected } = await runTool(run.h, run.second, run.secondX, row, c);
          expect(actual, JSON.stringify(actual)).toEqual(expected);
        });
      }

      it("second session: DELETE ends it, changing no other project", async () => {
        if (!run?.second || !run.secondX) return notOpened(c);
        await run.second.transport.terminateSession();
        await run.second.client.close();
        run.second = undefined;
        const { actual, expected } = await judge(run.h, { answer: "ok", text: "" }, "ok", [project], "");
        expect(actual, JSON.stringify(actual)).toEqual(expected);
      });
    });
  }
}

describe("MCP authorization matrix", () => {
  // On PostgreSQL (the suites' second pass) a sample: the face and the auth rules do not depend on
  // the store, and each opened session there is a fresh database to seed.
  const sample = [
    "wrong token, alpha",
    "beta token, alpha, alpha's agent one",
    "owner: alpha token, alpha, alpha's agent one (takeover)",
    "beta identity: beta token, beta, its agent one (takeover)",
    "alpha/repo token, alpha/repo, a new agent",
    "unbound: beta token, alpha",
    "unbound: alpha token, alpha",
  ];
  const unknown = sample.filter((n) => !mcpClasses.some((c) => c.name === n));
  if (unknown.length) throw new Error(`the PostgreSQL sample names no class ${JSON.stringify(unknown)}`);
  mcpMatrix(process.env.KXM_TEST_STORE === "postgres" ? mcpClasses.filter((c) => sample.includes(c.name)) : mcpClasses);
});

// The target every row aims at is alpha (matrix.cases.ts); the rows' expectations assume it.
if (TARGET !== "alpha") throw new Error("the MCP matrix's rows aim at alpha's seed");
