package access_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
)

// TestPast64Bits: a hex, octal or binary number past 64 bits written
// plainly (0x1ffffffffffffffff), which YAML reads as a string, is a number
// to burst and rate, as it is to a flow's keys: burst names it too large
// (below the least, when negative), and rate refuses it as it refuses 0x10. The
// error said "burst must be a whole number, not the string …".
func TestPast64Bits(t *testing.T) {
	for _, tt := range []struct {
		extra []string
		want  string
	}{
		{[]string{"rate: 1", "burst: 0x1ffffffffffffffff"}, "access.yaml:7: burst 0x1ffffffffffffffff is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: 0o3777777777777777777777"}, "access.yaml:7: burst 0o3777777777777777777777 is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: 0b" + strings.Repeat("1", 70)}, "access.yaml:7: burst 0b" + strings.Repeat("1", 62) + "… is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: -0x1ffffffffffffffff"}, "access.yaml:7: burst must be at least 1, not -0x1ffffffffffffffff"},
		{[]string{"rate: 1", `burst: "0x1ffffffffffffffff"`}, `access.yaml:7: burst must be a whole number, not the string "0x1ffffffffffffffff"`},
		{[]string{"rate: -0x1ffffffffffffffff"}, "access.yaml:6: rate must be more than 0, not -0x1ffffffffffffffff: leave rate out for no limit"},
		{[]string{"rate: 0x1" + strings.Repeat("f", 300)}, "access.yaml:6: rate 0x1" + strings.Repeat("f", 61) + "… is too large: leave rate out for no limit"},
		// not written plainly, as 0x10 is not (TestNumbersWrittenPlainly)
		{[]string{"rate: 0x1ffffffffffffffff"}, `access.yaml:6: rate must be written as a plain number (3.6893488147419103e+19), not "0x1ffffffffffffffff"`},
	} {
		if got := parseFields(tt.extra...); got != tt.want {
			t.Errorf("%v:\n got %q\nwant %q", tt.extra, got, tt.want)
		}
	}
}

// parseFields parses access.yaml holding one entry of the usual fields and
// extra, and returns its error, "" for none.
func parseFields(extra ...string) string {
	fields := append([]string{"id: a", "tenant: acme", "sha256: " + strings.Repeat("ab", 32), `flows: ["*"]`}, extra...)
	_, err := access.Parse("access.yaml", []byte(keysDoc(entry(fields...))))
	if err != nil {
		return err.Error()
	}
	return ""
}
