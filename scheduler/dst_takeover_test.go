package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestTakeoverAcrossDaylightSaving: a fixed-time schedule ticks once at a
// time the clock shows twice and right after the jump for one it jumps
// over (docs: Daylight saving), whichever process holds the flow: a
// standby taking over from a holder that ticked the first 01:30 of the
// night New York falls back, or a process started then in its place
// (reading the .last record), does not tick the second 01:30; one taking
// over before New York jumps over 02:30 ticks it at 03:00.
func TestTakeoverAcrossDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name, spec string
		start      time.Time // a starts then, and b too when it stands by
		aStops     time.Time // a's clock is stepped to here, then a stops
		bStarts    time.Time // b starts then after a stopped; zero: b stands by from start
		until      time.Time
		want       []string
	}{
		{
			name: "fall back, standby", spec: "30 1 * * *",
			start: utc("2026-10-31T12:00:00Z"), aStops: utc("2026-11-01T05:45:00Z"), until: utc("2026-11-02T12:00:00Z"),
			want: []string{"a@11-01 01:30 -0400", "b@11-02 01:30 -0500"},
		},
		{
			name: "fall back, started after the first 01:30", spec: "30 1 * * *",
			start: utc("2026-10-31T12:00:00Z"), aStops: utc("2026-11-01T05:45:00Z"), bStarts: utc("2026-11-01T06:10:00Z"), until: utc("2026-11-02T12:00:00Z"),
			want: []string{"a@11-01 01:30 -0400", "b@11-02 01:30 -0500"},
		},
		{
			name: "fall back, wildcard ticks both", spec: "30 * * * *",
			start: utc("2026-11-01T04:00:00Z"), aStops: utc("2026-11-01T05:45:00Z"), until: utc("2026-11-01T07:00:00Z"),
			want: []string{"a@11-01 00:30 -0400", "a@11-01 01:30 -0400", "b@11-01 01:30 -0500"},
		},
		{
			name: "spring forward, standby", spec: "30 2 * * *",
			start: utc("2026-03-07T00:00:00Z"), aStops: utc("2026-03-08T06:50:00Z"), until: utc("2026-03-09T12:00:00Z"),
			want: []string{"a@03-07 02:30 -0500", "b@03-08 03:00 -0400", "b@03-09 02:30 -0400"},
		},
		{
			name: "spring forward, started before the jump", spec: "30 2 * * *",
			start: utc("2026-03-07T00:00:00Z"), aStops: utc("2026-03-08T06:50:00Z"), bStarts: utc("2026-03-08T06:55:00Z"), until: utc("2026-03-09T12:00:00Z"),
			want: []string{"a@03-07 02:30 -0500", "b@03-08 03:00 -0400", "b@03-09 02:30 -0400"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			logs := e.captureLog()
			e.publish(cronFlow("acme", "nightly", c.spec, "America/New_York", ""))
			clkA := clocktest.New(c.start)
			a := e.start("a", clkA, 10*time.Minute)
			clkA.WaitCalls(t, 1)
			var clkB *clocktest.Fake
			if c.bStarts.IsZero() {
				clkB = clocktest.New(c.start)
				e.start("b", clkB, 10*time.Minute)
				clkB.WaitCalls(t, 1)
			}
			clkA.StepUntil(t, c.aStops, 2000)
			if !e.lockHeld("acme", "nightly") {
				t.Fatal("a does not hold the lock")
			}
			if clkB != nil {
				clkB.StepUntil(t, c.aStops, 2000) // standing by, refused
			}
			a.Stop()
			if clkB == nil {
				clkB = clocktest.New(c.bStarts)
				e.start("b", clkB, 10*time.Minute)
				clkB.WaitCalls(t, 1)
			}
			clkB.StepUntil(t, c.until, 2000)
			var got []string
			for _, k := range e.ticks.all() {
				got = append(got, k.Sched+"@"+k.At.In(ny).Format("01-02 15:04 -0700"))
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("ticks in New York time (-want +got):\n%s", diff)
			}
			wantNoSetBack(t, logs)
		})
	}
}
