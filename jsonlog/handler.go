// Package jsonlog is the host's structured-log handler: a slog.Handler that
// writes exactly the lines slog.JSONHandler writes (without options) at a
// fraction of the cost.
//
// The host logs one or two lines per request and per queued message, each
// with a handful of strings and numbers; slog.JSONHandler spends about a
// microsecond on such a line, a tenth of what the host spends on the
// request besides net/http. Handler encodes the attribute kinds the host
// logs itself (strings, integers, booleans, durations, finite floats,
// times) and hands any other record (a group, an error or any other value,
// a LogValuer, an empty key) to a slog.JSONHandler on the same writer, so
// that every line is the standard library's, byte for byte.
package jsonlog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler is a slog.Handler writing JSON lines, one Write per record.
type Handler struct {
	out   *lockedWriter
	level slog.Leveler
	pre   []byte       // the attributes of WithAttrs, encoded: `,"key":value` each
	std   slog.Handler // slog.JSONHandler with the same attributes and groups
	// stdOnly: a group was opened, or an attribute of WithAttrs is not one
	// this handler encodes; every record then goes to std
	stdOnly bool
}

// lockedWriter serialises the writes of a handler and of the handlers
// derived from it, std included: each writes a whole line at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// New returns a handler writing to w the records at level or above
// (nil means slog.LevelInfo).
func New(w io.Writer, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	out := &lockedWriter{w: w}
	return &Handler{out: out, level: level, std: slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level})}
}

// Enabled reports whether records at level are written.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.level.Level()
}

// Handle writes r as one JSON line.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if h.stdOnly {
		return h.std.Handle(ctx, r)
	}
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b, ok := h.appendRecord((*bp)[:0], r)
	if !ok {
		return h.std.Handle(ctx, r)
	}
	*bp = b
	_, err := h.out.Write(b)
	return err
}

// appendRecord appends r's line, or reports that r has something this
// handler leaves to std.
func (h *Handler) appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	b, ok := h.appendHead(b, r.Time, r.Level, r.Message)
	if !ok {
		return b, false // a time slog writes its own way: the line is slog's
	}
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a)
		return ok
	})
	return append(b, '}', '\n'), ok
}

// appendHead appends a line's opening brace, time, level, message and the
// attributes of WithAttrs.
func (h *Handler) appendHead(b []byte, t time.Time, level slog.Level, msg string) ([]byte, bool) {
	b = append(b, '{')
	if !t.IsZero() {
		b = append(b, `"time":`...)
		var ok bool
		if b, ok = appendTime(b, t.Round(0)); !ok {
			return b, false
		}
		b = append(b, ',')
	}
	b = append(b, `"level":`...)
	b = appendString(b, level.String())
	b = append(b, `,"msg":`...)
	b = appendString(b, msg)
	return append(b, h.pre...), true
}

// LogAttrs does what l.LogAttrs does, in less time when l's handler is a
// Handler: it encodes the line straight from attrs. slog.Logger.LogAttrs
// builds a slog.Record first, which records the caller's program counter
// (this handler never prints it) and copies the attributes after the fifth
// into a new slice; the host writes one such line per request and per
// queued message. Any other handler, and any line this handler leaves to
// slog.JSONHandler, goes through l.LogAttrs.
func LogAttrs(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	h, ok := l.Handler().(*Handler)
	if !ok || h.stdOnly {
		l.LogAttrs(ctx, level, msg, attrs...)
		return
	}
	if !h.Enabled(ctx, level) {
		return
	}
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b, ok := h.appendHead((*bp)[:0], time.Now(), level, msg)
	for i := 0; ok && i < len(attrs); i++ {
		b, ok = appendAttr(b, attrs[i])
	}
	if !ok {
		l.LogAttrs(ctx, level, msg, attrs...)
		return
	}
	*bp = append(b, '}', '\n')
	h.out.Write(*bp)
}

// WithAttrs returns a handler whose lines carry attrs after the message.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	h2 := *h
	h2.std = h.std.WithAttrs(attrs)
	if !h.stdOnly {
		pre := append([]byte(nil), h.pre...)
		for _, a := range attrs {
			var ok bool
			if pre, ok = appendAttr(pre, a); !ok {
				h2.stdOnly = true
				break
			}
		}
		h2.pre = pre
	}
	return &h2
}

// WithGroup returns a handler that puts the attributes that follow in the
// group name. Its records go to slog.JSONHandler.
func (h *Handler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.std, h2.stdOnly = h.std.WithGroup(name), true
	return &h2
}

// appendAttr appends `,"key":value`, or reports that a is not an attribute
// this handler encodes.
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	if a.Key == "" {
		return b, false // slog elides an empty attribute, keeps an empty key with a value
	}
	b = append(b, ',')
	b = appendString(b, a.Key)
	b = append(b, ':')
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		b = appendString(b, v.String())
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		b = strconv.AppendInt(b, int64(v.Duration()), 10) // nanoseconds, as json.Marshal
	case slog.KindFloat64:
		return appendFloat(b, v.Float64())
	case slog.KindTime:
		return appendTime(b, v.Time())
	default: // Any (errors included), Group, LogValuer
		return b, false
	}
	return b, true
}

// appendTime appends t as slog.JSONHandler does (RFC 3339 with
// nanoseconds); a year it refuses is left to it.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y >= 10000 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// appendFloat appends f as json.Marshal does; NaN and the infinities,
// which it refuses, are left to slog.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hex = "0123456789abcdef"

// appendString appends s quoted as slog.JSONHandler quotes it: encoding/json's
// escapes without the HTML ones, invalid UTF-8 as U+FFFD, and U+2028 and
// U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// bufPool holds line buffers; one that grew past maxKeptBuf is dropped.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxKeptBuf = 16 << 10

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxKeptBuf {
		bufPool.Put(bp)
	}
}
