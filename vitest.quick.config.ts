import { defineConfig } from "vitest/config";
import base from "./vitest.config.ts";

/**
 * `npm run test:quick`: the inner loop. The pure rules (test/unit) and the hub's own suites that
 * run in this process against an in-memory SQLite hub: no child process, toolchain, browser,
 * openssl or PostgreSQL, and none of the few suites that take many seconds by design. About a
 * minute on a 2-core machine; `npm test` (scripts/test.sh) still runs everything.
 */
export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: [
      "test/unit/**/*.test.ts",
      "test/{architecture,errors,auth,lease,mcp,ops,peer,presence,server,store,sync,transcode,wire}/**/*.test.ts",
    ],
    exclude: [
      // Long by design: every method x caller x face (about 3,000 cases, two minutes).
      "test/auth/matrix.*.test.ts",
      // Child processes (the CLI, a hub killed mid-write, a second process on the store).
      "test/auth/project-tokens.test.ts",
      "test/lease/lease.crash.test.ts",
      "test/ops/log-level.test.ts",
      "test/server/shutdown.child.test.ts",
      "test/store/group-commit.test.ts",
      "test/store/group-commit.crash.test.ts",
      "test/store/schema.test.ts",
      "test/sync/durability.test.ts",
      // PostgreSQL clusters.
      "test/store/postgres.test.ts",
      "test/store/store.postgres.test.ts",
      // Seconds each for what the unit tables and the lease suites already cover at small scale:
      // 50-agent races, 256 KiB bodies over every protocol, counters over 100 calls per protocol,
      // every operator hand over every protocol.
      "test/lease/lease.race.test.ts",
      "test/server/limits.test.ts",
      "test/ops/lease-metrics.test.ts",
      "test/ops/hands.test.ts",
    ],
    // One project, one module cache per worker (as the base config's "hub" project).
    projects: undefined,
    isolate: false,
    // The quick loop is SQLite only, whatever the shell exports: no PostgreSQL cluster starts
    // (the base config's global setup does when KXM_TEST_STORE=postgres). The build is made, for
    // the test of its sync worker.
    globalSetup: ["test/fixtures/build.global.ts"],
    env: { ...base.test?.env, KXM_TEST_STORE: "", KXM_TEST_POSTGRES_URL: "" },
  },
});
