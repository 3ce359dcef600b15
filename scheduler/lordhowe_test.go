package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestSchedulerLordHoweAcrossDST: Australia/Lord_Howe moves its clock by
// 30 minutes, on 4 October 2026 from 02:00 (+1030) to 02:30 (+1100), on 5
// April 2026 from 02:00 (+1100) back to 01:30 (+1030). The scheduler
// ticks as in any zone (docs: Daylight saving): a fixed-time time the
// clock jumps over ticks right after the jump (02:30), one it shows
// twice ticks at the first, every other time once. A daily 01:30 ticked
// a second time at 02:30 on 4 October, and a daily 02:00 did not tick on
// 5 April, as robfig/cron's Next answered.
func TestSchedulerLordHoweAcrossDST(t *testing.T) {
	lordHowe, err := time.LoadLocation("Australia/Lord_Howe")
	if err != nil {
		t.Fatal(err)
	}
	october := [2]time.Time{time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC)}
	april := [2]time.Time{time.Date(2026, 4, 3, 12, 0, 0, 0, time.UTC), time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)}
	for _, c := range []struct {
		name, spec string
		span       [2]time.Time
		want       []string
	}{
		{"01:30 forward", "30 1 * * *", october, []string{"10-03 01:30 +1030", "10-04 01:30 +1030", "10-05 01:30 +1100", "10-06 01:30 +1100"}},
		{"02:00 forward, after the jump", "0 2 * * *", october, []string{"10-03 02:00 +1030", "10-04 02:30 +1100", "10-05 02:00 +1100", "10-06 02:00 +1100"}},
		{"01:30 back, once", "30 1 * * *", april, []string{"04-04 01:30 +1100", "04-05 01:30 +1100", "04-06 01:30 +1030", "04-07 01:30 +1030"}},
		{"01:30 back, wildcard twice", "30 * * * *", [2]time.Time{time.Date(2026, 4, 4, 13, 0, 0, 0, time.UTC), time.Date(2026, 4, 4, 16, 0, 0, 0, time.UTC)}, []string{"04-05 00:30 +1100", "04-05 01:30 +1100", "04-05 01:30 +1030", "04-05 02:30 +1030"}},
		{"02:00 back, once", "0 2 * * *", april, []string{"04-04 02:00 +1100", "04-05 02:00 +1030", "04-06 02:00 +1030", "04-07 02:00 +1030"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.publish(cronFlow("acme", "nightly", c.spec, "Australia/Lord_Howe", ""))
			clk := clocktest.New(c.span[0])
			e.start("p1", clk, 10*time.Minute)
			clk.WaitCalls(t, 1)
			clk.StepUntil(t, c.span[1], 2000)
			var got []string
			for _, k := range e.ticks.all() {
				got = append(got, k.At.In(lordHowe).Format("01-02 15:04 -0700"))
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("ticks in Lord Howe time (-want +got):\n%s", diff)
			}
		})
	}
}
