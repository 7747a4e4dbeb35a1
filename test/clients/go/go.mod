module kxm-hub/test/clients/go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/kxm-dev/kxm-hub/clients/go v0.0.0
	github.com/kxm-dev/kxm-hub/gen/go v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab
	google.golang.org/protobuf v1.36.12
)

require google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c // indirect

// The generated client and the library are used straight from the repository's gen/go and
// clients/go, never from a registry (the library's own replace of gen/go counts only in its own
// builds, so this module names both).
replace (
	github.com/kxm-dev/kxm-hub/clients/go => ../../../clients/go
	github.com/kxm-dev/kxm-hub/gen/go => ../../../gen/go
)
