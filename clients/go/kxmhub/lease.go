package kxmhub

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	hubv1 "github.com/kxm-dev/kxm-hub/gen/go/kxm/hub/v1"
)

// AcquireOptions: TTL on the hub (5 s..10 min, default 30 s); Wait for a lease another agent
// holds, in the hub's queue (default 0: lease_held at once). The context ends a wait; a grant
// that crossed its end on the wire is looked up and released by the session (settleUnanswered).
type AcquireOptions struct {
	TTL  time.Duration
	Wait time.Duration
}

// Lease is a lease this process holds, renewed about every third of its TTL until Release or
// loss. Lost is closed (Err says why) when the hub says the lease is gone (lease_superseded,
// lease_expired, lease_not_found), and also when renewals have failed for so long that the lease
// may lapse on the hub: a fifth of the TTL before the TTL counted from when the last successful
// renewal was sent, so the work it guards stops before anyone else can be granted it. Until the
// first renewal the TTL counts from the grant: the acquire's send time plus the time the hub
// says it waited in the lease's queue (AcquireLeaseResponse.waited_ms), so a lease granted after
// a wait longer than its TTL is as valid as one granted at once.
type Lease struct {
	Name string
	// Token is the fencing token: present it with every write to the guarded resource.
	Token int64

	s    *Session
	ttl  time.Duration
	lost chan struct{}
	stop chan struct{}
	// stopOnce closes stop once: Release and Session.Close may race (a WithLease ending while
	// its session closes), and closing a channel twice panics.
	stopOnce sync.Once
	kept     sync.WaitGroup
	mu       sync.Mutex
	err      error
	lease    *hubv1.Lease
}

// Acquire takes the lease (waiting in the queue with Wait) and keeps it renewed.
func (s *Session) Acquire(ctx context.Context, name string, o AcquireOptions) (*Lease, error) {
	if o.TTL == 0 {
		o.TTL = 30 * time.Second
	}
	// What the request cannot carry (milliseconds as an int32) is the caller's mistake: converted,
	// it would wrap into a small TTL on the hub while the keeper works from the long one.
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"TTL", o.TTL}, {"Wait", o.Wait}} {
		if d.v < 0 || d.v/time.Millisecond > math.MaxInt32 {
			return nil, &Error{Code: "protocol_error", Message: fmt.Sprintf("%s must be 0..%d ms (got %s)", d.field, math.MaxInt32, d.v), Metadata: map[string]string{"field": d.field}}
		}
	}
	ttl := int32(o.TTL / time.Millisecond)
	req := &hubv1.AcquireLeaseRequest{Name: name, TtlMs: &ttl}
	if o.Wait > 0 {
		wait := int32(o.Wait / time.Millisecond)
		req.WaitMs = &wait
	}
	if err := s.beginAcquire(ctx, name); err != nil {
		return nil, AsError(err)
	}
	sent := s.clock.Now()
	res, err := s.Leases.AcquireLease(ctx, connect.NewRequest(req))
	if err != nil {
		e := AsError(err)
		s.mu.Lock()
		s.doneAcquiring(name)
		s.acquireEnded(name, unanswered[e.Code])
		s.mu.Unlock()
		return nil, e
	}
	l := &Lease{Name: name, Token: res.Msg.GetLease().GetFencingToken(), s: s, ttl: o.TTL, lost: make(chan struct{}), stop: make(chan struct{}), lease: res.Msg.GetLease()}
	// One hold of s.mu from the end of this Acquire's count to the lease in held: a look at the
	// lease (settleUnanswered) never sees it in neither, and never releases what this returns.
	s.mu.Lock()
	s.doneAcquiring(name)
	// Renewed: this agent holds the lease already, under this acquire's token. When a call of
	// this session holds it (or is acquiring it), two holders of one token are what no fence
	// can tell apart, so it stays that call's and this is refused. When none does, nobody
	// answers for it (an Acquire whose answer was lost and whose look failed too, an earlier
	// process of the agent): this Acquire takes it over, or every retry would renew it and no
	// agent would ever get it.
	if res.Msg.GetRenewed() && s.after(name) {
		s.acquireEnded(name, false)
		s.mu.Unlock()
		return nil, &Error{Code: "lease_held", Message: fmt.Sprintf("lease %s is already held by this agent (fencing token %d); hold it once", name, res.Msg.GetLease().GetFencingToken()), Lease: res.Msg.GetLease()}
	}
	s.held[l] = struct{}{}
	// Held by this call now: a look put off for the name has nothing left to settle.
	delete(s.lookLater, name)
	s.mu.Unlock()
	l.kept.Add(1)
	go l.keep(grantedAt(sent, res.Msg.GetWaitedMs(), s.clock.Now()))
	return l, nil
}

