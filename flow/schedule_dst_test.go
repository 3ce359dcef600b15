package flow

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScheduleNextDaylightSaving: across daylight saving a schedule
// ticks as Vixie cron runs a job (docs/decisions.md, Daylight saving). A
// fixed-time schedule (neither its minute nor its hour field begins with
// *) ticks once at a time the clock shows twice, at its first
// occurrence, and a time the clock jumps over ticks right after the jump,
// at the first instant that exists, once however many of its times fell
// in the gap. A wildcard schedule (its minute or hour field begins with *)
// ticks at the times the wall clock reads: twice in the repeated hour,
// nothing made up for the skipped one. Fixed-time schedules ticked twice
// on the night the clock falls back (a daily export ran twice) and not at
// all on the night it jumps forward over their time.
//
// The 2026 changes: America/New_York 8 March 02:00 to 03:00, 1 November
// 02:00 back to 01:00; Australia/Lord_Howe 4 October 02:00 to 02:30, 5
// April 02:00 back to 01:30; Pacific/Chatham 27 September 02:45 to 03:45,
// 5 April 03:45 back to 02:45; America/Santiago 6 September 00:00 to
// 01:00, 4 April (Saturday) 24:00 back to 23:00.
func TestScheduleNextDaylightSaving(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	window := func(from, to string) [2]time.Time { return [2]time.Time{utc(from), utc(to)} }
	nyMar := window("2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z")
	nyNov := window("2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z")
	lhOct := window("2026-10-02T12:00:00Z", "2026-10-05T12:00:00Z")
	lhApr := window("2026-04-03T12:00:00Z", "2026-04-06T12:00:00Z")
	chSep := window("2026-09-25T12:00:00Z", "2026-09-28T12:00:00Z")
	chApr := window("2026-04-03T12:00:00Z", "2026-04-06T12:00:00Z")
	saSep := window("2026-09-04T12:00:00Z", "2026-09-07T12:00:00Z")
	saApr := window("2026-04-03T12:00:00Z", "2026-04-06T12:00:00Z")
	tests := []struct {
		name, zone, spec string
		window           [2]time.Time
		want             []string
	}{
		// America/New_York, forward: 02:00 to 02:59 do not happen
		{"fixed daily, in the gap", "America/New_York", "30 2 * * *", nyMar, []string{"2026-03-08 03:00 -0400", "2026-03-09 02:30 -0400"}},
		{"fixed Sundays, in the gap", "America/New_York", "30 2 * * 0", nyMar, []string{"2026-03-08 03:00 -0400"}},
		{"fixed, gap and jump's end once", "America/New_York", "0 2,3 * * *", nyMar, []string{"2026-03-08 03:00 -0400", "2026-03-09 02:00 -0400", "2026-03-09 03:00 -0400"}},
		{"fixed, several times in the gap", "America/New_York", "0,15,30,45 2 8 3 *", nyMar, []string{"2026-03-08 03:00 -0400"}},
		{"wildcard minute, nothing made up", "America/New_York", "*/30 1-3 8 3 *", nyMar, []string{"2026-03-08 01:00 -0500", "2026-03-08 01:30 -0500", "2026-03-08 03:00 -0400", "2026-03-08 03:30 -0400"}},
		{"wildcard hour, nothing made up", "America/New_York", "0 * 8 3 *", window("2026-03-08T04:30:00Z", "2026-03-08T08:30:00Z"), []string{"2026-03-08 00:00 -0500", "2026-03-08 01:00 -0500", "2026-03-08 03:00 -0400", "2026-03-08 04:00 -0400"}},
		{"@hourly is a wildcard", "America/New_York", "@hourly", window("2026-03-08T04:30:00Z", "2026-03-08T08:30:00Z"), []string{"2026-03-08 00:00 -0500", "2026-03-08 01:00 -0500", "2026-03-08 03:00 -0400", "2026-03-08 04:00 -0400"}},
		// America/New_York, back: 01:00 to 01:59 happen twice
		{"fixed daily, repeated once", "America/New_York", "30 1 * * *", nyNov, []string{"2026-11-01 01:30 -0400", "2026-11-02 01:30 -0500"}},
		{"fixed Sundays, repeated once", "America/New_York", "30 1 * * 0", nyNov, []string{"2026-11-01 01:30 -0400"}},
		{"fixed, after the repeat", "America/New_York", "0 1,2 * * *", nyNov, []string{"2026-11-01 01:00 -0400", "2026-11-01 02:00 -0500", "2026-11-02 01:00 -0500", "2026-11-02 02:00 -0500"}},
		{"wildcard minute, repeated twice", "America/New_York", "*/30 1-2 1 11 *", nyNov, []string{"2026-11-01 01:00 -0400", "2026-11-01 01:30 -0400", "2026-11-01 01:00 -0500", "2026-11-01 01:30 -0500", "2026-11-01 02:00 -0500", "2026-11-01 02:30 -0500"}},
		{"wildcard hour, repeated twice", "America/New_York", "30 * 1 11 *", window("2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z"), []string{"2026-11-01 00:30 -0400", "2026-11-01 01:30 -0400", "2026-11-01 01:30 -0500", "2026-11-01 02:30 -0500"}},
		// Australia/Lord_Howe, forward 30 minutes: 02:00 to 02:29 do not happen
		{"fixed daily, in the gap", "Australia/Lord_Howe", "15 2 * * *", lhOct, []string{"2026-10-03 02:15 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:15 +1100"}},
		{"fixed daily, at the gap's start", "Australia/Lord_Howe", "0 2 * * *", lhOct, []string{"2026-10-03 02:00 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:00 +1100"}},
		{"fixed, gap and jump's end once", "Australia/Lord_Howe", "0,30 2 * * *", lhOct, []string{"2026-10-03 02:00 +1030", "2026-10-03 02:30 +1030", "2026-10-04 02:30 +1100", "2026-10-05 02:00 +1100", "2026-10-05 02:30 +1100"}},
		{"fixed daily, before the gap", "Australia/Lord_Howe", "30 1 * * *", lhOct, []string{"2026-10-03 01:30 +1030", "2026-10-04 01:30 +1030", "2026-10-05 01:30 +1100"}},
		{"fixed Sundays, in the gap", "Australia/Lord_Howe", "15 2 * * 0", lhOct, []string{"2026-10-04 02:30 +1100"}},
		{"wildcard minute, nothing made up", "Australia/Lord_Howe", "*/15 1-2 4 10 *", lhOct, []string{
			"2026-10-04 01:00 +1030", "2026-10-04 01:15 +1030", "2026-10-04 01:30 +1030", "2026-10-04 01:45 +1030",
			"2026-10-04 02:30 +1100", "2026-10-04 02:45 +1100",
		}},
		// Australia/Lord_Howe, back 30 minutes: 01:30 to 01:59 happen twice
		{"fixed daily, repeated once", "Australia/Lord_Howe", "30 1 * * *", lhApr, []string{"2026-04-04 01:30 +1100", "2026-04-05 01:30 +1100", "2026-04-06 01:30 +1030"}},
		{"fixed daily, 01:45 repeated once", "Australia/Lord_Howe", "45 1 * * *", lhApr, []string{"2026-04-04 01:45 +1100", "2026-04-05 01:45 +1100", "2026-04-06 01:45 +1030"}},
		{"fixed daily, not repeated", "Australia/Lord_Howe", "15 1 * * *", lhApr, []string{"2026-04-04 01:15 +1100", "2026-04-05 01:15 +1100", "2026-04-06 01:15 +1030"}},
		{"fixed daily, after the repeat", "Australia/Lord_Howe", "0 2 * * *", lhApr, []string{"2026-04-04 02:00 +1100", "2026-04-05 02:00 +1030", "2026-04-06 02:00 +1030"}},
		{"fixed Sundays, repeated once", "Australia/Lord_Howe", "30 1 * * 0", lhApr, []string{"2026-04-05 01:30 +1100"}},
		{"wildcard minute, repeated twice", "Australia/Lord_Howe", "*/15 1-2 5 4 *", lhApr, []string{
			"2026-04-05 01:00 +1100", "2026-04-05 01:15 +1100", "2026-04-05 01:30 +1100", "2026-04-05 01:45 +1100",
			"2026-04-05 01:30 +1030", "2026-04-05 01:45 +1030",
			"2026-04-05 02:00 +1030", "2026-04-05 02:15 +1030", "2026-04-05 02:30 +1030", "2026-04-05 02:45 +1030",
		}},
		// Pacific/Chatham, forward at 02:45: 02:45 to 03:44 do not happen
		{"fixed daily, in the gap", "Pacific/Chatham", "0 3 * * *", chSep, []string{"2026-09-26 03:00 +1245", "2026-09-27 03:45 +1345", "2026-09-28 03:00 +1345"}},
		{"fixed Sundays, in the gap", "Pacific/Chatham", "0 3 * * 0", chSep, []string{"2026-09-27 03:45 +1345"}},
		{"wildcard minute, nothing made up", "Pacific/Chatham", "*/30 2-4 27 9 *", chSep, []string{"2026-09-27 02:00 +1245", "2026-09-27 02:30 +1245", "2026-09-27 04:00 +1345", "2026-09-27 04:30 +1345"}},
		// Pacific/Chatham, back at 03:45: 02:45 to 03:44 happen twice
		{"fixed daily, repeated once", "Pacific/Chatham", "0 3 * * *", chApr, []string{"2026-04-04 03:00 +1345", "2026-04-05 03:00 +1345", "2026-04-06 03:00 +1245"}},
		{"fixed Sundays, repeated once", "Pacific/Chatham", "0 3 * * 0", chApr, []string{"2026-04-05 03:00 +1345"}},
		{"wildcard minute, repeated twice", "Pacific/Chatham", "*/30 2-3 5 4 *", chApr, []string{
			"2026-04-05 02:00 +1345", "2026-04-05 02:30 +1345", "2026-04-05 03:00 +1345", "2026-04-05 03:30 +1345",
			"2026-04-05 03:00 +1245", "2026-04-05 03:30 +1245",
		}},
		// America/Santiago, forward at midnight: Sunday 00:00 to 00:59 do not happen
		{"fixed midnight, in the gap", "America/Santiago", "0 0 * * *", saSep, []string{"2026-09-05 00:00 -0400", "2026-09-06 01:00 -0300", "2026-09-07 00:00 -0300"}},
		{"@daily, in the gap", "America/Santiago", "@daily", saSep, []string{"2026-09-05 00:00 -0400", "2026-09-06 01:00 -0300", "2026-09-07 00:00 -0300"}},
		{"fixed Sunday midnight, in the gap", "America/Santiago", "0 0 * * 0", saSep, []string{"2026-09-06 01:00 -0300"}},
		{"fixed Saturdays, before the gap", "America/Santiago", "30 23 * * 6", saSep, []string{"2026-09-05 23:30 -0400"}},
		{"wildcard minute, nothing made up", "America/Santiago", "*/30 0-1 6 9 *", saSep, []string{"2026-09-06 01:00 -0300", "2026-09-06 01:30 -0300"}},
		// America/Santiago, back at midnight: Saturday 23:00 to 23:59 happen twice
		{"fixed daily, repeated once", "America/Santiago", "30 23 * * *", saApr, []string{"2026-04-03 23:30 -0300", "2026-04-04 23:30 -0300", "2026-04-05 23:30 -0400"}},
		{"fixed Saturdays, repeated once", "America/Santiago", "30 23 * * 6", saApr, []string{"2026-04-04 23:30 -0300"}},
		{"fixed midnight, after the repeat", "America/Santiago", "0 0 * * *", saApr, []string{"2026-04-04 00:00 -0300", "2026-04-05 00:00 -0400", "2026-04-06 00:00 -0400"}},
		{"wildcard minute, repeated twice", "America/Santiago", "*/30 23 4 4 *", saApr, []string{"2026-04-04 23:00 -0300", "2026-04-04 23:30 -0300", "2026-04-04 23:00 -0400", "2026-04-04 23:30 -0400"}},
	}
	for _, tt := range tests {
		t.Run(tt.zone+" "+tt.spec+" "+tt.name, func(t *testing.T) {
			s := cronSchedule(t, tt.spec, tt.zone)
			if diff := cmp.Diff(tt.want, ticks(s, tt.window[0], tt.window[1])); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			wantNextEachMinute(t, s, tt.window[0], tt.want)
		})
	}
}

