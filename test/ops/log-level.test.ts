import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { ChildHubs } from "../fixtures/child-hub.js";

/** KXM_LOG_LEVEL: `debug` writes a `request_completed` line per call; `info` (default) does not. */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

describe("log level", () => {
  it("parses the level and refuses an unknown one", () => {
    expect(loadConfig([], { KXM_LOG_LEVEL: "DEBUG" }).logLevel).toBe("debug");
    expect(loadConfig([], {}).logLevel).toBe("info");
    expect(() => loadConfig(["--log-level", "loud"], {})).toThrow(/KXM_LOG_LEVEL/);
  });

  it.each([
    ["debug", true],
    ["info", false],
  ] as const)("at %s a completed call is logged: %s", async (level, logged) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-hub-level-"));
    try {
      const hub = await hubs.start(dir, path.join(dir, "kxm.db"), { KXM_LOG_LEVEL: level });
      const res = await fetch(`${hub.url}/v1/agents/register`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-request-id": "req-level-1" },
        body: JSON.stringify({ name: "alpha", project: "p" }),
      });
      expect(res.status).toBe(201);
      hub.child.kill("SIGTERM");
      expect(await hub.exited).toBe(0);
      const lines = fs.readFileSync(path.join(dir, "hub.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      const completed = lines.find((l) => l.event === "request_completed" && l.requestId === "req-level-1");
      if (logged) expect(completed).toMatchObject({ face: "rest", code: "ok", caller: "project:p", durationMs: expect.any(Number) });
      else expect(completed).toBeUndefined();
      expect(lines.some((l) => l.event === "hub_stopped")).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
