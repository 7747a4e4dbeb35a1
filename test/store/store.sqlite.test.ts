import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { storeContract } from "./store.contract.js";

storeContract("sqlite in memory", async (clock) => new SqliteStore({ path: ":memory:", synchronous: "full", clock }));
storeContract("sqlite file", async (clock) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-store-"));
  return new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full", clock });
});
