package scheduler_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestEveryChangeJustBeforeADueTimeKeepsItsTick: a publication that
// arrives within the poll before an @every flow's due time and writes the
// same period otherwise ("@every 60s" as "@every 1m") or adds a
// schedule_timezone (an @every schedule's times are the same in every
// zone) keeps the tick that was due (docs/decisions.md: "a tick that was
// due then still fires if the new schedule has that time too … or a change
// of form only"). It was dropped: no tick at +60 s, the next at +120 s.
func TestEveryChangeJustBeforeADueTimeKeepsItsTick(t *testing.T) {
	for _, c := range []struct{ name, from, fromZone, to, toZone string }{
		{"unchanged (control)", "@every 60s", "", "@every 60s", ""},
		{"form only", "@every 60s", "", "@every 1m", ""},
		{"zone only", "@every 1m", "", "@every 1m", "Europe/Berlin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "minutely", c.from, c.fromZone, ""))
			clk := clocktest.New(st0)
			e.start("p1", clk, time.Second)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, st0.Add(59*time.Second), 100) // the last poll before the due time
			e.publish(cronFlow("acme", "minutely", c.to, c.toZone, ""))
			clk.StepUntil(t, st0.Add(121*time.Second), 200)
			if got := e.ticks.times(st0); len(got) != 2 || got[0] != 60*time.Second || got[1] != 120*time.Second {
				t.Errorf("%s -> %s: ticks at %v after st0, want [1m0s 2m0s] (the due tick kept)", c.from, c.to, got)
			}
		})
	}
}

// TestStandbyPendingEveryFormChange: the same edit at a standby keeps
// the time it holds as pending (the holder was late for it, then stopped),
// which it ticks when it takes over; the edit cleared it, and that time was
// never ticked.
func TestStandbyPendingEveryFormChange(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepEarliest(t) // 14:03: a ticks
	clkB := clocktest.New(st0)
	e.start("b", clkB, 10*time.Second)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, at(4, 0), 100) // b is refused at 14:04, which a is late for
	e.publish(cronFlow("acme", "minutely", "@every 60s", "", ""))
	clkB.StepEarliest(t) // 14:04:10: b follows the change, still refused
	a.Stop()
	clkB.StepUntil(t, at(6, 30), 100)
	got := tickTimes(e.ticks.all())
	if !slices.Contains(got, "b@14:04:20") {
		t.Errorf("ticks %v: 14:04, pending at b, was not ticked when b took over at 14:04:20", got)
	}
}

// TestEveryNoOpChangeKeepsTheTimes: the same edit between due times keeps
// the times of the period (docs/decisions.md: "the times of an @every
// schedule count from when a process started"); it restarted the count from
// the publication, so an @every 1h flow edited at +30 min ticked at +1h30m.
func TestEveryNoOpChangeKeepsTheTimes(t *testing.T) {
	for _, c := range []struct{ name, to, toZone string }{
		{"form only", "@every 60m", ""},
		{"zone only", "@every 1h", "Asia/Tokyo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "hourly", "@every 1h", "", ""))
			clk := clocktest.New(st0)
			e.start("p1", clk, time.Second)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, st0.Add(30*time.Minute), 4000)
			e.publish(cronFlow("acme", "hourly", c.to, c.toZone, ""))
			clk.StepUntil(t, st0.Add(61*time.Minute), 4000)
			if got := e.ticks.times(st0); len(got) != 1 || got[0] != time.Hour {
				t.Errorf("@every 1h -> %s %s: ticks at %v after st0 by st0+61m, want one at 1h0m0s", c.to, c.toZone, got)
			}
		})
	}
}
