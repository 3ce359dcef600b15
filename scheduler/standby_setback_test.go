package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestStandbySetBackLongAgoTakesOverNoDoubleTick: a standby that saw the
// clock set back by more than a gap, while the holder went on ticking by
// the clock, later takes the flow over at a poll, its clock a little
// behind the holder's (as in TestStandbyBehindTakesOverNoDoubleTick): the
// holder's record, made after the set back, holds. The standby kept the
// set back it saw until it first fired, and set the record aside: it
// ticked 13:39 and 13:40 a second time.
func TestStandbySetBackLongAgoTakesOverNoDoubleTick(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepEarliest(t) // 14:03 a ticks
	clkB := clocktest.New(st0.Add(-5 * time.Second))
	e.start("b", clkB, time.Second)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, at(2, 30), 100) // b refused at 14:02
	// the machine's clock set back by half an hour: both see it
	clkA.SetBack(30 * time.Minute)
	clkB.SetBack(30 * time.Minute)
	clkB.StepEarliest(t)                              // b sees it at its next poll
	clkA.StepUntil(t, at(40, 0).Add(-time.Hour), 100) // a ticks 13:35 to 13:40 by the clock
	clkB.StepUntil(t, at(39, 57).Add(-time.Hour), 1000)
	a.Stop()
	clkB.StepUntil(t, at(42, 30).Add(-time.Hour), 1000)
	want := []string{"a@14:03:00", "a@13:35:00", "a@13:36:00", "a@13:37:00", "a@13:38:00", "a@13:39:00", "a@13:40:00", "b@13:41:00", "b@13:42:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}
