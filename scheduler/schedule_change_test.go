package scheduler_test

import (
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestChangeJustBeforeADueTimeKeepsItsTick: a publication that changes a
// schedule within the poll interval before a due time that the new schedule
// has too (both tick at 15:00) does not drop that tick.
func TestChangeJustBeforeADueTimeKeepsItsTick(t *testing.T) {
	for _, change := range []bool{false, true} {
		e := newEnv(t)
		e.publish(cronFlow("acme", "nightly", "0 * * * *", "", ""))
		start := time.Date(2026, 8, 9, 14, 59, 50, 0, time.UTC)
		clk := clocktest.New(start)
		e.start("p1", clk, time.Second)
		clk.WaitCalls(t, 1)
		clk.StepUntil(t, start.Add(9*time.Second), 100) // 14:59:59
		if change {
			e.publish(cronFlow("acme", "nightly", "0,30 * * * *", "", ""))
		}
		clk.StepUntil(t, start.Add(11*time.Second), 100) // 15:00:01
		if got := e.ticks.all(); len(got) != 1 {
			t.Errorf("changed %v: ticks %v, want one at 15:00", change, got)
		}
	}
}

// TestEveryTakeoverKeepsThePeriod: the times of an @every schedule count
// from when a process started; a process taking a flow over goes on from
// the last tick, so no two ticks are less than a period apart.
func TestEveryTakeoverKeepsThePeriod(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "hourly", "@every 1h", "", ""))
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepEarliest(t) // a ticks at st0+1h
	// b starts (a second process, or a restart) 50 min after a
	clkB := clocktest.New(st0.Add(50 * time.Minute))
	e.start("b", clkB, time.Hour)
	clkB.WaitCalls(t, 1)
	clkB.StepEarliest(t) // st0+1h50m: b is refused the lock
	clkA.StepEarliest(t) // st0+2h: a ticks
	a.Stop()             // and goes away
	clkB.StepUntil(t, st0.Add(3*time.Hour+time.Minute), 100)
	got := e.ticks.all()
	if len(got) < 3 || !got[2].At.Equal(st0.Add(3*time.Hour)) {
		t.Fatalf("ticks %v, want st0+1h and st0+2h by a, then st0+3h by b", got)
	}
	for i := 1; i < len(got); i++ {
		if d := got[i].At.Sub(got[i-1].At); d < time.Hour {
			t.Errorf("ticks %v and %v only %v apart on @every 1h", got[i-1], got[i], d)
		}
	}
}
