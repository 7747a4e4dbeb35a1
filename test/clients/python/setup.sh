#!/usr/bin/env bash
# Makes the venv for the Python client tests (.venv-clients at the repo root) and installs the
# client into it the way a user would from a checkout (`pip install ./gen/python ./clients/python`:
# the generated package kxm-hub-proto and the library kxm-hub-client), plus pytest.
# Idempotent and quiet when already done: the pinned requirements are (re)installed only when
# requirements.txt, gen/python/pyproject.toml or clients/python/pyproject.toml changed; the two
# packages are re-installed on every run so the tests always exercise the current code.
# Installs from temp copies so no build byproducts land in gen/ or clients/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

VENV=.venv-clients
REQ=test/clients/python/requirements.txt
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

command -v python3 >/dev/null || { echo "setup.sh: python3 not found on PATH (need Python >= 3.11)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -R gen/python "$tmp/proto"
cp -R clients/python "$tmp/client"
rm -rf "$tmp"/{proto,client}/build "$tmp"/{proto,client}/*.egg-info

want="$(cat "$REQ" gen/python/pyproject.toml clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$PY" || "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
  echo "setup.sh: installing $REQ, ./gen/python and ./clients/python into $VENV" >&2
  [[ -x "$PY" ]] || python3 -m venv "$VENV"
  # Neither package installed first: a kxm-hub-client from before the split also shipped kxm/,
  # and uninstalling it after kxm-hub-proto is in would delete kxm-hub-proto's files.
  "${PIP[@]}" uninstall -y kxm-hub-client kxm-hub-proto 2>/dev/null || true
  # One resolution: the packages' declared dependencies must be satisfiable by the pins.
  "${PIP[@]}" install -r "$REQ" "$tmp/proto" "$tmp/client"
  echo "$want" >"$VENV/.requirements.sha256"
else
  # Dependencies are already pinned and present: just replace the packages with the current code.
  "${PIP[@]}" install --no-deps --no-build-isolation --force-reinstall "$tmp/proto" "$tmp/client"
fi
"${PIP[@]}" check >/dev/null || { "${PIP[@]}" check >&2; exit 1; }
