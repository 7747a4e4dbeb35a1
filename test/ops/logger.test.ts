import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../src/ops/observer.js";

/**
 * The JSON-lines logger (src/ops/observer.ts): lines gathered in memory reach the file in the
 * order they were logged, a close writes every one of them before it returns, and a quiet hub's
 * lines are written without waiting for more.
 */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function logFile(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-hub-logger-"));
  dirs.push(dir);
  return path.join(dir, "hub.jsonl");
}

const linesOf = (file: string) =>
  fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe("the logger", () => {
  it("writes every line, in order, by the time close returns", async () => {
    const file = logFile();
    const log = createLogger(file);
    // Far past one hand-over (64 KiB) and one write, with lines of other scripts among them.
    const n = 3_000;
    for (let i = 0; i < n; i++) log.logger.info({ event: "e", i, note: i % 7 === 0 ? "é中😀" : "plain" });
    await log.close();
    const lines = linesOf(file);
    expect(lines.map((l) => l.i)).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(lines[7]).toMatchObject({ level: 30, event: "e", note: "é中😀" });
    expect(new Date(String(lines[0]!.time)).toISOString()).toBe(lines[0]!.time);
  });

  it("writes every line, in order, when a write is still under way as close is called", async () => {
    const file = logFile();
    const log = createLogger(file);
    // The thread pool busy: the first hand-over's write waits there, under way, while the rest
    // are logged and close is called (a loaded machine does the same by chance).
    const busy = Array.from({ length: Number(process.env.UV_THREADPOOL_SIZE ?? 4) + 2 }, () =>
      new Promise((resolve) => crypto.pbkdf2("x", "salt", 200_000, 32, "sha256", resolve)),
    );
    const n = 3_000;
    for (let i = 0; i < n; i++) log.logger.info({ event: "e", i });
    await log.close();
    expect(linesOf(file).map((l) => l.i)).toEqual(Array.from({ length: n }, (_, i) => i));
    await Promise.all(busy);
  });

  it("writes a quiet hub's few lines without waiting for more", async () => {
    const file = logFile();
    const log = createLogger(file);
    try {
      log.logger.info({ event: "only" });
      // No deadline asserted: the line is written by the flush tick, never by close here.
      while (!fs.readFileSync(file, "utf8").includes('"only"')) await new Promise((r) => setTimeout(r, 20));
      expect(linesOf(file)).toEqual([expect.objectContaining({ event: "only" })]);
    } finally {
      await log.close();
    }
  });

  it.each([
    ["exits without closing the logger", "process.exit(3);", 3],
    ["dies of an uncaught error", 'throw new Error("boom");', 1],
  ])("writes the lines still gathered when a process %s", (_, end, code) => {
    const file = logFile();
    const entry = path.join(path.dirname(file), "log-and-end.mjs");
    const observer = pathToFileURL(path.resolve(import.meta.dirname, "../../src/ops/observer.ts")).href;
    fs.writeFileSync(
      entry,
      `import { createLogger } from ${JSON.stringify(observer)};
      const log = createLogger(${JSON.stringify(file)});
      for (let i = 0; i < 10; i++) log.logger.info({ event: "before_the_end", i });
      ${end}`,
    );
    const out = spawnSync(process.execPath, ["--import", "tsx", entry], { cwd: path.resolve(import.meta.dirname, "../.."), encoding: "utf8", timeout: 60_000 });
    expect(out.status, out.stderr).toBe(code);
    expect(linesOf(file).map((l) => l.i)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it("stamps lines of one millisecond with that millisecond's time", async () => {
    const file = logFile();
    const log = createLogger(file);
    const before = Date.now();
    for (let i = 0; i < 50; i++) log.logger.info({ event: "t", i });
    const after = Date.now();
    await log.close();
    for (const l of linesOf(file)) {
      const t = Date.parse(String(l.time));
      expect(t).toBeGreaterThanOrEqual(before);
      expect(t).toBeLessThanOrEqual(after);
    }
  });
});
