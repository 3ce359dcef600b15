// Package clocktest is the fake clock.Clock of the tests of the
// background components.
package clocktest

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock"
)

var _ clock.Clock = (*Fake)(nil)

// Fake is a clock.Clock whose time moves only when a test says so.
//
// After(d) with d > 0 registers a waiter that Advance fires once its
// deadline is reached; After(d) with d <= 0 fires at once. A component (a
// queue worker, the scheduler) blocks only on After with d > 0, so Calls,
// the number of those, tells a test when the component has come back to
// its wait: take n := Calls() before an action that wakes it exactly once,
// then WaitCalls(n+1). Tests never sleep.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter     // not fired yet, in registration order
	last    *waiter       // the most recent After call with d > 0
	calls   int           // After calls with d > 0
	all     int           // every After call
	changed chan struct{} // closed and replaced on every After call
}

type waiter struct {
	at    time.Time
	ch    chan time.Time
	fired bool
}

// New returns a Fake whose time is start, with nothing pending.
func New(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now is the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once d has passed on
// the fake clock.
func (c *Fake) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.all++
	if d <= 0 {
		ch <- c.now
	} else {
		c.calls++
		c.last = &waiter{at: c.now.Add(d), ch: ch}
		c.waiters = append(c.waiters, c.last)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the time on by d and fires the waiters that are due, in
// deadline order. It returns how many it fired.
func (c *Fake) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(c.now.Add(d))
}

// AdvanceTo moves the time to t (never backwards) and fires what is due.
func (c *Fake) AdvanceTo(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		t = c.now
	}
	return c.setLocked(t)
}

// AdvanceToNext moves the time to the earliest pending deadline and fires
// every waiter due then; it returns how many it fired (0 when nothing was
// pending).
func (c *Fake) AdvanceToNext() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return 0
	}
	next := c.waiters[0].at
	for _, w := range c.waiters[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	return c.setLocked(next)
}

// SetBack sets the time back by d, as a wall clock is set back (by NTP, or
// by hand): the waiters keep their durations, as timers do, which count
// on a monotonic clock, so none fires.
func (c *Fake) SetBack(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(-d)
	for _, w := range c.waiters {
		w.at = w.at.Add(-d)
	}
}

func (c *Fake) setLocked(t time.Time) int {
	c.now = t
	var due, keep []*waiter
	for _, w := range c.waiters {
		if w.at.After(t) {
			keep = append(keep, w)
		} else {
			due = append(due, w)
		}
	}
	c.waiters = keep
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, w := range due {
		w.fired = true
		w.ch <- t
	}
	return len(due)
}

// LastDeadline is the deadline of the most recent wait, if it has not fired:
// what a single component blocked on the clock waits for.
func (c *Fake) LastDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || c.last.fired {
		return time.Time{}, false
	}
	return c.last.at, true
}

// Calls is the number of After calls with d > 0 so far: the times a component
// went back to waiting on the clock.
func (c *Fake) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// AllCalls counts every After call, the immediate ones included.
func (c *Fake) AllCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all
}

// Pending is the number of waiters not fired yet (a waiter abandoned by a
// woken component stays pending until its deadline).
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitCalls blocks until Calls() >= n, that is until the component has gone
// back to waiting on the clock; it fails the test if that does not happen
// within a generous real-time bound.
func (c *Fake) WaitCalls(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		calls, changed := c.calls, c.changed
		c.mu.Unlock()
		if calls >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the component did not come back to wait on the clock: %d After calls, want %d", calls, n)
		}
	}
}

// WaitDeadline blocks until a waiter whose deadline is at is pending: a
// component has begun the wait that ends then. It fails the test if none
// is within a generous real-time bound.
func (c *Fake) WaitDeadline(t testing.TB, at time.Time) {
	t.Helper()
	c.WaitDeadlines(t, at, 1)
}

// WaitDeadlines blocks until n waiters whose deadline is at are pending
// (abandoned ones count): a component that begins a wait, is woken
// otherwise (a channel it also selects on) and begins the same wait
// again has made two. Advancing the clock between a component's reading
// of Now and its call to After would move the second wait's deadline.
// It fails the test if there are not n within a generous real-time bound.
func (c *Fake) WaitDeadlines(t testing.TB, at time.Time, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		found := 0
		for _, w := range c.waiters {
			if w.at.Equal(at) {
				found++
			}
		}
		changed := c.changed
		c.mu.Unlock()
		if found >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d waits on the clock end at %s, want %d", found, at.Format(time.RFC3339Nano), n)
		}
	}
}

// Step advances to the deadline of the most recent wait (the one a single
// component is blocked on; older ones were abandoned when it was woken
// otherwise, and fire harmlessly), and waits until it waits on the
// clock again. It returns the new time.
func (c *Fake) Step(t testing.TB) time.Time {
	t.Helper()
	c.mu.Lock()
	n, last := c.calls, c.last
	if last == nil || last.fired {
		now := c.now
		c.mu.Unlock()
		t.Fatalf("nothing waits on the clock at %s", now.Format(time.RFC3339Nano))
	}
	c.setLocked(last.at)
	c.mu.Unlock()
	c.WaitCalls(t, n+1)
	return last.at
}

// StepEarliest moves to the earliest pending deadline and waits until every
// component it woke is back at rest (each component of the clock has one
// live waiter; call it only while none is abandoned). It returns the new
// time.
func (c *Fake) StepEarliest(t testing.TB) time.Time {
	t.Helper()
	n := c.Calls()
	fired := c.AdvanceToNext()
	if fired == 0 {
		t.Fatalf("nothing waits on the clock at %v", c.Now())
	}
	c.WaitCalls(t, n+fired)
	return c.Now()
}

// StepUntil steps (StepEarliest) until the clock reaches end, at most max
// steps.
func (c *Fake) StepUntil(t testing.TB, end time.Time, max int) {
	t.Helper()
	for i := 0; c.Now().Before(end); i++ {
		if i == max {
			t.Fatalf("%d steps and the clock is at %v, short of %v", max, c.Now(), end)
		}
		c.StepEarliest(t)
	}
}
