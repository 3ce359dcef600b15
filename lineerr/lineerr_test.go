package lineerr_test

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nexushq/nexus/lineerr"
)

func TestList(t *testing.T) {
	l := lineerr.List{{File: "flows/a.md", Line: 3, Msg: "unknown step key x"}, {File: "flows/a.md", Line: 9, Msg: "bad"}}
	if got, want := l.Error(), "flows/a.md:3: unknown step key x\nflows/a.md:9: bad"; got != want {
		t.Errorf("List.Error() = %q, want %q", got, want)
	}
}

func TestDescribe(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{`v: fast`, `the string "fast"`},
		{`v: 0.5`, `the number 0.5`},
		{`v: 3`, `the number 3`},
		{`v: true`, `true`},
		{`v:`, `an empty value`},
		{`v: [1]`, `a list`},
		{`v: {a: 1}`, `a mapping`},
		// a value past ShownBytes is cut, at a character's start
		{"v: " + strings.Repeat("a", 63) + "éb", `the string "` + strings.Repeat("a", 63) + `"…`},
		{"v: " + strings.Repeat("9", 70), `the number ` + strings.Repeat("9", 64) + `…`},
		// a tag is named as written, unquoted, unless a %-escape makes it
		// hold a character that does not print: quoted then, so that the
		// error stays one line
		{`v: !foo x`, `a value tagged !foo`},
		{`v: !a%0Ab x`, `a value tagged "!a\nb"`},
		{`v: !%E2%80%A8 x`, `a value tagged "!\u2028"`},
		{`v: !%1B[31m x`, `a value tagged "!\x1b[31m"`},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tt.yaml), &doc); err != nil {
			t.Fatal(err)
		}
		v := doc.Content[0].Content[1]
		if got := lineerr.Describe(v); got != tt.want {
			t.Errorf("Describe(%s) = %q, want %q", tt.yaml, got, tt.want)
		}
	}
}

// TestLeadingZero: a number with a leading zero is named, with its key,
// cut to ShownBytes; 0, 0.5, 10, -1 and the string "010" are not.
func TestLeadingZero(t *testing.T) {
	for _, tt := range []struct{ value, want string }{
		{"010", "rate 010 has a leading zero, which YAML reads as octal: write it without"},
		{"-07", "rate -07 has a leading zero, which YAML reads as octal: write it without"},
		{"0", ""}, {"0.5", ""}, {"10", ""}, {"-1", ""}, {`"010"`, ""},
		// a value past ShownBytes is cut, as every value an error quotes
		{"0" + strings.Repeat("7", 199), "rate 0" + strings.Repeat("7", 63) + "… has a leading zero, which YAML reads as octal: write it without"},
		{"-0" + strings.Repeat("7", 199), "rate -0" + strings.Repeat("7", 62) + "… has a leading zero, which YAML reads as octal: write it without"},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte("rate: "+tt.value), &doc); err != nil {
			t.Fatal(err)
		}
		if got := lineerr.LeadingZero("rate", doc.Content[0].Content[1]); got != tt.want {
			t.Errorf("LeadingZero(rate: %s) = %q, want %q", tt.value, got, tt.want)
		}
	}
}

// TestPastFloatAndPastInt: numbers written plainly past float64's range
// are PastFloat, whole ones past int64's are PastInt; quoted, in range, or
// not whole, they are neither.
func TestPastFloatAndPastInt(t *testing.T) {
	for _, tt := range []struct {
		value              string
		pastFloat, pastInt bool
	}{
		{"1e400", true, false},
		{"-1e400", true, false},
		{".5e400", true, false},
		{`"1e400"`, false, false},
		{"1e308", false, false},
		{"fast", false, false},
		{"99999999999999999999", false, true},
		{"-99999999999999999999", false, true},
		{"9223372036854775808", false, true},
		{"-9223372036854775809", false, true},
		{"9223372036854775807", false, false},
		{"-9223372036854775808", false, false},
		{`"99999999999999999999"`, false, false},
		{"99999999999999999999.5", false, false},
		{"1e20", false, false},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte("v: "+tt.value), &doc); err != nil {
			t.Fatal(err)
		}
		v := doc.Content[0].Content[1]
		if got := lineerr.PastFloat(v); got != tt.pastFloat {
			t.Errorf("PastFloat(%s) = %v, want %v", tt.value, got, tt.pastFloat)
		}
		if got := lineerr.PastInt(v); got != tt.pastInt {
			t.Errorf("PastInt(%s) = %v, want %v", tt.value, got, tt.pastInt)
		}
	}
}

// TestCut: a value is cut to n bytes at most, never inside a character,
// with an ellipsis; a short one is left whole.
func TestCut(t *testing.T) {
	for _, tt := range []struct {
		s          string
		n          int
		cut, quote string
	}{
		{"short", 64, "short", `"short"`},
		{"abcdef", 3, "abc…", `"abc"…`},
		{"abé", 3, "ab…", `"ab"…`},
		{"é", 1, "…", `""…`},
	} {
		if got := lineerr.Cut(tt.s, tt.n); got != tt.cut {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.cut)
		}
		if got := lineerr.QuoteCut(tt.s, tt.n); got != tt.quote {
			t.Errorf("QuoteCut(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.quote)
		}
	}
}

// Clip shows a value unquoted, cut to ShownBytes, and quoted when it holds
// a character that does not print or a byte that is not UTF-8.
func TestClip(t *testing.T) {
	for _, tt := range []struct{ s, want string }{
		{"1e300", "1e300"},
		{"!tag", "!tag"},
		{"!é", "!é"},
		{"a b", "a b"},
		{"a\nb", `"a\nb"`},
		{"\r", `"\r"`},
		{"\u2029", `"\u2029"`},
		{"\xff", `"\xff"`},
		{strings.Repeat("a", 70), strings.Repeat("a", 64) + "…"},
		{strings.Repeat("a", 70) + "\n", strings.Repeat("a", 64) + "…"},
		{"\n" + strings.Repeat("a", 70), `"\n` + strings.Repeat("a", 63) + `"…`},
	} {
		if got := lineerr.Clip(tt.s); got != tt.want {
			t.Errorf("Clip(%q) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
