import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { createProjectTokens, type ProjectTokensDeps } from "../../src/auth/project-tokens.js";
import {
  decideCreate,
  decideRevoke,
  closesProject,
  endedTokenOf,
  expiryNote,
  maxLabelChars,
  maxLiveTokens,
  newTokenSecret,
  scopeAllows,
  tokenEndedChange,
  tokenIdOfSecret,
  tokenIdPattern,
  tokenScopes,
  tokenState,
  ttlRange,
  type NewToken,
  type TokenState,
} from "../../src/auth/tokens.js";
import { errorTable } from "../../src/errors.js";
import { sha256Hex } from "../../src/ids.js";
import { NOW, decideOf, dependencyCall, fixedClock, named, passesChecks, quietObserver, refusal, refusalOf, titled, untouchable } from "./support.js";

/**
 * The managed project-token rules of src/auth/tokens.ts, called directly at a fixed hub instant:
 * no hub, no store. Expected answers are the project README's "managed tokens" (shown once and
 * stored hashed, 100 live per project, expiry 1 s..10 years, scopes agent > read > check,
 * revocation at once; decisions D14, D15) and the token codes of its error table.
 */

/** The rows the rules decide on, as their own signatures name them. */
type ProjectTokenRow = NonNullable<Parameters<typeof decideRevoke>[2]>;
type TokenScope = Parameters<typeof scopeAllows>[0];

const PROJECT = "org/repo";
const HEX = "0123456789abcdef";
const TAIL = "A".repeat(21) + "_-" + "z9".repeat(10); // 43 base64url characters
const SECRET = `kxmpt_${HEX}_${TAIL}`;

const token = (over: Partial<ProjectTokenRow> = {}): ProjectTokenRow => ({
  id: `pt_${HEX}`,
  project: PROJECT,
  scope: "agent",
  label: "ci",
  hash: sha256Hex(SECRET),
  createdAtMs: NOW - 60_000,
  expiryNoted: false,
  ...over,
});

describe("scopes", () => {
  it("names three scopes, widest first", () => {
    expect(tokenScopes).toEqual(["agent", "read", "check"]);
  });

  const matrix: { have: TokenScope; need: TokenScope; allowed: boolean }[] = [
    { have: "agent", need: "agent", allowed: true },
    { have: "agent", need: "read", allowed: true },
    { have: "agent", need: "check", allowed: true },
    { have: "read", need: "agent", allowed: false },
    { have: "read", need: "read", allowed: true },
    { have: "read", need: "check", allowed: true },
    { have: "check", need: "agent", allowed: false },
    { have: "check", need: "read", allowed: false },
    { have: "check", need: "check", allowed: true },
  ];
  it.each(titled(matrix, (c) => `a ${c.have} token for a call that needs ${c.need}: ${c.allowed}`))("%s", (_title, { have, need, allowed }) => {
    expect(scopeAllows(have, need)).toBe(allowed);
  });
});

describe("tokenState", () => {
  type Case = { name: string; t: ProjectTokenRow; state: TokenState };
  const cases: Case[] = [
    { name: "a token without expiry is live", t: token(), state: "live" },
    { name: "a token 1 ms before its expiry is live", t: token({ expiresAtMs: NOW + 1 }), state: "live" },
    { name: "a token at its exact expiry instant is expired", t: token({ expiresAtMs: NOW }), state: "expired" },
    { name: "a token past its expiry is expired", t: token({ expiresAtMs: NOW - 1 }), state: "expired" },
    { name: "a revoked token is revoked", t: token({ revokedAtMs: NOW - 1 }), state: "revoked" },
    { name: "revoked wins over expired", t: token({ revokedAtMs: NOW - 10, expiresAtMs: NOW - 20 }), state: "revoked" },
    { name: "a token revoked at this instant is revoked", t: token({ revokedAtMs: NOW, expiresAtMs: NOW + 1_000 }), state: "revoked" },
  ];
  it.each(named(cases))("%s", (_title, { t, state }) => {
    expect(tokenState(t, NOW)).toBe(state);
  });
});

