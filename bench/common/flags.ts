/**
 * What every bench runner does with its parsed flags: `--help` prints the usage and exits 0; a
 * bad value prints what is wrong and the usage, and exits 2; numbers are read with a lower bound.
 */
export function flagReaders<F extends { help?: boolean } & Record<string, unknown>>(flags: F, usage: string) {
  if (flags.help) {
    console.log(usage);
    process.exit(0);
  }
  function fail(msg: string): never {
    console.error(`${msg}\n${usage}`);
    process.exit(2);
  }
  const num = (name: keyof F & string, min: number) => {
    const n = Number(flags[name]);
    if (!Number.isFinite(n) || n < min) fail(`--${name} must be a number >= ${min}`);
    return n;
  };
  const int = (name: keyof F & string, min: number) => Math.floor(num(name, min));
  return { fail, num, int };
}

/**
 * Runs a bench runner's `main`: prints the total time and exits 0, or prints the failure, runs
 * the cleanup that is set by then (hub stopped, temp dir removed) and exits 1.
 */
export function runBench(main: () => Promise<void>, cleanup: () => (() => Promise<void>) | undefined): void {
  const started = Date.now();
  main().then(
    () => {
      console.log(`total ${((Date.now() - started) / 1_000).toFixed(1)} s`);
      process.exit(0);
    },
    async (e: unknown) => {
      console.error(e);
      await cleanup()?.().catch(() => {});
      process.exit(1);
    },
  );
}
