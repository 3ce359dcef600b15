package flow

import (
	"cmp"
	"math"
	"strconv"
	"strings"
)

// exactNumber is a JSON number that no float64 holds digit for digit: an
// integer beyond 64 bits (an unsigned 64-bit id such as
// 12345678901234567890), or a decimal with more significant digits than a
// float64 keeps (0.1000000000000000000001). It is written back as it was
// read, so a document that passes through a flow keeps every digit, as it
// does in jq. Comparisons, equality and negation are exact; the other
// arithmetic uses f, the nearest float64, and gives a float64.
//
// Every other number is an int or a float64: a number of at most 15
// significant digits in float64's range always reads back as itself, so
// only longer ones, or ones that underflow, are checked.
type exactNumber struct {
	f    float64
	text string // the JSON literal as read: -?digits[.digits][e[+-]digits]
}

// readNumber returns the document value of a JSON number literal that is
// not a 64-bit integer (those are ints), given f, its nearest float64.
func readNumber(text string, f float64) any {
	sig := 0
	for i := 0; i < len(text) && text[i] != 'e' && text[i] != 'E'; i++ {
		if c := text[i]; c >= '1' && c <= '9' || c == '0' && sig > 0 {
			sig++
		}
	}
	if sig == 0 || sig <= 15 && math.Abs(f) >= 0x1p-1022 {
		return f
	}
	if compareDecimals(parseDecimal(text), floatDecimal(f)) == 0 {
		return f // 1.50000000000000000000 is 1.5
	}
	return exactNumber{f: f, text: text}
}

// negate is -x, exact: the literal with its sign turned. An exactNumber
// is never zero (a zero reads back as itself).
func (x exactNumber) negate() exactNumber {
	if t, ok := strings.CutPrefix(x.text, "-"); ok {
		return exactNumber{f: -x.f, text: t}
	}
	return exactNumber{f: -x.f, text: "-" + x.text}
}

// decimal is a number's exact value, 0.digits × 10^exp, with no leading or
// trailing zero in digits; zero is the zero decimal.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// maxExponent bounds the exponent parseDecimal keeps. A literal's exponent
// beyond it only ever meets a float64's (within ±330) or another literal's,
// and literals that far out compare by sign of the exponent alone.
const maxExponent = 1 << 30

// parseDecimal reads the text of a JSON number exactly.
func parseDecimal(s string) decimal {
	var d decimal
	if t, ok := strings.CutPrefix(s, "-"); ok {
		d.neg, s = true, t
	}
	mant, expText := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expText = s[:i], s[i+1:]
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := whole + frac
	exp := len(whole)
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	digits = strings.TrimRight(digits[lead:], "0")
	if digits == "" {
		return decimal{}
	}
	exp -= lead
	e, neg := 0, false
	if t, ok := strings.CutPrefix(expText, "-"); ok {
		expText, neg = t, true
	} else {
		expText = strings.TrimPrefix(expText, "+")
	}
	for i := 0; i < len(expText) && e < maxExponent; i++ {
		e = e*10 + int(expText[i]-'0')
	}
	e = min(e, maxExponent)
	if neg {
		e = -e
	}
	d.digits, d.exp = digits, exp+e
	return d
}

// floatDecimal is the value of f's shortest form, the one JSON writes.
func floatDecimal(f float64) decimal {
	return parseDecimal(strconv.FormatFloat(f, 'e', -1, 64))
}

// decimalOf returns the exact value of a number, false when v is none.
func decimalOf(v any) (decimal, bool) {
	switch n := v.(type) {
	case int:
		return parseDecimal(strconv.Itoa(n)), true
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return decimal{}, false
		}
		return floatDecimal(n), true
	case exactNumber:
		return parseDecimal(n.text), true
	}
	return decimal{}, false
}

// compareDecimals compares two exact values.
func compareDecimals(a, b decimal) int {
	sign := func(d decimal) int {
		switch {
		case d.digits == "":
			return 0
		case d.neg:
			return -1
		}
		return 1
	}
	sa, sb := sign(a), sign(b)
	if sa != sb || sa == 0 {
		return cmp.Compare(sa, sb)
	}
	c := cmp.Compare(a.exp, b.exp)
	if c == 0 {
		c = strings.Compare(a.digits, b.digits) // 0.12 < 0.123: a prefix is less
	}
	return sa * c
}
