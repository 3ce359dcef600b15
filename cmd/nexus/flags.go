package main

import (
	"errors"
	"flag"
	"regexp"
	"strconv"
)

// decimalNumbers makes each number flag of fs take decimal numbers alone,
// as its variable does: a whole number its digits (a sign and leading
// zeros allowed, read in base 10), any other a decimal fraction with an
// exponent or not (5, 0.5, .5, 1e3), or Inf or NaN, which the flag's own
// check refuses in its words. The flag package reads Go's literals, so
// --max-workers 0x10 was 16 and 010 eight, where NEXUS_MAX_WORKERS=010 is
// ten, and --rate 0x1p4 16. Any other form is refused as no number. Flags
// already made so are left as they are.
func decimalNumbers(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(*decimalValue); done {
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch g.Get().(type) {
		case int, int64, uint, uint64, float64:
			f.Value = &decimalValue{Value: f.Value}
		}
	})
}

// decimalValue is a number flag's value that takes decimal digits alone
// (decimalNumbers).
type decimalValue struct {
	flag.Value
}

// decimalFloat is a decimal number, with a fraction or an exponent or
// not; nonFinite the words strconv.ParseFloat reads as infinity or NaN.
var (
	decimalFloat = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
	nonFinite    = regexp.MustCompile(`(?i)^[+-]?(inf|infinity|nan)$`)
)

// The flag package's words for a value its own number flags refuse, which
// flagError reads.
var (
	errFlagParse = errors.New("parse error")
	errFlagRange = errors.New("value out of range")
)

func (v *decimalValue) Set(s string) error {
	var canonical string
	var err error
	switch v.Get().(type) {
	case float64:
		if !decimalFloat.MatchString(s) && !nonFinite.MatchString(s) {
			return errFlagParse
		}
		return v.Value.Set(s)
	case uint, uint64:
		var n uint64
		n, err = strconv.ParseUint(s, 10, 64)
		canonical = strconv.FormatUint(n, 10)
	default:
		var n int64
		n, err = strconv.ParseInt(s, 10, 64)
		canonical = strconv.FormatInt(n, 10)
	}
	if errors.Is(err, strconv.ErrRange) {
		return errFlagRange
	}
	if err != nil {
		return errFlagParse
	}
	// the flag's own parsing, of a form it reads as base 10 (its range
	// may be narrower than 64 bits)
	return v.Value.Set(canonical)
}

// String is the value's text; the flag package also calls it on a zero
// decimalValue, to tell a default from none in the usage.
func (v *decimalValue) String() string {
	if v == nil || v.Value == nil {
		return ""
	}
	return v.Value.String()
}

// Get keeps what flagError reads of a flag's type.
func (v *decimalValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}
