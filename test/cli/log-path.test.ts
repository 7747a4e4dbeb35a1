import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli, serveCli } from "../fixtures/cli.js";

/**
 * The default log follows the data path (issue 20): two hubs started in one directory on different
 * data paths, without KXM_LOG_PATH, each log to `<data path>.log.jsonl`, never to one shared
 * `.kxm/logs/kxm-hub.jsonl`.
 */

const eventsIn = (file: string) =>
  fs
    .readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { event: string; url?: string });

describe("the default log path", () => {
  it("two hubs on different data paths in one directory write separate logs beside their data", async ({ onTestFinished }) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-log-path-"));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const dataPaths = [path.join("state", "one.db"), path.join("other", "two.db")];
    const hubs = await Promise.all(dataPaths.map((d) => serveCli(["--port", "0"], { env: { KXM_DATA_PATH: d }, cwd: dir })));
    for (const hub of hubs) expect(await hub.stop()).toBe(0);
    dataPaths.forEach((d, i) => {
      const events = eventsIn(path.join(dir, `${d}.log.jsonl`));
      expect(events.find((e) => e.event === "hub_started")?.url).toBe(hubs[i]!.url);
      expect(events.at(-1)?.event).toBe("hub_stopped");
    });
    expect(fs.existsSync(path.join(dir, ".kxm"))).toBe(false);
  });

  it("serve --help says where the log goes by default", async () => {
    const r = await runCli(["serve", "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      `(default: <data path>.log.jsonl, ${path.join(".kxm", "state", "kxm.db.log.jsonl")} with the default data path; ` +
        `${path.join(".kxm", "logs", "kxm-hub.jsonl")} with :memory: or a database URL)`,
    );
  });
});
