package registry

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
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

// TestPruneBatchFollowsTheTimeItHolds: a prune's batch grows while a
// batch holds the write lock briefly and shrinks when one holds it long,
// within 1 and pruneBatch.
func TestPruneBatchFollowsTheTimeItHolds(t *testing.T) {
	for _, c := range []struct {
		n    int
		took time.Duration
		want int
	}{
		{pruneFirstBatch, time.Millisecond, 2 * pruneFirstBatch},
		{4000, time.Millisecond, pruneBatch},
		{pruneBatch, 0, pruneBatch},
		{1000, pruneHold * 3 / 4, 1000}, // about right: kept
		{1000, pruneHold + time.Millisecond, 500},
		{1, 10 * time.Second, 1}, // one answer that takes long: still pruned, one at a time
	} {
		if got := nextPruneBatch(c.n, c.took); got != c.want {
			t.Errorf("nextPruneBatch(%d, %v) = %d, want %d", c.n, c.took, got, c.want)
		}
	}
}

// TestJournalQueriesReadAPage: every query a Journal page runs walks an
// index newest first and stops at the page, never reading and sorting all
// the entries it filters (a tenant alone did: tenantJournal now runs one
// query per flow of the tenant, or, for a tenant of many flows, walks
// journal_at).
func TestJournalQueriesReadAPage(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := &Entry{At: time.Unix(1_800_000_000, 0), Row: 7}
	for _, q := range []JournalQuery{
		{},
		{Before: before},
		{Flow: "a"},
		{Tenant: "acme", Flow: "a"},
		{Tenant: "acme", Flow: "a", Before: before},
		{Tenant: "acme"},
		{Tenant: "acme", Before: before},
	} {
		query, args := journalQuery(q)
		if q.Tenant != "" && q.Flow == "" {
			query, args = tenantScanQuery(q) // a tenant of many flows
		}
		if plan := queryPlan(t, r, query, args); strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("the page %+v sorts what it filters: %q", q, plan)
		}
	}
}

// TestJournalPagesStartAtTheirCursor: a page after a cursor (Before: the
// next page's link of /api/journal, the Journal page and nexus journal)
// enters the index at the cursor's time. Its condition was written as
// at < ? OR at = ? AND id < ?, which SQLite does not take for a range of
// the index: it walked the index from the newest entry, testing each,
// until the page was full, so a page cost all the entries newer than it
// (0.5 s for a page of 1,000 near the end of a journal of 3 million rows,
// 0.7–1.2 s through /api/journal, against 2 ms).
func TestJournalPagesStartAtTheirCursor(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := &Entry{At: time.Unix(1_800_000_000, 0), Row: 7}
	for _, q := range []JournalQuery{
		{Before: before},
		{Tenant: "acme", Flow: "a", Before: before},
		{Flow: "a", Before: before},
		{CorrelationID: "c", Before: before},
		{Tenant: "acme", Flow: "a", CorrelationID: "c", Before: before},
		{Tenant: "acme", Before: before},
	} {
		query, args := journalQuery(q)
		if q.Tenant != "" && q.Flow == "" {
			query, args = tenantScanQuery(q) // a tenant of many flows
		}
		plan := queryPlan(t, r, query, args)
		if !strings.Contains(plan, "at<?") {
			t.Errorf("the page %+v does not enter its index at the cursor (at<?): %q", q, plan)
		}
	}
}

// queryPlan is SQLite's plan of query, its steps joined by "; ".
func queryPlan(t *testing.T, r *Registry, query string, args []any) string {
	t.Helper()
	rows, err := r.db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestJournalWritesWithEveryConnectionTaken: the writer prepares its
// statements before its transaction begins, never in it: a prepare in the
// transaction waits for a second connection of the pool, which writers
// waiting on SQLite's write lock (the transaction's) may all hold, and
// they wait out their busy timeout, failing, while the journal waits for
// them. With a pool of one connection, such a wait would never end.
func TestJournalWritesWithEveryConnectionTaken(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.db.SetMaxOpenConns(1)
	w := r.NewJournalWriter(JournalConfig{Logger: slog.New(slog.DiscardHandler)})
	at := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	for i := range 3 * journalRowsPerInsert {
		door := "enqueue"
		if i >= 2*journalRowsPerInsert {
			door = "run" // a third statement shares another set of columns
		}
		w.Append(Entry{At: at, Door: door, Tenant: "acme", Flow: "f", Version: 1, CorrelationID: "c", MsgID: int64(i + 1), Attempt: 1, Outcome: "succeeded", Status: 200})
	}
	done := make(chan struct{})
	go func() {
		w.Start()
		w.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the writer did not write its batch within 20s: it waits for a connection its own transaction holds")
	}
	if w.Written() != 3*journalRowsPerInsert {
		t.Errorf("Written() = %d, want %d", w.Written(), 3*journalRowsPerInsert)
	}
}

// TestJournalInsertsBounded: a writer keeps at most maxJournalInserts
// INSERTs prepared, the one sharing nothing (which serves any rows past
// the others) among them, however many sets of shared columns its batches
// show.
func TestJournalInsertsBounded(t *testing.T) {
	r, err := Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var inserts journalInserts
	defer inserts.close()
	// 32 batches of journalRowsPerInsert rows, each sharing another set
	// of columns (never none): its later rows differ from its first in
	// the columns of kind's bits
	for kind := range 2 * maxJournalInserts {
		batch := make([]Entry, journalRowsPerInsert)
		for i := range batch {
			batch[i] = Entry{Door: "enqueue", Tenant: "acme", Flow: "f", Version: 1, Attempt: 1, Outcome: "succeeded", Status: 200}
			if kind&1 != 0 && i > 0 {
				batch[i].Status = 500
			}
			if kind&2 != 0 && i > 0 {
				batch[i].Version = 2
			}
			if kind&4 != 0 && i > 0 {
				batch[i].Attempt = 2
			}
			if kind&8 != 0 && i > 0 {
				batch[i].Error = "x"
			}
			if kind&16 != 0 && i > 0 {
				batch[i].Outcome = "failed"
			}
		}
		inserts.prepare(r.db, batch)
		if err := r.writeEntries(context.Background(), batch, &inserts); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(inserts.stmts); n > maxJournalInserts {
		t.Errorf("%d INSERTs prepared, want at most %d", n, maxJournalInserts)
	}
	if _, ok := inserts.stmts[0]; !ok {
		t.Error("the INSERT sharing nothing was not prepared for the rows past the others")
	}
}
