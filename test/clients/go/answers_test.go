package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
)

// The library's answers where the hub's answer alone does not settle them: a body over the hub's
// limit is never transient, a cancelled wait of the library's own is "cancelled", and a lease an
// Acquire's lost answer left behind is taken over by the retry instead of renewed forever.

// A 413 (payload_too_large, Connect resource_exhausted) fails the same way every time: it is not
// transient, whatever its Connect code.
func TestPayloadTooLargeIsNotTransient(t *testing.T) {
	e := loadEnv(t)
	a := open(t, e, newTestClock(""), "big")
	b := open(t, e, newTestClock(""), "target")
	_, err := a.Send(within(t), b.Agent.GetName(), strings.Repeat("x", 300_000))
	var herr *kxmhub.Error
	if !errors.As(err, &herr) {
		t.Fatalf("send of 300 KB: %v", err)
	}
	t.Logf("send of 300 KB: code=%s transient=%v", herr.Code, herr.Transient)
	if herr.Code != "payload_too_large" || herr.Transient {
		t.Fatalf("want payload_too_large, not transient; got code=%s transient=%v", herr.Code, herr.Transient)
	}
}

// An Acquire whose ctx is cancelled while it waits for the session's look after an earlier
// unanswered Acquire of the same name: the same "cancelled" as an Acquire cancelled on the wire
// (and as TypeScript's "cancelled"), not a transient "unavailable" that invites a retry.
func TestAcquireCancelledWhileALookIsPendingSaysCancelled(t *testing.T) {
	e := loadEnv(t)
	holder := open(t, e, newTestClock(""), "holder")
	name := "lib-look-" + randomHex(4)
	held, err := holder.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	// The waiter's GetLease (the session's look) is held until the test ends.
	unblock := make(chan struct{})
	defer close(unblock)
	hold := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure == "/kxm.hub.v1.LeaseService/GetLease" {
				<-unblock
			}
			return next(ctx, req)
		}
	})
	waiter := open(t, e, newTestClock(""), "waiter", connect.WithInterceptors(hold))
	base := hubSleepers(t, e.controlURL)
	first, cancelFirst := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(first, name, kxmhub.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute})
		done <- err
	}()
	eventually(t, "the waiter queued", func() bool { return hubSleepers(t, e.controlURL) >= base+1 })
	cancelFirst()
	err = <-done
	var herr *kxmhub.Error
	if !errors.As(err, &herr) || herr.Code != "cancelled" {
		t.Fatalf("the first acquire: %v", err)
	}
	// The look is under way (its GetLease held). A second Acquire waits for it; its ctx is cancelled.
	second, cancelSecond := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancelSecond)
	_, err = waiter.Acquire(second, name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if !errors.As(err, &herr) {
		t.Fatalf("the second acquire: %v", err)
	}
	t.Logf("second acquire, cancelled while waiting for the look: code=%s transient=%v message=%q", herr.Code, herr.Transient, herr.Message)
	if herr.Code != "cancelled" || herr.Transient {
		t.Fatalf("want cancelled, not transient; got code=%s transient=%v", herr.Code, herr.Transient)
	}
}

