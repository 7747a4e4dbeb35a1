import { backupCommand, raiseFenceCommand, restoreCommand } from "./cli/backup.js";
import { serveCommand, serveHelp } from "./cli/serve.js";
import { ConfigError } from "./config.js";
import { BackupError, StoreOpenError } from "./store/store.js";

/**
 * The `kxm-hub` command (bin/kxm-hub.mjs runs this file): `serve` (also what plain `kxm-hub
 * [flags]` does), `backup`, `restore` and `raise-fence`. A refusal is one line `kxm-hub: <code>: <message>` on
 * stderr and exit code 1, never a stack trace.
 */
const usage = `Usage: kxm-hub [serve] [flags]      start the hub (the default command)
       kxm-hub backup --out <file>     copy a store, running or not, with a manifest
       kxm-hub restore --from <file>   restore a backup into a store no hub is using
       kxm-hub raise-fence --database-url <url>   after restoring a PostgreSQL database
       kxm-hub <command> --help        the command's flags and defaults

${serveHelp}`;

const commands: Record<string, (argv: string[]) => Promise<void>> = {
  serve: serveCommand,
  backup: backupCommand,
  restore: restoreCommand,
  "raise-fence": raiseFenceCommand,
};

async function main(argv: string[]): Promise<void> {
  const [first, ...rest] = argv;
  if (first === undefined || first.startsWith("-")) {
    if (first === "--help" || first === "-h") {
      process.stdout.write(`${usage}\n`);
      return;
    }
    return serveCommand(argv);
  }
  if (first === "help") {
    process.stdout.write(`${usage}\n`);
    return;
  }
  const command = commands[first];
  if (!command) throw new ConfigError("invalid_config", `unknown command ${JSON.stringify(first)}; see kxm-hub --help`);
  return command(rest);
}

/** The code and message of a refusal; undefined for anything unexpected (a bug). */
function refusalOf(e: unknown): { code: string; message: string } | undefined {
  if (e instanceof ConfigError || e instanceof StoreOpenError || e instanceof BackupError) {
    return { code: e.code, message: e.message };
  }
  return undefined;
}

main(process.argv.slice(2)).catch((e: unknown) => {
  const refusal = refusalOf(e);
  const line = refusal
    ? `kxm-hub: ${refusal.code}: ${refusal.message}\n`
    : `kxm-hub: internal_error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`;
  // Exit only once the line is out: stderr may be a pipe.
  process.exitCode = 1;
  process.stderr.write(line, () => process.exit(1));
});
