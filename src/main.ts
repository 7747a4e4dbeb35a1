import { CommandError } from "./cli/command-error.js";
import { hubVersion } from "./cli/version.js";
import { ConfigError } from "./config.js";
import { BackupError, StoreOpenError } from "./store/store.js";

/**
 * The `kxm-hub` command (bin/kxm-hub.mjs runs this file): `serve` (also what plain `kxm-hub
 * [flags]` does), `backup`, `restore`, `raise-fence`, `ops`, `mcp` (a stdio bridge to a hub's
 * MCP face), and the agent commands `agents`, `send`, `inbox`, `reply` and `lease` (`lease run`
 * holds a lease while a command runs), and `guard git`, a pre-receive hook that lets only a
 * lease's current fencing token push to the refs it protects. A refusal is one line
 * `kxm-hub: <code>: <message>` on stderr and exit code 1 (`ops`, `mcp` and the agent commands have
 * their own codes), never a stack trace.
 */
const usage = (serveHelp: string) => `Usage: kxm-hub [serve] [flags]      start the hub (the default command)
       kxm-hub backup --out <file>     copy a store, running or not, with a manifest
       kxm-hub restore --from <file>   restore a backup into a store no hub is using
       kxm-hub raise-fence --database-url <url>   after restoring a PostgreSQL database
       kxm-hub ops leases|release-lease|evict --project <p> ...   an operator's hands on a running hub
       kxm-hub ops tokens|create-token|revoke-token --project <p> ...   project tokens; kxm-hub ops audit: the audit trail
       kxm-hub mcp                     a stdio MCP server relaying to a hub's /mcp (KXM_URL, KXM_PROJECT, KXM_AGENT)
       kxm-hub lease run <name> -- <command> [args...]   hold a lease while a command runs
       kxm-hub lease acquire|renew|release|get|list|check <name> ...   a lease from a shell
       kxm-hub guard git [--install <repo> ...]   a pre-receive hook: pushes to protected refs need a current fencing token
       kxm-hub agents [--all]          the project's agents
       kxm-hub send <target> <text>    message an agent; kxm-hub reply <message-id> <text> answers one
       kxm-hub inbox [--follow] [--ack]   the agent's pending mail (agent commands: KXM_URL, KXM_PROJECT, KXM_AGENT)
       kxm-hub <command> --help        the command's flags and defaults
       kxm-hub --version, -v           the version (package.json)

${serveHelp}`;

type Command = (argv: string[]) => Promise<void>;

/**
 * Each command is loaded when it runs: the hub and its stores take seconds to load, and
 * `--version`, an `ops` call (a plain fetch) or the `mcp` bridge should not wait for them.
 */
const commands: Record<string, () => Promise<Command>> = {
  serve: async () => (await import("./cli/serve.js")).serveCommand,
  backup: async () => (await import("./cli/backup.js")).backupCommand,
  restore: async () => (await import("./cli/backup.js")).restoreCommand,
  "raise-fence": async () => (await import("./cli/backup.js")).raiseFenceCommand,
  ops: async () => (await import("./cli/ops.js")).opsCommand,
  mcp: async () => (await import("./cli/mcp.js")).mcpCommand,
  lease: async () => (await import("./cli/lease.js")).leaseCommand,
  guard: async () => (await import("./cli/guard-git.js")).guardCommand,
  agents: async () => (await import("./cli/agent.js")).agentsCommand,
  send: async () => (await import("./cli/agent.js")).sendCommand,
  inbox: async () => (await import("./cli/agent.js")).inboxCommand,
  reply: async () => (await import("./cli/agent.js")).replyCommand,
};

const printUsage = async () => process.stdout.write(`${usage((await import("./cli/serve.js")).serveHelp)}\n`);

async function main(argv: string[]): Promise<void> {
  const [first, ...rest] = argv;
  if (first === undefined || first.startsWith("-")) {
    if (first === "--help" || first === "-h") {
      await printUsage();
      return;
    }
    if (first === "--version" || first === "-v") {
      process.stdout.write(`${hubVersion()}\n`);
      return;
    }
    return (await commands.serve!())(argv);
  }
  if (first === "help") {
    await printUsage();
    return;
  }
  const load = commands[first];
  if (!load) throw new ConfigError("invalid_config", `unknown command ${JSON.stringify(first)}; see kxm-hub --help`);
  return (await load())(rest);
}

/** The code, message and exit code of a refusal; undefined for anything unexpected (a bug). */
function refusalOf(e: unknown): { code: string; message: string; exitCode: number } | undefined {
  if (e instanceof CommandError) return { code: e.code, message: e.message, exitCode: e.exitCode };
  if (e instanceof ConfigError || e instanceof StoreOpenError || e instanceof BackupError) {
    return { code: e.code, message: e.message, exitCode: 1 };
  }
  return undefined;
}

main(process.argv.slice(2)).catch((e: unknown) => {
  const refusal = refusalOf(e);
  const line = refusal
    ? `kxm-hub: ${refusal.code}: ${refusal.message}\n`
    : `kxm-hub: internal_error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`;
  // Exit only once the line is out: stderr may be a pipe.
  const exitCode = refusal?.exitCode ?? 1;
  process.exitCode = exitCode;
  process.stderr.write(line, () => process.exit(exitCode));
});
