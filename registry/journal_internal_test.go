package registry

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// TestPutBackDropIsLogged: entries a refused batch cannot put back in a
// full buffer are dropped, counted and logged as journal_dropped, as every
// loss of the journal is; they were counted and nothing said it, though
// the log is an operator's only sign of executions missing from the
// journal.
func TestPutBackDropIsLogged(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(JournalConfig{Buffer: 2, BatchSize: 2, FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	at := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	for i := range 2 { // the doors filled the buffer while the batch was out
		w.Append(Entry{At: at, Door: "run", Tenant: "acme", Flow: "f", Version: 1, CorrelationID: "c", Attempt: 1 + i, Outcome: "succeeded", Status: 200})
	}
	refused := []Entry{{At: at, Door: "run", Tenant: "acme", Flow: "g", Version: 1, CorrelationID: "r1", Attempt: 1, Outcome: "succeeded", Status: 200},
		{At: at, Door: "run", Tenant: "acme", Flow: "g", Version: 1, CorrelationID: "r2", Attempt: 1, Outcome: "succeeded", Status: 200}}
	w.putBack(refused) // the database refused the batch for the moment
	if w.Dropped() != 2 {
		t.Fatalf("Dropped() = %d, want the 2 entries with no room", w.Dropped())
	}
	if evs := logs.Events(t, "journal_dropped"); len(evs) != 1 || evs[0]["dropped"] != float64(2) {
		t.Errorf("journal_dropped events %v, want one saying 2 entries were lost", evs)
	}
}
