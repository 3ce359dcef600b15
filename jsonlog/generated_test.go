package jsonlog_test

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// genString returns a short string drawn from pieces that need escapes or
// are invalid UTF-8, mixed with plain text.
func genString(rng *rand.Rand) string {
	pieces := []string{"", "a", "key", "\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\b", "\f",
		"<", ">", "&", "é", "✓", "\u2028", "\u2029", "\xff", "\xe2\x80", "\xed\xa0\x80", "\U0001F600", "\ufffd", " "}
	var b strings.Builder
	for range rng.IntN(5) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

type valuerOf struct{ v slog.Value }

func (l valuerOf) LogValue() slog.Value { return l.v }

var zones = []*time.Location{time.UTC, time.FixedZone("", 0), time.FixedZone("P", 5*3600+45*60),
	time.FixedZone("N", -(3*3600 + 30*60)), time.FixedZone("S", 17*60+30)}

func genTime(rng *rand.Rand) time.Time {
	switch rng.IntN(6) {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(9999+rng.IntN(3), 12, 31, 23, 59, 59, rng.IntN(1e9), zones[rng.IntN(len(zones))])
	case 2:
		return time.Date(rng.IntN(3)-1, 1, 1, 0, 0, 0, 0, zones[rng.IntN(len(zones))])
	case 3:
		return time.Now() // with a monotonic reading
	}
	return time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
}

func genFloat(rng *rand.Rand) float64 {
	special := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1e-6, 1e-7, 1e21, 1e20,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1, -123.456}
	if rng.IntN(2) == 0 {
		return special[rng.IntN(len(special))]
	}
	return math.Float64frombits(rng.Uint64())
}

func genValue(rng *rand.Rand, depth int) slog.Value {
	switch rng.IntN(13) {
	case 0:
		return slog.StringValue(genString(rng))
	case 1:
		return slog.Int64Value(rng.Int64() - rng.Int64())
	case 2:
		return slog.Uint64Value(rng.Uint64())
	case 3:
		return slog.BoolValue(rng.IntN(2) == 0)
	case 4:
		return slog.DurationValue(time.Duration(rng.Int64() - rng.Int64()))
	case 5:
		return slog.Float64Value(genFloat(rng))
	case 6:
		return slog.TimeValue(genTime(rng))
	case 7:
		return slog.AnyValue(errors.New(genString(rng)))
	case 8:
		return slog.AnyValue([]string{genString(rng)})
	case 9:
		if depth < 2 {
			return slog.AnyValue(valuerOf{genValue(rng, depth+1)})
		}
	case 10:
		if depth < 2 {
			return slog.GroupValue(genAttrs(rng, depth+1)...)
		}
	case 11:
		return slog.AnyValue(nil)
	}
	return slog.StringValue(genString(rng))
}

func genAttrs(rng *rand.Rand, depth int) []slog.Attr {
	attrs := make([]slog.Attr, rng.IntN(5))
	for i := range attrs {
		if rng.IntN(20) == 0 {
			continue // the empty attribute
		}
		key := genString(rng)
		if rng.IntN(3) == 0 {
			key = "dup"
		}
		attrs[i] = slog.Attr{Key: key, Value: genValue(rng, depth)}
	}
	return attrs
}

// TestHandlerWritesWhatSlogWritesGenerated compares jsonlog's lines with
// slog.JSONHandler's over many generated records and handler chains
// (WithAttrs, WithGroup, empty groups, LogValuers, errors, odd strings,
// floats, times in zones and out of range).
func TestHandlerWritesWhatSlogWritesGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 5000 {
		var steps []string
		derive := func(h slog.Handler) slog.Handler { return h }
		for range rng.IntN(4) {
			prev := derive
			if rng.IntN(3) == 0 {
				name := genString(rng)
				steps = append(steps, fmt.Sprintf("WithGroup(%q)", name))
				derive = func(h slog.Handler) slog.Handler { return prev(h).WithGroup(name) }
			} else {
				attrs := genAttrs(rng, 0)
				steps = append(steps, fmt.Sprintf("WithAttrs(%v)", attrs))
				derive = func(h slog.Handler) slog.Handler { return prev(h).WithAttrs(attrs) }
			}
		}
		r := slog.NewRecord(genTime(rng), slog.Level(rng.IntN(20)-8), genString(rng), 0)
		r.AddAttrs(genAttrs(rng, 0)...)
		got, want := both(t, derive, r)
		if got != want {
			t.Fatalf("record %d (handler %v, attrs %v):\njsonlog wrote\n%s\nslog.JSONHandler wrote\n%s", n, steps, r, got, want)
		}
	}
}
