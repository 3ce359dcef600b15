package scheduler_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/scheduler"
)

// TestClockSetBack: when the wall clock is set back, the flow goes on
// ticking by the clock. It stayed silent for as long as the clock went
// back: its next time had been computed on the clock before, and the last
// tick's record was ahead of every time due. A time ticked already is not
// ticked again unless the clock went back by more than the gap between two
// ticks (then the times of the gap are new ones).
func TestClockSetBack(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		back       time.Duration
		until      time.Time // the clock's time, after the set back, at which the ticks are read
		want       []string  // the ticks, by the clock
		logged     int       // cron_clock_set_back lines
	}{
		// a period after the first pass on the clock set back (13:04:11)
		{"@every by an hour", "@every 1m", time.Hour, at(6, 30).Add(-time.Hour),
			[]string{"a@14:03:00", "a@14:04:00", "a@13:05:11", "a@13:06:11"}, 2},
		// a period after the last tick, by the clock
		{"@every by half a period", "@every 1m", 30 * time.Second, at(6, 30),
			[]string{"a@14:03:00", "a@14:04:00", "a@14:05:00", "a@14:06:00"}, 1},
		{"a cron expression by less than its gap", "*/15 * * * *", 5 * time.Minute, at(45, 30),
			[]string{"a@14:15:00", "a@14:30:00", "a@14:45:00"}, 1},
		{"a cron expression by more than its gap", "*/15 * * * *", time.Hour, at(45, 30).Add(-time.Hour),
			[]string{"a@14:15:00", "a@13:30:00", "a@13:45:00"}, 2},
		// 14:00 is 15 minutes from the record, but the clock went back by
		// 20, more than the gap: the times since 13:56 are new ones (the
		// record was compared with the time due, and nothing ticked until
		// 14:30)
		{"a cron expression by between one and two gaps", "*/15 * * * *", 20 * time.Minute, at(15, 30),
			[]string{"a@14:15:00", "a@14:00:00", "a@14:15:00"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "beat", c.spec, "", ""))
			clk := clocktest.New(st0)
			e.start("a", clk, time.Second)
			clk.WaitCalls(t, 1)
			setAt := at(4, 10)
			if c.spec != "@every 1m" {
				setAt = at(16, 0)
			}
			clk.StepUntil(t, setAt, 2000)
			clk.SetBack(c.back)
			clk.StepUntil(t, c.until, 5000)
			if diff := cmp.Diff(c.want, tickTimes(e.ticks.all())); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			// the next time brought back, and the record set aside
			if got := logs.Events(t, "cron_clock_set_back"); len(got) != c.logged {
				t.Errorf("cron_clock_set_back lines %v, want %d", got, c.logged)
			}
		})
	}
}

// TestChathamFallBackDoesNotSpin: in Pacific/Chatham the clock falls
// back at 03:45 (+1345) to 02:45 (+1245), so 03:00 happens twice (13:15 and
// 14:15 UTC on 2026-04-04): a fixed-time 0 3 * * * ticks at the first
// only, a wildcard 0 * * * * at both (docs: Daylight saving). Between
// 14:00 and 14:15 UTC robfig/cron's Next returned 13:15 UTC, a time in
// the past. A set back is now read from the clock itself; when it was
// read from Next going back, this was one (a false cron_clock_set_back),
// the next time became 13:15 UTC, and the loop waited 0 at every pass
// until 14:15: it spun. 0 3 * * * ticked at both.
func TestChathamFallBackDoesNotSpin(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []string
	}{
		{"0 3 * * *", []string{"a@13:15:00"}},
		{"0 * * * *", []string{"a@13:15:00", "a@14:15:00"}},
	} {
		t.Run(c.spec, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "nightly", c.spec, "Pacific/Chatham", ""))
			start := time.Date(2026, 4, 4, 13, 0, 0, 0, time.UTC)
			clk := clocktest.New(start)
			e.start("a", clk, time.Minute)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, start.Add(80*time.Minute), 200)
			if got := tickTimes(e.ticks.all()); !cmp.Equal(got, c.want) {
				t.Errorf("ticks %v, want %v", got, c.want)
			}
			wantNoSetBack(t, logs)
		})
	}
}

// TestLordHoweNoFalseClockSetBack: in Australia/Lord_Howe robfig/cron
// stepped over the daily 12:00 of the day the clock moves, so its Next
// was not monotonic: Next(01:00 UTC) was 04-06, Next(15:30 UTC) 04-05,
// which was taken for a clock set back. (flow.Schedule.Next no longer
// uses it; TestSchedulerLordHoweAcrossDST holds the times.)
func TestLordHoweNoFalseClockSetBack(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "noon", "0 12 * * *", "Australia/Lord_Howe", ""))
	start := time.Date(2026, 4, 4, 0, 30, 0, 0, time.UTC)
	clk := clocktest.New(start)
	e.start("a", clk, time.Minute)
	clk.WaitCalls(t, 1)
	clk.StepUntil(t, time.Date(2026, 4, 5, 2, 0, 0, 0, time.UTC), 3000)
	wantNoSetBack(t, logs)
}

