package scenario

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// Options.Takeover: a restarted agent replaces its instance still marked online at once.

// expectCode checks the code of a library error or of a generated client's refusal.
func expectCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if herr := kxmhub.AsError(err); herr == nil || herr.Code != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

func TestLibraryTakeoverRestartsAnAgentAtOnce(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	opts := kxmhub.Options{
		URL: e.hubURL, Token: e.token, Project: project, Name: "phoenix-" + randomHex(4),
		HeartbeatEvery: 10 * time.Second, Clock: clock,
	}
	old, err := kxmhub.Connect(within(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close(context.Background()) })
	name := "lib-takeover-" + randomHex(4)
	// Renewed only every 100 s: its loss below comes with the session's, not from a renewal.
	held, err := old.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 300 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The old instance reads its inbox: its stream is open (asleep on the hub clock).
	base := hubSleepers(t, e.controlURL)
	inboxCtx, stopInbox := context.WithCancel(context.Background())
	t.Cleanup(stopInbox)
	inboxEnd := make(chan error, 1)
	go func() {
		for _, err := range old.Inbox(inboxCtx, nil) {
			if err != nil {
				inboxEnd <- err
				return
			}
		}
		inboxEnd <- nil
	}()
	eventually(t, "the old inbox open", func() bool { return hubSleepers(t, e.controlURL) >= base+1 })

	_, err = kxmhub.Connect(within(t), opts)
	expectCode(t, "a second instance without takeover", err, "duplicate_agent_name")

	opts.Takeover = true
	newer, err := kxmhub.Connect(within(t), opts)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	t.Cleanup(func() { _ = newer.Close(context.Background()) })
	if !newer.TakenOver || newer.Agent.GetId() != old.Agent.GetId() || fmt.Sprint(newer.ReleasedLeases) != fmt.Sprint([]string{name}) {
		t.Fatalf("takeover: taken over %v, id %s (was %s), released %v", newer.TakenOver, newer.Agent.GetId(), old.Agent.GetId(), newer.ReleasedLeases)
	}

	// The old instance is refused at once: its calls, its stream, then its renewals and heartbeat.
	_, err = old.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
	expectCode(t, "the old instance's call", err, "invalid_agent_identity")
	select {
	case err := <-inboxEnd:
		expectCode(t, "the old instance's inbox", err, "invalid_agent_identity")
	case <-time.After(waitTimeout):
		t.Fatal("the old instance's inbox stream did not end")
	}
	eventually(t, "heartbeats and keeper asleep", func() bool { return clock.sleepers() >= 3 })
	clock.advance(t, 10*time.Second)
	for what, done := range map[string]<-chan struct{}{"lease": held.Lost(), "session": old.Done()} {
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Fatalf("the old instance's %s was not lost", what)
		}
	}
	expectCode(t, "the old lease's loss", held.Err(), "invalid_agent_identity")
	expectCode(t, "the old session's loss", old.Err(), "invalid_agent_identity")

	// The lease was released with its token kept as the floor: the old token never works again
	// and every later grant is higher.
	renew := func(token int64) error {
		_, err := newer.Leases.RenewLease(within(t), connect.NewRequest(&hubv1.RenewLeaseRequest{Name: name, FencingToken: &token}))
		return err
	}
	expectCode(t, "renewing the old token after the takeover", renew(held.Token), "lease_not_found")
	again, err := newer.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil || again.Token <= held.Token {
		t.Fatalf("the new instance's grant: %v %v, want a token above %d", again, err, held.Token)
	}
	expectCode(t, "renewing the old token after the new grant", renew(held.Token), "lease_superseded")
	if err := again.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	other := open(t, e, clock, "other")
	next, err := other.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil || next.Token <= again.Token {
		t.Fatalf("the next grant: %v %v, want a token above %d", next, err, again.Token)
	}
}
