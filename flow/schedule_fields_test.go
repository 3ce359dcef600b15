package flow

import (
	"testing"

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
