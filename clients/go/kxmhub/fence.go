package kxmhub

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
	"github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1/hubv1connect"
)

// FenceCheck is what a fencing token is for a lease, at the hub's clock. Valid is true only for
// Reason "current" (the live holder's current token). "superseded": a later grant exists;
// "expired": the current token of a lease that lapsed; "released": the current token of a
// released lease; "unknown": the hub never issued it for that lease of the project. Lease is the
// lease as it stands when someone holds it (for "current", "expired", and "superseded" while it
// is held), else nil.
type FenceCheck struct {
	Valid  bool
	Reason string
	Lease  *hubv1.Lease
}

var fenceReasons = map[hubv1.FenceReason]string{
	hubv1.FenceReason_FENCE_REASON_CURRENT:    "current",
	hubv1.FenceReason_FENCE_REASON_SUPERSEDED: "superseded",
	hubv1.FenceReason_FENCE_REASON_EXPIRED:    "expired",
	hubv1.FenceReason_FENCE_REASON_RELEASED:   "released",
	hubv1.FenceReason_FENCE_REASON_UNKNOWN:    "unknown",
}

// CheckFence asks the hub whether token is the live holder's current token for lease name: what
// a resource the lease protects checks before it accepts a write carrying the token. Accept the
// write only when Valid. Over a session's Leases client it checks the agent's own project; over a
// client that carries the project's token alone (a resource is not an agent), name the project
// in project ("" for the caller's own). The refusals are *Error (lease_token_required,
// protocol_error, invalid_auth).
func CheckFence(ctx context.Context, leases hubv1connect.LeaseServiceClient, name string, token int64, project string) (FenceCheck, error) {
	res, err := leases.CheckFence(ctx, connect.NewRequest(&hubv1.CheckFenceRequest{Name: name, FencingToken: &token, Project: project}))
	if err != nil {
		return FenceCheck{}, AsError(err)
	}
	reason, ok := fenceReasons[res.Msg.GetReason()]
	if !ok {
		return FenceCheck{}, &Error{Code: "unknown", Message: fmt.Sprintf("the hub answered an unknown fence reason %d", res.Msg.GetReason())}
	}
	return FenceCheck{Valid: res.Msg.GetValid() && reason == "current", Reason: reason, Lease: res.Msg.GetLease()}, nil
}

// CheckFence is CheckFence over the session's own client: a token for a lease of its project.
func (s *Session) CheckFence(ctx context.Context, name string, token int64) (FenceCheck, error) {
	return CheckFence(ctx, s.Leases, name, token, "")
}

// WithToken is the client option that sends token (the project's, or the admin token) as the
// bearer of every call: what a resource's own LeaseServiceClient needs to call CheckFence.
func WithToken(token string) connect.ClientOption {
	return connect.WithInterceptors(&credentials{token: token})
}
