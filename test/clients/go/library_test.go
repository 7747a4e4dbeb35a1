package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kxm-dev/kxm-hub/clients/go/kxmhub"
	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// The Go library's behaviour against the hub (clients/go/kxmhub). The library's clock is the hub's:
// testClock moves the hub clock through the control port and fires the library's timers with it,
// so renewals and lapses happen when the test moves time.

type timer struct {
	due time.Time
	ch  chan time.Time
}

type testClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []timer
	control string // empty: a clock of this process only (timers running late against the hub's)
}

func newTestClock(control string) *testClock {
	return &testClock{now: time.Unix(1_000_000, 0), control: control}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{due: c.now.Add(d), ch: ch})
	return ch
}

// sleepers counts the library's timers not yet due (abandoned ones included: compare counts taken alike).
func (c *testClock) sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (c *testClock) advance(t *testing.T, d time.Duration) {
	t.Helper()
	if c.control != "" {
		post(t, fmt.Sprintf("%s/advance?ms=%d", c.control, d.Milliseconds()))
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []timer
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.due.After(c.now) {
			due = append(due, tm)
		} else {
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	now := c.now
	c.mu.Unlock()
	for _, tm := range due {
		tm.ch <- now
	}
}

func post(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(within(t), http.MethodPost, url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	res.Body.Close()
}

// hubSleepers is how many waits sleep on the hub's clock (the waiting acquires, here).
func hubSleepers(t *testing.T, control string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(within(t), http.MethodGet, control+"/sleepers", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	defer res.Body.Close()
	var body struct{ Sleepers int }
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Sleepers
}

// eventually polls cond (real time) until it holds, or fails after waitTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func open(t *testing.T, e env, clock kxmhub.Clock, name string, opts ...connect.ClientOption) *kxmhub.Session {
	t.Helper()
	s, err := kxmhub.Connect(within(t), kxmhub.Options{
		URL: e.hubURL, Token: e.token, Project: project, Name: name + "-" + randomHex(4),
		HeartbeatEvery: time.Hour, Clock: clock, ClientOptions: opts,
	})
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestLibraryRenewalsKeepALeaseThroughThreeTTLs(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	s := open(t, e, clock, "keeper")
	name := "lib-keep-" + randomHex(4)
	l, err := s.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for elapsed := time.Duration(0); elapsed < 18*time.Second; elapsed += 2 * time.Second {
		eventually(t, "the keeper asleep", func() bool { return clock.sleepers() >= 2 }) // keeper + heartbeat
		clock.advance(t, 2*time.Second)
	}
	eventually(t, "the keeper asleep", func() bool { return clock.sleepers() >= 2 })
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	default:
	}
	got, err := s.Leases.GetLease(within(t), connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
	if err != nil || got.Msg.GetLease().GetFencingToken() != l.Token || got.Msg.GetExpired() {
		t.Fatalf("the lease on the hub: %v %v", got, err)
	}
	if err := l.Release(within(t)); err != nil {
		t.Fatal(err)
	}
}

func TestLibrarySupersededHolderIsToldItLostTheLease(t *testing.T) {
	e := loadEnv(t)
	hubClock := newTestClock(e.controlURL)
	late := newTestClock("") // this holder's timers run late against the hub's clock
	a := open(t, e, late, "alpha")
	b := open(t, e, hubClock, "beta")
	name := "lib-super-" + randomHex(4)
	held, err := a.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hubClock.advance(t, 5001*time.Millisecond)
	taken, err := b.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 5 * time.Second})
	if err != nil || taken.Token != held.Token+1 {
		t.Fatalf("takeover: %v %v", taken, err)
	}
	late.advance(t, 5*time.Second/3) // the keeper renews: the hub refuses
	select {
	case <-held.Lost():
	case <-time.After(waitTimeout):
		t.Fatal("no loss signal")
	}
	var herr *kxmhub.Error
	if !errors.As(held.Err(), &herr) || herr.Code != "lease_superseded" || herr.Lease.GetFencingToken() != taken.Token {
		t.Fatalf("loss: %#v", held.Err())
	}
	if held.Check() == nil {
		t.Fatal("Check must return the loss")
	}
}

func TestLibraryHandsOverToFiveWaitersInOrder(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	holder := open(t, e, clock, "holder")
	name := "lib-fifo-" + randomHex(4)
	first, err := holder.Acquire(within(t), name, kxmhub.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var acquires atomic.Int32
	count := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure == "/kxm.hub.v1.LeaseService/AcquireLease" {
				acquires.Add(1)
			}
			return next(ctx, req)
		}
	})
	base := hubSleepers(t, e.controlURL)
	type result struct {
		l   *kxmhub.Lease
		err error
	}
	results := make([]chan result, 5)
	sessions := make([]*kxmhub.Session, 5)
	for i := range 5 {
		sessions[i] = open(t, e, clock, fmt.Sprintf("waiter%d", i), connect.WithInterceptors(count))
		results[i] = make(chan result, 1)
		go func() {
			l, err := sessions[i].Acquire(context.Background(), name, kxmhub.AcquireOptions{TTL: 30 * time.Second, Wait: 2 * time.Minute})
			results[i] <- result{l, err}
		}()
		// Queued (asleep on the hub clock) before the next one comes.
		eventually(t, "the waiter queued", func() bool { return hubSleepers(t, e.controlURL) >= base+i+1 })
	}
	if err := first.Release(within(t)); err != nil {
		t.Fatal(err)
	}
	token := first.Token
	for i := range 5 {
		var r result
		select {
		case r = <-results[i]:
		case <-time.After(waitTimeout):
			t.Fatalf("waiter %d was not granted", i)
		}
		if r.err != nil || r.l.Token != token+1 || r.l.Lease().GetHolderAgentName() != sessions[i].Agent.GetName() {
			t.Fatalf("waiter %d: %v %v", i, r.l, r.err)
		}
		token = r.l.Token
		if err := r.l.Release(within(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := acquires.Load(); n != 5 {
		t.Fatalf("AcquireLease calls: %d, want 5 (no polling)", n)
	}
}

func TestLibrarySessionLostWhenTheHubRefusesItsHeartbeat(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	s, err := kxmhub.Connect(within(t), kxmhub.Options{URL: e.hubURL, Token: e.token, Project: project, Name: "ghost-" + randomHex(4), HeartbeatEvery: 10 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// Rotates the key this session holds away.
	if _, err := s.Presence.UnregisterAgent(within(t), connect.NewRequest(&hubv1.UnregisterAgentRequest{AgentId: s.Agent.GetId()})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the heartbeat asleep", func() bool { return clock.sleepers() >= 1 })
	clock.advance(t, 10*time.Second)
	select {
	case <-s.Done():
	case <-time.After(waitTimeout):
		t.Fatal("no loss signal")
	}
	var herr *kxmhub.Error
	if !errors.As(s.Err(), &herr) || herr.Code != "invalid_agent_identity" {
		t.Fatalf("loss: %v", s.Err())
	}
}

func TestLibraryTypedErrorsCarryTheCodeAndTheLease(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	a := open(t, e, clock, "alpha")
	b := open(t, e, clock, "beta")
	name := "lib-held-" + randomHex(4)
	held, err := a.Acquire(within(t), name, kxmhub.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(within(t), name, kxmhub.AcquireOptions{})
	var herr *kxmhub.Error
	if !errors.As(err, &herr) || herr.Code != "lease_held" || herr.Lease.GetFencingToken() != held.Token ||
		herr.Metadata["holderAgentName"] != a.Agent.GetName() || herr.Transient {
		t.Fatalf("refusal: %#v", err)
	}
	if !errors.Is(err, &kxmhub.Error{Code: "lease_held"}) {
		t.Fatal("errors.Is by code")
	}
}

func TestLibraryInboxAcksAndReplies(t *testing.T) {
	e := loadEnv(t)
	clock := newTestClock(e.controlURL)
	sender := open(t, e, clock, "sender")
	reader := open(t, e, clock, "reader")
	for i := range 3 {
		if _, err := sender.Send(within(t), reader.Agent.GetId(), fmt.Sprintf("note %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var got []string
	for ev, err := range reader.Inbox(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Reply(ctx, "ok "+ev.Message.GetContent()); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Message.GetContent())
		if len(got) == 3 {
			break
		}
	}
	if fmt.Sprint(got) != "[note 0 note 1 note 2]" {
		t.Fatalf("inbox: %v", got)
	}
}
