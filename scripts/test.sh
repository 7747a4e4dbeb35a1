#!/usr/bin/env bash
# Every check of the project, in order: generated code fresh and lint-clean (buf lint, Go build,
# Python import), TypeScript type-check, then the vitest suites. Installs the pinned generator
# tools itself (scripts/tools.sh); `npm ci` must have run (the README's test command does it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PWD/node_modules/.bin:$PATH"

bash scripts/check-gen.sh

echo "test: tsc --noEmit"
tsc --noEmit -p tsconfig.json

mkdir -p .kxm
status=0
vitest run --reporter=default --reporter=json --outputFile=.kxm/vitest-report.json "$@" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(".kxm/vitest-report.json", "utf8"));
  console.log(`vitest: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests + r.numTodoTests} skipped`);
' || true
exit "$status"
