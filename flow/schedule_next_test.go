package flow

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/robfig/cron/v3"
)

// cronSchedule compiles a flow scheduled spec in zone and returns its
// schedule.
func cronSchedule(t *testing.T, spec, zone string) *Schedule {
	t.Helper()
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: t\nschedule: \"" + spec + "\"\nschedule_timezone: " + zone + "\n---\n\n## Step: a\n```ntd\n{}\n```\n"
	f, err := Compile("f.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f.Schedule()
}

// ticks lists a schedule's times in (from, to], by Next, as wall clock
// and offset in its zone.
func ticks(s *Schedule, from, to time.Time) []string {
	var out []string
	for n := s.Next(from); !n.IsZero() && !n.After(to); n = s.Next(n) {
		out = append(out, n.In(s.Location()).Format("2006-01-02 15:04 -0700"))
		if len(out) > 1000 {
			break
		}
	}
	return out
}

// TestScheduleNextLordHowe: Australia/Lord_Howe moves its clock by 30
// minutes: on 4 October 2026 from 02:00 (+1030) to 02:30 (+1100), on 5
// April 2026 from 02:00 (+1100) back to 01:30 (+1030). A schedule ticks
// there as in every zone (docs/decisions.md, Daylight saving): a
// fixed-time one whose time does not happen (02:00 to 02:29 in October)
// ticks right after the jump, at 02:30, and one whose time happens twice
// (01:30 to 01:59 in April) ticks at the first; a wildcard one follows
// the wall clock. robfig/cron's Next added a tick at 02:30 to a daily
// 01:30 in October, and stepped over the 02:00 and the 12:00 of both
// days, which happen once.
func TestScheduleNextLordHowe(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	oct := [2]time.Time{utc("2026-10-02T12:00:00Z"), utc("2026-10-05T12:00:00Z")}
	apr := [2]time.Time{utc("2026-04-03T12:00:00Z"), utc("2026-04-06T12:00:00Z")}
	tests := []struct {
		spec   string
		window [2]time.Time
		want   []string
	}{
		{"30 1 * * *", oct, []string{"2026-10-03 01:30 +1030", "2026-10-04 01:30 +1030", "2026-10-05 01:30 +1100"}},
		{"0 2 * * *", oct, []string{"2026-10-03 02:00 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:00 +1100"}},
		{"15 2 * * *", oct, []string{"2026-10-03 02:15 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:15 +1100"}},
		{"30 2 * * *", oct, []string{"2026-10-03 02:30 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:30 +1100"}},
		{"0 12 * * *", oct, []string{"2026-10-03 12:00 +1030", "2026-10-04 12:00 +1100", "2026-10-05 12:00 +1100"}},
		{"30 1 * * *", apr, []string{"2026-04-04 01:30 +1100", "2026-04-05 01:30 +1100", "2026-04-06 01:30 +1030"}},
		{"45 1 * * *", apr, []string{"2026-04-04 01:45 +1100", "2026-04-05 01:45 +1100", "2026-04-06 01:45 +1030"}},
		{"0 2 * * *", apr, []string{"2026-04-04 02:00 +1100", "2026-04-05 02:00 +1030", "2026-04-06 02:00 +1030"}},
		{"15 1 * * *", apr, []string{"2026-04-04 01:15 +1100", "2026-04-05 01:15 +1100", "2026-04-06 01:15 +1030"}},
		{"0 12 * * *", apr, []string{"2026-04-04 12:00 +1100", "2026-04-05 12:00 +1030", "2026-04-06 12:00 +1030"}},
		{"*/15 1-2 5 4 *", apr, []string{
			"2026-04-05 01:00 +1100", "2026-04-05 01:15 +1100", "2026-04-05 01:30 +1100", "2026-04-05 01:45 +1100",
			"2026-04-05 01:30 +1030", "2026-04-05 01:45 +1030",
			"2026-04-05 02:00 +1030", "2026-04-05 02:15 +1030", "2026-04-05 02:30 +1030", "2026-04-05 02:45 +1030",
		}},
		{"*/15 1-2 4 10 *", oct, []string{
			"2026-10-04 01:00 +1030", "2026-10-04 01:15 +1030", "2026-10-04 01:30 +1030", "2026-10-04 01:45 +1030",
			"2026-10-04 02:30 +1100", "2026-10-04 02:45 +1100",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.spec+" "+tt.window[0].Format("Jan"), func(t *testing.T) {
			s := cronSchedule(t, tt.spec, "Australia/Lord_Howe")
			if diff := cmp.Diff(tt.want, ticks(s, tt.window[0], tt.window[1])); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			// from any time of the window, Next is the first time listed
			// after it
			var want []time.Time
			for _, w := range tt.want {
				v, err := time.Parse("2006-01-02 15:04 -0700", w)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, v)
			}
			for at := tt.window[0]; at.Before(want[len(want)-1]); at = at.Add(time.Minute) {
				i := 0
				for !want[i].After(at) {
					i++
				}
				if next := s.Next(at); !next.Equal(want[i]) {
					t.Errorf("Next(%v) = %v, want %v", at.UTC(), next.UTC(), want[i].UTC())
					break
				}
			}
		})
	}
}

// TestScheduleNextAgreesWithCron: in zones whose changes robfig/cron
// handles (whole hours), Next answers as its Next does, through 2026 and
// every 7 minutes around each of the zone's changes of offset, for dense
// and sparse schedules and descriptors. robfig/cron follows the wall
// clock for every schedule, so a fixed-time one (which ticks once at a
// repeated time and after the jump for a skipped one:
// TestScheduleNextDaylightSaving) is compared only where no change of
// offset comes within a day of the time asked or of the answers.
func TestScheduleNextAgreesWithCron(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "America/Sao_Paulo", "Asia/Kolkata", "Australia/Sydney", "America/Santiago", "Asia/Tehran"}
	specs := []string{"* * * * *", "30 2 * * *", "0 * * * *", "*/7 1-3 * * *", "0 0 * * 0", "0 3 1 * *", "5 4 * * 1-5", "@daily", "@hourly", "0 0 29 2 *", "15 0 13 * 5"}
	for _, zone := range zones {
		loc, err := loadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range specs {
			s := cronSchedule(t, spec, zone)
			ref, err := cron.ParseStandard(spec)
			if err != nil {
				t.Fatal(err)
			}
			ref.(*cron.SpecSchedule).Location = loc
			// the year every 11 h 17 min, and each change of offset
			// every 7 min from a day before to a day after
			var at []time.Time
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for a := from; a.Before(from.AddDate(1, 0, 0)); a = a.Add(11*time.Hour + 17*time.Minute) {
				at = append(at, a)
			}
			for _, end := from.In(loc).ZoneBounds(); !end.IsZero() && end.Year() == 2026; _, end = end.In(loc).ZoneBounds() {
				for a := end.Add(-26 * time.Hour); a.Before(end.Add(26 * time.Hour)); a = a.Add(7 * time.Minute) {
					at = append(at, a)
				}
			}
			fixed := cronFixedTime(spec)
			for _, a := range at {
				got, want := s.Next(a), ref.Next(a)
				if fixed && changeNear(loc, a, maxTime(got, want)) {
					continue
				}
				if !got.Equal(want) {
					t.Errorf("%s in %s: Next(%v) = %v, want %v (robfig/cron)", spec, zone, a, got.In(loc), want.In(loc))
					break
				}
			}
		}
	}
}

