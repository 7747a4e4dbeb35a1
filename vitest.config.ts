import os from "node:os";
import { defineConfig } from "vitest/config";

/**
 * Files that run each in a module graph of their own: the fuzz suites read their settings from the
 * environment when they load (tls.fuzz.test.ts sets FUZZ_TLS and loads the others again), and the
 * client checks start toolchains and a browser beside the hub.
 */
const isolated = ["test/fuzz/**/*.test.ts", "test/clients/**/*.test.ts"];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Most files wait on sockets, child processes and disk syncs rather than on the CPU: two
    // files at a time even on two cores (vitest's default there is one) took the hub suites from
    // 13.6 to 9.7 minutes on this project's 2-core machine.
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    // The build the `kxm-hub` command runs (D52); KXM_TEST_STORE=postgres: the hub suites run on a
    // throwaway PostgreSQL cluster.
    globalSetup: ["test/fixtures/build.global.ts", "test/fixtures/postgres.global.ts"],
    projects: [
      // One module cache per worker for all its files: the hub's modules load once per worker
      // instead of once per file (the SQLite pass went from 9.4 to 5.8 minutes). Each test builds
      // its own hub (startTestHub), so nothing else is shared between files.
      // Not on PostgreSQL (KXM_TEST_STORE=postgres): there the shared workers took a minute to stop
      // at the end of the pass, which ate what the shared cache saved.
      { extends: true, test: { name: "hub", include: ["test/**/*.test.ts"], exclude: isolated, isolate: process.env.KXM_TEST_STORE === "postgres" } },
      { extends: true, test: { name: "isolated", include: isolated } },
    ],
  },
});
