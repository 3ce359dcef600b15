package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeysPast64Bits: a hex, octal or binary number past 64 bits written
// plainly (0x1ffffffffffffffff), which YAML reads as a string, is a number
// to the front matter's keys, as 1e400 is: a string key refuses it as a
// number, a whole-number key as too large (below the least, when
// negative), and queue_backoff_factor as not written plainly. description
// compiled it as its text, and the number keys named it as a string
// (`timeout_ms must be a whole number, not the string "0x1f…"`).
func TestKeysPast64Bits(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n"
	steps := "---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, c := range []struct{ lines, want string }{
		{"description: 0x1ffffffffffffffff\n", "description must be a string, not the number 0x1ffffffffffffffff"},
		{"description: -0o3777777777777777777777\n", "description must be a string, not the number -0o3777777777777777777777"},
		{"dedup_key: 0x1_ffff_ffff_ffff_ffff\n", "dedup_key must be a string, not the number 0x1_ffff_ffff_ffff_ffff"},
		{"timeout_ms: 0x1ffffffffffffffff\n", "timeout_ms 0x1ffffffffffffffff is too large: at most 1000000000000"},
		{"queue_max_attempts: 0b" + strings.Repeat("1", 66) + "\n", "queue_max_attempts 0b" + strings.Repeat("1", 62) + "… is too large: at most 4294967295"},
		{"max_body_bytes: -0x1ffffffffffffffff\n", "max_body_bytes must be at least 1, not -0x1ffffffffffffffff"},
		{"queue_backoff_factor: 0x1ffffffffffffffff\n", "queue_backoff_factor must be written as a plain number (3.6893488147419103e+19), not \"0x1ffffffffffffffff\""},
		{"queue_backoff_factor: -0x1ffffffffffffffff\n", "queue_backoff_factor must be at least 1.0, not -0x1ffffffffffffffff"},
		{"queue_backoff_factor: 0x1" + strings.Repeat("f", 256) + "\n", "queue_backoff_factor 0x1" + strings.Repeat("f", 61) + "… is too large: at most 1.7976931348623157e+308"},
	} {
		var got []string
		for _, e := range compileErrs(t, head+c.lines+steps) {
			if e.Line != 5 {
				t.Errorf("%q: error on line %d, want 5: %s", c.lines, e.Line, e.Msg)
			}
			got = append(got, e.Msg)
		}
		if diff := cmp.Diff([]string{c.want}, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", c.lines, diff)
		}
	}
	f, err := Compile("f.md", []byte(head+"description: \"0x1ffffffffffffffff\"\n"+steps))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Description(); got != "0x1ffffffffffffffff" {
		t.Errorf("quoted, description %q", got)
	}
}
