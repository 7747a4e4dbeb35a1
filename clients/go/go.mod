// The Go client library (package kxmhub) over the generated code, which is its own module in
// gen/go. Two modules, so that gen/ holds only generated code and a manifest.
//
// The require names the generated module by its real path, so a user's `go get
// github.com/kxm-dev/kxm-hub/clients/go@<version>` resolves it like any dependency once both
// modules are tagged (gen/go/vX.Y.Z, clients/go/vX.Y.Z, released together with the require
// below raised to the gen/go tag). The replace applies only when this module is the main
// module (building or testing it in this repository) and is ignored in a user's build: here the
// library always builds against the checkout's gen/go, never against a published copy. Until the
// modules are published a user replaces both (see README.md).
module github.com/kxm-dev/kxm-hub/clients/go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/kxm-dev/kxm-hub/gen/go v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab
)

require (
	google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/kxm-dev/kxm-hub/gen/go => ../../gen/go
