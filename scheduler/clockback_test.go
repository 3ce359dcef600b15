package scheduler_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
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
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := &jsonlogtest.Buffer{}
			e.log = logs.Logger(slog.LevelInfo)
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
