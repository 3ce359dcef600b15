package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/scheduler"
)

// TestLateEveryTickCountsFromWhenItIsMade: an @every flow whose holder was
// suspended past a due time (15:02 + 1 h, woken at 16:32) ticks once, late,
// and its next time is a period after that tick for every process: the
// holder, one started in its place, and nexus status. The record held the
// last time of the period's grid (16:02), so a process started at 16:40
// ticked at 17:02, half a period after the late tick, and nexus status
// said 17:02 while the holder would have ticked at 17:32.
func TestLateEveryTickCountsFromWhenItIsMade(t *testing.T) {
	for _, restart := range []bool{false, true} {
		e := newEnv(t)
		e.publish(cronFlow("acme", "hourly", "@every 1h", "", ""))
		a, clkA := e.startAt("a", st0, time.Minute)
		clkA.StepUntil(t, st0.Add(61*time.Minute), 100) // ticks at 15:02
		n := clkA.Calls()
		clkA.AdvanceTo(st0.Add(150 * time.Minute)) // suspended: wakes at 16:32
		clkA.WaitCalls(t, n+1)
		clkA.StepUntil(t, st0.Add(158*time.Minute), 100) // 16:40
		sc := e.live.Live().Flows()[0].Flow.Schedule()
		if got, want := scheduler.NextTick(e.dir, "acme", "hourly", sc, clkA.Now()), st0.Add(210*time.Minute); !got.Equal(want) {
			t.Errorf("nexus status at 16:40 says the next tick is at %s, want 17:32", got.UTC().Format("15:04:05"))
		}
		clk, next := clkA, "a@17:32:00"
		if restart {
			a.Stop()
			_, clk = e.startAt("b", st0.Add(158*time.Minute), time.Minute)
			next = "b@17:32:00"
		}
		clk.StepUntil(t, st0.Add(240*time.Minute), 300) // 18:02
		want := []string{"a@15:02:00", "a@16:32:00", next}
		if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
			t.Errorf("restart %v: ticks (-want +got):\n%s", restart, diff)
		}
	}
}