// TestNoFalseClockSetBackInNormalOperation: irregular gaps, a DST
// change in a zone, a late holder, a standby with a clock a little behind:
// no cron_clock_set_back, each time ticked once.
func TestNoFalseClockSetBackInNormalOperation(t *testing.T) {
	for _, c := range []struct {
		name, spec, zone string
		start            time.Time
		span             time.Duration
		poll             time.Duration
	}{
		{"twice a day", "0 9,17 * * *", "", st0, 72 * time.Hour, time.Hour},
		{"monthly", "0 0 1 * *", "", st0, 100 * 24 * time.Hour, 24 * time.Hour},
		{"New York fall back, 01:30 twice", "30 1 * * *", "America/New_York", time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), 72 * time.Hour, 10 * time.Minute},
		{"New York spring forward", "30 2 * * *", "America/New_York", time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC), 72 * time.Hour, 10 * time.Minute},
		{"Berlin hourly across fall back", "0 * * * *", "Europe/Berlin", time.Date(2026, 10, 24, 20, 0, 0, 0, time.UTC), 30 * time.Hour, 7 * time.Minute},
		{"@every with a zone", "@every 7m", "Asia/Kolkata", st0, 3 * time.Hour, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "f", c.spec, c.zone, ""))
			clkA := clocktest.New(c.start)
			e.start("a", clkA, c.poll)
			clkA.WaitCalls(t, 1)
			clkA.StepUntil(t, c.start.Add(c.span), 20000)
			wantNoSetBack(t, logs)
			seen := map[string]bool{}
			for _, ev := range logs.Events(t, "cron_tick") {
				s, _ := ev["scheduled_for"].(string)
				if seen[s] {
					t.Errorf("%s ticked twice", s)
				}
				seen[s] = true
			}
			if len(seen) == 0 {
				t.Error("no tick")
			}
		})
	}
}

// TestStandbyBehindTakesOverNoDoubleTick: a standby whose clock is
// behind the holder's, on a "* * * * *" flow, takes it over at a poll
// after the holder ticked 14:04 and stopped: no time is ticked twice, none
// of the holder's record is taken for a clock set back, and the standby
// goes on from 14:05. 90 s behind is more than the schedule's gap, a
// minute: the record, 14:04, is 2 min ahead of the time b holds pending
// (14:02), but b's clock was never set back, so the record holds. When a
// record more than a gap ahead was taken for a set back, b ticked 14:02,
// then 14:03 and 14:04 a second time.
func TestStandbyBehindTakesOverNoDoubleTick(t *testing.T) {
	for _, c := range []struct {
		name   string
		behind time.Duration
		poll   time.Duration // b's
		before time.Time     // b's clock when a stops
	}{
		{"5 s behind", 5 * time.Second, time.Second, at(3, 57)},
		{"90 s behind", 90 * time.Second, 10 * time.Second, at(2, 40)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "minutely", "* * * * *", "", ""))
			clkA := clocktest.New(st0)
			a := e.start("a", clkA, time.Hour)
			clkA.WaitCalls(t, 1)
			clkA.StepEarliest(t) // 14:03 a ticks
			clkB := clocktest.New(st0.Add(-c.behind))
			e.start("b", clkB, c.poll)
			clkB.WaitCalls(t, 1)
			clkA.StepEarliest(t) // 14:04 a ticks
			clkB.StepUntil(t, c.before, 400)
			a.Stop()
			clkB.StepUntil(t, at(6, 30), 400)
			want := []string{"a@14:03:00", "a@14:04:00", "b@14:05:00", "b@14:06:00"}
			if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			wantNoSetBack(t, logs)
		})
	}
}

