package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestStandbyTicksAStuckHoldersTimeOnceLate: a holder stuck through a
// nightly time (it holds the lock and ticks nothing, as when SIGSTOPped)
// and then gone leaves that time to the standby, which saw it pass while
// it ran: the standby ticks it once, late, when it takes the flow over
// (hours after it, since the next time has not come), and then the next
// night's time on time. This is the decision recorded in decisions.md ("A
// standby ticks the time a holder left"): a time that passed while some
// process followed the flow is ticked once, late, as the holder would tick
// it were it continued; one that passed while no process ran is not
// (resume's minute).
func TestStandbyTicksAStuckHoldersTimeOnceLate(t *testing.T) {
	day := func(d, hh, mm int) time.Time { return time.Date(2026, 8, d, hh, mm, 0, 0, time.UTC) }
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "nightly", "0 3 * * *", "", ""))
	clkA := clocktest.New(day(9, 1, 0))
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepUntil(t, day(9, 2, 0), 5) // a takes the lock at 02:00, then is stuck
	if !e.lockHeld("acme", "nightly") {
		t.Fatal("a does not hold the lock")
	}
	clkB := clocktest.New(day(9, 2, 30))
	e.start("b", clkB, 10*time.Minute)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, day(9, 20, 0), 200) // 03:00 passes at b, refused
	if got := e.ticks.all(); len(got) != 0 {
		t.Fatalf("ticks while a holds the lock: %v", got)
	}
	a.Stop() // gone without ticking 03:00
	clkB.StepUntil(t, day(10, 3, 5), 200)
	want := []string{"b@20:10:00", "b@03:00:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	var stoodFor []string
	for _, ev := range logs.Events(t, "cron_tick") {
		stoodFor = append(stoodFor, fmt.Sprint(ev["scheduled_for"]))
	}
	if diff := cmp.Diff([]string{"2026-08-09T03:00:00Z", "2026-08-10T03:00:00Z"}, stoodFor); diff != "" {
		t.Errorf("the ticks' scheduled_for (-want +got):\n%s", diff)
	}
	if got := e.lastRecord("acme", "nightly"); !got.Equal(day(10, 3, 0)) {
		t.Errorf("last tick recorded %v, want the second night's 03:00", got)
	}
}
