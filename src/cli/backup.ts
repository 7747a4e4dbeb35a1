import { parseArgs } from "node:util";
import { systemClock } from "../clock.js";
import { argumentMessage, ConfigError, defaultConfig, flagHelp, isArgumentError, postgresUrl, redactedDatabaseUrl, type FlagDoc } from "../config.js";
import { backupTo, manifestPathOf, maxFenceMargin, restoreFrom } from "../store/sqlite/backup.js";
import { PostgresStore } from "../store/postgres/postgres-store.js";
import { hubVersion } from "./version.js";

/**
 * `kxm-hub backup` and `kxm-hub restore` (docs/operations.md, "Backup and restore"). The store does the work
 * (store/sqlite/backup.ts); this reads the flags and prints the outcome.
 */

/** Restore's default fence margin, after etcd's `snapshot restore --bump-revision`. */
export const defaultFenceMargin = 1_000_000;

const dataPathFlag: FlagDoc = {
  env: "KXM_DATA_PATH",
  value: "file",
  meaning: "the hub's SQLite file",
  default: defaultConfig.dataPath,
};

const backupFlags = {
  "data-path": { ...dataPathFlag, meaning: "the store to back up; the hub may be running on it" },
  out: {
    value: "file",
    meaning: "the backup file to write; <file>.manifest.json is written beside it; never overwritten (backup_exists)",
    default: "none, required",
  },
} satisfies Record<string, FlagDoc>;

const restoreFlags = {
  from: {
    value: "file",
    meaning: "the backup file; its <file>.manifest.json must be beside it and match (backup_corrupt)",
    default: "none, required",
  },
  "data-path": { ...dataPathFlag, meaning: "the store to replace; no hub may be running on it (runtime_store_locked)" },
  "bump-fence": {
    value: "n",
    meaning: `margin added to every resource's fencing-token floor, 1..${maxFenceMargin}; must exceed the grants made on one resource after the backup`,
    default: String(defaultFenceMargin),
  },
} satisfies Record<string, FlagDoc>;

const raiseFenceFlags = {
  "database-url": {
    env: "KXM_DATABASE_URL",
    value: "url",
    meaning: "postgres://user:password@host:port/database: the database a restore (pg_restore, point-in-time recovery) just brought back",
    default: "none, required",
  },
  "bump-fence": restoreFlags["bump-fence"],
} satisfies Record<string, FlagDoc>;

const helpText = (usage: string, what: string, table: Record<string, FlagDoc>) =>
  `${usage}\n\n${what}\n\n${flagHelp(table)}\n  --help, -h\n      this text`;

export const backupHelp = helpText(
  "Usage: kxm-hub backup --out <file> [--data-path <file>]",
  "Writes a consistent copy of the store, also while a hub is serving from it (a cp of the file\n" +
    "misses what is still in its -wal), and a manifest: sha256, schema and hub version, time, and\n" +
    "the highest fencing token of every resource.",
  backupFlags,
);

export const restoreHelp = helpText(
  "Usage: kxm-hub restore --from <file> [--data-path <file>] [--bump-fence <n>]",
  "Replaces the store with a backup, for a hub that is not running. Every resource's fence floor is\n" +
    "raised by the margin and every lease released, in one transaction, so the restored hub never\n" +
    "hands out a fencing token again (holders re-acquire and get a higher one).",
  restoreFlags,
);

export const raiseFenceHelp = helpText(
  "Usage: kxm-hub raise-fence --database-url <url> [--bump-fence <n>]",
  "For hubs on PostgreSQL, after the database was restored with PostgreSQL's own tools and before\n" +
    "any hub serves from it: what restore does to a SQLite file, in one transaction. Every\n" +
    "resource's fence floor is raised by the margin, every lease released, and every watch\n" +
    "stream's numbers raised, so no fencing token or watch cursor is ever handed out twice.",
  raiseFenceFlags,
);

/** Parses a subcommand's flags; `undefined` when --help was asked for (after printing it). */
function parse(argv: string[], table: Record<string, FlagDoc>, help: string): Record<string, string | undefined> | undefined {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        ...Object.fromEntries(Object.keys(table).map((f) => [f, { type: "string" as const }])),
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (e) {
    if (isArgumentError(e)) throw new ConfigError("invalid_config", argumentMessage(e));
    throw e;
  }
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return undefined;
  }
  const out: Record<string, string | undefined> = {};
  for (const [flag, doc] of Object.entries(table)) {
    const v = (values[flag] as string | undefined) ?? (doc.env ? process.env[doc.env] : undefined);
    out[flag] = v === undefined || v.trim() === "" ? undefined : v.trim();
  }
  return out;
}

