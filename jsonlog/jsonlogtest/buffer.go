// Package jsonlogtest captures JSON log lines for tests.
package jsonlogtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nexushq/nexus/jsonlog"
)

// Buffer collects what is written to it: a logger's JSON lines, or a
// process's output. It is safe for concurrent use; its zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Logger returns a logger writing the host's JSON lines, at level and
// above, into b.
func (b *Buffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(jsonlog.New(b, level))
}

// Events returns, in order, the records written so far whose "event" field
// is event. A line that is not a JSON object fails t.
func (b *Buffer) Events(t testing.TB, event string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("a log line is not a JSON object: %v\n%s", err, sc.Bytes())
		}
		if rec["event"] == event {
			out = append(out, rec)
		}
	}
	return out
}
