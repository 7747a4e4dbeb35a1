// The operator page in a real headless Chromium (Debian's, driven by playwright-core), served by
// the hub itself at `/`: sign-in (by itself on an open hub), each live view following what the
// test does through the API, the hub clock moved by the test, a hub restart survived without a
// reload (and shown as such), the operator's release and eviction behind a confirmation, the
// admin's project tokens (the secret shown once) and audit trail, and a screenshot of every view
// written to SCREENSHOTS.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HubConfig } from "../../src/config.js";
import { TokenScope, WatchProjectRequestSchema, type WatchProjectRequest } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { syncEvent } from "../sync/fixtures.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const CHROMIUM = "/usr/bin/chromium";
/** Where the screenshots of each view go (kept after the run; .kxm/ is not committed). */
export const SCREENSHOTS = path.join(root, ".kxm", "screenshots", "operator-page");

const ADMIN = "tok-admin-operator";
const TOKENS = { "team/web": "tok-web", "team/api": "tok-api" };
const RUNTIME = "rtm_builder00001";
const RUNTIME_TTL_MS = 600_000;

let browser: Browser;
let workDir: string;
let port: number;

/** A free loopback port, so the restarted hub can come back on the same origin. */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return p;
}

beforeAll(async () => {
  const version = execFileSync("bash", [path.join(root, "scripts/setup-browser.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  console.log(`setup-browser: ${version.trim()}`);
  // The page as the hub serves it: built ahead, as `npm ci` (prepare) does.
  console.log(execFileSync(process.execPath, [path.join(root, "scripts/build-ui.mjs")], { encoding: "utf8" }).trim());
  fs.rmSync(SCREENSHOTS, { recursive: true, force: true });
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-operator-page-"));
  port = await freePort();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}, 300_000);

afterAll(async () => {
  await browser?.close();
  if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
  console.log(`operator page screenshots: ${SCREENSHOTS}`);
});

const clock = new FakeClock();

/** The page names an empty icon of its own: the browser never asks the hub for /favicon.ico. */
const askedForIcon = (t: TestHub) => t.events.some((e) => e.fields.path === "/favicon.ico");

/** The hub under test: a file store, a fixed port, the test's clock; `start` again after `close` is a restart. */
function hubConfig(): Partial<HubConfig> {
  return {
    port,
    dataPath: path.join(workDir, "hub.db"),
    authToken: ADMIN,
    projectTokens: TOKENS,
    // Keep-alives on every second of hub time: a clock the test moves reaches the page at once.
    streamKeepAliveMs: 1_000,
    staleAfterMs: RUNTIME_TTL_MS,
    cleanupIntervalMs: 3_600_000,
  };
}
const startHub = () => startTestHub({ clock, config: hubConfig() });

const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });

/** What the page asked WatchProject for, in order (the binary Connect request, decoded). */
const projectWatches: WatchProjectRequest[] = [];

async function openPage(t: TestHub) {
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  page.on("request", (r) => {
    if (!r.url().endsWith("/kxm.hub.v1.OpsService/WatchProject")) return;
    const body = r.postDataBuffer();
    // One Connect envelope: a flag byte, a 4-byte length, the message.
    if (body) projectWatches.push(fromBinary(WatchProjectRequestSchema, body.subarray(5, 5 + body.readUInt32BE(1))));
  });
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource|ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE/.test(m.text())) problems.push(m.text());
  });
  await page.goto(`${t.baseUrl}/`);
  await page.waitForSelector("body[data-ready=true]");
  return { page, problems };
}

async function signIn(page: Page, token: string, project = "") {
  await page.fill("#token", token);
  await page.fill("#project", project);
  await page.click("button[type=submit]");
}

const text = (page: Page, selector: string) => page.locator(selector).innerText();
const view = async (page: Page, id: string) => {
  await page.click(`nav a[data-view=${id}]`);
  await page.waitForSelector(`main[data-view=${id}]`);
};
/** m:ss on screen, in seconds. */
const seconds = (mss: string) => {
  const [m, s] = mss.trim().split(":").map(Number);
  return m! * 60 + s!;
};