// TestRestartAfterTheClockWasSetBack: a process starts on a clock set
// back, while no process ran, by more than the gap between two ticks
// (a host whose clock ran a day ahead until it was put right): the
// last-tick record is ahead of every time due. The flow ticks by the
// clock, as a running process does when it sees the clock go back; it
// stayed silent until the clock caught up with the record, and NextTick
// showed the record's next time. A record ahead by less than the gap
// still keeps the time it ticked from being ticked again.
func TestRestartAfterTheClockWasSetBack(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		back       time.Duration // how far the clock is set back before the restart
		want       []string      // the second process's ticks until 14:10:30
		nextTick   time.Time     // NextTick, scheduler.NextTick, at the restart
	}{
		{"@every by a day", "@every 1m", 24 * time.Hour,
			[]string{"b@14:05:00", "b@14:06:00", "b@14:07:00", "b@14:08:00", "b@14:09:00", "b@14:10:00"}, at(5, 0)},
		{"a cron expression by a day", "*/5 * * * *", 24 * time.Hour,
			[]string{"b@14:05:00", "b@14:10:00"}, at(5, 0)},
		// the record (14:05) is 1 minute ahead of the restart at 14:04,
		// less than the gap: 14:05 was ticked, 14:10 is next
		{"a cron expression by less than its gap", "*/5 * * * *", time.Minute,
			[]string{"b@14:10:00"}, at(10, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			ls := e.publish(cronFlow("acme", "beat", c.spec, "", ""))
			lf, _ := ls.Lookup("acme", "beat")
			sc := lf.Flow.Schedule()
			clkA := clocktest.New(st0)
			a := e.start("a", clkA, time.Hour)
			clkA.WaitCalls(t, 1)
			restart := at(4, 0)
			clkA.StepUntil(t, restart.Add(c.back), 5000)
			a.Stop()
			before := len(e.ticks.all())
			if got := scheduler.NextTick(e.dir, "acme", "beat", sc, restart); !got.Equal(c.nextTick) {
				t.Errorf("scheduler.NextTick at the restart = %v, want %v", got.UTC(), c.nextTick)
			}
			clkB := clocktest.New(restart)
			b := e.start("b", clkB, time.Second)
			clkB.WaitCalls(t, 1)
			if got := b.NextTick("acme", "beat", sc, restart); !got.Equal(c.nextTick) {
				t.Errorf("Scheduler.NextTick at the restart = %v, want %v", got.UTC(), c.nextTick)
			}
			clkB.StepUntil(t, at(10, 30), 2000)
			if diff := cmp.Diff(c.want, tickTimes(e.ticks.all()[before:])); diff != "" {
				t.Errorf("ticks after the restart (-want +got):\n%s", diff)
			}
			if c.back > 5*time.Minute {
				if got := logs.Events(t, "cron_clock_set_back"); len(got) != 1 {
					t.Errorf("cron_clock_set_back lines %v, want 1 (the record set aside once)", got)
				}
			} else {
				wantNoSetBack(t, logs)
			}
		})
	}
}

// TestTickWhoseRecordFailsIsTriedAgain: a due tick whose .last record
// cannot be written (a full disk; here a folder where the record's
// temporary file goes) appends nothing, and is tried again at every poll
// until the record is written, then appended; one still failing when the
// next tick is due is lost, logged. It was skipped at once: every tick
// due while the disk was full was lost.
func TestTickWhoseRecordFailsIsTriedAgain(t *testing.T) {
	e := newEnv(t)
	logs := e.captureLog()
	e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	_, clk := e.startAt("a", st0, time.Second)
	clk.StepUntil(t, at(3, 30), 200) // 14:03 ticks
	unblock := e.blockRecord("acme", "minutely")
	clk.StepUntil(t, at(4, 20), 200) // 14:04 cannot be recorded, nor at the polls after
	unblock()
	clk.StepUntil(t, at(5, 30), 200) // recorded and appended at the next poll; 14:05 ticks
	unblock = e.blockRecord("acme", "minutely")
	clk.StepUntil(t, at(7, 30), 300) // 14:06 fails until 14:07 is due: lost; 14:07 fails too
	unblock()
	clk.StepUntil(t, at(7, 40), 300) // 14:07, at the next poll
	want := []string{"a@14:03:00", "a@14:04:21", "a@14:05:00", "a@14:07:31"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	var lost int
	for _, l := range logs.Events(t, "cron_failed") {
		if strings.Contains(fmt.Sprint(l["msg"]), "it is lost") {
			lost++
			if l["scheduled_for"] != "2026-08-09T14:06:00Z" {
				t.Errorf("lost tick %v, want the one of 14:06", l["scheduled_for"])
			}
		}
	}
	if lost != 1 {
		t.Errorf("%d ticks logged as lost, want 1 (14:06)", lost)
	}
	// the records, as ticked: 14:07 is the last
	if got, want := scheduler.NextTick(e.dir, "acme", "minutely", e.live.Live().Flows()[0].Flow.Schedule(), at(7, 40)), at(8, 0); !got.Equal(want) {
		t.Errorf("NextTick after the last record %v, want %v", got.UTC(), want)
	}
}

// TestTickRecordedButNotQueuedIsQueued: the write of a tick's record can
// fail after its rename went through (the folder's sync failing): the
// record then holds the tick, though nothing was queued. Tried again, the
// tick is queued (this process holds the flow: the record is its own); it
// was taken for a tick made already, and lost without a word.
func TestTickRecordedButNotQueuedIsQueued(t *testing.T) {
	e := newEnv(t)
	e.publish(cronFlow("acme", "minutely", "@every 1m", "", ""))
	_, clk := e.startAt("a", st0, time.Second)
	clk.StepUntil(t, at(3, 30), 200) // 14:03 ticks
	unblock := e.blockRecord("acme", "minutely")
	clk.StepUntil(t, at(4, 10), 200) // 14:04's write fails
	// as if its rename had gone through
	record := filepath.Join(e.dir, "acme", "minutely.last")
	if err := os.WriteFile(record, []byte(strconv.FormatInt(at(4, 0).UnixNano(), 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unblock()
	clk.StepUntil(t, at(4, 30), 200)
	want := []string{"a@14:03:00", "a@14:04:11"}
	if diff := cmp.Diff(want, tickTimes(e.ticks.all())); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}