// unanswered are the codes of a call that ended without the hub's answer (AsError): it may have
// been carried out all the same.
var unanswered = map[string]bool{"cancelled": true, "unavailable": true, "unknown": true}

// settleTimeout bounds each call of settleUnanswered.
const settleTimeout = 10 * time.Second

// doneAcquiring counts an Acquire of name as no longer in flight; s.mu is held.
func (s *Session) doneAcquiring(name string) {
	if s.acquiring[name]--; s.acquiring[name] == 0 {
		delete(s.acquiring, name)
	}
}

// holds says whether a call of this session holds lease name; s.mu is held.
func (s *Session) holds(name string) bool {
	for l := range s.held {
		if l.Name == name {
			return true
		}
	}
	return false
}

// after says whether a call of this session holds lease name or is acquiring it; s.mu is held.
func (s *Session) after(name string) bool {
	return s.acquiring[name] > 0 || s.holds(name)
}

// beginAcquire waits for the look at lease name after an Acquire that got no answer, if one is
// under way, or for ctx to end; then it counts this Acquire as in flight, under the same hold of
// s.mu as its last check, so that no look starts while it is in flight.
func (s *Session) beginAcquire(ctx context.Context, name string) error {
	for {
		s.mu.Lock()
		done := s.unsettled[name]
		if done == nil {
			s.acquiring[name]++
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// acquireEnded: an Acquire of name ended without holding the lease (counted out of acquiring
// already); noAnswer says it got no answer. Either starts the look it needs or one put off for
// the name; s.mu is held.
func (s *Session) acquireEnded(name string, noAnswer bool) {
	if noAnswer || s.lookLater[name] {
		s.settleUnanswered(name)
	}
}

// settleUnanswered: an Acquire that got no answer (cancelled, timed out, the connection lost)
// may have been granted all the same, the grant on its way when the call ended. Nothing of this
// session would ever release it, and it would stay held until its TTL ran out. So the lease is
// looked up, and released when this agent holds it and no call of this session holds or
// acquires it (as etcd's lock recipe deletes its key when a wait for the lock is cancelled).
// While another Acquire of the name is in flight, the look is put off (lookLater) until the last
// of them ends: without the lease, the look runs then; holding it, that call answers for it.
// The next Acquire of the name waits for the look; Close too. s.mu is held.
func (s *Session) settleUnanswered(name string) {
	if s.err != nil || s.noLooks || s.holds(name) {
		delete(s.lookLater, name)
		return
	}
	if s.acquiring[name] > 0 {
		s.lookLater[name] = true
		return
	}
	delete(s.lookLater, name)
	if s.unsettled[name] != nil {
		return
	}
	done := make(chan struct{})
	s.unsettled[name] = done
	s.looks.Add(1)
	go func() {
		defer s.looks.Done()
		defer func() {
			s.mu.Lock()
			delete(s.unsettled, name)
			s.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		got, err := s.Leases.GetLease(ctx, connect.NewRequest(&hubv1.GetLeaseRequest{Name: name}))
		if err != nil || got.Msg.GetLease().GetHolderAgentId() != s.Agent.GetId() {
			return
		}
		s.mu.Lock()
		mine := !s.after(name)
		s.mu.Unlock()
		if mine {
			token := got.Msg.GetLease().GetFencingToken()
			_, _ = s.Leases.ReleaseLease(ctx, connect.NewRequest(&hubv1.ReleaseLeaseRequest{Name: name, FencingToken: &token}))
		}
	}()
}

// grantedAt is the earliest time, on this process's clock, at which the hub can have granted a
// lease: the acquire's send time plus the time the hub says it waited in the queue (the hub
// started counting no earlier than the send), yet never after the answer arrived. The TTL and
// the renewals count from here; counting from the send alone would take a grant after a long
// wait for one that has already lapsed.
func grantedAt(sent time.Time, waitedMs int32, answered time.Time) time.Time {
	at := sent.Add(time.Duration(waitedMs) * time.Millisecond)
	if at.After(answered) {
		return answered
	}
	return at
}

// WithLease runs fn holding the lease: fn's context is cancelled if the lease is lost, and the
// lease is released when fn returns.
func (s *Session) WithLease(ctx context.Context, name string, o AcquireOptions, fn func(ctx context.Context, token int64) error) error {
	l, err := s.Acquire(ctx, name, o)
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.Lost():
			cancel(l.Err())
		case <-work.Done():
		}
	}()
	return fn(work, l.Token)
}

// Lost is closed when the lease is lost (or released).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why Lost is closed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Check returns the loss, if the lease is lost: call it before an irreversible step.
func (l *Lease) Check() error { return l.Err() }

// Lease is the lease as the hub last granted or renewed it.
func (l *Lease) Lease() *hubv1.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

func (l *Lease) lose(err *Error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	l.err = err
	close(l.lost)
	l.s.mu.Lock()
	delete(l.s.held, l)
	l.s.mu.Unlock()
	return true
}

// Release stops renewing and releases the lease (one already lost is not released).
func (l *Lease) Release(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	l.kept.Wait()
	if !l.lose(&Error{Code: "released", Message: "lease " + l.Name + " was released"}) {
		return nil
	}
	_, err := l.s.Leases.ReleaseLease(ctx, connect.NewRequest(&hubv1.ReleaseLeaseRequest{Name: l.Name, FencingToken: &l.Token}))
	if e := AsError(err); e != nil && e.Code != "lease_superseded" && e.Code != "lease_not_found" {
		return e
	}
	return nil
}

// keep renews the lease granted no earlier than grant until Release or loss. Validity counts
// from when the last confirmed grant or renewal can at the earliest have happened on the hub.
func (l *Lease) keep(grant time.Time) {
	defer l.kept.Done()
	margin := l.ttl / 5
	validUntil := grant.Add(l.ttl)
	nextRenew := grant.Add(l.ttl / 3)
	for {
		lostAt := validUntil.Add(-margin)
		wake := nextRenew
		if lostAt.Before(wake) {
			wake = lostAt
		}
		select {
		case <-l.stop:
			return
		case <-l.s.clock.After(wake.Sub(l.s.clock.Now())):
		}
		if !l.s.clock.Now().Before(lostAt) {
			l.lose(&Error{Code: "lease_unconfirmed", Message: "lease " + l.Name + " could not be renewed before it may lapse", Lease: l.Lease(), Transient: true})
			return
		}
		sent := l.s.clock.Now()
		ttl := int32(l.ttl / time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), lostAt.Sub(sent))
		go func() {
			select {
			case <-l.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		res, err := l.s.Leases.RenewLease(ctx, connect.NewRequest(&hubv1.RenewLeaseRequest{Name: l.Name, FencingToken: &l.Token, TtlMs: &ttl}))
		cancel()
		select {
		case <-l.stop:
			return
		default:
		}
		if err == nil {
			l.mu.Lock()
			l.lease = res.Msg.GetLease()
			l.mu.Unlock()
			validUntil = sent.Add(l.ttl)
			nextRenew = sent.Add(l.ttl / 3)
			continue
		}
		// A renewal the hub's end cut is transient (AsError); this keeper's own cancel (Release)
		// returned above.
		e := AsError(err)
		if !e.Transient && e.Code != "rate_limited" {
			l.lose(e)
			return
		}
		// The hub is away: try again soon, while the lease can still be valid. Over the rate
		// limit: not before its window ends (an earlier try is refused too), nor past lostAt.
		retry := l.ttl / 10
		if retry > time.Second {
			retry = time.Second
		}
		if e.Code == "rate_limited" {
			// At most a TTL (the keeper gives up at lostAt anyway): no overflow from a huge value.
			if ms, perr := strconv.ParseInt(e.Metadata["retryAfterMs"], 10, 64); perr == nil {
				if after := time.Duration(min(ms, l.ttl.Milliseconds())) * time.Millisecond; after > retry {
					retry = after
				}
			}
		}
		nextRenew = l.s.clock.Now().Add(retry)
	}
}
