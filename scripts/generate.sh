#!/usr/bin/env bash
# Regenerates gen/ (TypeScript, Go, Python) from proto/ with the pinned tools from scripts/tools.sh.
# Only the generated trees are removed first; the packages' manifests, the one hand-written kind
# of file in gen/, stay: gen/go/go.mod, gen/go/go.sum, gen/python/pyproject.toml. The client
# libraries on the generated code are in clients/ and are not touched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/tools.sh
export PATH="$PWD/.tools/bin:$PWD/node_modules/.bin:$PATH"
rm -rf gen/ts gen/go/kxm gen/python/kxm
buf generate
# The API's comments for code that reads them at run time (the MCP face's tool descriptions):
# generated descriptors carry none, so scripts/proto-docs.mjs writes them from an image with
# source info to gen/ts/kxm/hub/v1/docs.ts. scripts/check-gen.sh runs the same two steps.
img="$(mktemp -d)"
trap 'rm -rf "$img"' EXIT
buf build --path proto/kxm --as-file-descriptor-set -o "$img/kxm.binpb"
node scripts/proto-docs.mjs "$img/kxm.binpb" gen/ts/kxm/hub/v1/docs.ts
