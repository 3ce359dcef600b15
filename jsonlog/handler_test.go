package jsonlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/jsonlog"
)

var t0 = time.Date(2026, 8, 9, 14, 2, 11, 123456789, time.UTC)

// record is a record with a fixed time.
func record(level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(t0, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

// both writes the records through a jsonlog handler and a slog.JSONHandler,
// each first shaped by derive, and returns the two outputs.
func both(t testing.TB, derive func(slog.Handler) slog.Handler, records ...slog.Record) (got, want string) {
	t.Helper()
	var g, w bytes.Buffer
	hs := []slog.Handler{jsonlog.New(&g, nil), slog.NewJSONHandler(&w, nil)}
	for i, h := range hs {
		if derive != nil {
			h = derive(h)
		}
		for _, r := range records {
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatalf("handler %d: %v", i, err)
			}
		}
	}
	return g.String(), w.String()
}

type stringer struct{}

func (stringer) LogValue() slog.Value { return slog.StringValue("resolved") }

// handlerCase is records to write through a handler shaped by derive.
// recordAt is a record of time at with attrs.
func recordAt(at time.Time, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(at, slog.LevelInfo, "m", 0)
	r.AddAttrs(attrs...)
	return r
}

type handlerCase struct {
	name    string
	derive  func(slog.Handler) slog.Handler
	records []slog.Record
}

// handlerCases are the lines every test compares with slog.JSONHandler's.
func handlerCases() []handlerCase {
	strange := "quote\" backslash\\ newline\n cr\r tab\t nul\x00 bell\x07 <tag>&amp; é ✓ \u2028\u2029 bad\xff\xfe end"
	return []handlerCase{
		{"a queued message", nil, []slog.Record{record(slog.LevelInfo, "message processed",
			slog.String("tenant", "acme"), slog.String("flow", "order-intake"), slog.Uint64("msg_id", 1<<40),
			slog.String("correlation_id", "0b7c2f0e-3b1a-4c7d-9a1e-2f3b4c5d6e7f"), slog.Int("attempt", 1),
			slog.String("event", "queue_processed"), slog.String("outcome", "succeeded"),
			slog.Int("version", 3), slog.Int("status", 200), slog.Float64("duration_ms", 0.042))}},
		{"no attributes, every level", nil, []slog.Record{
			record(slog.LevelDebug-3, "d"), record(slog.LevelInfo, ""), record(slog.LevelWarn, "w"),
			record(slog.LevelError, "e"), record(slog.LevelError+4, "e4"), record(slog.LevelInfo+1, "i1")}},
		{"strings that need escapes", nil, []slog.Record{record(slog.LevelInfo, strange, slog.String(strange, strange))}},
		{"numbers, booleans, durations", nil, []slog.Record{record(slog.LevelInfo, "n",
			slog.Int64("min", math.MinInt64), slog.Uint64("max", math.MaxUint64), slog.Bool("t", true), slog.Bool("f", false),
			slog.Duration("d", 1500*time.Millisecond), slog.Duration("neg", -time.Nanosecond))}},
		{"floats as json.Marshal writes them", nil, []slog.Record{record(slog.LevelInfo, "f",
			slog.Float64("zero", 0), slog.Float64("negzero", math.Copysign(0, -1)), slog.Float64("small", 1e-7),
			slog.Float64("tiny", 5e-324), slog.Float64("big", 1e21), slog.Float64("huge", math.MaxFloat64),
			slog.Float64("third", 1.0/3), slog.Float64("int", 42), slog.Float64("edge", 1e-6), slog.Float64("under", 999999999999999999999.0))}},
		{"non-finite floats (slog's error text)", nil, []slog.Record{record(slog.LevelInfo, "nan",
			slog.Float64("nan", math.NaN()), slog.Float64("inf", math.Inf(-1)))}},
		{"times", nil, []slog.Record{
			record(slog.LevelInfo, "t", slog.Time("at", t0), slog.Time("zone", t0.In(time.FixedZone("X", -90*60))), slog.Time("zero", time.Time{})),
			record(slog.LevelInfo, "year", slog.Time("far", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))),
			slog.NewRecord(time.Time{}, slog.LevelInfo, "no time", 0)}},
		{"a record's time outside years 0-9999 (slog's own text)", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.String("tenant", "acme")})
		}, []slog.Record{
			recordAt(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.String("k", "v")),
			recordAt(time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), slog.Int("n", 1)),
			recordAt(time.Date(9999, 12, 31, 23, 30, 0, 0, time.UTC).In(time.FixedZone("E", 3600)), slog.Bool("b", true))}},
		{"values slog encodes itself", nil, []slog.Record{record(slog.LevelWarn, "mixed",
			slog.String("before", "x"), slog.Any("error", errors.New("boom \"quoted\"")), slog.Any("list", []int{1, 2}),
			slog.Any("nil", nil), slog.Any("valuer", stringer{}), slog.Group("g", slog.Int("a", 1)), slog.String("", "empty key"),
			slog.Attr{}, slog.String("after", "y"))}},
		{"WithAttrs", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.String("tenant", "acme"), slog.Int("n", 7)}).WithAttrs(nil).WithAttrs([]slog.Attr{slog.Bool("b", true)})
		}, []slog.Record{record(slog.LevelInfo, "m", slog.String("k", "v")), record(slog.LevelInfo, "m2")}},
		{"WithAttrs of a value slog encodes", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.String("a", "1"), slog.Any("err", errors.New("e"))}).WithAttrs([]slog.Attr{slog.Int("z", 2)})
		}, []slog.Record{record(slog.LevelInfo, "m", slog.String("k", "v"))}},
		{"WithGroup", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.String("top", "t")}).WithGroup("").WithGroup("req").WithAttrs([]slog.Attr{slog.Int("n", 1)})
		}, []slog.Record{record(slog.LevelInfo, "m", slog.String("k", "v")), record(slog.LevelInfo, "none")}},
	}
}