// TestScheduleNextLeapYearEnd: Go's ZoneBounds, for the last UTC day of
// a leap year in a zone read by its TZ rule (past the zone's last change
// listed in Go's database, as London's and New York's are), answers an end at
// that day's start, before the time looked up (golang/go#81583). Next
// went round for ever on it, taking memory without bound, for a daily
// schedule on 30 and 31 December 2028 and for a yearly one all 2028.
func TestScheduleNextLeapYearEnd(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		spec, zone string
		from       time.Time
		want       string
	}{
		{"0 0 * * *", "Europe/London", utc("2028-12-30T12:00:00Z"), "2028-12-31 00:00 +0000"},
		{"0 0 * * *", "Europe/London", utc("2028-12-31T00:00:00Z"), "2029-01-01 00:00 +0000"},
		{"30 23 31 12 *", "America/New_York", utc("2024-12-31T12:00:00Z"), "2024-12-31 23:30 -0500"},
		{"@yearly", "Europe/London", utc("2028-03-01T00:00:00Z"), "2029-01-01 00:00 +0000"},
		{"@yearly", "America/New_York", utc("2028-03-01T00:00:00Z"), "2029-01-01 00:00 -0500"},
		{"0 0 29 2 *", "Europe/London", utc("2028-03-01T00:00:00Z"), "2032-02-29 00:00 +0000"},
	}
	for _, tt := range tests {
		s := cronSchedule(t, tt.spec, tt.zone)
		done := make(chan time.Time, 1)
		go func() { done <- s.Next(tt.from) }()
		select {
		case got := <-done:
			if f := got.In(s.Location()).Format("2006-01-02 15:04 -0700"); f != tt.want {
				t.Errorf("%s in %s: Next(%v) = %s, want %s", tt.spec, tt.zone, tt.from, f, tt.want)
			}
		case <-time.After(2 * time.Second):
			// it does not come back: end the test binary before it
			// takes the machine's memory
			panic(tt.spec + " in " + tt.zone + ": Next(" + tt.from.String() + ") did not return within 2 s")
		}
	}
}

// TestScheduleNextInZone: Next answers in the schedule's zone, as its doc
// says and robfig/cron's Next did, whatever the zone of the time asked;
// it answered in the zone of the time asked.
func TestScheduleNextInZone(t *testing.T) {
	for _, spec := range []string{"30 1 * * *", "@every 90s"} {
		s := cronSchedule(t, spec, "Australia/Lord_Howe")
		for _, at := range []time.Time{time.Date(2026, 4, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 5, 0, 0, 0, 0, time.FixedZone("X", 3600))} {
			if got := s.Next(at).Location(); got != s.Location() {
				t.Errorf("%s: Next(%v) is in %v, want %v", spec, at, got, s.Location())
			}
		}
	}
}

// changeNear reports whether loc's offset changes between a day before
// from and a day after to.
func changeNear(loc *time.Location, from, to time.Time) bool {
	start, end := from.Add(-26*time.Hour).Unix(), to.Add(26*time.Hour).Unix()
	for n := start; n < end; {
		c := offsetChange(loc, n, min(n+6*3600, end))
		if c < min(n+6*3600, end) {
			return true
		}
		n = c
	}
	return false
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
