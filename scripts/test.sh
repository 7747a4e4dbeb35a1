#!/usr/bin/env bash
# Every check of the project, in order: generated code fresh and lint-clean (buf lint, Go build,
# Python import), TypeScript type-check, the vitest suites of the hub (with PostgreSQL's server
# binaries, installed when missing by scripts/setup-postgres.sh: the PostgreSQL suites start and
# stop throwaway clusters of their own), the RPC suites again with every call through connect's
# own handlers (KXM_TEST_WIRE=connect), then the client checks
# (TypeScript, Go, Python, browser, buf curl) one file at a time in two lanes, since they start
# toolchains and a browser beside the hub; last, the hub's suites once more on Node 22. All of it
# runs on Node 24, whatever Node the machine has. Installs what it needs itself (scripts/node.sh,
# scripts/tools.sh, scripts/setup-browser.sh, test/clients/python/setup.sh); `npm ci` must have run
# first (the README's test command does it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ "${KXM_NODE_LINE:-}" == 24 ]] || exec bash scripts/node.sh 24 -- bash scripts/test.sh "$@"
export PATH="$PWD/node_modules/.bin:$PATH"
echo "test: Node $(node --version)"

bash scripts/check-gen.sh
bash scripts/setup-postgres.sh

echo "test: tsc --noEmit"
tsc --noEmit -p tsconfig.json
tsc --noEmit -p ui/tsconfig.json

mkdir -p .kxm
status=0
vitest run --exclude 'test/clients/**' --reporter=default --reporter=json --outputFile=.kxm/vitest-hub.json "$@" || status=$?
# The hub's suites once more with every test hub on PostgreSQL (a database each, on one throwaway
# cluster: test/fixtures/postgres.global.ts); the store contract runs on both in the pass above.
# The MCP face, the REST transcoding and the fuzz suites that reach the store through a face
# (REST, RPC, MCP) come too: hostile input must get its typed refusal on PostgreSQL as well, whose
# text refuses what SQLite takes.
KXM_TEST_STORE=postgres vitest run test/lease test/presence test/peer test/sync test/server test/auth test/ops \
  test/mcp test/transcode test/fuzz/rest.fuzz.test.ts test/fuzz/rpc.fuzz.test.ts test/fuzz/mcp.fuzz.test.ts \
  --reporter=default --reporter=json --outputFile=.kxm/vitest-hub-postgres.json "$@" || status=$?
# The RPC suites once more with every call through connect's own handlers (config `wire`): the
# in-process fast path for plain Connect calls (src/wire) must not be what makes them pass.
# test/fuzz/differential.fuzz.test.ts, in the first pass, holds the two paths to the same bytes.
KXM_TEST_WIRE=connect vitest run test/server test/lease/lease.rpc.test.ts test/peer/peer.rpc.test.ts \
  test/presence/presence.rpc.test.ts test/peer/subscribe.test.ts test/lease/watch.test.ts test/presence/watch.test.ts \
  --reporter=default --reporter=json --outputFile=.kxm/vitest-hub-connect.json "$@" || status=$?
# The client checks, one file at a time in each of two lanes side by side: the lane that shares
# the Python venv (test/clients/python/setup.sh reinstalls into it) and the Chromium install, and
# the lane of the Go and TypeScript checks. The first lane's output is printed when both are done.
lane_python_browser=(test/clients/python.test.ts test/clients/mcp.test.ts test/clients/browser.test.ts test/clients/operator-page.test.ts)
vitest run "${lane_python_browser[@]}" --no-file-parallelism --reporter=default --reporter=json \
  --outputFile=.kxm/vitest-clients-python-browser.json "$@" >.kxm/clients-python-browser.log 2>&1 &
lane=$!
vitest run test/clients "${lane_python_browser[@]/#/--exclude=}" --no-file-parallelism \
  --reporter=default --reporter=json --outputFile=.kxm/vitest-clients.json "$@" || status=$?
wait "$lane" || status=$?
cat .kxm/clients-python-browser.log
# The hub's suites (SQLite) on Node 22, the older line package.json's `engines` allows.
bash scripts/node.sh 22 -- vitest run --project hub --reporter=default --reporter=json \
  --outputFile=.kxm/vitest-hub-node22.json "$@" || status=$?
node -e '
  const fs = require("fs");
  let passed = 0, failed = 0, skipped = 0;
  const failures = [];
  const firstLine = (text) => String(text ?? "").split("\n").find((l) => l.trim() !== "")?.slice(0, 300) ?? "";
  for (const f of [".kxm/vitest-hub.json", ".kxm/vitest-hub-postgres.json", ".kxm/vitest-hub-connect.json", ".kxm/vitest-clients.json", ".kxm/vitest-clients-python-browser.json", ".kxm/vitest-hub-node22.json"]) {
    if (!fs.existsSync(f)) { failed++; console.log(`missing report ${f}`); continue; }
    const r = JSON.parse(fs.readFileSync(f, "utf8"));
    passed += r.numPassedTests; failed += r.numFailedTests; skipped += r.numPendingTests + r.numTodoTests;
    if (!r.success && r.numFailedTests === 0) failed++;
    // What failed, again at the very end: often only the tail of a run is kept.
    for (const file of r.testResults ?? []) {
      const name = file.name.replace(process.cwd() + "/", "");
      const failing = (file.assertionResults ?? []).filter((a) => a.status === "failed");
      if (file.status === "failed" && failing.length === 0) failures.push(`${f}: ${name}: ${firstLine(file.message)}`);
      for (const a of failing) failures.push(`${f}: ${name} > ${a.fullName}: ${firstLine(a.failureMessages?.[0])}`);
    }
  }
  for (const line of failures) console.log(`failed: ${line}`);
  console.log(`vitest: ${passed} passed, ${failed} failed, ${skipped} skipped`);
' || true
exit "$status"