func TestHandlerWritesWhatSlogWrites(t *testing.T) {
	for _, tc := range handlerCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, want := both(t, tc.derive, tc.records...)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lines differ from slog.JSONHandler's (-slog +jsonlog):\n%s", diff)
			}
		})
	}
}

// TestLogAttrsWritesWhatSlogWrites: jsonlog.LogAttrs writes through a
// Handler (and through any other handler) the line Logger.LogAttrs writes
// through slog.JSONHandler, except for the time, which each takes from the
// clock: it is compared as a well-formed time of the test's duration.
func TestLogAttrsWritesWhatSlogWrites(t *testing.T) {
	timeField := regexp.MustCompile(`^\{"time":"([^"]+)",`)
	for _, tc := range handlerCases() {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var g, o, w bytes.Buffer
			loggers := []*slog.Logger{slog.New(jsonlog.New(&g, nil)), slog.New(slog.NewTextHandler(&o, nil)), slog.New(slog.NewJSONHandler(&w, nil))}
			for i, l := range loggers {
				if tc.derive != nil {
					loggers[i] = slog.New(tc.derive(l.Handler()))
				}
			}
			for _, r := range tc.records {
				var attrs []slog.Attr
				r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
				jsonlog.LogAttrs(context.Background(), loggers[0], r.Level, r.Message, attrs...)
				jsonlog.LogAttrs(context.Background(), loggers[1], r.Level, r.Message, attrs...)
				loggers[2].LogAttrs(context.Background(), r.Level, r.Message, attrs...)
			}
			end := time.Now()
			lines := func(s string) []string { return strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") }
			got, want := lines(g.String()), lines(w.String())
			for i := range got {
				m := timeField.FindStringSubmatch(got[i])
				if m == nil {
					t.Fatalf("line %d has no time first: %s", i+1, got[i])
				}
				at, err := time.Parse(time.RFC3339Nano, m[1])
				if err != nil || at.Before(start.Truncate(time.Millisecond)) || at.After(end) {
					t.Errorf("line %d: time %s, want one between %s and %s", i+1, m[1], start, end)
				}
				got[i] = timeField.ReplaceAllString(got[i], "{")
				if i < len(want) {
					want[i] = timeField.ReplaceAllString(want[i], "{")
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lines differ from slog.JSONHandler's (-slog +jsonlog.LogAttrs):\n%s", diff)
			}
			if n := strings.Count(o.String(), "\n"); n != len(want) {
				t.Errorf("through a TextHandler: %d lines, want %d:\n%s", n, len(want), o.String())
			}
		})
	}
}

// TestLogAttrsLevel: below the handler's level LogAttrs writes nothing.
func TestLogAttrsLevel(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(jsonlog.New(&b, slog.LevelWarn))
	jsonlog.LogAttrs(context.Background(), l, slog.LevelInfo, "quiet", slog.String("k", "v"))
	if b.Len() != 0 {
		t.Fatalf("an info line at level warn was written: %s", b.String())
	}
	jsonlog.LogAttrs(context.Background(), l, slog.LevelWarn, "loud", slog.String("k", "v"))
	if !strings.Contains(b.String(), `"level":"WARN","msg":"loud","k":"v"}`) {
		t.Fatalf("the warning was not written as expected: %s", b.String())
	}
}

