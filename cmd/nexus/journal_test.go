package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/registry"
)

// firstWriteHeap is a command's stdout that records the live heap at its
// first write (after a collection), and keeps what is written.
type firstWriteHeap struct {
	bytes.Buffer
	live uint64 // 0 until the first write
}

func (w *firstWriteHeap) Write(p []byte) (int, error) {
	if w.live == 0 {
		w.live = liveHeap()
	}
	return w.Buffer.Write(p)
}

// liveHeap is the heap's live bytes, after a collection.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestJournalPrintsAsItReads: nexus journal with a large --limit (a dump
// of the journal to a file) prints the entries a page at a time, holding
// a page in memory, and every entry once, newest first, across the
// pages' edges (here entries share their times in threes, so that pages
// end between two of one time). It read every entry asked for before
// printing the first, and wrote each line in three writes: 2.4 GB of
// memory and 125 s for a journal of 3.1 million rows.
func TestJournalPrintsAsItReads(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	deployOrders(t, db)
	reg, err := registry.Open(context.Background(), db, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60000
	w := reg.NewJournalWriter(registry.JournalConfig{Buffer: n, FlushEvery: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		w.Append(registry.Entry{At: base.Add(time.Duration(i/3) * time.Millisecond), Door: "enqueue", Tenant: "acme", Flow: "orders", Version: 1,
			CorrelationID: fmt.Sprintf("c-%06d", i), MsgID: int64(i + 1), Attempt: 1, Outcome: "dead_lettered", Status: 502,
			Error: "step 'forward': effect handler failed: HTTP 503 Service Unavailable"})
	}
	w.Start()
	w.Stop()
	if w.Written() != n {
		t.Fatalf("the journal writer wrote %d entries, want %d", w.Written(), n)
	}
	reg.Close()

	before := liveHeap()
	var stdout firstWriteHeap
	var stderr bytes.Buffer
	if code := run([]string{"journal", "--db", db, "--limit", fmt.Sprint(n + 10)}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus journal: exit %d: %s", code, stderr.String())
	}
	grew := int64(stdout.live) - int64(before)
	t.Logf("the live heap at the first line: %d KiB more than before the command", grew>>10)
	if grew > 4<<20 {
		t.Errorf("nexus journal --limit %d held %d MiB when it printed its first line: it read every entry first", n+10, grew>>20)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("nexus journal printed %d lines, want %d", len(lines), n)
	}
	for i, line := range lines {
		if want := fmt.Sprintf(" msg_id=%d ", n-i); !strings.Contains(line, want) {
			t.Fatalf("line %d: %q; want the entry of%s(newest first, each once)", i+1, line, want)
		}
	}
}
