package kxmhub

import "time"

// Clock is the time the library keeps (renewal intervals, when a lease must count as lost,
// back-off): the system's by default. Tests pass their own, moved together with the hub's clock.
type Clock interface {
	Now() time.Time
	// After delivers once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
