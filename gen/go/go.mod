// The generated Go code (kxm/hub/v1, from scripts/generate.sh) as a module of its own. This
// file and go.sum are the only hand-written files in gen/go: a package manifest is allowed in
// gen/, code is not. The client library that builds on this module is clients/go.
module github.com/kxm-dev/kxm-hub/gen/go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/protobuf v1.36.12
)
