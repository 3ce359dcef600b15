package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A step's read_timeout_ms and connect_timeout_ms written in hex, octal or
// binary, or with underscores, are refused with the text the front
// matter's whole-number keys give for the same forms, naming the number
// they read as; the step said only "must be a whole number".
func TestStepTimeoutWrittenPlainly(t *testing.T) {
	type result struct {
		Line int
		Msg  string
	}
	for _, c := range []struct {
		value string
		want  []result
	}{
		{"500", nil},
		{"+500", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (500), not "+500"`}}},
		{"0500", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (500), not "0500"`}}},
		{"0x3", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (3), not "0x3"`}}},
		{"0o17", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (15), not "0o17"`}}},
		{"0b101", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (5), not "0b101"`}}},
		{"1_000", []result{{11, `read_timeout_ms must be written as a plain whole number of milliseconds (1000), not "1_000"`}}},
		{"-0x3", []result{{11, `read_timeout_ms must be at least 1, not -0x3`}}},
		{"0x0", []result{{11, `read_timeout_ms must be at least 1, not 0x0`}}},
		{"1.5", []result{{11, `read_timeout_ms must be a whole number of milliseconds, not "1.5"`}}},
		{"0xfffffffffffffffff", []result{{11, `read_timeout_ms 0xfffffffffffffffff is too large: at most 1000000000000 (about 31 years)`}}},
		{"abc", []result{{11, `read_timeout_ms must be a whole number of milliseconds, not "abc"`}}},
	} {
		t.Run(c.value, func(t *testing.T) {
			src := rv6Head + "## Step: s\neffects: [http_egress]\nendpoint: https://x.example.com/\nread_timeout_ms: " + c.value + "\n"
			var got []result
			for _, e := range compileErrs(t, src) {
				got = append(got, result{e.Line, e.Msg})
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
