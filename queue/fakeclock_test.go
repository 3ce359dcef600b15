package queue_test

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/queue"
)

// fakeClock is a queue.Clock whose time moves only when a test says so.
//
// After(d) with d > 0 registers a waiter that Advance fires once its
// deadline is reached; After(d) with d <= 0 fires at once. A worker blocks
// only on After with d > 0, so Calls, the number of those, tells a test when
// the worker has come back to its wait: take n := Calls() before an action
// that wakes the worker exactly once, then WaitCalls(n+1). Tests never sleep.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter // not fired yet, in registration order
	last    *fakeWaiter   // the most recent After call with d > 0
	calls   int           // After calls with d > 0
	all     int           // every After call
	changed chan struct{} // closed and replaced on every After call
}

type fakeWaiter struct {
	at    time.Time
	ch    chan time.Time
	fired bool
}

var _ queue.Clock = (*fakeClock)(nil)

func newFakeClock(start time.Time) *fakeClock {
	return &fakeClock{now: start, changed: make(chan struct{})}
}

// Now is the fake time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once d has passed on
// the fake clock.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.all++
	if d <= 0 {
		ch <- c.now
	} else {
		c.calls++
		c.last = &fakeWaiter{at: c.now.Add(d), ch: ch}
		c.waiters = append(c.waiters, c.last)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the time on by d and fires the waiters that are due, in
// deadline order. It returns how many it fired.
func (c *fakeClock) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(c.now.Add(d))
}

// AdvanceTo moves the time to t (never backwards) and fires what is due.
func (c *fakeClock) AdvanceTo(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		t = c.now
	}
	return c.setLocked(t)
}

// AdvanceToNext moves the time to the earliest pending deadline and fires
// every waiter due then. It reports false when nothing is pending.
func (c *fakeClock) AdvanceToNext() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return c.now, false
	}
	next := c.waiters[0].at
	for _, w := range c.waiters[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	c.setLocked(next)
	return next, true
}

func (c *fakeClock) setLocked(t time.Time) int {
	c.now = t
	var due, keep []*fakeWaiter
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
// what a single worker blocked on the clock waits for.
func (c *fakeClock) LastDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || c.last.fired {
		return time.Time{}, false
	}
	return c.last.at, true
}

// Calls is the number of After calls with d > 0 so far: the times a worker
// went back to waiting on the clock.
func (c *fakeClock) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// AllCalls counts every After call, the immediate ones included.
func (c *fakeClock) AllCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all
}

// Pending is the number of waiters not fired yet (a waiter abandoned by a
// woken worker stays pending until its deadline).
func (c *fakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitCalls blocks until Calls() >= n, that is until the worker has gone
// back to waiting on the clock; it fails the test if that does not happen
// within a generous real-time bound.
func (c *fakeClock) WaitCalls(t testing.TB, n int) {
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
			t.Fatalf("the worker did not come back to wait on the clock: %d After calls, want %d", calls, n)
		}
	}
}

// Step advances to the deadline of the most recent wait (the one a single
// worker is blocked on; older ones were abandoned when it was woken
// otherwise, and fire harmlessly), and waits until the worker waits on the
// clock again. It returns the new time.
func (c *fakeClock) Step(t testing.TB) time.Time {
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

func TestFakeClock(t *testing.T) {
	start := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	c := newFakeClock(start)
	a := c.After(2 * time.Second)
	b := c.After(time.Second)
	now := c.After(0)
	select {
	case got := <-now:
		if !got.Equal(start) {
			t.Errorf("After(0) fired with %v, want %v", got, start)
		}
	default:
		t.Fatal("After(0) did not fire at once")
	}
	if c.Calls() != 2 || c.AllCalls() != 3 || c.Pending() != 2 {
		t.Fatalf("Calls %d AllCalls %d Pending %d, want 2 3 2", c.Calls(), c.AllCalls(), c.Pending())
	}
	if n := c.Advance(999 * time.Millisecond); n != 0 {
		t.Fatalf("Advance(999ms) fired %d waiters", n)
	}
	select {
	case <-a:
		t.Fatal("a fired early")
	case <-b:
		t.Fatal("b fired early")
	default:
	}
	if at, ok := c.AdvanceToNext(); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("AdvanceToNext = %v %v, want %v", at, ok, start.Add(time.Second))
	}
	if got := <-b; !got.Equal(start.Add(time.Second)) {
		t.Errorf("b fired with %v", got)
	}
	if n := c.AdvanceTo(start.Add(time.Hour)); n != 1 {
		t.Fatalf("AdvanceTo fired %d, want 1", n)
	}
	if got := <-a; !got.Equal(start.Add(time.Hour)) {
		t.Errorf("a fired with %v, want the time it was fired at", got)
	}
	if c.AdvanceTo(start); !c.Now().Equal(start.Add(time.Hour)) {
		t.Errorf("AdvanceTo moved the clock backwards to %v", c.Now())
	}
	if _, ok := c.AdvanceToNext(); ok {
		t.Error("AdvanceToNext with nothing pending reported a deadline")
	}
}
