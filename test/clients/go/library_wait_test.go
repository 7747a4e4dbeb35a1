package scenario

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// A lease granted after a wait in its queue longer than its TTL: the library counts its validity
// from the grant (send time + the hub's waited_ms), not from when the acquire was sent.

const waitTTL = 6 * time.Second

// grantAfterALongWait has a holder keep the lease for 16 s of hub time (more than twice waitTTL)
// while the waiter's acquire (Wait 60 s) waits in the queue, then release it: the waiter's lease
// as granted. The holder's clock is its own (moved alongside the hub's), so the waiter's clock
// counts the waiter's timers only.
func grantAfterALongWait(t *testing.T, e env, wc *testClock, waiter *kxmhub.Session, name string) *kxmhub.Lease {
	t.Helper()
	hc := newTestClock("")
	holder := open(t, e, hc, "holder")
	held, err := holder.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: waitTTL})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *kxmhub.Lease
		err error
	}
	granted := make(chan result, 1)
	base := hubSleepers(t, e.controlURL)
	go func() {
		l, err := waiter.Acquire(context.Background(), name, kxmhub.AcquireOptions{TTL: waitTTL, Wait: time.Minute})
		granted <- result{l, err}
	}()
	eventually(t, "the waiter queued", func() bool { return hubSleepers(t, e.controlURL) >= base+1 })
	for kept := time.Duration(0); kept < 16*time.Second; kept += 2 * time.Second {
		eventually(t, "the holder's keeper asleep", func() bool { return hc.sleepers() >= 2 }) // keeper + heartbeat
		hc.advance(t, 2*time.Second)
		wc.advance(t, 2*time.Second)
	}
	eventually(t, "the holder's keeper asleep", func() bool { return hc.sleepers() >= 2 })
	select {
	case r := <-granted:
		t.Fatalf("granted while the holder still held it: %v %v", r.l, r.err)
	default:
	}
	if err := held.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-granted:
	case <-time.After(waitTimeout):
		t.Fatal("the waiter was not granted the released lease")
	}
	if r.err != nil || r.l.Token != held.Token+1 || r.l.Lease().GetHolderAgentName() != waiter.Agent.GetName() {
		t.Fatalf("the waiter's grant: %v %v", r.l, r.err)
	}
	return r.l
}

// keeperAsleep waits until the lease's keeper sleeps on the clock (keeper + heartbeat), failing
// at once if the lease is lost instead.
func keeperAsleep(t *testing.T, clock *testClock, l *kxmhub.Lease, when string) {
	t.Helper()
	lost := func() bool {
		select {
		case <-l.Lost():
			return true
		default:
			return false
		}
	}
	eventually(t, "the keeper asleep "+when, func() bool { return lost() || clock.sleepers() >= 2 })
	if lost() {
		t.Fatalf("lost %s: %v", when, l.Err())
	}
}

func TestLibraryLeaseGrantedAfterAWaitLongerThanItsTTLStaysRenewed(t *testing.T) {
	e := loadEnv(t)
	wc := newTestClock(e.controlURL)
	waiter := open(t, e, wc, "waiter")
	name := "lib-waited-" + randomHex(4)
	l := grantAfterALongWait(t, e, wc, waiter, name)
	keeperAsleep(t, wc, l, "at the grant")
	for elapsed := time.Duration(0); elapsed < 3*waitTTL; elapsed += 2 * time.Second {
		keeperAsleep(t, wc, l, "after "+elapsed.String())
		wc.advance(t, 2*time.Second)
	}
	keeperAsleep(t, wc, l, "after three TTLs")
	got, err := waiter.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
	if err != nil || got.Msg.GetLease().GetFencingToken() != l.Token || got.Msg.GetExpired() ||
		got.Msg.GetLease().GetHolderAgentId() != waiter.Agent.GetId() {
		t.Fatalf("the lease on the hub: %v %v", got, err)
	}
	if err := l.Release(within(t)); err != nil {
		t.Fatal(err)
	}
}

