package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStringKeysMistyped: a front matter key whose value is a string
// (description, schedule, schedule_timezone, dedup_key, dedup_on_failure)
// refuses a number or a boolean, as it refuses a list, a mapping or an
// empty value; description took 5 or true as the text "5", and the others
// named the number as text ("dedup_on_failure must be rerun or absorb,
// not \"5\""). Quoted, or tagged !!str, it is a string; a date written
// plainly is the text as written. flow and tenant are names, which may be
// numbers (names-numeric).
func TestStringKeysMistyped(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n"
	steps := "---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, c := range []struct{ lines, want string }{
		{"description: 5\n", "description must be a string, not the number 5"},
		{"description: -1.5\n", "description must be a string, not the number -1.5"},
		{"description: 0x10\n", "description must be a string, not the number 0x10"},
		{"description: 1e400\n", "description must be a string, not the number 1e400"},
		{"description: true\n", "description must be a string, not true"},
		{"description: .inf\n", "description must be a string, not the number .inf"},
		{"description: !foo x\n", "description must be a string, not a value tagged !foo"},
		{"description: !!binary aGk=\n", "description must be a string, not a value tagged !!binary"},
		{"description:\n  - a\n", "description must be a string, not a list"},
		{"description: {a: 1}\n", "description must be a string, not a mapping"},
		{"schedule: 5\n", "schedule must be a string, not the number 5"},
		{"schedule: \"@daily\"\nschedule_timezone: 1\n", "schedule_timezone must be a string, not the number 1"},
		{"dedup_key: 7\n", "dedup_key must be a string, not the number 7"},
		{"dedup_key: \"{{ $.id }}\"\ndedup_on_failure: false\n", "dedup_on_failure must be a string, not false"},
	} {
		var got []string
		for _, e := range compileErrs(t, head+c.lines+steps) {
			if want := 4 + strings.Count(c.lines, "\n") - strings.Count(c.lines, "\n  "); e.Line != want {
				t.Errorf("%q: error on line %d, want %d: %s", c.lines, e.Line, want, e.Msg)
			}
			got = append(got, e.Msg)
		}
		if diff := cmp.Diff([]string{c.want}, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", c.lines, diff)
		}
	}
	for lines, want := range map[string]string{
		"description: \"5\"\n":      "5",
		"description: !!str 5\n":    "5",
		"description: '1e400'\n":    "1e400",
		"description: 2026-01-01\n": "2026-01-01",
		"description: yes\n":        "yes",
		"description: nightly 5\n":  "nightly 5",
	} {
		f, err := Compile("f.md", []byte(head+lines+steps))
		if err != nil {
			t.Errorf("%q: %v", lines, err)
			continue
		}
		if f.Description() != want {
			t.Errorf("%q: description %q, want %q", lines, f.Description(), want)
		}
	}
}
