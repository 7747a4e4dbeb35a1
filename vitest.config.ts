import os from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Most files wait on sockets, child processes and disk syncs rather than on the CPU: two
    // files at a time even on two cores (vitest's default there is one) took the hub suites from
    // 13.6 to 9.7 minutes on this project's 2-core machine.
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    // KXM_TEST_STORE=postgres: the hub suites run on a throwaway PostgreSQL cluster.
    globalSetup: ["test/fixtures/build.global.ts", "test/fixtures/postgres.global.ts"],
  },
});