func TestLibraryLeaseGrantedAfterAWaitIsLostBeforeItCanLapseWhenRenewalsFail(t *testing.T) {
	e := loadEnv(t)
	wc := newTestClock(e.controlURL)
	var refuse atomic.Bool
	renewals := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if refuse.Load() && req.Spec().Procedure == "/kxm.hub.v1.LeaseService/RenewLease" {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("the hub is away"))
			}
			return next(ctx, req)
		}
	})
	waiter := open(t, e, wc, "waiter", connect.WithInterceptors(renewals))
	name := "lib-waited-lost-" + randomHex(4)
	refuse.Store(true)
	l := grantAfterALongWait(t, e, wc, waiter, name)
	// Granted at G, its TTL ends at G+6 s on the hub; the loss comes a fifth of the TTL before
	// (G+4.8 s): not at G+4 s, by G+5 s.
	for elapsed := time.Duration(0); elapsed < 5*time.Second; elapsed += time.Second {
		keeperAsleep(t, wc, l, "after "+elapsed.String())
		wc.advance(t, time.Second)
	}
	select {
	case <-l.Lost():
	case <-time.After(waitTimeout):
		t.Fatal("no loss signal")
	}
	var herr *kxmhub.Error
	if !errors.As(l.Err(), &herr) || herr.Code != "lease_unconfirmed" {
		t.Fatalf("loss: %v", l.Err())
	}
	got, err := waiter.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
	if err != nil || got.Msg.GetLease().GetFencingToken() != l.Token || got.Msg.GetExpired() {
		t.Fatalf("the lease must still be live on the hub when the loss comes: %v %v", got, err)
	}
}

// An Acquire whose answer never came (cancelled while the grant was on its way) would leave the
// lease held by the agent until its TTL: the library looks the lease up and releases it, and the
// session's next Acquire of the name is a grant of its own, not lease_held.
func TestLibraryReleasesALeaseGrantedToAnAcquireWhoseAnswerNeverCame(t *testing.T) {
	e := loadEnv(t)
	hc := newTestClock("")
	holder := open(t, e, hc, "holder")
	name := "lib-unanswered-" + randomHex(4)
	held, err := holder.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The hub's answer to the first AcquireLease reaches this side of the wire and no further:
	// the call ends only when its caller gives up.
	var lost atomic.Bool
	answered := make(chan struct{})
	lose := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if req.Spec().Procedure != "/kxm.hub.v1.LeaseService/AcquireLease" || !lost.CompareAndSwap(false, true) {
				return res, err
			}
			close(answered)
			<-ctx.Done()
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	})
	waiter := open(t, e, newTestClock(""), "waiter", connect.WithInterceptors(lose))
	giveUp, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan error, 1)
	base := hubSleepers(t, e.controlURL)
	go func() {
		_, err := waiter.Acquire(giveUp, name, kxmhub.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute})
		failed <- err
	}()
	eventually(t, "the waiter queued", func() bool { return hubSleepers(t, e.controlURL) >= base+1 })
	if err := held.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answered:
	case <-time.After(waitTimeout):
		t.Fatal("the waiter was not granted the released lease")
	}
	got, err := holder.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
	if err != nil || got.Msg.GetLease().GetHolderAgentId() != waiter.Agent.GetId() || got.Msg.GetLease().GetFencingToken() != held.Token+1 {
		t.Fatalf("the grant the waiter never saw: %v %v", got, err)
	}
	cancel()
	var herr *kxmhub.Error
	if err := <-failed; !errors.As(err, &herr) || herr.Code != "cancelled" {
		t.Fatalf("the cancelled acquire: %v", err)
	}
	again, err := waiter.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil || again.Token != held.Token+2 {
		t.Fatalf("the waiter's next acquire: %v %v", again, err)
	}
	if err := again.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	next, err := holder.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil || next.Token != held.Token+3 {
		t.Fatalf("another agent's acquire: %v %v", next, err)
	}
	_ = next.Release(within(t))
}
