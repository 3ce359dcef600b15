package scheduler_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/queue"
)

// fakeClock is a queue.Clock whose time moves only when a test says so.
//
// After(d) with d > 0 registers a waiter fired by the Advance calls that
// reach its deadline; After(d) with d <= 0 fires at once. A scheduler blocks
// only on After with d > 0, so Calls, the number of those, tells a test when
// the scheduler is back at rest: take n := Calls() before an action that
// wakes it exactly once, then WaitCalls(n+1).
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
	calls   int // After calls with d > 0
	all     int // every After call
	changed chan struct{}
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

var _ queue.Clock = (*fakeClock)(nil)

func newFakeClock(start time.Time) *fakeClock {
	return &fakeClock{now: start, changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.all++
	if d <= 0 {
		ch <- c.now
	} else {
		c.calls++
		c.waiters = append(c.waiters, &fakeWaiter{at: c.now.Add(d), ch: ch})
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the time on by d and fires what is due; it returns how many
// waiters it fired.
func (c *fakeClock) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(c.now.Add(d))
}

// AdvanceToNext moves the time to the earliest pending deadline and fires
// everything due then; it returns how many waiters it fired (0 when nothing
// was pending).
func (c *fakeClock) AdvanceToNext() int {
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

func (c *fakeClock) setLocked(t time.Time) int {
	if t.Before(c.now) {
		t = c.now
	}
	c.now = t
	fired := 0
	keep := c.waiters[:0:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			keep = append(keep, w)
			continue
		}
		w.ch <- t
		fired++
	}
	c.waiters = keep
	return fired
}

func (c *fakeClock) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func (c *fakeClock) AllCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all
}

// WaitCalls blocks until Calls() >= n, failing the test after a generous
// real-time bound.
func (c *fakeClock) WaitCalls(t testing.TB, n int) {
	t.Helper()
	if !c.waitCalls(n, 10*time.Second) {
		t.Fatalf("the scheduler did not come back to wait on the clock: %d After calls (%d with immediate ones), want %d", c.Calls(), c.AllCalls(), n)
	}
}

func (c *fakeClock) waitCalls(n int, bound time.Duration) bool {
	deadline := time.After(bound)
	for {
		c.mu.Lock()
		calls, changed := c.calls, c.changed
		c.mu.Unlock()
		if calls >= n {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// Step moves to the earliest pending deadline and waits until every
// scheduler it woke is at rest again (each scheduler of the clock has one
// live waiter; call Step only while none is abandoned). It returns the new
// time.
func (c *fakeClock) Step(t testing.TB) time.Time {
	t.Helper()
	n := c.Calls()
	fired := c.AdvanceToNext()
	if fired == 0 {
		t.Fatalf("nothing waits on the clock at %v", c.Now())
	}
	c.WaitCalls(t, n+fired)
	return c.Now()
}

// StepUntil steps until the clock reaches end (at most max steps).
func (c *fakeClock) StepUntil(t testing.TB, end time.Time, max int) {
	t.Helper()
	for i := 0; c.Now().Before(end); i++ {
		if i == max {
			t.Fatalf("%d steps and the clock is at %v, short of %v", max, c.Now(), end)
		}
		c.Step(t)
	}
}

func TestFakeClock(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	c := newFakeClock(start)
	a, b := c.After(time.Minute), c.After(time.Second)
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
	if n := c.AdvanceToNext(); n != 1 || !c.Now().Equal(start.Add(time.Second)) {
		t.Fatalf("AdvanceToNext fired %d, now %v", n, c.Now())
	}
	if got := <-b; !got.Equal(start.Add(time.Second)) {
		t.Errorf("b fired with %v", got)
	}
	select {
	case <-a:
		t.Fatal("a fired early")
	default:
	}
	if n := c.Advance(time.Hour); n != 1 {
		t.Fatalf("Advance fired %d", n)
	}
	<-a
	if c.Calls() != 2 || c.AllCalls() != 3 {
		t.Errorf("Calls %d AllCalls %d", c.Calls(), c.AllCalls())
	}
}
