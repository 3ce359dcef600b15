// Package lineerr owns the errors of a file an operator writes (a flow
// file, access.yaml): one "PATH:LINE: message" line per error, and the way
// they name a YAML value ("the string \"fast\"", "a list").
package lineerr

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is one error of a file: a file, a line (1-based) and a message.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// List is every error of one file, in line order; its text is one
// "PATH:LINE: message" line per error.
type List []*Error

func (l List) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Describe names a YAML value for an error: the string "fast", the number
// 0.5, a list, an empty value, a value tagged !foo (a scalar written with a
// tag other than those above, `! 5` once MarkNonSpecificTags marked it).
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "an empty value"
	case "!!str":
		return "the string " + Quote(n.Value)
	case "!!int", "!!float":
		return "the number " + Clip(n.Value)
	case "!!bool":
		return n.Value
	}
	if Tagged(n) {
		// `! 5`, `!foo 5`: "not \"5\"" would name a value a key takes
		return "a value tagged " + Clip(n.Tag)
	}
	return Quote(n.Value)
}

// ShownBytes is how much of a value of the file an error quotes: a longer
// value is cut, with an ellipsis, so that one line says what is wrong.
const ShownBytes = 64

// Quote is s quoted as an error shows a value of the file: cut to
// ShownBytes.
func Quote(s string) string { return QuoteCut(s, ShownBytes) }

// Clip is s as an error shows a value of the file, unquoted: cut to
// ShownBytes. When what is shown holds a character that does not print
// (a line break, U+2028, an escape sequence: a YAML tag can, through
// %-escapes) or a byte that is not UTF-8, it is quoted as Quote quotes
// it, so that the error stays one line.
func Clip(s string) string {
	c := Cut(s, ShownBytes)
	if !utf8.ValidString(c) || strings.IndexFunc(c, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return Quote(s)
	}
	return c
}

// QuoteCut quotes s, cut to n bytes at most (at a character's start).
func QuoteCut(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:runeStart(s, n)]) + "…"
}

// Cut is s, cut to n bytes at most (at a character's start) with an
// ellipsis.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeStart(s, n)] + "…"
}

// runeStart is the largest i <= n at which a character of s starts.
func runeStart(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// LeadingZero is the complaint about a number key written with a leading
// zero (key: 010; a quoted "010" is a string, not this), which YAML reads
// as octal (8) rather than as whoever wrote it meant it, and "" for any
// other value. The value is cut to ShownBytes (Clip), as every value an
// error names.
func LeadingZero(key string, n *yaml.Node) string {
	v := strings.TrimLeft(n.Value, "+-")
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" || len(v) < 2 || v[0] != '0' || v[1] < '0' || v[1] > '9' {
		return ""
	}
	return key + " " + Clip(n.Value) + " has a leading zero, which YAML reads as octal: write it without"
}

// yamlFloat is how YAML writes a decimal number (go.yaml.in/yaml/v3's own
// pattern); wholeNumber is one without a fraction or an exponent.
var (
	yamlFloat   = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	wholeNumber = regexp.MustCompile(`^[-+]?[0-9]+$`)
)

// PastFloat reports whether n is a number written plainly (not quoted)
// that is past float64's range (1e400, -1e400): YAML reads it as a string,
// which whoever wrote the file did not write. Its key's error says it is
// too large (or below the least, when negative), not that it is a string.
func PastFloat(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.Style != 0 || n.Tag != "!!str" || !yamlFloat.MatchString(n.Value) {
		return false
	}
	_, err := strconv.ParseFloat(n.Value, 64)
	return errors.Is(err, strconv.ErrRange)
}

// PastInt reports whether n is a whole number written plainly that is past
// int64's range: YAML reads 9223372036854775808 as an unsigned integer and
// 99999999999999999999 as a float, neither of which an int64 holds. Its
// key's error says it is too large (or below the least, when negative),
// not that it is not a whole number.
func PastInt(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.Style != 0 || n.Tag != "!!int" && n.Tag != "!!float" || !wholeNumber.MatchString(n.Value) {
		return false
	}
	_, err := strconv.ParseInt(n.Value, 10, 64)
	return errors.Is(err, strconv.ErrRange)
}

// Tagged reports whether n is written with a YAML tag other than the one
// its kind has without it (!!str on a string, !!seq on a list, !!map on a
// mapping): `!foo x`, `! x` (see MarkNonSpecificTags), `!!int 42`. A key
// whose value is a name, a string or a list of names refuses it: read
// without its tag, the value is not what was written.
func Tagged(n *yaml.Node) bool {
	if n.Style&yaml.TaggedStyle == 0 {
		return false
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Tag != "!!str"
	case yaml.SequenceNode:
		return n.Tag != "!!seq"
	case yaml.MappingNode:
		return n.Tag != "!!map"
	}
	return true
}

