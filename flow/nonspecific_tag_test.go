package flow

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestNonSpecificTag: YAML's non-specific tag `!` (`! 5`, `!<!> x`), which
// the YAML library drops without a trace, is a tag like any other to the
// front matter: a string key refuses it as it refuses `!foo`, and so does
// a whole-number or a number key, and schedule_input refuses it on a
// value, a key or the whole input, on the value's own line. They compiled
// as the value without it (`schedule_input: {a: ! 5}` as {"a":5},
// `description: ! x` as "x"), where a reader following YAML's rules reads
// `! 5` as the string "5".
func TestNonSpecificTag(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n"
	steps := "---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, c := range []struct {
		lines string
		line  int
		want  string
	}{
		{"description: ! x\n", 5, "description must be a string, not a value tagged !"},
		{"description: ! 5\n", 5, "description must be a string, not a value tagged !"},
		{"description: !<!> x\n", 5, "description must be a string, not a value tagged !"},
		{"description: &d ! x\n", 5, "description must be a string, not a value tagged !"},
		{"description: ! \"x\"\n", 5, "description must be a string, not a value tagged !"},
		{"description: ! |\n  x\n", 5, "description must be a string, not a value tagged !"},
		{"description:\n  ! x\n", 5, "description must be a string, not a value tagged !"},
		{"schedule: ! \"@daily\"\n", 5, "schedule must be a string, not a value tagged !"},
		{"schedule: \"@daily\"\nschedule_timezone: ! UTC\n", 6, "schedule_timezone must be a string, not a value tagged !"},
		{"dedup_key: ! \"{{ $.id }}\"\n", 5, "dedup_key must be a string, not a value tagged !"},
		{"dedup_key: \"{{ $.id }}\"\ndedup_on_failure: ! rerun\n", 6, "dedup_on_failure must be a string, not a value tagged !"},
		{"timeout_ms: ! 5\n", 5, "timeout_ms must be a whole number, not a value tagged !"},
		{"queue_backoff_factor: ! 2\n", 5, "queue_backoff_factor must be a number, not a value tagged !"},
		{"timeout_ms: !foo 5\n", 5, "timeout_ms must be a whole number, not a value tagged !foo"},
	} {
		var got []string
		for _, e := range compileErrs(t, head+c.lines+steps) {
			if e.Line != c.line {
				t.Errorf("%q: error on line %d, want %d: %s", c.lines, e.Line, c.line, e.Msg)
			}
			got = append(got, e.Msg)
		}
		if diff := cmp.Diff([]string{c.want}, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", c.lines, diff)
		}
	}

	const obj = "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}: "
	const tagged = "the YAML tag ! is not JSON: write the value without it (a string in quotes)"
	for _, c := range []struct {
		input string
		line  int
	}{
		{"{a: ! 5}", 6},
		{"{a: ! x}", 6},
		{"{a: !<!> x}", 6},
		{"{a: [1, ! 2]}", 6},
		{"{a: &n ! 5, b: *n}", 6},
		{"{a: ! \"x\"}", 6},
		{"{! a: x}", 6},
		{"{a: ! {b: 1}}", 6},
		{"! {a: 1}", 6},
		{"! '{\"a\": 1}'", 6},
		{"\n  job: nightly\n  limits: ! 5", 8},
		{"\n  job: nightly\n  ! limits: 5", 8},
		{"\n  job: nightly\n  limits: &l\n    ! 5", 8}, // the value begins at its anchor
		{"\n  job: nightly\n  limits: ! \n    max: 5", 8},
	} {
		errs := compileErrs(t, scheduledFlow(c.input))
		if len(errs) != 1 || errs[0].Line != c.line || errs[0].Msg != obj+tagged {
			t.Errorf("%s: errors %v, want one on line %d: %q", c.input, errs, c.line, obj+tagged)
		}
	}

	// an exclamation mark inside a value, or quoted, is text
	for input, want := range map[string]string{
		"{a: \"! 5\", b: 'x!', c: [\"!\"], \"!\": 1}": `{"a":"! 5","b":"x!","c":["!"],"!":1}`,
	} {
		checkTickDocument(t, input, want)
	}
	f, err := Compile("f.md", []byte(head+"description: hi! there\n"+steps))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Description(); got != "hi! there" {
		t.Errorf("description %q, want %q", got, "hi! there")
	}
}

// TestNonSpecificTagLongLine: finding `!` reads each line of the front
// matter into characters once, not once for each value on it: a
// schedule_input of 50,000 values on one line compiles in well under the
// seconds that reading the line again for each value takes.
func TestNonSpecificTagLongLine(t *testing.T) {
	in := "{a: [" + strings.Repeat("1, ", 50000) + "1]}"
	start := time.Now()
	if _, err := Compile("f.md", []byte(scheduledFlow(in))); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("compiled in %v", d)
	}
}
