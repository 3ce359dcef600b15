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

// maxExponent bounds the exponent of a value's written form (appendJSON's
// d.ddde±N), so that every number read is written in a form that reads
// back: 0.1e-999999999, whose exponent is written with 9 digits, is
// 1e-1000000000, out of range as that is.
const maxExponent = 999_999_999

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
	if exp >= len(digits) && exp <= 19 && math.Abs(f) >= 1<<53 {
		// a whole number that fits 64 bits (9007199254740993.0, 1e18) is
		// an int, as the form it is written in reads back, however few
		// its digits: as a float64 it would lose the 1 of 1e18 + 1 (below
		// 2^53 a float64 holds every whole number)
		var ibuf [24]byte
		w := ibuf[:0]
		if neg {
			w = append(w, '-')
		}
		w = append(w, digits...)
		for range exp - len(digits) {
			w = append(w, '0')
		}
		if n, err := strconv.ParseInt(string(w), 10, 0); err == nil {
			return int(n), true
		}
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
	} else if exp-1 < -maxExponent || exp-1 > maxExponent {
		// 0.1e-999999999 is 1e-1000000000, whose written form would
		// not read back
		return neg, digits, 0, false
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
// whole number in all its digits (with an exponent when it would take
// more than maxWrittenZeros zeros), a fraction from 1e-6 up in decimal
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
	case d.exp > n+maxWrittenZeros:
		// written with an exponent, below
	case d.exp >= n: // whole
		dst = append(dst, d.digits...)
		for range d.exp - n {
			dst = append(dst, '0')
		}
		return dst
	case d.exp > 0:
		dst = append(dst, d.digits[:d.exp]...)
		dst = append(dst, '.')
		return append(dst, d.digits[d.exp:]...)
	case d.exp > -6: // 1e-6 is 0.1 × 10^-5
		dst = append(dst, "0."...)
		for range -d.exp {
			dst = append(dst, '0')
		}
		return append(dst, d.digits...)
	}
	dst = append(dst, d.digits[0])
	if n > 1 {
		dst = append(dst, '.')
		dst = append(dst, d.digits[1:]...)
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(d.exp-1), 10)
}

// maxWrittenZeros is the most zeros a whole number is written with after
// its digits: 1.0000000000000001e308, 22 bytes, is not written in 309
// (a body of such numbers would come back 14 times its size, over the
// ceiling of a queue it is published to), but as it is; an id keeps all
// its digits.
const maxWrittenZeros = 21

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
