import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { storeContract } from "./store.contract.js";

storeContract("sqlite in memory", async () => new SqliteStore({ path: ":memory:", synchronous: "full" }));
storeContract("sqlite file", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-store-"));
  return new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full" });
});
