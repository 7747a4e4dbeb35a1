module github.com/kxm-dev/kxm-hub/gen/go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/protobuf v1.36.12
)

require google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab // indirect
