/**
 * Run from a terminal, `kxm-hub lease run` leaves its command the terminal (D75): the command can
 * open /dev/tty, as a password or passphrase prompt does (`git push` over https or ssh). In a
 * session of its own (Node's detached is setsid) it could not. Driven through a real
 * pseudo-terminal, with Python's `pty`.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { bin } from "../fixtures/cli.js";
import { startTestHub } from "../fixtures/hub.js";

/**
 * Runs argv with a pseudo-terminal as its controlling terminal (as in an agent's or a person's
 * shell); answers what it printed. With KXM_TEST_CTRL_C set, types one Ctrl-C once "ready" was printed.
 */
const ptyRunner = `
import os, pty, sys, time, select
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
interrupt = os.environ.get("KXM_TEST_CTRL_C") == "1"
end = time.time() + 20
while time.time() < end:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            d = os.read(fd, 4096)
        except OSError:
            d = b""
        if not d:
            break
        out += d
        if interrupt and b"ready" in out:
            os.write(fd, b"\\x03")
            interrupt = False
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.stdout.write("\\nEXIT %d\\n" % os.waitstatus_to_exitcode(st))
`;

function inTerminal(argv: string[], env: Record<string, string>): Promise<string> {
  const child = spawn("python3", ["-c", ptyRunner, ...argv], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  return new Promise((resolve) => child.once("close", () => resolve(out)));
}

describe("kxm-hub lease run in a terminal", () => {
  it("the command keeps the terminal: it can open /dev/tty (a password or passphrase prompt)", { timeout: 40_000 }, async () => {
    await using t = await startTestHub();
    const env = { KXM_URL: t.baseUrl, KXM_PROJECT: "org/repo", KXM_AGENT: "alpha" };
    // Outside lease run the same command has its terminal.
    expect(await inTerminal(["sh", "-c", "exec 3</dev/tty && echo tty-ok"], env)).toContain("tty-ok");
    const out = await inTerminal([process.execPath, bin, "lease", "run", "repo/main", "--ttl", "5s", "--", "sh", "-c", "exec 3</dev/tty && echo tty-ok"], env);
    expect(out).toContain("tty-ok");
    expect(out).toContain("EXIT 0");
  });

  it("one Ctrl-C reaches the command once, and lease run waits for it to end", { timeout: 40_000 }, async () => {
    await using t = await startTestHub();
    const env = { KXM_URL: t.baseUrl, KXM_PROJECT: "org/repo", KXM_AGENT: "alpha", KXM_TEST_CTRL_C: "1" };
    // Counts the interrupts it gets; it ends on its own, a while after the first (a graceful shutdown).
    const command = `let n = 0; process.on("SIGINT", () => { n++; console.log("got SIGINT " + n); if (n === 1) setTimeout(() => process.exit(3), 1500); }); console.log("ready"); setInterval(() => {}, 1000);`;
    const out = await inTerminal([process.execPath, bin, "lease", "run", "repo/main", "--ttl", "30s", "--", process.execPath, "-e", command], env);
    expect(out).toContain("got SIGINT 1");
    expect(out).not.toContain("got SIGINT 2");
    expect(out).toContain("EXIT 3");
    // The lease was released on the way out.
    const lease = await t.rest("/v1/leases/repo%2Fmain?project=org%2Frepo", { headers: {} });
    expect(await lease.json()).toMatchObject({ code: "lease_not_found" });
  });
});
