#!/usr/bin/env bash
# Makes the venv for the Python client tests (.venv-clients at the repo root) and installs the
# generated client package into it the way a user would (`pip install ./gen/python`), plus pytest.
# Idempotent and quiet when already done: the pinned requirements are (re)installed only when
# requirements.txt or gen/python/pyproject.toml changed; the package itself is re-installed on
# every run so the tests always exercise the current gen/python.
# Installs from a temp copy of gen/python so no build byproducts land in gen/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

VENV=.venv-clients
REQ=test/clients/python/requirements.txt
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

command -v python3 >/dev/null || { echo "setup.sh: python3 not found on PATH (need Python >= 3.11)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -R gen/python "$tmp/python"
rm -rf "$tmp/python/build" "$tmp/python"/*.egg-info

want="$(cat "$REQ" gen/python/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$PY" || "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
  echo "setup.sh: installing $REQ and ./gen/python into $VENV" >&2
  [[ -x "$PY" ]] || python3 -m venv "$VENV"
  # One resolution: the package's declared dependencies must be satisfiable by the pins.
  "${PIP[@]}" install -r "$REQ" "$tmp/python"
  echo "$want" >"$VENV/.requirements.sha256"
else
  # Dependencies are already pinned and present: just replace the package with the current code.
  "${PIP[@]}" install --no-deps --no-build-isolation --force-reinstall "$tmp/python"
fi
"${PIP[@]}" check >/dev/null || { "${PIP[@]}" check >&2; exit 1; }
