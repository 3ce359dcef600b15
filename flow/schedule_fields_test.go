package flow

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// scheduleErrs compiles a flow scheduled spec and returns its errors'
// messages.
func scheduleErrs(t *testing.T, spec string) []string {
	t.Helper()
	var msgs []string
	for _, e := range compileErrs(t, "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\nschedule: \""+spec+"\"\n---\n\n## Step: s\n```ntd\n{}\n```\n") {
		msgs = append(msgs, e.Msg)
	}
	return msgs
}

// TestScheduleListEmptyElement: a list in a cron field with an empty
// element (1,2,,3, a leading or a trailing comma) is a compile error
// naming the field, as any other cron error is; robfig/cron skipped the
// empty element, so a slip of the keyboard (a number left out) compiled
// as the list without it.
func TestScheduleListEmptyElement(t *testing.T) {
	const notCron = " is not a cron expression (five fields, or @every 30s, @hourly, @daily…): "
	for _, c := range []struct{ spec, want string }{
		{"1,2,,3 * * * *", `schedule "1,2,,3 * * * *"` + notCron + "the minute field 1,2,,3 has an empty element in its list"},
		{"0 ,9 * * *", `schedule "0 ,9 * * *"` + notCron + "the hour field ,9 has an empty element in its list"},
		{"0 9 1, * *", `schedule "0 9 1, * *"` + notCron + "the day of month field 1, has an empty element in its list"},
		{"0 9 * 1,,6 *", `schedule "0 9 * 1,,6 *"` + notCron + "the month field 1,,6 has an empty element in its list"},
		{"0 9 * * ,", `schedule "0 9 * * ,"` + notCron + "the day of week field , has an empty element in its list"},
		{"0 9 * * mon,,fri", `schedule "0 9 * * mon,,fri"` + notCron + "the day of week field mon,,fri has an empty element in its list"},
	} {
		if diff := cmp.Diff([]string{c.want}, scheduleErrs(t, c.spec)); diff != "" {
			t.Errorf("%s: errors (-want +got):\n%s", c.spec, diff)
		}
	}
	for _, spec := range []string{"0 9,17 * * *", "0,30 * * * 1,3,5", "@daily"} {
		if errs := scheduleErrs(t, spec); errs != nil {
			t.Errorf("%s: %v", spec, errs)
		}
	}
}

