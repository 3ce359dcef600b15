// Package clock is time as the background components see it: the queue
// workers' retry schedules and the cron scheduler are given a Clock, the
// real one in production and a fake one in tests (package clocktest), so
// that timed behaviour is tested without sleeping.
package clock

import "time"

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// After is time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
