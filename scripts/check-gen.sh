#!/usr/bin/env bash
# Fails unless gen/ is exactly what scripts/generate.sh would produce now, the protos pass
# `buf lint`, the Go module in gen/go builds and vets, and the Python package in gen/python
# installs and imports, each with the client library on top of it (clients/go, clients/python).
# Regenerates into a temp dir; never writes to gen/ or clients/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/tools.sh
export PATH="$PWD/.tools/bin:$PWD/node_modules/.bin:$PATH"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "check-gen: buf lint"
buf lint

echo "check-gen: gen/ is fresh"
buf generate --output "$tmp"
# As scripts/generate.sh: the API's comments, from an image with source info (outside $tmp/gen).
buf build --path proto/kxm --as-file-descriptor-set -o "$tmp/kxm.binpb"
node scripts/proto-docs.mjs "$tmp/kxm.binpb" "$tmp/gen/ts/kxm/hub/v1/docs.ts"
# The only hand-written files in gen/, which generation does not produce: the packages'
# manifests. The client libraries are in clients/.
for f in gen/go/go.mod gen/go/go.sum gen/python/pyproject.toml; do
  cp "$f" "$tmp/$f"
done
# __pycache__, build, *.egg-info: gitignored byproducts of installing/importing gen/python.
skip=(-x __pycache__ -x build -x '*.egg-info')
if ! diff -rq "${skip[@]}" gen "$tmp/gen" >/dev/null; then
  echo "gen/ is stale: run npm run generate" >&2
  diff -rq "${skip[@]}" gen "$tmp/gen" | sed "s#$tmp/gen#(fresh)gen#g" >&2 || true
  diff -ru "${skip[@]}" gen "$tmp/gen" | sed "s#$tmp/gen#(fresh)gen#g" | head -n 40 >&2 || true
  exit 1
fi

echo "check-gen: go build + go vet (gen/go, clients/go)"
# Each module by its own go.mod (clients/go takes gen/go through its replace).
for m in gen/go clients/go; do
  (cd "$m" && GOFLAGS=-mod=readonly go build ./... && GOFLAGS=-mod=readonly go vet ./...)
done

echo "check-gen: pip install + import (gen/python, clients/python)"
# Installed from the temp copy of gen/python (identical to gen/python by now) and a copy of
# clients/python, so no build files land in gen/ or clients/.
mkdir -p "$tmp/clients"
cp -R clients/python "$tmp/clients/python"
rm -rf "$tmp/clients/python/build" "$tmp/clients/python"/*.egg-info
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --target "$tmp/site" "$tmp/gen/python" "$tmp/clients/python"
.venv/bin/python - "$tmp/site" <<'PY'
import ast, importlib, pathlib, sys
root = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(root))
mods = sorted([*root.glob("kxm/**/*.py"), *root.glob("kxmhub/*.py")])
for stub in root.glob("kxm/**/*.pyi"):
    ast.parse(stub.read_text(), str(stub))
for m in mods:
    importlib.import_module(".".join(m.relative_to(root).with_suffix("").parts))
assert any(m.name.endswith("_connect.py") for m in mods), "no Connect stubs installed"
print(f"check-gen: imported {len(mods)} Python modules")
PY
echo "check-gen: OK"