// After an Acquire whose answer was lost (its grant crossed the broken connection) and whose
// look at the lease failed too, nothing of the session holds the lease the hub holds for its
// agent: the retry takes it over (the hub answers "renewed"), where refusing would renew it at
// every retry and lock every agent out.
func TestRetryingAnAcquireWhoseAnswerWasLostNeverRenewsAnOrphanForever(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	var acquires, looks atomic.Int32
	flaky := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			switch req.Spec().Procedure {
			case "/kxm.hub.v1.LeaseService/AcquireLease":
				if acquires.Add(1) == 1 {
					_, _ = next(ctx, req)
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("read: connection reset by peer"))
				}
			case "/kxm.hub.v1.LeaseService/GetLease":
				if looks.Add(1) == 1 {
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("dial: connection refused"))
				}
			}
			return next(ctx, req)
		}
	})
	s := open(t, e, clock, "builder", connect.WithInterceptors(flaky))
	other := open(t, e, newTestClock(""), "other")
	name := "lib-orphan-" + randomHex(4)
	_, err := s.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 10 * time.Second})
	var herr *kxmhub.Error
	if !errors.As(err, &herr) || herr.Code != "unavailable" {
		t.Fatalf("first acquire: %v", err)
	}
	refused := map[string]int{}
	var got *kxmhub.Lease
	for i := 0; i < 24 && got == nil; i++ { // every 5 s for 2 minutes (12 TTLs)
		clock.advance(t, 5*time.Second)
		got, err = s.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			refused[kxmhub.AsError(err).Code]++
		}
	}
	_, otherErr := other.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 10 * time.Second})
	if got == nil && otherErr != nil {
		t.Fatalf("neither the retrying agent nor another one can get the lease (retries refused %v): each refused retry renewed it", refused)
	}
	if got != nil {
		if got.Token != 1 {
			t.Fatalf("the lease taken over: token %d, want 1 (the one the lost answer carried)", got.Token)
		}
		if err := got.Release(within(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// A TTL or a wait the request cannot carry (milliseconds as an int32) is the caller's mistake,
// refused before anything is sent: converted, about 49.7 days wrapped into a small TTL on the hub
// while the keeper renewed from the long one.
func TestATTLTheRequestCannotCarryIsRefused(t *testing.T) {
	e := loadEnv(t)
	s := open(t, e, newTestClock(""), "long")
	wraps := time.Duration(1<<32+30_000) * time.Millisecond // as an int32 of ms: 30 s, a valid TTL
	for _, o := range []kxmhub.AcquireOptions{{TTL: wraps}, {TTL: time.Minute, Wait: wraps}} {
		_, err := s.Acquire(within(t), "lib-long-"+randomHex(4), o)
		var herr *kxmhub.Error
		if !errors.As(err, &herr) || herr.Code != "protocol_error" || herr.Transient {
			t.Fatalf("acquire with %+v: %v, want protocol_error", o, err)
		}
	}
}

// A renewal refused for the rate (rate_limited, retryAfterMs 10 s) is tried again when the window
// ends, not every second before it (each such try is refused too and spends the next window).
func TestARateLimitedRenewalWaitsOutRetryAfterMs(t *testing.T) {
	e := loadEnv(t)
	c := newTestClock("")
	var renewals atomic.Int32
	limited := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure == "/kxm.hub.v1.LeaseService/RenewLease" && renewals.Add(1) == 1 {
				refusal := connect.NewError(connect.CodeResourceExhausted, errors.New("request rate limit exceeded"))
				detail, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "kxm-hub", Metadata: map[string]string{"retryAfterMs": "10000"}})
				if err != nil {
					return nil, err
				}
				refusal.AddDetail(detail)
				return nil, refusal
			}
			return next(ctx, req)
		}
	})
	s := open(t, e, c, "patient", connect.WithInterceptors(limited))
	l, err := s.Acquire(within(t), "lib-rate-"+randomHex(4), kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// The renewal at 10 s is refused; until 20 s nothing more is sent.
	for elapsed := time.Duration(0); elapsed < 19*time.Second; elapsed += time.Second {
		keeperAsleep(t, c, l, "after "+elapsed.String())
		c.advance(t, time.Second)
	}
	keeperAsleep(t, c, l, "at 19s")
	if n := renewals.Load(); n != 1 {
		t.Fatalf("renewals by 19 s: %d, want the one refused at 10 s", n)
	}
	c.advance(t, time.Second)
	eventually(t, "the renewal at 20 s", func() bool { return renewals.Load() == 2 })
	keeperAsleep(t, c, l, "after the renewal at 20 s")
}

// An Acquire whose answer was lost while another Acquire of the name was in flight: the look at
// the lease waits for that one to end instead of being skipped. Here the first Acquire (A) waits
// in the queue and is granted, its answer lost, and is cancelled while a second (B, no wait) is
// on the wire; B ends refused (lease_held, asked before the grant). The look then runs and
// releases A's grant, where skipping it left the lease held by the agent with nobody renewing or
// releasing it: every other agent locked out until its TTL.
func TestAnUnansweredAcquireLeavesNoOrphanWhenAnotherAcquireOfTheNameWasInFlight(t *testing.T) {
	e := loadEnv(t)
	other := open(t, e, newTestClock(""), "other")
	name := "lib-orphan-flight-" + randomHex(4)
	held, err := other.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A's answer (the grant) reaches this side of the wire and no further; B's answer is held
	// back until the test lets it through.
	var calls atomic.Int32
	aAnswered, bAnswered, bGoes := make(chan struct{}), make(chan struct{}), make(chan struct{})
	gate := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure != "/kxm.hub.v1.LeaseService/AcquireLease" {
				return next(ctx, req)
			}
			n := calls.Add(1)
			res, err := next(ctx, req)
			switch n {
			case 1:
				close(aAnswered)
				<-ctx.Done()
				return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
			case 2:
				close(bAnswered)
				<-bGoes
			}
			return res, err
		}
	})
	me := open(t, e, newTestClock(""), "me", connect.WithInterceptors(gate))
	base := hubSleepers(t, e.controlURL)
	aCtx, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	aDone := make(chan error, 1)
	go func() {
		_, err := me.Acquire(aCtx, name, kxmhub.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute})
		aDone <- err
	}()
	eventually(t, "A queued", func() bool { return hubSleepers(t, e.controlURL) >= base+1 })
	bDone := make(chan error, 1)
	go func() {
		_, err := me.Acquire(context.Background(), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
		bDone <- err
	}()
	<-bAnswered
	if err := held.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	<-aAnswered // A is granted; its answer never arrives
	cancelA()
	expectCode(t, "A", <-aDone, "cancelled")
	close(bGoes)
	expectCode(t, "B", <-bDone, "lease_held")
	var got *kxmhub.Lease
	eventually(t, "another agent granted the lease (A's grant released by the look)", func() bool {
		got, err = other.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
		return err == nil
	})
	if got.Token != held.Token+2 {
		t.Fatalf("another agent's grant: token %d, want %d (after A's grant, %d)", got.Token, held.Token+2, held.Token+1)
	}
	_ = got.Release(within(t))
}