// MarkNonSpecificTags gives every value of n written with YAML's
// non-specific tag `!` (`! 5`, `!<!> x`) the tag "!" and TaggedStyle, so
// that a key refuses it as it refuses any other tag (`!foo x`). The YAML
// library drops `!` without a trace (`! 5` reads as the number 5, where
// YAML's rules make it the string "5"), so it is read in lines, the YAML
// text n was parsed from: a value written with a tag begins where its
// properties do, and a value without TaggedStyle whose properties hold a
// tag holds that one.
func MarkNonSpecificTags(n *yaml.Node, lines []string) {
	(&yamlText{lines: lines, runes: map[int][]rune{}}).mark(n)
}

// yamlText is the YAML text of a file or of a value (a flow's step key),
// by line, each line read into characters once (a node's column counts
// characters): a flow mapping on one line holds many values.
type yamlText struct {
	lines []string
	runes map[int][]rune
}

// line is the line numbered l (from 1) as characters.
func (t *yamlText) line(l int) []rune {
	r, ok := t.runes[l]
	if !ok {
		r = []rune(t.lines[l-1])
		t.runes[l] = r
	}
	return r
}

func (t *yamlText) mark(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		return // the value it names is marked where it is written
	}
	if n.Style&yaml.TaggedStyle == 0 && t.startsWithTag(n) &&
		!(len(n.Content) > 0 && n.Content[0].Line == n.Line && n.Content[0].Column == n.Column) {
		// (a block mapping begins where its first key does: `! a: 1`
		// tags the key)
		n.Tag = "!"
		n.Style |= yaml.TaggedStyle
	}
	for _, c := range n.Content {
		t.mark(c)
	}
}

// startsWithTag reports whether the text at n's line and column (counted
// in characters from 1) holds a tag, after an anchor if any (`&a ! x`);
// properties may be followed by blanks, a comment and line breaks.
func (t *yamlText) startsWithTag(n *yaml.Node) bool {
	if n.Line < 1 || n.Line > len(t.lines) || n.Column < 1 {
		return false
	}
	text := t.line(n.Line)
	if n.Column-1 >= len(text) {
		return false
	}
	text = text[n.Column-1:]
	if text[0] != '&' {
		return text[0] == '!'
	}
	i := 1
	for i < len(text) && !strings.ContainsRune(" \t,[]{}", text[i]) {
		i++ // the anchor's name
	}
	for l := n.Line; ; {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		if i < len(text) && text[i] != '#' {
			return text[i] == '!'
		}
		if l >= len(t.lines) {
			return false
		}
		l++
		text, i = t.line(l), 0
	}
}

// Past64Bits reads n when it is a hex, octal or binary number written
// plainly (0x1ffffffffffffffff, -0o…, +0b…, with underscores) past what 64
// bits hold: YAML reads such a number as an integer within 64 bits and as
// a string past them, which whoever wrote the file did not write.
func Past64Bits(n *yaml.Node) (*big.Int, bool) {
	if n.Kind != yaml.ScalarNode || n.Style != 0 || n.Tag != "!!str" {
		return nil, false
	}
	// as YAML reads it: underscores dropped, then a Go integer literal
	plain := strings.ReplaceAll(n.Value, "_", "")
	digits := strings.TrimLeft(plain, "+-")
	if len(plain)-len(digits) > 1 || len(digits) < 3 || digits[0] != '0' || !strings.ContainsRune("xXoObB", rune(digits[1])) ||
		n.Value[0] == '_' {
		return nil, false
	}
	x, ok := new(big.Int).SetString(plain, 0)
	return x, ok
}

// plainNumberText is a number written plainly, as JSON writes it without
// its sign: digits without a leading zero, a point followed by digits, an
// exponent.
var plainNumberText = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

// PlainNumber reports whether s is a number written plainly (2, 1.5, 2e0),
// as a number key of a flow's front matter and access.yaml's rate are
// written: not +2, 0x3, 1_000, .5 or 2., which YAML reads as numbers too
// and a reader may not.
func PlainNumber(s string) bool { return plainNumberText.MatchString(s) }

// PlainWhole reports whether s is a whole number written as digits alone,
// without a sign or a leading zero (0 itself aside), as a whole-number key
// (timeout_ms, a status code, access.yaml's burst) is written.
func PlainWhole(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NotPlainWhole is the error of a whole-number key whose value reads as the
// number n but is not written as digits alone (+500, 0500, 0x3, 1_000),
// in a flow's front matter, a step and access.yaml alike. A key ending in
// _ms is said to hold milliseconds.
func NotPlainWhole(key string, n int64, written string) string {
	unit := ""
	if strings.HasSuffix(key, "_ms") {
		unit = " of milliseconds"
	}
	return fmt.Sprintf("%s must be written as a plain whole number%s (%d), not %s", key, unit, n, Quote(written))
}

// NotPlainNumber is NotPlainWhole's error for a number key that need not be
// whole (queue_backoff_factor, rate) whose value reads as x but is not
// written plainly (+2, 0x3, 1_000, 2.).
func NotPlainNumber(key string, x float64, written string) string {
	return fmt.Sprintf("%s must be written as a plain number (%s), not %s", key, strconv.FormatFloat(x, 'g', -1, 64), Quote(written))
}
