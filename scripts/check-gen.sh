#!/usr/bin/env bash
# Fails unless gen/ is exactly what scripts/generate.sh would produce now, the protos pass
# `buf lint`, the Go module in gen/go builds and vets, and the Python package in gen/python
# installs and imports. Regenerates into a temp dir; never writes to gen/.
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
# Hand-written files in gen/ that generation does not produce: the modules' manifests and the
# client libraries beside the generated code (gen/go/kxmhub, gen/python/kxmhub).
for f in gen/go/go.mod gen/go/go.sum gen/python/pyproject.toml; do
  cp "$f" "$tmp/$f"
done
cp -R gen/go/kxmhub "$tmp/gen/go/kxmhub"
mkdir -p "$tmp/gen/python"
(cd gen/python && find kxmhub -name '*.py' -print0 | xargs -0 -I{} cp --parents {} "$tmp/gen/python/")
# __pycache__, build, *.egg-info: gitignored byproducts of installing/importing gen/python.
skip=(-x __pycache__ -x build -x '*.egg-info')
if ! diff -rq "${skip[@]}" gen "$tmp/gen" >/dev/null; then
  echo "gen/ is stale: run npm run generate" >&2
  diff -rq "${skip[@]}" gen "$tmp/gen" | sed "s#$tmp/gen#(fresh)gen#g" >&2 || true
  diff -ru "${skip[@]}" gen "$tmp/gen" | sed "s#$tmp/gen#(fresh)gen#g" | head -n 40 >&2 || true
  exit 1
fi

echo "check-gen: go build + go vet (gen/go)"
(cd gen/go && GOFLAGS=-mod=readonly go build ./... && GOFLAGS=-mod=readonly go vet ./...)

echo "check-gen: pip install + import (gen/python)"
# Installed from the temp copy (identical to gen/python by now) so no build files land in gen/.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --target "$tmp/site" "$tmp/gen/python"
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