describe("secrets", () => {
  type Case = { name: string; bearer: string; id: string | undefined };
  const cases: Case[] = [
    { name: "a well-formed secret names its token", bearer: SECRET, id: `pt_${HEX}` },
    { name: "another prefix is not a managed token", bearer: `kxmpx_${HEX}_${TAIL}`, id: undefined },
    { name: "upper-case hex is not the form", bearer: `kxmpt_${HEX.toUpperCase()}_${TAIL}`, id: undefined },
    { name: "15 hex digits are not the form", bearer: `kxmpt_${HEX.slice(1)}_${TAIL}`, id: undefined },
    { name: "17 hex digits are not the form", bearer: `kxmpt_${HEX}0_${TAIL}`, id: undefined },
    { name: "a 42-character tail is not the form", bearer: `kxmpt_${HEX}_${TAIL.slice(1)}`, id: undefined },
    { name: "a 44-character tail is not the form", bearer: `kxmpt_${HEX}_${TAIL}A`, id: undefined },
    { name: "standard base64 characters are not the form", bearer: `kxmpt_${HEX}_${TAIL.slice(2)}+/`, id: undefined },
    { name: "a trailing newline is not the form", bearer: `${SECRET}\n`, id: undefined },
    { name: "a leading space is not the form", bearer: ` ${SECRET}`, id: undefined },
    { name: "a configured (unmanaged) token is not the form", bearer: "project-token-1", id: undefined },
    { name: "the token id is not a secret", bearer: `pt_${HEX}`, id: undefined },
  ];
  it.each(named(cases))("%s", (_title, { bearer, id }) => {
    expect(tokenIdOfSecret(bearer)).toBe(id);
  });

  it.each(titled([
    { id: `pt_${HEX}`, ok: true },
    { id: `pt_${HEX.toUpperCase()}`, ok: false },
    { id: `pt_${HEX}0`, ok: false },
    { id: `pt_${HEX.slice(1)}`, ok: false },
    { id: `xx_${HEX}`, ok: false },
  ], (c) => `token id ${c.id} has the form: ${c.ok}`))("%s", (_title, { id, ok }) => {
    expect(tokenIdPattern.test(id)).toBe(ok);
  });

  it("makes secrets that name their own id, 256 random bits after it, never the same twice in a thousand", () => {
    const made = Array.from({ length: 1_000 }, () => newTokenSecret());
    for (const { id, secret } of made) {
      expect(id).toMatch(tokenIdPattern);
      expect(tokenIdOfSecret(secret)).toBe(id);
      expect(Buffer.from(secret.slice(`kxmpt_${HEX}_`.length), "base64url")).toHaveLength(32);
    }
    expect(new Set(made.map((m) => m.id)).size).toBe(1_000);
    expect(new Set(made.map((m) => m.secret)).size).toBe(1_000);
  });
});

describe("decideCreate", () => {
  const fresh = { id: `pt_${HEX}`, secret: SECRET };
  const input = (over: Partial<NewToken> = {}): NewToken => ({ project: PROJECT, scope: "read", label: "ci-2027", ...over });

  type Case = { name: string; input: NewToken; current?: ProjectTokenRow; live: number; expect: { refused: "token_limit_reached" | "internal_error" } | { expiresAtMs: number | undefined } };
  const cases: Case[] = [
    { name: "creates the first token of a project", input: input(), live: 0, expect: { expiresAtMs: undefined } },
    { name: "creates the 100th live token", input: input(), live: maxLiveTokens - 1, expect: { expiresAtMs: undefined } },
    { name: "refuses the 101st live token with token_limit_reached", input: input(), live: maxLiveTokens, expect: { refused: "token_limit_reached" } },
    { name: "refuses when more than the limit are live", input: input(), live: maxLiveTokens + 5, expect: { refused: "token_limit_reached" } },
    { name: "refuses an id that is taken (never reuses a row)", input: input(), current: token(), live: 0, expect: { refused: "internal_error" } },
    { name: "expires the minimum ttl after now", input: input({ ttlMs: ttlRange.min }), live: 0, expect: { expiresAtMs: NOW + 1_000 } },
    { name: "expires the maximum ttl after now", input: input({ ttlMs: ttlRange.max }), live: 0, expect: { expiresAtMs: NOW + 315_360_000_000 } },
  ];

  it.each(named(cases))("%s", (_title, { input: i, current, live, expect: want }) => {
    const decide = () => decideCreate(i, fresh, current, live, NOW);
    if ("refused" in want) {
      const e = refusal(decide);
      expect(e.code).toBe(want.refused);
      if (want.refused === "token_limit_reached") {
        expect(e.metadata).toEqual({ maxLiveTokens: "100" });
        expect(errorTable[e.code]).toEqual({ connect: "failed_precondition", rest: 409 });
      }
      return;
    }
    const d = decide();
    const row: ProjectTokenRow = {
      id: fresh.id,
      project: PROJECT,
      scope: i.scope,
      label: i.label,
      hash: sha256Hex(SECRET),
      createdAtMs: NOW,
      ...(want.expiresAtMs !== undefined && { expiresAtMs: want.expiresAtMs }),
      expiryNoted: false,
    };
    expect(d.write).toEqual(row);
    expect(d.result).toEqual(row);
    // The project is closed from now on: the streams let in for its having no token end.
    expect(d.change).toEqual({ stream: "tokens", body: { kind: "created" } });
    expect(endedTokenOf(d.change!.body)).toBeUndefined();
    expect(closesProject(d.change!.body)).toBe(true);
    expect(d.audit).toEqual({
      kind: "token_created",
      project: PROJECT,
      detail: { tokenId: fresh.id, scope: i.scope, label: i.label, ...(want.expiresAtMs !== undefined && { expiresAtMs: want.expiresAtMs }) },
    });
    expect(tokenState(row, NOW)).toBe("live");
  });

  test.prop([fc.constantFrom<TokenScope>("agent", "read", "check"), fc.string({ maxLength: maxLabelChars }), fc.option(fc.integer({ min: ttlRange.min, max: ttlRange.max }), { nil: undefined })], { numRuns: 200 })(
    "stores the secret only as its hash, and no audit entry shows it",
    (scope, label, ttlMs) => {
      const made = newTokenSecret();
      const d = decideCreate({ project: PROJECT, scope, label, ...(ttlMs !== undefined && { ttlMs }) }, made, undefined, 0, NOW);
      expect(d.write!.hash).toBe(sha256Hex(made.secret));
      expect(JSON.stringify(d)).not.toContain(made.secret);
      expect(JSON.stringify(d)).not.toContain(made.secret.slice(`kxmpt_${HEX}_`.length));
    },
  );
});

