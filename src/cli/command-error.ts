/**
 * A command that ends without doing what it was asked, with the exit code that says why. main.ts
 * prints `kxm-hub: <code>: <message>` on stderr and exits with `exitCode`; the hub's own start-up
 * refusals (ConfigError, StoreOpenError, BackupError) exit 1 the same way.
 */
export class CommandError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode: number,
    /** What the hub answered, when it refused (printed by `--json`). */
    readonly answer?: unknown,
  ) {
    super(message);
    this.name = "CommandError";
  }
}

/** The ops commands' exit codes (kxm-hub ops --help). */
export const exitCodes = { refused: 1, usage: 2, unreachable: 3 } as const;

/** A command line the command does not accept: exit 2. */
export const usageError = (message: string) => new CommandError("usage_error", message, exitCodes.usage);

/** Writes to stdout and resolves once it is out (stdout may be a pipe a hook's caller reads). */
export const write = (text: string) => new Promise<void>((resolve) => process.stdout.write(text, () => resolve()));
