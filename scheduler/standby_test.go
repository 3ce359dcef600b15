package scheduler_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/scheduler"
)

// at is 14:mm:ss on st0's day (st0 is 14:02:00).
func at(mm, ss int) time.Time { return time.Date(2026, 8, 9, 14, mm, ss, 0, time.UTC) }

// tickTimes lists the ticks as "process@hh:mm:ss" (the process's clock at
// the append).
func tickTimes(ticks []tick) []string {
	var out []string
	for _, k := range ticks {
		out = append(out, k.Sched+"@"+k.At.UTC().Format("15:04:05"))
	}
	return out
}

// lastRecord reads the time of the flow's last-tick record (zero when
// there is none).
func (e *env) lastRecord(tenant, flowName string) time.Time {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, tenant, flowName+".last"))
	if os.IsNotExist(err) {
		return time.Time{}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		e.t.Fatalf("the .last record %q is empty", b)
	}
	n, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		e.t.Fatalf("the .last record %q: %v", b, err)
	}
	return time.Unix(0, n).UTC()
}

// lockHeld tells whether some process holds the flow's lock.
func (e *env) lockHeld(tenant, flowName string) bool {
	e.t.Helper()
	l := flock.New(filepath.Join(e.dir, tenant, flowName+".lock"))
	ok, err := l.TryLock()
	if err != nil {
		e.t.Fatal(err)
	}
	if ok {
		l.Unlock()
	}
	return !ok
}

