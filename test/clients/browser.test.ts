// Connect-Web in a real headless Chromium (Debian's, driven by playwright-core): the lease
// scenario's unary part over Connect (JSON) and gRPC-Web, a WatchPresence stream rendered into
// the DOM, and CORS, with the page served from another origin than the hub.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControl } from "../fixtures/control.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const CHROMIUM = "/usr/bin/chromium";
const TOKEN = "tok-clients";

let workDir: string;
let pageServer: { origin: string; close(): Promise<void> };
let browser: BrowserContext;

/** Serves index.html and the bundled page.js from `dir` on its own 127.0.0.1 port. */
async function servePage(dir: string) {
  const types: Record<string, string> = { ".html": "text/html", ".js": "text/javascript" };
  const server = http.createServer((req, res) => {
    const name = new URL(req.url ?? "/", "http://page").pathname.replace(/^\/$/, "/index.html");
    const file = path.join(dir, path.basename(name));
    if (!fs.existsSync(file)) return res.writeHead(404).end();
    res.writeHead(200, { "content-type": types[path.extname(file)] ?? "application/octet-stream" });
    res.end(fs.readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

beforeAll(async () => {
  // Installs Debian's chromium on first use (apt), then prints its version.
  const t0 = Date.now();
  const version = execFileSync("bash", [path.join(root, "scripts/setup-browser.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found after scripts/setup-browser.sh; the browser test cannot run`);
  console.log(`setup-browser: ${version.trim()} (${Date.now() - t0} ms)`);

  workDir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-browser-"));
  await build({
    entryPoints: [path.join(here, "browser/page.ts")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "chrome120",
    outfile: path.join(workDir, "page.js"),
    logLevel: "warning",
  });
  fs.copyFileSync(path.join(here, "browser/index.html"), path.join(workDir, "index.html"));
  pageServer = await servePage(workDir);

  // A fresh profile dir per run; the flags keep Chromium off the (closed) network.
  browser = await chromium.launchPersistentContext(path.join(workDir, "profile"), {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}, 300_000);

afterAll(async () => {
  await browser?.close();
  await pageServer?.close();
  if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
});

/** A hub whose CORS allows `corsOrigins`, plus its control port. */
async function hubWith(corsOrigins: string[]) {
  const t = await startTestHub({ config: { projectTokens: { clients: TOKEN }, corsOrigins } });
  const control = await startControl(t);
  return {
    t,
    control,
    async close() {
      await control.close();
      await t.close();
    },
  };
}

/** Opens the page pointed at `t`'s hub; collects the browser console for CORS messages. */
async function openPage(t: TestHub, transport: "connect" | "grpc-web") {
  const page = await browser.newPage();
  const consoleLines: string[] = [];
  page.on("console", (m) => consoleLines.push(m.text()));
  page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
  await page.goto(`${pageServer.origin}/?hub=${encodeURIComponent(t.baseUrl)}&transport=${transport}`);
  await page.waitForSelector("body[data-ready=true]");
  return { page, consoleLines };
}

const agentNames = (page: Page) => page.locator("#agents li").allTextContents();

describe.each(["connect", "grpc-web"] as const)("browser client over %s, page on another origin", (transport) => {
  it("runs the lease scenario's unary part", async () => {
    const hub = await hubWith([pageServer.origin]);
    const { page } = await openPage(hub.t, transport);
    try {
      expect(new URL(hub.t.baseUrl).origin).not.toBe(pageServer.origin);

      const one = await page.evaluate(() => window.kxm.leasePhase1());
      expect(one).toEqual({
        token1: 1,
        holder: "web-agent-1",
        renewed: true,
        renewedToken: 1,
        held: { code: "Aborted", reason: "LEASE_HELD" },
      });

      const res = await fetch(`${hub.control.url}/advance?ms=5001`, { method: "POST" });
      expect(res.status).toBe(200);

      const two = await page.evaluate(() => window.kxm.leasePhase2());
      expect(two).toEqual({
        token2: 2,
        holder: "web-agent-2",
        superseded: { code: "Aborted", reason: "LEASE_SUPERSEDED" },
      });
      await expect.poll(() => page.locator("#log li.ok").count()).toBe(2);
    } finally {
      await page.close();
      await hub.close();
    }
  });

  it("renders WatchPresence frames: an agent registered from Node appears in the DOM", async () => {
    const hub = await hubWith([pageServer.origin]);
    const { page } = await openPage(hub.t, transport);
    try {
      const watched = await page.evaluate(() => window.kxm.watchPresence());
      expect(watched.snapshotAgents).toEqual(["web-agent-1"]);
      await expect.poll(() => agentNames(page)).toEqual(["web-agent-1 (online)"]);

      await hub.t.register(`node-agent-${transport}`, "clients", TOKEN);
      await expect.poll(() => agentNames(page), { timeout: 10_000 }).toEqual([
        "web-agent-1 (online)",
        `node-agent-${transport} (online)`,
      ]);

      if (transport === "grpc-web") await page.screenshot({ path: "/tmp/kxm-browser.png", fullPage: true });
    } finally {
      await page.close();
      await hub.close();
    }
  });

  it("is refused by a hub whose CORS allows another origin only", async () => {
    const hub = await hubWith(["http://app.example"]);
    const { page, consoleLines } = await openPage(hub.t, transport);
    try {
      const out = await page.evaluate(() => window.kxm.tryRegister("blocked-agent"));
      expect(out.ok).toBe(false);
      if (out.ok) return;
      expect(out.code).toBe("Unknown");
      expect(out.message).toMatch(/Failed to fetch/);
      await expect.poll(() => page.locator("#log li.fail").allTextContents()).toEqual([
        expect.stringContaining("register blocked-agent failed"),
      ]);
      expect(consoleLines.join("\n")).toMatch(/blocked by CORS policy/);

      // The preflight stopped it: nothing reached the store.
      const probe = await hub.t.register("probe", "clients", TOKEN);
      const listed = await hub.t.rest("/v1/agents", { headers: probe.headers });
      const body = (await listed.json()) as { agents: { name: string }[] };
      expect(body.agents.map((a) => a.name)).toEqual(["probe"]);
    } finally {
      await page.close();
      await hub.close();
    }
  });
});
