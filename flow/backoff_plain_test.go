package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// queue_backoff_factor, the one front-matter number that need not be
// whole, is written plainly as the whole-number keys are: a sign, hex,
// octal, binary, underscores, a point with no digit after it, a leading
// zero or a hex float (which YAML reads as numbers) are refused with the
// text the whole-number keys give, naming the number YAML reads; a
// reader may not see that number.
func TestBackoffFactorWrittenPlainly(t *testing.T) {
	type result struct {
		Line int
		Msg  string
	}
	for _, c := range []struct {
		value  string
		want   []result // nil: compiles
		factor float64
	}{
		{"2", nil, 2},
		{"1.5", nil, 1.5},
		{"1.0", nil, 1},
		{"2e0", nil, 2},
		{"1.5E+1", nil, 15},
		{"+2", []result{{5, `queue_backoff_factor must be written as a plain number (2), not "+2"`}}, 0},
		{"+2.5", []result{{5, `queue_backoff_factor must be written as a plain number (2.5), not "+2.5"`}}, 0},
		{"0x3", []result{{5, `queue_backoff_factor must be written as a plain number (3), not "0x3"`}}, 0},
		{"0o17", []result{{5, `queue_backoff_factor must be written as a plain number (15), not "0o17"`}}, 0},
		{"0b101", []result{{5, `queue_backoff_factor must be written as a plain number (5), not "0b101"`}}, 0},
		{"1_000", []result{{5, `queue_backoff_factor must be written as a plain number (1000), not "1_000"`}}, 0},
		{"1_000.5", []result{{5, `queue_backoff_factor must be written as a plain number (1000.5), not "1_000.5"`}}, 0},
		{"1e1_0", []result{{5, `queue_backoff_factor must be written as a plain number (1e+10), not "1e1_0"`}}, 0},
		{"2.", []result{{5, `queue_backoff_factor must be written as a plain number (2), not "2."`}}, 0},
		{"02.5", []result{{5, `queue_backoff_factor must be written as a plain number (2.5), not "02.5"`}}, 0},
		{"!!int 0x3", []result{{5, `queue_backoff_factor must be written as a plain number (3), not "0x3"`}}, 0},
		{"!!float +2", []result{{5, `queue_backoff_factor must be written as a plain number (2), not "+2"`}}, 0},
		{"!!float 0x1p3", []result{{5, `queue_backoff_factor must be written as a plain number (8), not "0x1p3"`}}, 0},
		// YAML reads 010 as octal 8, as the whole-number keys say
		{"010", []result{{5, `queue_backoff_factor 010 has a leading zero, which YAML reads as octal: write it without`}}, 0},
		// below the least, whatever the form: the least is what to mend
		{".5", []result{{5, `queue_backoff_factor must be at least 1.0, not .5`}}, 0},
		{"-0x3", []result{{5, `queue_backoff_factor must be at least 1.0, not -0x3`}}, 0},
		// YAML reads it as a string
		{"0x1p3", []result{{5, `queue_backoff_factor must be a number, not the string "0x1p3"`}}, 0},
	} {
		t.Run(c.value, func(t *testing.T) {
			src := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nqueue_backoff_factor: " + c.value + "\n---\n\n## Step: s\n```ntd\n{}\n```\n"
			var got []result
			for _, e := range compileErrs(t, src) {
				got = append(got, result{e.Line, e.Msg})
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("errors (-want +got):\n%s", diff)
			}
			if c.want == nil {
				f, err := Compile("f.md", []byte(src))
				if err != nil {
					t.Fatal(err)
				}
				if f.Retry().BackoffFactor != c.factor {
					t.Errorf("factor %v, want %v", f.Retry().BackoffFactor, c.factor)
				}
			}
		})
	}
}
