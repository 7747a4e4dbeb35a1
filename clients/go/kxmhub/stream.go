package kxmhub

import (
	"context"
	"math/rand/v2"
	"time"
)

// jittered is a back-off pause d with "equal jitter": half of it, and up to the other half at
// random. The clients a hub restart cut off then come back spread over the pause, not all at
// once at each of its doublings.
func jittered(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// backoff is the pause before a Subscribe stream is opened again: 100 ms, doubling to at most
// 5 s, back to 100 ms once a frame arrives; each pause jittered.
type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

// wait sleeps the pause on the clock; false when ctx ended first.
func (b *backoff) wait(ctx context.Context, clock Clock) bool {
	if b.next == 0 {
		b.next = 100 * time.Millisecond
	}
	select {
	case <-ctx.Done():
		return false
	case <-clock.After(jittered(b.next)):
	}
	b.next = min(2*b.next, 5*time.Second)
	return true
}

// reopens says whether a Subscribe stream that ended with err is opened again: yes when the hub
// cut it off as too slow, when the hub is away, and when the connection under it dropped (a hub
// killed mid-stream can surface as cancelled; only the caller's own ctx ends the wait, and the
// caller checks that first); no for what retrying cannot fix (cursor_expired, a refused identity).
func reopens(err *Error) bool {
	return err == nil || err.Transient || err.Code == "cancelled" || err.Code == "subscriber_too_slow"
}

// ended is the error of a wait whose ctx is done: code "cancelled", unwrapping to ctx's cause
// (errors.Is(err, context.DeadlineExceeded) holds for a deadline).
func ended(ctx context.Context) *Error {
	cause := context.Cause(ctx)
	return &Error{Code: "cancelled", Message: cause.Error(), cause: cause}
}