describe("operator page (Chromium, served by the hub at /)", () => {
  it("signs in, follows agents, leases, messages and runs live, survives a hub restart, and refuses a wrong token", async () => {
    let t = await startHub();
    const { page, problems } = await openPage(t);
    try {
      // The page's own headers: a strict CSP, cached by hash.
      const index = await fetch(`${t.baseUrl}/`);
      expect(index.headers.get("content-security-policy")).toContain("script-src 'self'");
      const html = await index.text();
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/); // no inline script
      const asset = /src="(\/assets\/app-[A-Z0-9]+\.js)"/.exec(html)![1]!;
      const script = await fetch(`${t.baseUrl}${asset}`);
      expect(script.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      // The page stays light: its whole script, uncompressed, under 300 KiB.
      expect((await script.arrayBuffer()).byteLength).toBeLessThan(300 * 1024);

      // A wrong token is refused with a clear message, and nothing is kept.
      await signIn(page, "not-the-token", "team/web");
      await expect.poll(() => text(page, "#signin-error")).toContain("The hub refused this token");
      expect(await text(page, "#signin-error")).toContain("team/web");
      expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
      await shot(page, "0-sign-in-refused");

      // The admin token: every project, with counts.
      await signIn(page, ADMIN);
      await page.waitForSelector('tr[data-project="team/web"]');
      expect(page.url()).not.toContain(ADMIN);
      expect(await page.evaluate(() => sessionStorage.getItem("kxm-hub.session"))).toContain(ADMIN);
      const web = { authorization: `Bearer ${TOKENS["team/web"]}` };
      const builder = await t.register("builder-1", "team/web", TOKENS["team/web"]);
      await expect.poll(() => text(page, 'tr[data-project="team/web"]')).toContain("1 of 1");
      await shot(page, "1-projects");

      // Agents: one registered now appears within a second.
      await page.click('tr[data-project="team/web"] a');
      await page.waitForSelector('tr[data-agent="builder-1"]');
      await page.waitForSelector("#link-state[data-state=live]");
      const reviewer = await t.register("reviewer-2", "team/web", TOKENS["team/web"]);
      await page.waitForSelector('tr[data-agent="reviewer-2"][data-state=online]', { timeout: 1_000 });
      // Text from agents is shown as text: markup in a purpose is neither parsed nor run.
      const hostile = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`;
      const registered = await t.rest("/v1/agents/register", {
        json: { name: "markup", project: "team/web", purpose: hostile },
        headers: { authorization: `Bearer ${TOKENS["team/web"]}` },
      });
      expect(registered.status).toBe(201);
      await page.waitForSelector('tr[data-agent="markup"]');
      expect(await text(page, 'tr[data-agent="markup"] td[data-label=Purpose]')).toBe(hostile);
      expect(await page.locator("main img, main script").count()).toBe(0);
      expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
      await shot(page, "2-agents");

      // Leases: holder, token, a countdown; a lapse on the hub clock shows as lapsed.
      await view(page, "leases");
      const acquire = async (a: AgentCreds, name: string, ttlMs: number) =>
        (await (await t.rest(`/v1/leases/${encodeURIComponent(name)}/acquire`, { json: { ttlMs }, headers: a.headers })).json()) as {
          lease: { fencingToken: number };
        };
      const deploy = await acquire(builder, "deploy/main", 120_000);
      await acquire(reviewer, "pr/42", 600_000);
      const row = 'tr[data-lease="deploy/main"]';
      await page.waitForSelector(`${row}[data-state=held]`);
      expect(await text(page, `${row} .holder`)).toBe("builder-1");
      expect(await text(page, `${row} .token`)).toBe(String(deploy.lease.fencingToken));
      const first = seconds(await text(page, `${row} .left`));
      expect(first).toBeGreaterThan(100);
      await expect.poll(async () => seconds(await text(page, `${row} .left`)), { timeout: 5_000 }).toBeLessThan(first);
      await shot(page, "3-leases");
      clock.advance(120_001);
      await page.waitForSelector(`${row}[data-state=lapsed]`);
      expect(await text(page, `${row} .left`)).toBe("lapsed");
      expect(await page.locator('tr[data-lease="pr/42"]').getAttribute("data-state")).toBe("held");
      await shot(page, "4-leases-lapsed");

      // Messages: queued when sent, gone from the open list once replied.
      await view(page, "messages");
      const sent = (await (await t.rest("/v1/messages", { json: { target: builder.id, content: "please review" }, headers: reviewer.headers })).json()) as {
        message: { id: string };
      };
      const msg = `tr[data-message="${sent.message.id}"]`;
      await page.waitForSelector(`${msg}[data-status=queued]`);
      expect(await text(page, msg)).toContain("reviewer-2 → builder-1");
      await t.rest("/v1/messages", { json: { target: reviewer.id, content: "on it" }, headers: builder.headers });
      await expect.poll(() => page.locator("tr[data-message]").count()).toBe(2);
      await shot(page, "5-messages");
      await t.rest(`/v1/messages/${sent.message.id}/reply`, { json: { content: "done" }, headers: builder.headers });
      await page.waitForSelector(`${msg}[data-status=replied]`);
      await page.waitForSelector(msg, { state: "detached", timeout: 10_000 });
      expect(await page.locator("tr[data-message]").count()).toBe(1);

      // Runs: under their home runtime; orphaned once its presence lapses on the hub clock.
      await view(page, "runs");
      expect((await t.rest("/v1/runtime/presence", { headers: web, json: { project: "team/web", runtimeId: RUNTIME, host: "ci-7" } })).status).toBeLessThan(300);
      const event = (sequence: number, payload: Record<string, unknown>) =>
        syncEvent({ homeRuntimeId: RUNTIME, runId: "run_release0001", sequence, payload: { workflowId: "wf-release", ...payload }, occurredAt: `2026-01-01T12:0${sequence}:00Z` });
      const push = (events: Record<string, unknown>[]) => t.rest("/v1/sync/events", { headers: web, json: { project: "team/web", runtimeId: RUNTIME, events } });
      expect((await push([event(1, { status: "running", displayTitle: "Release 1.4" })])).status).toBe(200);
      const run = 'tr[data-run="run_release0001"]';
      await page.waitForSelector(`${run}[data-orphaned=false]`);
      expect(await text(page, run)).toContain("Release 1.4");
      await shot(page, "6-runs");
      clock.advance(RUNTIME_TTL_MS + 1);
      await t.hub.sweepNow();
      await page.waitForSelector(`${run}[data-orphaned=true]`);
      await page.waitForSelector(`section[data-runtime="${RUNTIME}"][data-presence=lapsed]`);
      await shot(page, "7-runs-orphaned");

      // Alerts: a push the hub refuses as a conflict.
      expect((await push([event(1, { status: "failed", displayTitle: "Forged" })])).status).toBe(200);
      await view(page, "alerts");
      await page.waitForSelector('tr[data-alert="sync_sequence_reused"]');
      await shot(page, "8-alerts");

      // A hub restart: the page says it is reconnecting, then live again, without a reload.
      await view(page, "agents");
      await page.evaluate(() => ((window as unknown as { keptAcrossRestart: string }).keptAcrossRestart = "yes"));
      expect(askedForIcon(t)).toBe(false);
      await t.close();
      await page.waitForSelector("#link-state[data-state=reconnecting]");
      // Unmistakable: a banner saying the tables stand still, and the views greyed out.
      expect(await text(page, "#connection-lost")).toMatch(/^Connection lost: reconnecting… the tables show what was known at \d\d:\d\d:\d\d\.$/);
      expect(await page.locator("main.lost").count()).toBe(1);
      await shot(page, "9-reconnecting");
      const watchesBefore = projectWatches.length;
      t = await startHub();
      await page.waitForSelector("#link-state[data-state=live]", { timeout: 15_000 });
      await page.waitForSelector("#connection-lost", { state: "detached" });
      expect(await page.locator("main.lost").count()).toBe(0);
      // One stream for the four views, opened again with each view's cursor: a resume, not a reload.
      const resumed = projectWatches.slice(watchesBefore).at(-1)!;
      expect(resumed.project).toBe("team/web");
      for (const cursor of [resumed.presenceAfterCursor, resumed.leasesAfterCursor, resumed.messagesAfterCursor, resumed.runsAfterCursor]) {
        expect(cursor).toBeGreaterThan(0n);
      }
      expect(projectWatches[0]!.presenceAfterCursor).toBeUndefined();
      const after = await t.register("after-restart", "team/web", TOKENS["team/web"]);
      await page.waitForSelector('tr[data-agent="after-restart"][data-state=online]');
      expect(await page.evaluate(() => (window as unknown as { keptAcrossRestart?: string }).keptAcrossRestart)).toBe("yes");
      // The streams resumed by cursor: what happened while the page was away is there too.
      await view(page, "leases");
      await acquire(after, "deploy/main", 60_000);
      // The lapsed lease taken by another agent: marked as taken over, on the next token.
      await page.waitForSelector('tr[data-lease="deploy/main"][data-state=held] .mark-taken-over');
      expect(await text(page, 'tr[data-lease="deploy/main"] .holder')).toBe("after-restart");
      expect(await text(page, 'tr[data-lease="deploy/main"] .token')).toBe(String(deploy.lease.fencingToken + 1));

      // A narrow window: rows become cards.
      await view(page, "agents");
      await page.setViewportSize({ width: 400, height: 760 });
      await shot(page, "10-agents-narrow");

      // Keyboard: the views are reachable with Tab and Enter.
      await page.setViewportSize({ width: 1100, height: 700 });
      await page.focus('nav a[data-view="messages"]');
      await page.keyboard.press("Enter");
      await page.waitForSelector("main[data-view=messages]");

      // A project's token sees its project only.
      await page.click("text=Sign out");
      await signIn(page, TOKENS["team/api"], "team/api");
      await page.waitForSelector("main[data-view=agents]");
      expect(await text(page, "header .project-name")).toBe("team/api");
      expect(await page.locator("nav a[href='#/projects']").count()).toBe(0);
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await t.close();
    }
  });

  it("shows who waits for a lease; releases a lease and evicts an agent, each after a confirmation", async () => {
    const t = await startTestHub({ clock, config: { authToken: ADMIN, projectTokens: TOKENS, streamKeepAliveMs: 1_000 } });
    const { page, problems } = await openPage(t);
    const token = TOKENS["team/web"];
    type Granted = { lease: { fencingToken: number; holderAgentName: string } };
    const acquire = (a: AgentCreds, name: string, waitMs?: number) =>
      t.rest(`/v1/leases/${encodeURIComponent(name)}/acquire`, { json: { ttlMs: 300_000, ...(waitMs && { waitMs }) }, headers: a.headers });
    const granted = async (r: Promise<Response> | Response) => ((await (await r).json()) as Granted).lease;
    const row = 'tr[data-lease="deploy/main"]';
    const confirm = async (button: string, title: string) => {
      await page.click(button);
      await page.waitForSelector("dialog#confirm[open]");
      expect(await text(page, "#confirm-title")).toBe(title);
    };
    try {
      // The operator here holds the project's token, not the admin's.
      await signIn(page, token, "team/web");
      const [builder, reviewer, third] = [await t.register("builder-1", "team/web", token), await t.register("reviewer-2", "team/web", token), await t.register("third-3", "team/web", token)];
      await view(page, "leases");
      await page.waitForSelector("#link-state[data-state=live]");
      const first = await granted(acquire(builder, "deploy/main"));
      await granted(acquire(builder, "cache/warm"));

      // A waiter appears under the lease it waits for, with how long it has waited on the hub clock.
      const waiting = acquire(reviewer, "deploy/main", 120_000);
      await page.waitForSelector(`${row} li[data-waiter="reviewer-2"]`);
      clock.advance(30_000);
      await expect.poll(() => text(page, `${row} li[data-waiter="reviewer-2"]`)).toMatch(/^reviewer-2 waiting 3\d s · gives up in 1:[23]\d$/);
      expect(await text(page, 'tr[data-lease="cache/warm"] .queue')).toBe("none");
      await shot(page, "11-lease-waiter");

      // Release asks first; Escape (or Cancel) leaves the lease as it is.
      await confirm(`${row} button[data-action=release]`, "Release lease deploy/main?");
      expect(await text(page, "#confirm-body")).toContain(`builder-1 holds it on fencing token ${first.fencingToken}`);
      expect(await text(page, "#confirm-body")).toContain("reviewer-2, first of 1 waiting, gets it on the next token.");
      await shot(page, "12-release-confirm");
      await page.keyboard.press("Escape");
      await page.waitForSelector("dialog#confirm", { state: "detached" });
      expect(await text(page, `${row} .holder`)).toBe("builder-1");

      // Released: the waiter holds it on the next token, and the row says from whom.
      await confirm(`${row} button[data-action=release]`, "Release lease deploy/main?");
      await page.click("dialog#confirm button[data-confirm]");
      await page.waitForSelector("dialog#confirm", { state: "detached" });
      const next = await granted(waiting);
      expect(next).toMatchObject({ holderAgentName: "reviewer-2", fencingToken: first.fencingToken + 1 });
      await page.waitForSelector(`${row}[data-state=held] .mark-handed-on`);
      expect(await text(page, `${row} .holder`)).toBe("reviewer-2");
      expect(await text(page, `${row} .from`)).toBe("from builder-1, force-released");
      expect(await text(page, `${row} .token`)).toBe(String(next.fencingToken));
      expect(await text(page, `${row} .queue`)).toBe("none");
      expect(await text(page, "#notice")).toContain(`Released deploy/main (token ${first.fencingToken}): reviewer-2 holds it now, on token ${next.fencingToken}.`);
      await shot(page, "13-lease-force-released");

      // The token shown is the one released: a lease handed on meanwhile is refused, not released.
      await confirm(`${row} button[data-action=release]`, "Release lease deploy/main?");
      const r = await t.rest(`/v1/leases/deploy%2Fmain/release`, { json: { fencingToken: next.fencingToken }, headers: reviewer.headers });
      expect(r.status).toBe(200);
      const again = await granted(acquire(builder, "deploy/main"));
      await page.click("dialog#confirm button[data-confirm]");
      await expect.poll(() => text(page, "#confirm-error")).toContain(`Not released: deploy/main changed hands since token ${next.fencingToken} was shown`);
      expect(await text(page, "#confirm-error")).toContain(`the hub is now at token ${again.fencingToken}`);
      await shot(page, "14-release-refused");
      await page.click("dialog#confirm button[data-cancel]");
      await page.waitForSelector("dialog#confirm", { state: "detached" });
      expect(await text(page, `${row} .holder`)).toBe("builder-1");

      // Evict: the agent goes offline, its leases are released and handed to their waiters.
      const thirdWaits = acquire(third, "deploy/main", 120_000);
      await page.waitForSelector(`${row} li[data-waiter="third-3"]`);
      await view(page, "agents");
      await confirm('tr[data-agent="builder-1"] button[data-action=evict]', "Evict agent builder-1?");
      expect(await text(page, "#confirm-body")).toContain("Its leases (cache/warm, deploy/main) are released");
      await shot(page, "15-evict-confirm");
      await page.click("dialog#confirm button[data-confirm]");
      await page.waitForSelector('tr[data-agent="builder-1"][data-state=offline]');
      expect(await page.locator('tr[data-agent="builder-1"] button').count()).toBe(0);
      expect(await text(page, "#notice")).toContain("Evicted builder-1: offline, its key refused; released cache/warm, deploy/main.");
      await shot(page, "16-agent-evicted");
      expect(await granted(thirdWaits)).toMatchObject({ holderAgentName: "third-3", fencingToken: again.fencingToken + 1 });
      await view(page, "leases");
      await page.waitForSelector(`${row}[data-state=held]`);
      expect(await text(page, `${row} .holder`)).toBe("third-3");
      await page.waitForSelector('tr[data-lease="cache/warm"][data-state=force-released]');
      expect(await text(page, 'tr[data-lease="cache/warm"] .left')).toBe("force-released");
      await shot(page, "17-leases-after-evict");
      await page.waitForSelector('tr[data-lease="cache/warm"]', { state: "detached", timeout: 10_000 });
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await t.close();
    }
  });

  it("as admin, creates a token (its secret shown once), revokes it after a confirmation, and reads both in the audit trail; a project's token is refused the trail in words", async () => {
    const t = await startTestHub({ config: { authToken: ADMIN, projectTokens: TOKENS, streamKeepAliveMs: 1_000 } });
    const { page, problems } = await openPage(t);
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: t.baseUrl });
    const admin = { authorization: `Bearer ${ADMIN}` };
    const rows = page.locator("table.audit tbody tr");
    try {
      await signIn(page, ADMIN);
      await page.waitForSelector("main[data-view=projects]");
      await page.evaluate(() => (location.hash = "#/p/team%2Fweb/tokens"));
      await page.waitForSelector("main[data-view=tokens] #token-form");
      await page.waitForSelector("#link-state[data-state=live]");
      expect(await text(page, "main")).toContain("This project has no managed token.");

      // Created through the form: the secret once, in a box that says so, with a copy button.
      await page.selectOption("#token-scope", String(TokenScope.READ));
      await page.fill("#token-label", "ci-2027");
      await page.fill("#token-ttl", "30");
      await page.click("#token-create");
      await page.waitForSelector("#token-secret");
      const id = (await page.getAttribute("#token-secret", "data-token"))!;
      const secret = await text(page, "#token-secret-value");
      expect(id).toMatch(/^pt_[0-9a-f]{16}$/);
      expect(secret.startsWith(`kxmpt_${id.slice(3)}_`)).toBe(true);
      expect(await text(page, "#token-secret")).toContain("Shown once.");
      await page.click("#token-copy");
      await expect.poll(() => text(page, "#token-copy-state")).toBe("Copied to the clipboard.");
      expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
      const asReader = () => t.rest("/v1/agents?project=team%2Fweb", { headers: { authorization: `Bearer ${secret}` } });
      expect((await asReader()).status).toBe(200);
      // Listed, never with its secret; and once the box is closed the secret is nowhere on the page.
      const row = `tr[data-token="${id}"]`;
      await page.waitForSelector(`${row}[data-state=live]`);
      expect(await text(page, `${row} td[data-label=Scope]`)).toBe("read");
      expect(await text(page, `${row} td[data-label=Label]`)).toBe("ci-2027");
      expect(await text(page, `${row} td[data-label=Expires]`)).toMatch(/ · in (29|30) d$/);
      expect(await text(page, "table.tokens")).not.toContain(secret);
      await shot(page, "19-token-created");
      await page.click("#token-secret-close");
      await page.waitForSelector("#token-secret", { state: "detached" });
      expect(await page.content()).not.toContain(secret);

      // Revoked after the confirmation: refused at once, the row says so.
      await page.click(`${row} button[data-action=revoke]`);
      await page.waitForSelector("dialog#confirm[open]");
      expect(await text(page, "#confirm-title")).toBe(`Revoke token ${id}?`);
      expect(await text(page, "#confirm-body")).toContain("cannot be brought back");
      await shot(page, "20-token-revoke-confirm");
      await page.click("dialog#confirm button[data-confirm]");
      await page.waitForSelector("dialog#confirm", { state: "detached" });
      await page.waitForSelector(`${row}[data-state=revoked]`);
      expect(await page.locator(`${row} button`).count()).toBe(0);
      expect(await text(page, "#notice")).toContain(`Revoked ${id}`);
      expect((await asReader()).status).toBe(401);

      // More for the trail: 49 tokens through the API (a page of 50 no longer holds the project's
      // entries), and 20 refused calls from one address (a security alert for the whole hub).
      const made = await Promise.all(Array.from({ length: 49 }, (_, i) => t.rest("/v1/ops/projects/team%2Fweb/tokens", { json: { scope: "check", label: `bulk-${i}` }, headers: admin })));
      expect(made.every((r) => r.ok)).toBe(true);
      await Promise.all(Array.from({ length: 20 }, () => t.rest("/v1/ops/audit", { headers: { authorization: "Bearer not-the-token" } })));
      await expect.poll(async () => JSON.stringify(await (await t.rest("/v1/ops/audit", { headers: admin })).json())).toContain("auth_refusals");

      // The project's trail, newest first, a page at a time: the revocation on the first page,
      // the creation (the oldest) after Older.
      await view(page, "audit");
      await expect.poll(() => rows.count()).toBe(50);
      expect(await text(page, "tr[data-kind=token_revoked]")).toContain(`tokenId=${id}`);
      expect(await page.locator("tr.security").count()).toBe(0);
      await page.click("#audit-older");
      await expect.poll(() => rows.count()).toBe(51);
      expect(await rows.last().getAttribute("data-kind")).toBe("token_created");
      expect(await rows.last().innerText()).toMatch(new RegExp(`label=ci-2027[\\s\\S]*scope=read[\\s\\S]*tokenId=${id}`));
      expect(await page.locator("#audit-older").count()).toBe(0);
      // Every project and the whole hub: the alert stands out.
      await page.selectOption("#audit-scope", "all");
      await page.waitForSelector("tr[data-kind=auth_refusals].security");
      expect(await text(page, "tr[data-kind=auth_refusals] td[data-label=Project]")).toBe("whole hub");
      expect(await text(page, "tr[data-kind=auth_refusals]")).toContain("remoteAddress=");
      expect(await text(page, "#audit-alerts")).toBe("1 security alert among the entries shown.");
      await shot(page, "21-audit");
      // The admin's hub-wide Audit, beside All projects: every entry, no project to filter by.
      await page.click("nav a[href='#/projects']");
      await page.waitForSelector("main[data-view=projects]");
      await view(page, "audit");
      await page.waitForSelector("tr[data-kind=auth_refusals].security");
      expect(await page.locator("#audit-scope").count()).toBe(0);

      // A project's token: the trail's refusal in words, and the page stays signed in.
      await page.click("text=Sign out");
      await signIn(page, TOKENS["team/api"], "team/api");
      await page.waitForSelector("main[data-view=agents]");
      await view(page, "audit");
      await expect.poll(() => text(page, "#audit-error")).toContain("Only the admin token may read the audit trail");
      expect(await text(page, "#audit-error")).toContain("project “team/api”");
      expect(await page.locator("table.audit").count()).toBe(0);
      expect(await text(page, "#signed-in-as")).toBe("project token");
      await shot(page, "22-audit-refused");
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await t.close();
    }
  });

  it("on a loopback hub without an admin token, signs in by itself and shows every project", async () => {
    const t = await startTestHub({ config: { projectTokens: TOKENS, streamKeepAliveMs: 1_000 } });
    const { page, problems } = await openPage(t);
    try {
      // No click: the hub accepts no token at all, and the header says so.
      await page.waitForSelector('tr[data-project="team/api"]');
      expect(await page.locator("#token").count()).toBe(0);
      expect(await text(page, "#signed-in-as")).toBe("open hub (no token)");
      await t.register("solo", "open/solo");
      await page.waitForSelector('tr[data-project="open/solo"]');
      expect(await text(page, 'tr[data-project="open/solo"]')).toContain("1 of 1");
      await shot(page, "18-open-hub");
      // Signed out, it stays out (a reload too) until the operator signs in again by hand.
      await page.click("text=Sign out");
      await page.reload();
      await page.waitForSelector("body[data-ready=true]");
      await signIn(page, "");
      await page.waitForSelector('tr[data-project="open/solo"]');
      expect(askedForIcon(t)).toBe(false);
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await t.close();
    }
  });

  it("keeps a sender's bidi override in its name: the Messages view still shows the recipient after the arrow", async () => {
    const t = await startTestHub({ config: { streamKeepAliveMs: 1_000 } });
    const { page, problems } = await openPage(t);
    try {
      const positions = async (senderName: string) => {
        // A name stored before names refused bidi controls (D74): written into the store.
        const from = await t.register(`sender-${senderName.length}`, "bidi/p");
        (t.hub.store as unknown as { db: { prepare(q: string): { run(...p: unknown[]): unknown } } }).db
          .prepare("UPDATE agents SET name = ? WHERE id = ?")
          .run(senderName, from.id);
        const to = await t.register(`bob-${senderName.length}`, "bidi/p");
        const sent = await t.rest("/v1/messages", { json: { target: to.id, content: "hi" }, headers: from.headers });
        expect(sent.status).toBe(202);
        const id = ((await sent.json()) as { message: { id: string } }).message.id;
        await page.evaluate(() => (location.hash = "#/p/bidi%2Fp/messages"));
        await page.waitForSelector(`tr[data-message="${id}"]`);
        return page.evaluate((messageId) => {
          const td = document.querySelector(`tr[data-message="${messageId}"] td[data-label="From → to"]`)!;
          const left = (needle: string, last = false) => {
            const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
            let found = NaN;
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
              const s = n.textContent ?? "";
              const i = last ? s.lastIndexOf(needle) : s.indexOf(needle);
              if (i < 0) continue;
              const r = document.createRange();
              r.setStart(n, i);
              r.setEnd(n, i + needle.length);
              found = r.getBoundingClientRect().left;
              if (!last) break;
            }
            return found;
          };
          return { arrow: left("→"), recipient: left("bob", true) };
        }, id);
      };
      const plain = await positions("mallory");
      expect(plain.recipient).toBeGreaterThan(plain.arrow);
      const overridden = await positions("mallory\u202e");
      expect(overridden.recipient).toBeGreaterThan(overridden.arrow);
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await t.close();
    }
  });
});