// TestScheduleDayOfWeekSeven: 7 in the day of week field is Sunday, as 0
// is, alone, in a list and at the end of a range (5-7, 1-7/2), as most
// crons and crontab(5) read it; robfig/cron takes 0 to 6 only, so such a
// schedule did not compile. Each ticks at the times of the same schedule
// written with 0, in the flow's zone; a day past 7 is refused, and so is
// a range from 7 that runs backwards (7-5, and 7/2, which runs from 7 to 6
// as N/step does), saying why and what to write: robfig/cron's
// "beginning of range (7) beyond end of range (6)" said 7 was past the
// days the compiler says are 0 to 7.
func TestScheduleDayOfWeekSeven(t *testing.T) {
	from := time.Date(2026, 3, 23, 12, 0, 0, 0, time.UTC) // a Monday, a week before Berlin's change
	to := from.AddDate(0, 0, 14)
	for _, c := range []struct{ spec, same string }{
		{"0 9 * * 7", "0 9 * * 0"},
		{"0 9 * * 5-7", "0 9 * * 0,5,6"},
		{"0 9 * * 6-7", "0 9 * * 0,6"},
		{"0 9 * * 7-7", "0 9 * * 0"},
		{"0 9 * * 7-7/2", "0 9 * * 0"},
		{"0 9 * * 0-7", "0 9 * * 0-6"},
		{"0 9 * * 1-7/2", "0 9 * * 0,1,3,5"},
		{"0 9 * * 2-7/2", "0 9 * * 2,4,6"},
		{"0 9 * * mon-7", "0 9 * * 0-6"},
		{"0 9 * * 7,3", "0 9 * * 0,3"},
		{"0 9 * * 07", "0 9 * * 0"},
		{"30 2 1 * 7", "30 2 1 * 0"}, // day of month or Sunday
	} {
		got, want := cronSchedule(t, c.spec, "Europe/Berlin"), cronSchedule(t, c.same, "Europe/Berlin")
		if diff := cmp.Diff(ticks(want, from, to), ticks(got, from, to)); diff != "" {
			t.Errorf("%s: ticks (-%s +%s):\n%s", c.spec, c.same, c.spec, diff)
		}
		if got.Spec() != c.spec {
			t.Errorf("%s: Spec() is %q", c.spec, got.Spec())
		}
	}
	if got := ticks(cronSchedule(t, "0 9 * * 7", "UTC"), from, to); !cmp.Equal(got, []string{"2026-03-29 09:00 +0000", "2026-04-05 09:00 +0000"}) {
		t.Errorf("0 9 * * 7 ticks at %v, want the two Sundays", got)
	}
	const notCron = " is not a cron expression (five fields, or @every 30s, @hourly, @daily…): "
	for _, c := range []struct{ spec, want string }{
		{"0 9 * * 8", `schedule "0 9 * * 8"` + notCron + "the day of week field 8 holds 8: days of the week are 0 to 7 (0 and 7 are Sunday) or sun to sat"},
		{"0 9 * * 5-8", `schedule "0 9 * * 5-8"` + notCron + "the day of week field 5-8 holds 8: days of the week are 0 to 7 (0 and 7 are Sunday) or sun to sat"},
		{"0 9 * * 5-7/0", `schedule "0 9 * * 5-7/0"` + notCron + "step of range should be a positive number: 5-7/0"},
		{"0 9 * * 7/2", `schedule "0 9 * * 7/2"` + notCron + "the day of week field 7/2 runs backwards from 7 to 6, where N/step ends: 7 is Sunday, write 0/2"},
		{"0 9 * * 7-5", `schedule "0 9 * * 7-5"` + notCron + "the day of week field 7-5 runs backwards from 7 to 5: 7 is Sunday, write 0-5"},
		{"0 9 * * 7-5/2", `schedule "0 9 * * 7-5/2"` + notCron + "the day of week field 7-5/2 runs backwards from 7 to 5: 7 is Sunday, write 0-5/2"},
		{"0 9 * * 7-FRI", `schedule "0 9 * * 7-FRI"` + notCron + "the day of week field 7-FRI runs backwards from 7 to FRI: 7 is Sunday, write 0-FRI"},
		{"0 9 * * 07-0", `schedule "0 9 * * 07-0"` + notCron + "the day of week field 07-0 runs backwards from 07 to 0: 7 is Sunday, write 0-0"},
		{"0 9 * * 1,7-5", `schedule "0 9 * * 1,7-5"` + notCron + "the day of week field 1,7-5 holds 7-5, which runs backwards from 7 to 5: 7 is Sunday, write 0-5"},
		{"0 9 * * 1,7/3", `schedule "0 9 * * 1,7/3"` + notCron + "the day of week field 1,7/3 holds 7/3, which runs backwards from 7 to 6, where N/step ends: 7 is Sunday, write 0/3"},
		{"0 9 * * 7/0", `schedule "0 9 * * 7/0"` + notCron + "step of range should be a positive number: 7/0"},
		{"0 9 * * 7/x", `schedule "0 9 * * 7/x"` + notCron + `failed to parse int from x: strconv.Atoi: parsing "x": invalid s…`},
		{"0 9 * * 6-1", `schedule "0 9 * * 6-1"` + notCron + "beginning of range (6) beyond end of range (1): 6-1"},
		{"0 9 * * 7-7/0", `schedule "0 9 * * 7-7/0"` + notCron + "step of range should be a positive number: 7-7/0"},
		{"0 9 * * 7-7/x", `schedule "0 9 * * 7-7/x"` + notCron + `failed to parse int from x: strconv.Atoi: parsing "x": invalid s…`},
		{"0 9 * * 1,7-7/0", `schedule "0 9 * * 1,7-7/0"` + notCron + "step of range should be a positive number: 7-7/0"},
	} {
		if diff := cmp.Diff([]string{c.want}, scheduleErrs(t, c.spec)); diff != "" {
			t.Errorf("%s: errors (-want +got):\n%s", c.spec, diff)
		}
	}
}
