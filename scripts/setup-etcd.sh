#!/usr/bin/env bash
# Makes sure etcd (Debian's etcd-server, with etcdctl from etcd-client) is on this machine for the
# lease comparison (`npm run bench:etcd`, ../shared/bench/lease-compare.mjs), which starts and
# stops its own single-node etcd in a temp dir. Installs nothing when `etcd` is on PATH.
set -euo pipefail
if command -v etcd >/dev/null; then
  exit 0
fi
echo "setup-etcd: installing Debian's etcd-server and etcd-client"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server etcd-client
# The package may start a service of its own on 2379; the comparison never uses it.
$sudo service etcd stop >/dev/null 2>&1 || true
