#!/usr/bin/env bash
# Installs Debian's Chromium for the browser client test (test/clients/browser.test.ts).
# Idempotent: does nothing when /usr/bin/chromium exists. Needs root (or sudo) on first run.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [[ ! -x "$CHROMIUM" ]]; then
  SUDO=""
  if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi
  echo "setup-browser: installing chromium from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

if [[ ! -x "$CHROMIUM" ]]; then
  echo "setup-browser: $CHROMIUM not found after install" >&2
  exit 1
fi

# Debian's launcher script prints a harmless "[: unexpected operator" on machines where /dev/shm
# shows up as two mounts; keep stdout (the version) only.
"$CHROMIUM" --version 2>/dev/null || { echo "setup-browser: $CHROMIUM --version failed" >&2; exit 1; }