// heartbeatGate holds every Heartbeat call until released; heedless calls do not end with their
// context either (a transport that does not give up on a silent hub).
type heartbeatGate struct {
	release  chan struct{}
	entered  chan struct{}
	once     sync.Once
	heedless bool
}

func (g *heartbeatGate) interceptor() connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure != "/kxm.hub.v1.PresenceService/Heartbeat" {
				return next(ctx, req)
			}
			g.once.Do(func() { close(g.entered) })
			if g.heedless {
				<-g.release
			} else {
				select {
				case <-g.release:
				case <-ctx.Done():
					return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
				}
			}
			return next(ctx, req)
		}
	}))
}

// Close does not wait for a heartbeat a silent hub never answers (each may take an interval,
// HeartbeatEvery: an hour here): it cancels it, and it returns when its own ctx ends whatever
// the call does.
func TestCloseDoesNotWaitForAHeartbeatTheHubNeverAnswers(t *testing.T) {
	e := loadEnv(t)
	for _, heedless := range []bool{false, true} {
		c := newTestClock("")
		g := &heartbeatGate{release: make(chan struct{}), entered: make(chan struct{}), heedless: heedless}
		defer close(g.release)
		s := open(t, e, c, "silent", g.interceptor())
		eventually(t, "the heartbeat timer", func() bool { return c.sleepers() >= 1 })
		c.advance(t, time.Hour) // the heartbeat goes out, and hangs
		<-g.entered
		ctx, cancel := context.WithCancel(context.Background())
		if heedless {
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		select {
		case err := <-closed:
			if !heedless && err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("Close (heartbeat heeding its context: %v) still waits for the heartbeat in flight", !heedless)
		}
		cancel()
		expectCode(t, "the closed session", s.Err(), "closed")
	}
}

func TestOptionsNeverPrintTheToken(t *testing.T) {
	o := kxmhub.Options{URL: "http://127.0.0.1:7331", Project: "p", Name: "alpha", Token: "kxmpt_0123456789abcdef_secret-part"}
	for _, shown := range []string{fmt.Sprint(o), fmt.Sprintf("%v", o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), fmt.Sprintf("%v", &o)} {
		if strings.Contains(shown, "secret-part") || strings.Contains(shown, "kxmpt_") {
			t.Fatalf("options printed with their token: %s", shown)
		}
		if !strings.Contains(shown, `Name: "alpha"`) || !strings.Contains(shown, "[redacted]") {
			t.Fatalf("options printed without what they say: %s", shown)
		}
	}
	if shown := fmt.Sprint(kxmhub.Options{Name: "beta"}); !strings.Contains(shown, `Token: ""`) {
		t.Fatalf("options without a token printed as if they had one: %s", shown)
	}
}

// A call the hub's end cut with an HTTP/2 CANCEL (connect reports it as Canceled, as when the hub
// is killed under the call) is "unavailable" and transient, as a reset connection is; a call
// whose own context was cancelled stays "cancelled". Before, both were "cancelled".
func TestACallCutAsCanceledFromTheHubsSideIsTransient(t *testing.T) {
	e := loadEnv(t)
	var cut atomic.Int32
	cutFirst := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure == "/kxm.hub.v1.PeerService/SendMessage" && cut.Add(1) == 1 {
				return nil, connect.NewError(connect.CodeCanceled, errors.New("stream error: stream ID 3; CANCEL; received from peer"))
			}
			return next(ctx, req)
		}
	})
	sender := open(t, e, newTestClock(""), "cut-sender", connect.WithInterceptors(cutFirst))
	target := open(t, e, newTestClock(""), "cut-target")
	_, err := sender.Send(within(t), target.Agent.GetName(), "cut")
	herr := kxmhub.AsError(err)
	t.Logf("a send cut from the hub's side: code=%s transient=%v", herr.Code, herr.Transient)
	if herr.Code != "unavailable" || !herr.Transient {
		t.Fatalf("want unavailable, transient; got code=%s transient=%v", herr.Code, herr.Transient)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = sender.Send(cancelled, target.Agent.GetName(), "never sent")
	if herr := kxmhub.AsError(err); herr.Code != "cancelled" || herr.Transient {
		t.Fatalf("a send whose context was cancelled: want cancelled, not transient; got code=%s transient=%v (%v)", herr.Code, herr.Transient, err)
	}
	if _, err := sender.Send(within(t), target.Agent.GetName(), "sent"); err != nil {
		t.Fatal(err)
	}
}
