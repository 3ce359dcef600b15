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
	for _, c := range []struct{ input, want string }{
		{"{? [1, 2] : x}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a list"},
		{"{a: {? {b: 1} : x}}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a mapping"},
		{"{a: &k [1], *k : x}", "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: a key is a string, not a list"},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != 6 || errs[0].Msg != c.want {
			t.Errorf("%s: errors %v, want one on line 6: %q", c.input, errs, c.want)
		}
	}
	for input, want := range map[string]string{
		"{a: &k b, *k : c}": `{"a":"b","b":"c"}`,
		"{1: a, true: b}":   `{"1":"a","true":"b"}`,
	} {
		checkTickDocument(t, input, want)
	}
}

// TestScheduleInputLeadingZero: a whole number of schedule_input written
// with a leading zero (017) is 15 to YAML (1.1's octal), 17 to whoever
// wrote it, and no JSON number: it is a compile error naming it, as in the
// rest of the front matter; it compiled as 15. Quoted, it is a string.
func TestScheduleInputLeadingZero(t *testing.T) {
	for input, want := range map[string]string{
		"{zip: 017}":  "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: the number 017 has a leading zero, which YAML reads as octal: write it without",
		"{a: [-017]}": "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: the number -017 has a leading zero, which YAML reads as octal: write it without",
	} {
		errs := compileErrs(t, scheduledFlow(input))
		if len(errs) != 1 || errs[0].Line != 6 || errs[0].Msg != want {
			t.Errorf("%s: errors %v, want one on line 6: %q", input, errs, want)
		}
	}
	checkTickDocument(t, "{a: 0, b: -0, c: \"017\", d: 0.5, e: 10}", `{"a":0,"b":0,"c":"017","d":0.5,"e":10}`)
}

// TestScheduleInputMergeKey: YAML's merge key (<<: *defaults) in
// schedule_input is a compile error saying it is not followed; it
// compiled as a member named "<<", so a tick delivered {"<<": {…}, …}
// rather than the keys merged. Quoted, "<<" is a key like any other.
func TestScheduleInputMergeKey(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\nschedule: \"@hourly\"\n"
	steps := "---\n\n## Step: s\n```ntd\n{}\n```\n"
	src := head + "schedule_input: {defaults: &d {job: nightly}, run: {<<: *d, region: eu}}\n" + steps
	errs := compileErrs(t, src)
	want := "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: YAML's merge key (<<) is not followed: write the keys it would merge"
	if len(errs) != 1 || errs[0].Line != 6 || errs[0].Msg != want {
		t.Errorf("errors %v, want one on line 6: %q", errs, want)
	}
	f, err := Compile("f.md", []byte(head+"schedule_input: {\"<<\": x}\n"+steps))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(AppendJSON(nil, f.Schedule().Input()))); got != `{"<<":"x"}` {
		t.Errorf("a quoted \"<<\" key: %s", got)
	}
}

// scheduledFlow is a flow ticking hourly whose schedule_input is written as
// input, from the front matter's line 6.
func scheduledFlow(input string) string {
	return "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\nschedule: \"@hourly\"\nschedule_input: " + input +
		"\n---\n\n## Step: s\n```ntd\n{}\n```\n"
}

// checkTickDocument compiles scheduledFlow(input) and compares the JSON
// document its ticks deliver with want.
func checkTickDocument(t *testing.T, input, want string) {
	t.Helper()
	f, err := Compile("f.md", []byte(scheduledFlow(input)))
	if err != nil {
		t.Errorf("%s: %v", input, err)
		return
	}
	if diff := cmp.Diff(want, strings.TrimSpace(string(AppendJSON(nil, f.Schedule().Input())))); diff != "" {
		t.Errorf("%s: the tick's document (-want +got):\n%s", input, diff)
	}
}

// TestScheduleInputKeyLines: in a schedule_input written over lines, a
// merge key (<<) and a key set twice are reported on the key's own line
// (the second one's, for a key set twice), as the input's other errors
// are; they were reported on the line of schedule_input:.
func TestScheduleInputKeyLines(t *testing.T) {
	const obj = "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: "
	const merge = "YAML's merge key (<<) is not followed: write the keys it would merge"
	for _, c := range []struct {
		input string
		line  int
		want  string
	}{
		{"\n  defaults: &d {job: nightly}\n  run:\n    <<: *d\n    region: eu", 9, merge},
		{"\n  defaults: &d {job: nightly}\n  run: {region: eu,\n    <<: *d}", 9, merge},
		{"\n  job: nightly\n  region: eu\n  job: daily", 9, "duplicate key \"job\""},
		{"\n  a:\n    b: 1\n    c: 2\n    b: 3", 10, "duplicate key \"b\""},
		{"{a: 1,\n  a: 2}", 7, "duplicate key \"a\""},
		{"{a: 1, a: 2}", 6, "duplicate key \"a\""},
		{"\n  a: &k b\n  b: 1\n  *k : c", 9, "duplicate key \"b\""},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != c.line || errs[0].Msg != obj+c.want {
			t.Errorf("%q: errors %v, want one on line %d: %q", c.input, errs, c.line, obj+c.want)
		}
	}
}
