package access_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
)

// TestRateAndBurstWithALeadingZero: YAML reads 010 as octal (8), not as
// whoever wrote the file meant it, so rate and burst written with a
// leading zero are refused, naming the line; 0.5 and 10 are not.
func TestRateAndBurstWithALeadingZero(t *testing.T) {
	parse := func(extra ...string) error {
		fields := append([]string{"id: a", "tenant: acme", "sha256: " + strings.Repeat("ab", 32), `flows: ["*"]`}, extra...)
		_, err := access.Parse("access.yaml", []byte(keysDoc(entry(fields...))))
		return err
	}
	for _, tt := range []struct {
		extra []string
		want  string // the error, "" for none
	}{
		{[]string{"rate: 100", "burst: 010"}, "access.yaml:7: burst 010 has a leading zero, which YAML reads as octal: write it without"},
		{[]string{"rate: 010"}, "access.yaml:6: rate 010 has a leading zero, which YAML reads as octal: write it without"},
		{[]string{"rate: 0100"}, "access.yaml:6: rate 0100 has a leading zero, which YAML reads as octal: write it without"},
		{[]string{"rate: 0.5"}, ""},
		{[]string{"rate: 10", "burst: 10"}, ""},
	} {
		err := parse(tt.extra...)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%v: error %q, want %q", tt.extra, got, tt.want)
		}
	}
}
