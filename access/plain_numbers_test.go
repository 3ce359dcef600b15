package access_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNumbersWrittenPlainly: rate and burst are written as a flow's front
// matter writes its numbers (lineerr.PlainNumber, lineerr.PlainWhole):
// 0x10, 0o17, 0b11, 1_000, +5, .5 and 1. (which YAML reads as numbers) are
// refused saying what to write, with the text a flow's key gives; they
// were read as the number YAML reads (0x1ffffffffffffffff too). A number
// below the least keeps that error, quoting it as written.
func TestNumbersWrittenPlainly(t *testing.T) {
	for _, tt := range []struct {
		extra []string
		want  string // "" for none
	}{
		{[]string{"rate: 0x10"}, `access.yaml:6: rate must be written as a plain number (16), not "0x10"`},
		{[]string{"rate: 0o17"}, `access.yaml:6: rate must be written as a plain number (15), not "0o17"`},
		{[]string{"rate: 0b11"}, `access.yaml:6: rate must be written as a plain number (3), not "0b11"`},
		{[]string{"rate: 1_000"}, `access.yaml:6: rate must be written as a plain number (1000), not "1_000"`},
		{[]string{"rate: +5"}, `access.yaml:6: rate must be written as a plain number (5), not "+5"`},
		{[]string{"rate: .5"}, `access.yaml:6: rate must be written as a plain number (0.5), not ".5"`},
		{[]string{"rate: 1."}, `access.yaml:6: rate must be written as a plain number (1), not "1."`},
		{[]string{"rate: 1_0.5"}, `access.yaml:6: rate must be written as a plain number (10.5), not "1_0.5"`},
		{[]string{"rate: 0x1ffffffffffffffff"}, `access.yaml:6: rate must be written as a plain number (3.6893488147419103e+19), not "0x1ffffffffffffffff"`},
		{[]string{"rate: +0"}, "access.yaml:6: rate must be more than 0, not +0: leave rate out for no limit"},
		{[]string{"rate: -0x5"}, "access.yaml:6: rate must be more than 0, not -0x5: leave rate out for no limit"},
		{[]string{"rate: 1", "burst: 0x10"}, `access.yaml:7: burst must be written as a plain whole number (16), not "0x10"`},
		{[]string{"rate: 1", "burst: 0o17"}, `access.yaml:7: burst must be written as a plain whole number (15), not "0o17"`},
		{[]string{"rate: 1", "burst: 0b11"}, `access.yaml:7: burst must be written as a plain whole number (3), not "0b11"`},
		{[]string{"rate: 1", "burst: 1_000"}, `access.yaml:7: burst must be written as a plain whole number (1000), not "1_000"`},
		{[]string{"rate: 1", "burst: +5"}, `access.yaml:7: burst must be written as a plain whole number (5), not "+5"`},
		{[]string{"rate: 1", "burst: +0"}, "access.yaml:7: burst must be at least 1, not +0"},
		{[]string{"rate: 1", "burst: -0x5"}, "access.yaml:7: burst must be at least 1, not -0x5"},
		{[]string{"rate: 0.5", "burst: 10"}, ""},
		{[]string{"rate: 2e0", "burst: 1"}, ""},
		{[]string{"rate: 1.5e2"}, ""},
		{[]string{"rate: 0"}, "access.yaml:6: rate must be more than 0, not 0: leave rate out for no limit"},
	} {
		if diff := cmp.Diff(tt.want, parseFields(tt.extra...)); diff != "" {
			t.Errorf("%v: error (-want +got):\n%s", tt.extra, diff)
		}
	}
}