// wantNextEachMinute checks that, from every minute (and second before
// it) from from to the last time of want, Next is the first time of want
// after it: from inside a repeated hour or a gap too.
func wantNextEachMinute(t *testing.T, s *Schedule, from time.Time, want []string) {
	t.Helper()
	var times []time.Time
	for _, w := range want {
		v, err := time.Parse("2006-01-02 15:04 -0700", w)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, v)
	}
	for at := from; at.Before(times[len(times)-1]); at = at.Add(time.Minute) {
		for _, a := range []time.Time{at.Add(-time.Second), at} {
			if a.Before(from) {
				continue
			}
			i := 0
			for !times[i].After(a) {
				i++
			}
			if next := s.Next(a); !next.Equal(times[i]) {
				t.Errorf("Next(%v) = %v, want %v", a.UTC(), next.In(s.Location()), times[i].In(s.Location()))
				return
			}
		}
	}
}

// TestCronFixedTime: a schedule is fixed-time, as Vixie cron reads it,
// when neither its minute nor its hour field begins with *; of the
// descriptors, all but @hourly.
func TestCronFixedTime(t *testing.T) {
	tests := map[string]bool{
		"30 2 * * *":       true,
		"0 0 * * 0":        true,
		"0,30 9-17 * * *":  true,
		"0-59 0-23 * * *":  true, // a range is not a *
		"5 4 1 * *":        true,
		"@daily":           true,
		"@midnight":        true,
		"@weekly":          true,
		"@monthly":         true,
		"@yearly":          true,
		"@annually":        true,
		"* 2 * * *":        false,
		"*/15 * * * *":     false,
		"*/15 2 * * *":     false,
		"0 * * * *":        false,
		"0 */2 * * *":      false,
		"? 2 * * *":        false,
		"@hourly":          false,
		"@every 1h":        false,
		"  30   2 * * * ":  true,
		"30 2,*/6 * * *":   true, // begins with 2, as Vixie cron reads it
		"*/1 1 * * *":      false,
		"30 2 * * * extra": false,
	}
	got := map[string]bool{}
	for spec := range tests {
		got[spec] = cronFixedTime(spec)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("cronFixedTime (-want +got):\n%s", diff)
	}
}