describe("decideRevoke", () => {
  type Case = { name: string; current: ProjectTokenRow | undefined; project?: string; expect: "token_not_found" | "revoked" | "unchanged" };
  const cases: Case[] = [
    { name: "refuses an unknown token with token_not_found", current: undefined, expect: "token_not_found" },
    { name: "refuses another project's token with token_not_found", current: token({ project: "org/other" }), expect: "token_not_found" },
    { name: "refuses a token of a project whose name only starts alike", current: token({ project: `${PROJECT}/sub` }), expect: "token_not_found" },
    { name: "revokes a live token now", current: token(), expect: "revoked" },
    { name: "revokes an expired token", current: token({ expiresAtMs: NOW - 1 }), expect: "revoked" },
    { name: "answers a token already revoked as it is, writing nothing", current: token({ revokedAtMs: NOW - 5 }), expect: "unchanged" },
  ];

  it.each(named(cases))("%s", (_title, { current, project = PROJECT, expect: want }) => {
    const before = structuredClone(current);
    if (want === "token_not_found") {
      const e = refusal(() => decideRevoke(project, `pt_${HEX}`, current, NOW));
      expect([e.code, e.metadata]).toEqual(["token_not_found", { tokenId: `pt_${HEX}` }]);
      expect(errorTable[e.code]).toEqual({ connect: "not_found", rest: 404 });
      return;
    }
    const d = decideRevoke(project, `pt_${HEX}`, current, NOW);
    if (want === "unchanged") {
      expect(d).toEqual({ result: current });
    } else {
      const row = { ...current!, revokedAtMs: NOW };
      expect(d).toEqual({
        write: row,
        change: { stream: "tokens", body: { kind: "revoked", tokenId: `pt_${HEX}` } },
        audit: { kind: "token_revoked", project: PROJECT, detail: { tokenId: `pt_${HEX}`, scope: "agent", label: "ci" } },
        result: row,
      });
      expect(tokenState(row, NOW)).toBe("revoked");
    }
    expect(current).toEqual(before);
  });

  test.prop([fc.option(fc.integer({ min: -10_000, max: 10_000 }), { nil: undefined }), fc.option(fc.integer({ min: -10_000, max: 0 }), { nil: undefined }), fc.integer({ min: 0, max: 10_000 })], { numRuns: 200 })(
    "once revoked, a token stays revoked and keeps its first revocation instant",
    (expiresInMs, revokedInMs, laterMs) => {
      const t = token({ ...(expiresInMs !== undefined && { expiresAtMs: NOW + expiresInMs }), ...(revokedInMs !== undefined && { revokedAtMs: NOW + revokedInMs }) });
      const first = decideRevoke(PROJECT, t.id, t, NOW).result;
      const again = decideRevoke(PROJECT, t.id, first, NOW + laterMs);
      expect(again.write).toBeUndefined();
      expect(again.result.revokedAtMs).toBe(first.revokedAtMs);
      expect(tokenState(again.result, NOW + laterMs)).toBe("revoked");
    },
  );
});

