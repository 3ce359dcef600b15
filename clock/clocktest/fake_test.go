package clocktest_test

import (
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

func TestFake(t *testing.T) {
	start := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	c := clocktest.New(start)
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
	if n := c.AdvanceToNext(); n != 1 || !c.Now().Equal(start.Add(time.Second)) {
		t.Fatalf("AdvanceToNext fired %d, now %v; want 1 at %v", n, c.Now(), start.Add(time.Second))
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
	if n := c.AdvanceToNext(); n != 0 {
		t.Errorf("AdvanceToNext with nothing pending fired %d", n)
	}
}