// TestStandbyTakesOverAtAPoll: a process that does not hold a flow's lock
// (a standby) tries it at every poll, not only at its own due times. When it
// gets it, it ticks the most recent due time it passed while standing by,
// unless the holder ticked it already (the .last record), and nothing more.
//
// Process a (poll 1 h: it wakes only at due times) takes the lock at 14:03;
// process b (poll 10 s) stands by. Each process has its own clock, so that
// "a is late" is the test's choice: a's clock is left behind b's.
func TestStandbyTakesOverAtAPoll(t *testing.T) {
	cases := []struct {
		name   string
		bStart time.Time // b starts then (a starts at st0)
		aUntil time.Time // a's clock is stepped to here (a ticks on its time)
		bUntil time.Time // then b's clock, standing by
		aLate  time.Time // then a's again, if not zero: a ticks late
		// then a stops; b's next step is a poll between due times
		wantLast time.Time // the .last record after that poll
		want     []string  // the ticks until 14:06:30
	}{{
		name:   "holder late for a due time, then gone: the standby ticks it at its next poll",
		bStart: st0, aUntil: at(3, 0), bUntil: at(4, 0),
		wantLast: at(4, 0),
		want:     []string{"a@14:03:00", "b@14:04:10", "b@14:05:00", "b@14:06:00"},
	}, {
		name:   "holder stuck through several due times: only the latest is ticked, not a backlog",
		bStart: st0, aUntil: at(3, 0), bUntil: at(5, 0),
		wantLast: at(5, 0),
		want:     []string{"a@14:03:00", "b@14:05:10", "b@14:06:00"},
	}, {
		name:   "holder on time: the standby takes the lock between due times and ticks nothing",
		bStart: st0, aUntil: at(4, 0), bUntil: at(4, 0),
		wantLast: at(4, 0),
		want:     []string{"a@14:03:00", "a@14:04:00", "b@14:05:00", "b@14:06:00"},
	}, {
		name:   "holder late but ticks before it goes: no double tick",
		bStart: st0, aUntil: at(3, 0), bUntil: at(4, 0), aLate: at(4, 0),
		wantLast: at(4, 0),
		want:     []string{"a@14:03:00", "a@14:04:00", "b@14:05:00", "b@14:06:00"},
	}, {
		name:   "standby that passed no due time: nothing pending",
		bStart: at(3, 30), aUntil: at(3, 0), bUntil: at(3, 40),
		wantLast: at(3, 0),
		want:     []string{"a@14:03:00", "b@14:04:00", "b@14:05:00", "b@14:06:00"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
			clkA := clocktest.New(st0)
			a := e.start("a", clkA, time.Hour)
			clkA.WaitCalls(t, 1)
			clkA.StepUntil(t, c.aUntil, 10)
			if !e.lockHeld("acme", "minutely") {
				t.Fatal("a does not hold the lock")
			}
			clkB := clocktest.New(c.bStart)
			e.start("b", clkB, 10*time.Second)
			clkB.WaitCalls(t, 1)
			clkB.StepUntil(t, c.bUntil, 100)
			if !c.aLate.IsZero() {
				clkA.StepUntil(t, c.aLate, 10)
			}
			a.Stop() // releases the lock
			now := clkB.StepEarliest(t)
			if now.Second() == 0 {
				t.Fatalf("b's first step after a stopped is at %v, a due time: the case tests a poll", now)
			}
			if !e.lockHeld("acme", "minutely") {
				t.Errorf("at %v, a poll after a stopped, b has not taken the lock", now.Format(time.TimeOnly))
			}
			if got := e.lastRecord("acme", "minutely"); !got.Equal(c.wantLast) {
				t.Errorf("at %v the last tick recorded is %v, want %v", now.Format(time.TimeOnly), got.Format(time.TimeOnly), c.wantLast.Format(time.TimeOnly))
			}
			clkB.StepUntil(t, at(6, 30), 100)
			if diff := cmp.Diff(c.want, tickTimes(e.ticks.all())); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStandbyPendingFollowsScheduleChange: a time pending at a standby stays
// pending across a publication only if the new schedule has it too, as a due
// time does at the process holding the lock.
func TestStandbyPendingFollowsScheduleChange(t *testing.T) {
	cases := []struct {
		spec string
		want []string
	}{
		{"*/2 * * * *", []string{"a@14:03:00", "b@14:04:20", "b@14:06:00"}}, // has 14:04
		{"1-59/2 * * * *", []string{"a@14:03:00", "b@14:05:00"}},            // has not
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
			clkA := clocktest.New(st0)
			a := e.start("a", clkA, time.Hour)
			clkA.WaitCalls(t, 1)
			clkA.StepEarliest(t) // 14:03: a ticks
			clkB := clocktest.New(st0)
			e.start("b", clkB, 10*time.Second)
			clkB.WaitCalls(t, 1)
			clkB.StepUntil(t, at(4, 0), 100) // b is refused at 14:04, which a is late for
			e.publish(cronFlow("acme", "minutely", c.spec, "", ""))
			clkB.StepEarliest(t) // 14:04:10: b follows the change, still refused
			a.Stop()
			clkB.StepUntil(t, at(6, 30), 100)
			if diff := cmp.Diff(c.want, tickTimes(e.ticks.all())); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStandbyEveryTakeoverAtAPoll: an @every flow taken over at a poll goes
// on from the last tick, as a takeover at a due time does: a time the holder
// missed is ticked, and no two ticks are less than a period apart.
func TestStandbyEveryTakeoverAtAPoll(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "hourly", "@every 1h", "", ""))
	clkA := clocktest.New(st0)
	a := e.start("a", clkA, time.Hour)
	clkA.WaitCalls(t, 1)
	clkA.StepEarliest(t) // st0+1h: a ticks
	// b starts 50 min after a: its own times are st0+1h50m, st0+2h50m...
	clkB := clocktest.New(st0.Add(50 * time.Minute))
	e.start("b", clkB, 10*time.Minute)
	clkB.WaitCalls(t, 1)
	clkB.StepUntil(t, st0.Add(110*time.Minute), 10) // refused at st0+1h50m
	a.Stop()                                        // late for st0+2h, and gone
	clkB.StepUntil(t, st0.Add(3*time.Hour+time.Minute), 20)
	want := []string{"a@15:02:00", "b@16:02:00", "b@17:02:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// TestStandbyTwoProcessesOneTickPerTime: two processes on one clock, both
// polling often; each due time is ticked once, by the holder, and after the
// holder stops by the other, with none lost or doubled at the handover.
func TestStandbyTwoProcessesOneTickPerTime(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
	clk := clocktest.New(st0)
	procs := map[string]*scheduler.Scheduler{
		"p1": e.start("p1", clk, 10*time.Second),
		"p2": e.start("p2", clk, 10*time.Second),
	}
	clk.WaitCalls(t, 2)
	clk.StepUntil(t, at(10, 30), 200)
	ticks := e.ticks.all()
	if len(ticks) == 0 {
		t.Fatal("no tick")
	}
	holder := ticks[0].Sched
	other := map[string]string{"p1": "p2", "p2": "p1"}[holder]
	procs[holder].Stop()
	// both waited for 14:10:40 (same clock, same poll); the stopped one's
	// wait is abandoned, so only the other comes back
	n := clk.Calls()
	if fired := clk.AdvanceToNext(); fired != 2 {
		t.Fatalf("%d waits fired at %v, want both processes'", fired, clk.Now())
	}
	clk.WaitCalls(t, n+1)
	clk.StepUntil(t, at(15, 30), 200)
	var want []string
	for m := 3; m <= 15; m++ {
		who := holder
		if m > 10 {
			who = other
		}
		want = append(want, who+"@"+at(m, 0).Format("15:04:05"))
	}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// TestEveryKeepsItsTimesAcrossRestarts: an @every flow goes on from its
// last tick when its server restarts, rather than a period after the
// start: restarted every 45 s, a host with "@every 1m" still ticks every
// minute on the minute of its first tick (the times it was down for are
// not made up). Counted from each start, it never ticked.
func TestEveryKeepsItsTimesAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	at := st0
	for i, life := range []time.Duration{70 * time.Second, 45 * time.Second, 45 * time.Second, 45 * time.Second, 45 * time.Second, 45 * time.Second, 45 * time.Second} {
		if i == 4 {
			at = at.Add(2 * time.Minute) // down for two ticks
		}
		s, clk := e.startAt(fmt.Sprintf("p%d", i), at, time.Second)
		clk.StepUntil(t, at.Add(life), 100)
		s.Stop()
		at = at.Add(life)
	}
	want := []string{"p0@14:03:00", "p2@14:04:00", "p3@14:05:00", "p4@14:08:00", "p6@14:09:00"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// TestEveryScheduledAgainCountsFromThePublication: a flow given an @every
// schedule while a process runs counts from the publication, even with a
// last-tick record from an earlier schedule (only the flows a process
// starts with go on from their record).
func TestEveryScheduledAgainCountsFromThePublication(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "report", "@every 1h", "", ""))
	a, clkA := e.startAt("a", st0, time.Minute)
	clkA.StepUntil(t, st0.Add(61*time.Minute), 100) // ticks at 15:02
	a.Stop()
	e.publish(flowSrc("acme", "report", "")) // unscheduled
	_, clkB := e.startAt("b", st0.Add(70*time.Minute), time.Minute)
	clkB.StepUntil(t, st0.Add(210*time.Minute), 300) // 17:32
	e.publish(cronFlow("acme", "report", "@every 90m", "", ""))
	clkB.StepUntil(t, st0.Add(6*time.Hour), 600)
	want := []string{"a@15:02:00", "b@19:03:00"} // a period after the pass that saw it (17:33)
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}
