package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/scheduler"
)

// TestEveryNewPeriodCountsFromTheLastTick: a publication that changes an
// @every period puts the next tick a new period after the last tick (its
// .last record), for the holder, a process started in its place and nexus
// status alike; a new period that puts that time in the past makes a late
// tick at once, and before any tick the new period counts from when the
// process began to follow the flow. The holder counted the new period from
// the publication (1h to 2h at 14:30 after a 14:02 tick: 16:30), while a
// process started in its place and nexus status said 16:02.
func TestEveryNewPeriodCountsFromTheLastTick(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to string
		start    time.Time // when process a starts
		publish  time.Time // the change, seen at the pass a minute later
		look     time.Time // when the next tick is asked for, and b starts in a's place
		next     string    // the next tick after look
		want     []string  // a's ticks to 18:02, and then the next one's
		noRecord bool      // no tick before look: nexus status cannot know
	}{
		{"longer", "@every 1h", "@every 2h", at(-58, 0), at(30, 0), at(40, 0), "16:02:00", []string{"a@14:02:00", "@16:02:00", "@18:02:00"}, false},
		{"shorter", "@every 1h", "@every 30m", at(-58, 0), at(10, 0), at(20, 0), "14:32:00", []string{"a@14:02:00", "@14:32:00", "@15:02:00"}, false},
		{"shorter, late", "@every 2h", "@every 30m", at(-118, 0), at(45, 0), at(50, 0), "15:16:00", []string{"a@14:02:00", "a@14:46:00", "@15:16:00"}, false},
		{"before any tick", "@every 1h", "@every 2h", at(2, 0), at(30, 0), at(40, 0), "16:02:00", []string{"@16:02:00", "@18:02:00"}, true},
	} {
		for _, restart := range []bool{false, true} {
			e := newEnv(t)
			e.publish(cronFlow("acme", "report", c.from, "", ""))
			a, clkA := e.startAt("a", c.start, time.Minute)
			clkA.StepUntil(t, c.publish, 300)
			e.publish(cronFlow("acme", "report", c.to, "", ""))
			clkA.StepUntil(t, c.look, 300)
			sc := e.live.Live().Flows()[0].Flow.Schedule()
			if got := a.NextTick("acme", "report", sc, clkA.Now()).UTC().Format("15:04:05"); got != c.next {
				t.Errorf("%s: %s -> %s: the holder's next tick at %s is %s, want %s", c.name, c.from, c.to, clkA.Now().UTC().Format("15:04"), got, c.next)
			}
			if got := scheduler.NextTick(e.dir, "acme", "report", sc, clkA.Now()).UTC().Format("15:04:05"); got != c.next && !c.noRecord {
				t.Errorf("%s: %s -> %s: nexus status at %s says the next tick is at %s, want %s", c.name, c.from, c.to, clkA.Now().UTC().Format("15:04"), got, c.next)
			}
			clk, name := clkA, "a"
			if restart {
				if c.noRecord {
					continue // a process started in a's place counts from its start
				}
				a.Stop()
				_, clk = e.startAt("b", c.look, time.Minute)
				name = "b"
			}
			clk.StepUntil(t, at(3, 0).Add(4*time.Hour), 300) // 18:03
			want := []string{}
			for _, w := range c.want {
				if w[0] == '@' {
					w = name + w
				}
				want = append(want, w)
			}
			if diff := cmp.Diff(want, tickTimes(e.ticks.all())[:min(len(want), len(e.ticks.all()))]); diff != "" {
				t.Errorf("%s: %s -> %s, restart %v: ticks (-want +got):\n%s", c.name, c.from, c.to, restart, diff)
			}
		}
	}
}
