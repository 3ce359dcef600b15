package flow

import (
	"bytes"
	"cmp"
	"math"
	"strconv"
)

// exactNumber is a JSON number that no float64 holds: an integer beyond
// 64 bits (an unsigned 64-bit id such as 12345678901234567890), a decimal
// with more significant digits than a float64 keeps
// (0.1000000000000000000001), or one under float64's range (1e-400). It
// keeps its exact value, so a document that passes through a flow keeps
// every digit. Comparisons, equality and negation are exact; the other
// arithmetic uses f, the nearest float64, and gives a float64. It is
// written in one form for its value (appendJSON), as every number is:
// 12345678901234567890.0 is written 12345678901234567890.
//
// Every other number is an int or a float64: a number of at most 15
// significant digits in float64's normal range always reads back as
// itself, so only longer ones, or smaller ones, are looked at.
type exactNumber struct {
	f float64
	d decimal // never zero: a zero reads back as itself
}

// decimal is a number's exact value, 0.digits × 10^exp, with no leading or
// trailing zero in digits; zero has no digits.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// maxExponentDigits bounds the exponent of a number that is not zero: one
// of more digits (1e-99999999999) is out of range, as 1e400 is.
const maxExponentDigits = 9

// maxShortNumber is the longest literal strconv.ParseFloat is given as it
// was written. ParseFloat reads at most 800 digits and keeps an exponent's
// first five, which misreads longer literals ("1" + 1000 zeros + "e-1000"
// reads as 1e-201, "0." + 9999 zeros + "1e100000" as 1); a longer one is
// given as 0.DIGITSeEXP, the form of its exact value, which it reads right.
const maxShortNumber = 800

// readNumber returns the document value of a JSON number literal that is
// not a 64-bit integer (those are ints); false when it is out of range.
func readNumber(text string) (any, bool) {
	var buf [24]byte
	neg, digits, exp, ok := readDecimal(text, buf[:0])
	if !ok {
		return nil, false
	}
	if len(digits) == 0 {
		if neg {
			return math.Copysign(0, -1), true
		}
		return 0.0, true
	}
	var f float64
	var err error
	if len(text) > maxShortNumber {
		f, err = strconv.ParseFloat(string(appendExact(nil, neg, digits, exp)), 64)
	} else {
		f, err = strconv.ParseFloat(text, 64)
	}
	if err != nil || math.IsInf(f, 0) {
		return nil, false
	}
	if len(digits) <= 15 && math.Abs(f) >= 0x1p-1022 {
		return f, true
	}
	var fbuf, fdigits [32]byte
	fneg, fd, fexp, _ := readDecimal(strconv.AppendFloat(fbuf[:0], f, 'e', -1, 64), fdigits[:0])
	if fneg == neg && fexp == exp && bytes.Equal(fd, digits) {
		return f, true // 1.50000000000000000000 is 1.5
	}
	return exactNumber{f: f, d: decimal{neg: neg, digits: string(digits), exp: exp}}, true
}

// readDecimal reads the exact value of a JSON number, neg and 0.digits ×
// 10^exp, appending the digits to buf; false when its exponent is out of
// range (maxExponentDigits).
func readDecimal[T string | []byte](s T, buf []byte) (neg bool, digits []byte, exp int, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	digits = buf[:0]
	point := false
	for ; i < len(s) && s[i] != 'e' && s[i] != 'E'; i++ {
		switch c := s[i]; {
		case c == '.':
			point = true
		case c == '0' && len(digits) == 0:
			if point {
				exp-- // 0.001: zeros after the point
			}
		default:
			digits = append(digits, c)
			if !point {
				exp++
			}
		}
	}
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	if i < len(s) { // the exponent
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		for i < len(s) && s[i] == '0' {
			i++
		}
		if len(s)-i > maxExponentDigits {
			if len(digits) > 0 {
				return neg, digits, 0, false
			}
			i = len(s) // zero, whatever the exponent
		}
		e := 0
		for ; i < len(s); i++ {
			e = e*10 + int(s[i]-'0')
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if len(digits) == 0 {
		exp = 0
	}
	return neg, digits, exp, true
}

// appendExact appends the exact form of a value, 0.DIGITSeEXP.
func appendExact(dst []byte, neg bool, digits []byte, exp int) []byte {
	if neg {
		dst = append(dst, '-')
	}
	dst = append(dst, "0."...)
	dst = append(dst, digits...)
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// appendJSON writes d as a JSON number, in one form for its value: a
// whole number in all its digits, a fraction from 1e-6 up in decimal
// notation, a smaller one with an exponent (1e-400), as encoding/json
// writes a float64.
func (d decimal) appendJSON(dst []byte) []byte {
	n := len(d.digits)
	if n == 0 {
		return append(dst, '0')
	}
	if d.neg {
		dst = append(dst, '-')
	}
	switch {
	case d.exp >= n: // whole: at most 309 digits, as an exactNumber is under 1.8e308
		dst = append(dst, d.digits...)
		for range d.exp - n {
			dst = append(dst, '0')
		}
	case d.exp > 0:
		dst = append(dst, d.digits[:d.exp]...)
		dst = append(dst, '.')
		dst = append(dst, d.digits[d.exp:]...)
	case d.exp > -6: // 1e-6 is 0.1 × 10^-5
		dst = append(dst, "0."...)
		for range -d.exp {
			dst = append(dst, '0')
		}
		dst = append(dst, d.digits...)
	default:
		dst = append(dst, d.digits[0])
		if n > 1 {
			dst = append(dst, '.')
			dst = append(dst, d.digits[1:]...)
		}
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, int64(d.exp-1), 10)
	}
	return dst
}

// negate is -x, exact.
func (x exactNumber) negate() exactNumber {
	x.f, x.d.neg = -x.f, !x.d.neg
	return x
}

// parseDecimal reads the exact value of a JSON number's text (one whose
// exponent is out of range, which readNumber refuses, as if it had none).
func parseDecimal[T string | []byte](s T) decimal {
	neg, digits, exp, _ := readDecimal(s, nil)
	return decimal{neg: neg && len(digits) > 0, digits: string(digits), exp: exp}
}

// decimalOf returns the exact value of a number, false when v is none. A
// float64 is the value of its shortest form, the one JSON writes.
func decimalOf(v any) (decimal, bool) {
	var buf [32]byte
	switch n := v.(type) {
	case int:
		return parseDecimal(strconv.AppendInt(buf[:0], int64(n), 10)), true
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return decimal{}, false
		}
		return parseDecimal(strconv.AppendFloat(buf[:0], n, 'e', -1, 64)), true
	case exactNumber:
		return n.d, true
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
		c = cmp.Compare(a.digits, b.digits) // 0.12 < 0.123: a prefix is less
	}
	return sa * c
}
