package scenario

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
	"github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1/hubv1connect"
)

// A resource checks the token a writer presents (kxmhub.CheckFence): the session's own check, and
// a resource's client that carries the project's token alone and names the project.
func TestLibraryCheckFenceSaysWhatATokenIs(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	s := open(t, e, clock, "fenced")
	name := "lib-fence-" + randomHex(4)
	held, err := s.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	own, err := s.CheckFence(within(t), name, held.Token)
	if err != nil || !own.Valid || own.Reason != "current" || own.Lease.GetFencingToken() != held.Token || own.Lease.GetHolderAgentName() != s.Agent.GetName() {
		t.Fatalf("the holder's token: %+v, %v", own, err)
	}
	resource := hubv1connect.NewLeaseServiceClient(http.DefaultClient, e.hubURL, kxmhub.WithToken(e.token))
	check := func(token int64) kxmhub.FenceCheck {
		t.Helper()
		c, err := kxmhub.CheckFence(within(t), resource, name, token, project)
		if err != nil {
			t.Fatalf("check %d: %v", token, err)
		}
		return c
	}
	if c := check(held.Token); !c.Valid || c.Reason != "current" {
		t.Fatalf("the resource's check of the holder's token: %+v", c)
	}
	if c := check(held.Token + 1); c.Valid || c.Reason != "unknown" || c.Lease != nil {
		t.Fatalf("a token never issued: %+v", c)
	}
	if err := held.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	if c := check(held.Token); c.Valid || c.Reason != "released" || c.Lease != nil {
		t.Fatalf("a released lease's token: %+v", c)
	}
	// Taken again through the generated client, so that no renewal keeps it past its TTL.
	ttl := int32(6_000)
	res, err := s.Leases.AcquireLease(within(t), connect.NewRequest(&hubv1.AcquireLeaseRequest{Name: name, TtlMs: &ttl}))
	if err != nil {
		t.Fatal(err)
	}
	again := res.Msg.GetLease().GetFencingToken()
	if c := check(held.Token); c.Valid || c.Reason != "superseded" || c.Lease.GetFencingToken() != again {
		t.Fatalf("the earlier token after a new grant: %+v", c)
	}
	clock.advance(t, 6*time.Second)
	if c := check(again); c.Valid || c.Reason != "expired" {
		t.Fatalf("the current token of a lapsed lease: %+v", c)
	}
	_, err = s.CheckFence(within(t), name, 0)
	if !errors.Is(err, &kxmhub.Error{Code: "protocol_error"}) {
		t.Fatalf("token 0: %v", err)
	}
}

// An agent holds a lease once: a second Acquire of it (the hub renews its own lease) is refused
// with lease_held, and the first holder keeps it.
func TestLibrarySecondAcquireOfAHeldLeaseIsRefused(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	s := open(t, e, clock, "twice")
	name := "lib-twice-" + randomHex(4)
	held, err := s.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []kxmhub.AcquireOptions{{TTL: 6 * time.Second}, {TTL: 6 * time.Second, Wait: 5 * time.Second}} {
		_, err := s.Acquire(within(t), name, o)
		var he *kxmhub.Error
		if !errors.As(err, &he) || he.Code != "lease_held" || he.Lease.GetFencingToken() != held.Token {
			t.Fatalf("a second Acquire (%+v): %v", o, err)
		}
	}
	select {
	case <-held.Lost():
		t.Fatalf("the first holder lost the lease: %v", held.Err())
	default:
	}
	if err := held.Release(within(t)); err != nil {
		t.Fatal(err)
	}
}
