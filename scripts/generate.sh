#!/usr/bin/env bash
# Regenerates gen/ (TypeScript, Go, Python) from proto/ with the pinned tools from scripts/tools.sh.
# Only the generated trees are removed first; the hand-written files stay: gen/go/go.mod,
# gen/go/go.sum, gen/python/pyproject.toml and the client libraries gen/go/kxmhub, gen/python/kxmhub.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/tools.sh
export PATH="$PWD/.tools/bin:$PWD/node_modules/.bin:$PATH"
rm -rf gen/ts gen/go/kxm gen/python/kxm
buf generate