const required = (value: string | undefined, flag: string) => {
  if (value === undefined) throw new ConfigError("invalid_config", `--${flag} is required`);
  return value;
};

/** backup and restore copy a SQLite file; hubs on PostgreSQL are backed up with its own tools. */
function refusePostgres(command: string): void {
  if (process.env.KXM_DATABASE_URL?.trim()) {
    throw new ConfigError(
      "invalid_config",
      `KXM_DATABASE_URL is set: this hub stores in PostgreSQL, which kxm-hub ${command} does not copy; ` +
        "use pg_dump / pg_restore, then kxm-hub raise-fence (docs/operations.md, Backup and restore)",
    );
  }
}

function fenceMargin(raw: string | undefined): number {
  const margin = raw === undefined ? defaultFenceMargin : Number(raw);
  if (raw !== undefined && (!/^\d+$/.test(raw) || margin < 1 || margin > maxFenceMargin)) {
    throw new ConfigError("invalid_config", `--bump-fence must be an integer in 1..${maxFenceMargin}`);
  }
  return margin;
}

/** `kxm-hub backup`: throws ConfigError, StoreOpenError, BackupError. */
export async function backupCommand(argv: string[]): Promise<void> {
  const flags = parse(argv, backupFlags, backupHelp);
  if (!flags) return;
  refusePostgres("backup");
  const out = required(flags.out, "out");
  const dataPath = flags["data-path"] ?? defaultConfig.dataPath;
  const startMs = performance.now();
  const m = await backupTo(dataPath, out, { hubVersion: hubVersion(), nowMs: systemClock.now() });
  const tookMs = Math.round(performance.now() - startMs);
  process.stdout.write(
    `backup of ${dataPath} written to ${out} (${m.bytes} bytes, schema ${m.schemaVersion}, ` +
      `${m.fences.length} resources, sha256 ${m.sha256}) in ${tookMs} ms; manifest ${manifestPathOf(out)}\n`,
  );
}

/** `kxm-hub restore`: throws ConfigError, StoreOpenError, BackupError. */
export async function restoreCommand(argv: string[]): Promise<void> {
  const flags = parse(argv, restoreFlags, restoreHelp);
  if (!flags) return;
  refusePostgres("restore");
  const from = required(flags.from, "from");
  const dataPath = flags["data-path"] ?? defaultConfig.dataPath;
  const margin = fenceMargin(flags["bump-fence"]);
  const r = restoreFrom({ from, dataPath, margin });
  process.stdout.write(
    `restored ${from} into ${dataPath}: schema ${r.schemaVersion}, ${r.resources} resources; every fence raised by ` +
      `${r.margin} (highest token in the backup ${r.highestTokenBefore}, unleased resources start above ${r.fenceBase}); ` +
      `${r.leasesReleased} leases released\n`,
  );
}

/** `kxm-hub raise-fence`: throws ConfigError, StoreOpenError (the database cannot be reached, a newer schema). */
export async function raiseFenceCommand(argv: string[]): Promise<void> {
  const flags = parse(argv, raiseFenceFlags, raiseFenceHelp);
  if (!flags) return;
  const url = postgresUrl(required(flags["database-url"], "database-url"));
  const margin = fenceMargin(flags["bump-fence"]);
  const store = await PostgresStore.open({ url, poolSize: 2 });
  try {
    const r = await store.raiseFence(margin).catch((e: unknown) => {
      // A token so high that the margin above it would pass 2^53: no margin is applied.
      throw e instanceof RangeError ? new ConfigError("invalid_config", e.message) : e;
    });
    process.stdout.write(
      `raised the fence of ${redactedDatabaseUrl(url)} by ${margin}: ${r.resources} resources (highest token before ` +
        `${r.highestTokenBefore}, unleased resources start above ${r.fenceBase}); ${r.leasesReleased} leases released; ` +
        "watch cursors from before are cursor_expired\n",
    );
  } finally {
    await store.close();
  }
}
