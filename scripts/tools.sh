#!/usr/bin/env bash
# Installs the pinned code generators into the repo (idempotent, quiet when up to date):
#   .tools/bin/protoc-gen-go, .tools/bin/protoc-gen-connect-go   (go install, pinned below)
#   .venv with scripts/requirements-tools.txt                      (protoc, protoc-gen-connectrpc, runtimes)
#   .tools/bin/protoc                  wrapper around the venv's grpc_tools.protoc (buf protoc_builtin)
#   .tools/bin/protoc-gen-connectrpc   link to the venv's console script
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROTOC_GEN_GO_VERSION=v1.36.12        # google.golang.org/protobuf
CONNECT_GO_VERSION=v1.21.1            # connectrpc.com/connect

BIN="$PWD/.tools/bin"
mkdir -p "$BIN"

# go_tool NAME PACKAGE VERSION: go install unless the binary already reports VERSION
# (both print it with --version: "protoc-gen-go v1.36.12", "1.21.1").
go_tool() {
  local name=$1 pkg=$2 version=$3 have
  have="$("$BIN/$name" --version 2>/dev/null || true)"
  have="${have##* }"
  if [[ "${have#v}" == "${version#v}" ]]; then return; fi
  echo "tools.sh: installing $name $version" >&2
  GOBIN="$BIN" go install "$pkg@$version"
}
go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
go_tool protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go "$CONNECT_GO_VERSION"

# Python venv, rebuilt when the requirements file changes.
REQ=scripts/requirements-tools.txt
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x .venv/bin/python || "$(cat .venv/.requirements.sha256 2>/dev/null)" != "$want" ]]; then
  echo "tools.sh: installing Python tools into .venv" >&2
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$REQ"
  echo "$want" >.venv/.requirements.sha256
fi

# protoc for buf's protoc_builtin plugins (python, pyi): the one bundled with grpcio-tools.
cat >"$BIN/protoc" <<'SH'
#!/bin/sh
# protoc from the grpcio-tools wheel in the repo's .venv (written by scripts/tools.sh).
exec "$(dirname "$0")/../../.venv/bin/python" -m grpc_tools.protoc "$@"
SH
chmod +x "$BIN/protoc"
ln -sfn ../../.venv/bin/protoc-gen-connectrpc "$BIN/protoc-gen-connectrpc"
