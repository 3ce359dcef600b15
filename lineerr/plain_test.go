package lineerr_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/lineerr"
)

// TestPlainNumbers: the rule a flow's number keys and access.yaml's rate
// and burst share: a number is written as JSON writes it, a whole number
// as digits alone; the error names the key, the number read and the text.
func TestPlainNumbers(t *testing.T) {
	type row struct {
		s             string
		number, whole bool
	}
	var got []row
	for _, s := range []string{"0", "5", "1.5", "2e0", "1E-3", "+5", "-5", "0x10", "0o17", "0b11", "1_000", ".5", "1.", "05", "00", ""} {
		got = append(got, row{s, lineerr.PlainNumber(s), lineerr.PlainWhole(s)})
	}
	want := []row{
		{"0", true, true}, {"5", true, true}, {"1.5", true, false}, {"2e0", true, false}, {"1E-3", true, false},
		{"+5", false, false}, {"-5", false, false}, {"0x10", false, false}, {"0o17", false, false}, {"0b11", false, false},
		{"1_000", false, false}, {".5", false, false}, {"1.", false, false}, {"05", false, false}, {"00", false, false}, {"", false, false},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(row{})); diff != "" {
		t.Errorf("PlainNumber, PlainWhole (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ got, want string }{
		{lineerr.NotPlainWhole("burst", 16, "0x10"), `burst must be written as a plain whole number (16), not "0x10"`},
		{lineerr.NotPlainWhole("timeout_ms", 500, "+500"), `timeout_ms must be written as a plain whole number of milliseconds (500), not "+500"`},
		{lineerr.NotPlainNumber("rate", 0.5, ".5"), `rate must be written as a plain number (0.5), not ".5"`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
