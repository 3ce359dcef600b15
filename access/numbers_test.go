package access_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
)

// TestRateAndBurstWithALeadingZero: YAML reads 010 as octal (8), not as
// whoever wrote the file meant it, so rate and burst written with a
// leading zero are refused, naming the line and the number, cut to 64
// bytes; 0.5 and 10 are not.
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
		// cut to 64 bytes, as every value an error quotes
		{[]string{"rate: 0" + strings.Repeat("7", 199)}, "access.yaml:6: rate 0" + strings.Repeat("7", 63) + "… has a leading zero, which YAML reads as octal: write it without"},
		{[]string{"rate: 100", "burst: 0" + strings.Repeat("7", 199)}, "access.yaml:7: burst 0" + strings.Repeat("7", 63) + "… has a leading zero, which YAML reads as octal: write it without"},
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

// TestRateAndBurstOutOfRange: a number too large for its field is said to
// be so. YAML reads 1e400 (past float64) as a string, 9223372036854775808
// as an unsigned integer and 99999999999999999999 as a float, so their
// errors said "not the string \"1e400\"" and "must be a whole number, not
// the number 99999999999999999999", of numbers written plainly and whole.
func TestRateAndBurstOutOfRange(t *testing.T) {
	parse := func(extra ...string) string {
		fields := append([]string{"id: a", "tenant: acme", "sha256: " + strings.Repeat("ab", 32), `flows: ["*"]`}, extra...)
		_, err := access.Parse("access.yaml", []byte(keysDoc(entry(fields...))))
		if err != nil {
			return err.Error()
		}
		return ""
	}
	for _, tt := range []struct {
		extra []string
		want  string
	}{
		{[]string{"rate: 1e400"}, "access.yaml:6: rate 1e400 is too large: leave rate out for no limit"},
		{[]string{"rate: -1e400"}, "access.yaml:6: rate must be more than 0, not -1e400: leave rate out for no limit"},
		{[]string{`rate: "1e400"`}, `access.yaml:6: rate must be a number of requests per second, not the string "1e400"`},
		{[]string{"rate: 1", "burst: 99999999999999999999"}, "access.yaml:7: burst 99999999999999999999 is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: -99999999999999999999"}, "access.yaml:7: burst must be at least 1, not -99999999999999999999"},
		{[]string{"rate: 1", "burst: 1e3"}, "access.yaml:7: burst must be a whole number, not the number 1e3"},
		{[]string{"rate: 1", "burst: 9223372036854775808"}, "access.yaml:7: burst 9223372036854775808 is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: 9223372036854775807"}, ""},
		// cut to 64 bytes, as every value an error quotes
		{[]string{"rate: 9" + strings.Repeat("9", 399)}, "access.yaml:6: rate 9" + strings.Repeat("9", 63) + "… is too large: leave rate out for no limit"},
		{[]string{"rate: -9" + strings.Repeat("9", 399)}, "access.yaml:6: rate must be more than 0, not -9" + strings.Repeat("9", 62) + "…: leave rate out for no limit"},
		{[]string{"rate: -0." + strings.Repeat("5", 199)}, "access.yaml:6: rate must be more than 0, not -0." + strings.Repeat("5", 61) + "…: leave rate out for no limit"},
		{[]string{"rate: 1", "burst: 9" + strings.Repeat("9", 199)}, "access.yaml:7: burst 9" + strings.Repeat("9", 63) + "… is too large: at most 9223372036854775807"},
		{[]string{"rate: 1", "burst: -9" + strings.Repeat("9", 199)}, "access.yaml:7: burst must be at least 1, not -9" + strings.Repeat("9", 62) + "…"},
	} {
		if got := parse(tt.extra...); got != tt.want {
			t.Errorf("%v:\n got %q\nwant %q", tt.extra, got, tt.want)
		}
	}
}

// TestLongNamesCut: an id, a flow or a field name an error quotes is cut
// to 64 bytes, as every value of the file is; they were quoted whole, 200
// bytes of a mistyped name in one line of the log.
func TestLongNamesCut(t *testing.T) {
	long := strings.Repeat("a", 200)
	cut := `"` + strings.Repeat("a", 64) + `"…`
	hash := "sha256: " + strings.Repeat("ab", 32)
	for _, tt := range []struct {
		fields []string
		want   string // in the error
	}{
		{[]string{"id: " + long + "X", "tenant: acme", hash, `flows: ["*"]`}, "access.yaml:2: invalid id " + cut + ": "},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["*"]`, long + ": 1"}, "access.yaml:6: unknown field " + cut + " in a key entry"},
		{[]string{"id: a", "tenant: acme", hash, `flows: ["` + long + `", "` + long + `"]`}, "access.yaml:5: flows lists " + cut + " twice"},
	} {
		_, err := access.Parse("access.yaml", []byte(keysDoc(entry(tt.fields...))))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.40q…: error %v, want one holding %q", tt.fields, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), long) {
			t.Errorf("%.40q…: the error quotes the 200 bytes whole: %v", tt.fields, err)
		}
	}
}