describe("token changes and the expiry note", () => {
  it.each(["revoked", "expired"] as const)("a %s change names the token that stopped working", (why) => {
    const c = tokenEndedChange("pt_1", why);
    expect(c).toEqual({ stream: "tokens", body: { kind: why, tokenId: "pt_1" } });
    expect(endedTokenOf(c.body)).toBe("pt_1");
  });

  it.each(titled([
    { name: "null", body: null },
    { name: "a string", body: "pt_1" },
    { name: "a numeric tokenId", body: { tokenId: 1 } },
    { name: "no tokenId", body: { kind: "revoked" } },
  ], (c) => `reads no token from ${c.name}`))("%s", (_title, { body }) => {
    expect(endedTokenOf(body)).toBeUndefined();
  });

  it("notes an expiry with its change and audit entry", () => {
    const t = token({ expiresAtMs: NOW - 1, scope: "check" });
    expect(expiryNote(t)).toEqual({
      change: { stream: "tokens", body: { kind: "expired", tokenId: t.id } },
      audit: { kind: "token_expired", project: PROJECT, detail: { tokenId: t.id, scope: "check", label: "ci", expiresAtMs: NOW - 1 } },
    });
  });
});

describe("token request bounds (checked before any store decision)", () => {
  /** Project tokens whose store is never reached by a request the checks refuse. */
  const tokens = () => createProjectTokens({ tokens: untouchable<ProjectTokensDeps["tokens"]>("tokens"), clock: fixedClock(), observer: quietObserver });

  it("has the documented bounds", () => {
    expect([maxLiveTokens, maxLabelChars, ttlRange.min, ttlRange.max]).toEqual([100, 200, 1_000, 10 * 365 * 86_400_000]);
  });

  it.each(titled([
    { name: "a ttl 1 ms below one second", input: { ttlMs: 999n }, field: "ttlMs" },
    { name: "a ttl 1 ms above ten years", input: { ttlMs: 315_360_000_001n }, field: "ttlMs" },
    { name: "a label over 200 characters", input: { label: "l".repeat(201) }, field: "label" },
    { name: "a label with a control character", input: { label: "ci\u0007" }, field: "label" },
    { name: "an empty project", input: { project: "" }, field: "project" },
  ], (c) => `create refuses ${c.name} with protocol_error`))("%s", async (_title, { input, field }) => {
    const e = await refusalOf(tokens().create({ project: PROJECT, scope: "agent", ...input }));
    expect([e.code, e.metadata.field]).toEqual(["protocol_error", field]);
  });

  it.each(titled([
    { name: "the minimum ttl", ttlMs: 1_000n, expiresAtMs: NOW + 1_000 },
    { name: "the maximum ttl", ttlMs: 315_360_000_000n, expiresAtMs: NOW + 315_360_000_000 },
    { name: "no ttl (never expires)", ttlMs: undefined, expiresAtMs: undefined },
  ], (c) => `create hands the rule ${c.name} and a trimmed label of 200 characters`))("%s", async (_title, { ttlMs, expiresAtMs }) => {
    const call = await dependencyCall(tokens().create({ project: PROJECT, scope: "check", label: ` ${"l".repeat(200)} `, ...(ttlMs !== undefined && { ttlMs }) }));
    const decide = decideOf<(current: ProjectTokenRow | undefined, live: number, nowMs: number) => { write?: ProjectTokenRow }>(call);
    const row = decide(undefined, 0, NOW).write!;
    expect(row).toMatchObject({ project: PROJECT, scope: "check", label: "l".repeat(200), createdAtMs: NOW });
    expect(row.expiresAtMs).toBe(expiresAtMs);
  });

  it.each(["pt_123", `pt_${HEX.toUpperCase()}`, SECRET, ""])("revoke refuses the token id %j with protocol_error", async (id) => {
    const e = await refusalOf(tokens().revoke(PROJECT, id));
    expect([e.code, e.metadata.field]).toEqual(["protocol_error", "tokenId"]);
  });

  it("revoke takes a well-formed id to the store", async () => {
    expect(await passesChecks(tokens().revoke(PROJECT, `pt_${HEX}`))).toBe(true);
  });
});