func FuzzHandlerWritesWhatSlogWrites(f *testing.F) {
	f.Add("msg", "key", "value", int64(-3), uint64(7), 1.5, int64(time.Second))
	f.Add("", "a\"b", "\x00\xff\u2028<&>", int64(0), uint64(0), 1e-7, int64(-1))
	f.Fuzz(func(t *testing.T, msg, key, s string, i int64, u uint64, fl float64, d int64) {
		r := record(slog.LevelInfo, msg, slog.String(key, s), slog.Int64("i", i), slog.Uint64("u", u),
			slog.Float64("f", fl), slog.Duration("d", time.Duration(d)), slog.Time("t", time.Unix(0, d)))
		got, want := both(t, func(h slog.Handler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String(s, key)}) }, r)
		if got != want {
			t.Errorf("jsonlog wrote\n%s\nslog.JSONHandler wrote\n%s", got, want)
		}
	})
}

func TestHandlerLevel(t *testing.T) {
	var b bytes.Buffer
	h := jsonlog.New(&b, slog.LevelWarn)
	ctx := context.Background()
	if h.Enabled(ctx, slog.LevelInfo) || !h.Enabled(ctx, slog.LevelWarn) {
		t.Errorf("Enabled at Warn: Info %v, Warn %v", h.Enabled(ctx, slog.LevelInfo), h.Enabled(ctx, slog.LevelWarn))
	}
	slog.New(h).Info("dropped")
	slog.New(h.WithGroup("g")).Info("dropped too")
	slog.New(h).Warn("kept")
	if n := strings.Count(b.String(), "\n"); n != 1 || !strings.Contains(b.String(), `"msg":"kept"`) {
		t.Errorf("at Warn the handler wrote %q", b.String())
	}
	if !jsonlog.New(io.Discard, nil).Enabled(ctx, slog.LevelInfo) {
		t.Error("the default level is not Info")
	}
}

// TestHandlerLinesStayWhole logs from many goroutines through handlers
// derived from one another, some records encoded by jsonlog and some by
// slog: every line of the output is one whole JSON object.
func TestHandlerLinesStayWhole(t *testing.T) {
	var b bytes.Buffer
	root := jsonlog.New(&b, nil)
	loggers := []*slog.Logger{slog.New(root), slog.New(root.WithAttrs([]slog.Attr{slog.String("with", "attrs")})), slog.New(root.WithGroup("g"))}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			l := loggers[g%len(loggers)]
			for i := range each {
				if i%3 == 0 {
					l.Warn("slow", "error", errors.New(strings.Repeat("x", i)))
				} else {
					l.Info("fast", "i", i, "s", strings.Repeat("y", i))
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	for _, line := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("a line is not one JSON object (%v): %.200q", err, line)
		}
	}
}

// BenchmarkHandler logs the line of a processed queue message through
// slog.JSONHandler (the baseline) and through jsonlog, both by way of a
// slog.Logger as the host does.
func BenchmarkHandler(b *testing.B) {
	for _, tc := range []struct {
		name string
		h    slog.Handler
	}{
		{"slog", slog.NewJSONHandler(io.Discard, nil)},
		{"jsonlog", jsonlog.New(io.Discard, nil)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := slog.New(tc.h)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l.LogAttrs(ctx, slog.LevelInfo, "message processed",
					slog.String("tenant", "acme"), slog.String("flow", "order-intake"), slog.Uint64("msg_id", 123456),
					slog.String("correlation_id", "0b7c2f0e-3b1a-4c7d-9a1e-2f3b4c5d6e7f"), slog.Int("attempt", 1),
					slog.String("event", "queue_processed"), slog.String("outcome", "succeeded"),
					slog.Int("version", 3), slog.Int("status", 200), slog.Float64("duration_ms", 0.042))
			}
		})
	}
	b.Run("jsonlog.LogAttrs", func(b *testing.B) {
		l := slog.New(jsonlog.New(io.Discard, nil))
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			jsonlog.LogAttrs(ctx, l, slog.LevelInfo, "message processed",
				slog.String("tenant", "acme"), slog.String("flow", "order-intake"), slog.Uint64("msg_id", 123456),
				slog.String("correlation_id", "0b7c2f0e-3b1a-4c7d-9a1e-2f3b4c5d6e7f"), slog.Int("attempt", 1),
				slog.String("event", "queue_processed"), slog.String("outcome", "succeeded"),
				slog.Int("version", 3), slog.Int("status", 200), slog.Float64("duration_ms", 0.042))
		}
	})
}
