package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow"
)

// TestLastDueIsTheLastTimeStepped: lastDue, which probes, finds the time
// stepping through every time of the schedule from due to now finds, for
// cron expressions dense and sparse, in zones with daylight saving, over
// gaps from none to months.
func TestLastDueIsTheLastTimeStepped(t *testing.T) {
	start := time.Date(2026, 3, 7, 22, 13, 41, 0, time.UTC) // a day before New York springs forward
	gaps := []time.Duration{0, 30 * time.Second, time.Minute, 59 * time.Minute, 25 * time.Hour, 9 * 24 * time.Hour, 200 * 24 * time.Hour}
	for _, c := range []struct{ spec, zone string }{
		{"* * * * *", ""},
		{"*/7 3 * * *", "America/New_York"},
		{"30 2 * * *", "America/New_York"}, // a time spring-forward skips
		{"0 0 1 1 *", ""},
		{"15 10 * * 1-5", "Europe/Paris"},
		{"@hourly", "Pacific/Chatham"},
	} {
		fm := fmt.Sprintf("schedule: %q\n", c.spec)
		if c.zone != "" {
			fm += "schedule_timezone: " + c.zone + "\n"
		}
		src := fmt.Sprintf("---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n%s---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n", fm)
		f, err := flow.Compile("flows/f.md", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		sc := f.Schedule()
		due := sc.Next(start)
		for _, gap := range gaps {
			now := due.Add(gap)
			want := due
			for n := sc.Next(due); !n.IsZero() && n.After(due) && !n.After(now); n = sc.Next(n) {
				want = n
			}
			if got := lastDue(sc, due, now); !got.Equal(want) {
				t.Errorf("%s (%s): lastDue from %v to %v = %v, want %v", c.spec, c.zone, due, now, got, want)
			}
		}
	}
}
