package scheduler_test

import (
	"testing"
	"time"
)

// TestClockSteppedYearsForwardDoesNotStall: a host booted with its clock
// at a default date (no RTC) and then set by NTP steps the wall clock
// years forward while the scheduler runs. A late tick stands for every
// time it was late for, and the last of those was found by stepping
// through each time between the due one and now: for @every 1s over two
// years, 63 million steps in one pass, during which no flow ticked and
// Stop waited (28 s under the race detector).
func TestClockSteppedYearsForwardDoesNotStall(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "fast", "@every 1s", "", ""),
		cronFlow("acme", "minutely", "* * * * *", "", ""))
	_, clk := e.startAt("a", st0, time.Second)
	clk.Step(t)
	n := clk.Calls()
	began := time.Now()
	clk.Advance(2 * 365 * 24 * time.Hour)
	for clk.Calls() < n+1 && time.Since(began) < time.Minute {
		time.Sleep(10 * time.Millisecond)
	}
	// a pass takes milliseconds; 5 s is slack for a loaded machine
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the pass after the clock jumped 2 years forward took %v", took)
	}
}
