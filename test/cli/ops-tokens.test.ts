import { describe, expect, it } from "vitest";
import { runCli } from "../fixtures/cli.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub ops tokens|create-token|revoke-token|audit`, run as the command against a real hub:
 * a rotation step by step (docs/security.md, "Rotating a project token"), the secret printed once, the admin
 * token required, usage errors with exit 2.
 */

const ADMIN = "tok-admin-cli";
const PROJECT = "org/repo";

const ops = (t: TestHub, args: string[], token = ADMIN) => runCli(["ops", ...args, "--url", t.baseUrl], { env: { KXM_TOKEN: token } });

describe("kxm-hub ops: project tokens and the audit trail", () => {
  it("rotates a project token: create the new one, use it, revoke the old, see it in the audit trail", async () => {
    await using t = await startTestHub({ config: { authToken: ADMIN } });
    const old = await ops(t, ["create-token", "--project", PROJECT, "--label", "ci", "--json"]);
    expect(old.code, old.stderr).toBe(0);
    const oldAnswer = JSON.parse(old.stdout) as { token: { tokenId: string }; secret: string };

    const made = await ops(t, ["create-token", "--project", PROJECT, "--scope", "read", "--ttl", "86400000", "--label", "dashboard"]);
    expect(made.code, made.stderr).toBe(0);
    const secret = made.stdout.trim().split("\n").pop()!;
    expect(secret).toMatch(/^kxmpt_/);
    expect(made.stdout).toMatch(/scope read/);
    const reads = await t.rest(`/v1/leases?project=${encodeURIComponent(PROJECT)}`, { headers: { authorization: `Bearer ${secret}` } });
    expect(reads.status).toBe(200);

    const listed = await ops(t, ["tokens", "--project", PROJECT]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^TOKEN\s+SCOPE\s+STATE/);
    expect(listed.stdout).toContain(oldAnswer.token.tokenId);
    expect(listed.stdout).not.toContain(secret);
    expect(listed.stdout).not.toContain(oldAnswer.secret);

    const revoked = await ops(t, ["revoke-token", "--project", PROJECT, oldAnswer.token.tokenId]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toMatch(new RegExp(`^revoked ${oldAnswer.token.tokenId}`));
    const refused = await t.rest("/v1/agents/register", { json: { name: "a", project: PROJECT }, headers: { authorization: `Bearer ${oldAnswer.secret}` } });
    expect(refused.status).toBe(401);

    const trail = await ops(t, ["audit", "--project", PROJECT]);
    expect(trail.code, trail.stderr).toBe(0);
    const kinds = trail.stdout.trim().split("\n").slice(1).map((l) => l.split(/\s+/)[2]);
    expect(kinds).toEqual(["token_revoked", "token_created", "token_created"]);
    expect(trail.stdout).not.toContain(secret);
  });

  it("needs the admin token, and checks its flags before calling", async () => {
    await using t = await startTestHub({ config: { authToken: ADMIN, projectTokens: { [PROJECT]: "tok-project" } } });
    const asProject = await ops(t, ["create-token", "--project", PROJECT], "tok-project");
    expect(asProject.code).toBe(1);
    expect(asProject.stderr).toMatch(/^kxm-hub: invalid_auth: /);
    for (const args of [
      ["create-token", "--project", PROJECT, "--scope", "owner"],
      ["revoke-token", "--project", PROJECT],
    ]) {
      const r = await ops(t, args);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(/^kxm-hub: usage_error: /);
    }
    const bad = await ops(t, ["revoke-token", "--project", PROJECT, "pt_0000000000000000"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^kxm-hub: token_not_found: /);
    expect((await t.sql("SELECT count(*) AS n FROM project_tokens"))[0]!.n).toBe(0);
  });
});
