#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries are on this machine (Debian's `postgresql` package) for
# the throwaway clusters the tests start and stop themselves (test/fixtures/postgres.ts: initdb
# in a temp dir as the `postgres` user, a free port, removed afterwards). Installs nothing when
# the binaries are there.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
echo "setup-postgres: installing Debian's postgresql"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql
# The package may start a cluster of its own on 5432; the tests never use it.
$sudo service postgresql stop >/dev/null 2>&1 || true
