/**
 * A restore keeps the replaced file's audit entries that the backup does not hold (a token
 * revoked after the backup, an earlier restore, alerts): the trail keeps what an operator is asked
 * about later (docs/security.md). It was the backup's trail alone.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { backupTo, restoreFrom } from "../../src/store/sqlite/backup.js";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe("restore and the audit trail", () => {
  it("keeps the audit entries the replaced file wrote after the backup", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-restore-audit-"));
    dirs.push(dir);
    const dataPath = path.join(dir, "kxm.db");
    const out = path.join(dir, "b.db");
    const ADMIN = "tok-admin";
    const admin = { authorization: `Bearer ${ADMIN}` };
    const config = { dataPath, authToken: ADMIN };
    let tokenId: string;
    {
      await using t = await startTestHub({ config });
      const made = await jsonOf(await t.rest("/v1/ops/projects/p/tokens", { headers: admin, json: { scope: "agent", label: "ci" } }));
      tokenId = made.token.tokenId;
      await backupTo(dataPath, out, { hubVersion: "0", nowMs: Date.now() });
      // After the backup: the token is revoked (an audited act).
      expect((await t.rest(`/v1/ops/projects/p/tokens/${tokenId}`, { method: "DELETE", headers: admin })).status).toBe(200);
      const before = await jsonOf(await t.rest("/v1/ops/audit", { headers: admin }));
      expect(before.events.map((e: { kind: string }) => e.kind)).toContain("token_revoked");
    }
    restoreFrom({ from: out, dataPath, margin: 1_000 });
    await using t = await startTestHub({ config });
    const after = await jsonOf(await t.rest("/v1/ops/audit", { headers: admin }));
    const kinds = after.events.map((e: { kind: string }) => e.kind);
    const tokens = await jsonOf(await t.rest("/v1/ops/projects/p/tokens", { headers: admin }));
    expect(tokens.tokens[0].revokedAt).toBeTruthy();
    // Kept once, in order (the trail lists the newest first): the backup's entry, the revocation
    // after it, then the restore.
    expect(kinds).toEqual(["restore", "token_revoked", "token_created"]);
  });
});
