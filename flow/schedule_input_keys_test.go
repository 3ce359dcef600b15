package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScheduleInputKeys: a key of schedule_input that is a list or a
// mapping (YAML's `? [a, b]`) names no member of a JSON object and is a
// compile error naming what it is, as such a key of the front matter is;
// it compiled as the key "", so a tick delivered {"": …}. A key written as
// an alias reads as the value it names, as aliases do everywhere in
// schedule_input.
func TestScheduleInputKeys(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\nschedule: \"@hourly\"\nschedule_input: "
	steps := "\n---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, c := range []struct{ input, want string }{
		{"{? [1, 2] : x}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a list"},
		{"{a: {? {b: 1} : x}}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a mapping"},
		{"{a: &k [1], *k : x}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a list"},
	} {
		errs := compileErrs(t, head+c.input+steps)
		if len(errs) != 1 || errs[0].Line != 6 || errs[0].Msg != c.want {
			t.Errorf("%s: errors %v, want one on line 6: %q", c.input, errs, c.want)
		}
	}
	for input, want := range map[string]string{
		"{a: &k b, *k : c}": `{"a":"b","b":"c"}`,
		"{1: a, true: b}":   `{"1":"a","true":"b"}`,
	} {
		f, err := Compile("f.md", []byte(head+input+steps))
		if err != nil {
			t.Errorf("%s: %v", input, err)
			continue
		}
		if diff := cmp.Diff(want, strings.TrimSpace(string(AppendJSON(nil, f.Schedule().Input())))); diff != "" {
			t.Errorf("%s: the tick's document (-want +got):\n%s", input, diff)
		}
	}
}
