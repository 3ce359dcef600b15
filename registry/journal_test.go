package registry_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// entry is the journal entry number i: every field set, times in whole
// microseconds (what the journal keeps).
func entry(i int, tenant, flow string, at time.Time) registry.Entry {
	doors := []string{"run", "enqueue", "cron"}
	outcomes := []string{"succeeded", "filtered", "fault_handled", "failed"}
	e := registry.Entry{
		At:            at,
		Door:          doors[i%len(doors)],
		Tenant:        tenant,
		Flow:          flow,
		Version:       1 + i%3,
		CorrelationID: fmt.Sprintf("corr-%04d", i),
		MsgID:         int64(i * 7),
		Attempt:       1 + i%5,
		Outcome:       outcomes[i%len(outcomes)],
		Status:        200 + i%4*100,
		Duration:      time.Duration(i)*time.Millisecond + 250*time.Microsecond,
	}
	if e.Outcome == "failed" {
		e.Error = fmt.Sprintf("step call: 502 from upstream (entry %d)", i)
	}
	return e
}

func journal(t *testing.T, r *registry.Registry, q registry.JournalQuery) []registry.Entry {
	t.Helper()
	got, err := r.Journal(context.Background(), q)
	if err != nil {
		t.Fatalf("Journal(%+v): %v", q, err)
	}
	for i := range got {
		got[i].Row = 0 // the journal's own, compared with the entries written (TestJournalPages reads them)
	}
	return got
}

// pageThrough lists q page after page, each from the last entry of the
// one before (Before), and returns the correlation IDs in the order read.
func pageThrough(t *testing.T, r *registry.Registry, q registry.JournalQuery) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		page, err := r.Journal(context.Background(), q)
		if err != nil || pages > 100 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, e := range page {
			got = append(got, e.CorrelationID)
		}
		if len(page) < q.Limit {
			return got
		}
		q.Before = &page[len(page)-1]
	}
}

// TestJournalPages: a listing goes on page after page from the last entry
// of the one before (Before), newest first, none twice and none left out,
// entries of one time included (their rows order them).
func TestJournalPages(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	for i := range 10 {
		w.Append(registry.Entry{At: t0.Add(time.Duration(i/3) * time.Second), Door: "run", Tenant: "acme", Flow: "a", Version: 1,
			CorrelationID: fmt.Sprint("c", i), Attempt: 1, Outcome: "succeeded", Status: 200})
	}
	w.Stop()
	got := pageThrough(t, r, registry.JournalQuery{Limit: 3})
	want := []string{"c9", "c8", "c7", "c6", "c5", "c4", "c3", "c2", "c1", "c0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the pages (-want +got):\n%s", diff)
	}
}

// TestTenantJournalPagesAcrossFlows: a tenant's listing (a page of each
// of its flows, merged) goes page after page newest first across its
// flows, entries of one time in the order they were written, none twice,
// none left out, none of another tenant.
func TestTenantJournalPagesAcrossFlows(t *testing.T) {
	// 3 flows: a page of each, merged; 50 (acme has 40 of them): more
	// than tenantJournal merges
	for _, flows := range []int{3, 50} {
		t.Run(fmt.Sprint(flows, " flows"), func(t *testing.T) { testTenantJournalPages(t, flows) })
	}
}

func testTenantJournalPages(t *testing.T, flows int) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	written := 0
	for i := range 100 {
		tenant, flow := "acme", fmt.Sprint("f", i%flows)
		if i%5 == 0 {
			tenant = "globex"
		}
		// times repeat, and go back now and then (an entry is written
		// when its execution ends)
		at := t0.Add(time.Duration(i/4)*time.Second - time.Duration(i%7/6)*3*time.Second)
		e := registry.Entry{At: at, Door: "run", Tenant: tenant, Flow: flow, Version: 1,
			CorrelationID: fmt.Sprint("c", i), Attempt: 1, Outcome: "succeeded", Status: 200}
		w.Append(e)
		if tenant == "acme" {
			written++
		}
	}
	w.Stop()
	// the order to follow: the whole journal's (one query), acme's entries
	var want []string
	for _, e := range journal(t, r, registry.JournalQuery{Limit: 1000}) {
		if e.Tenant == "acme" {
			want = append(want, e.CorrelationID)
		}
	}
	got := pageThrough(t, r, registry.JournalQuery{Tenant: "acme", Limit: 4})
	if written != 80 || len(want) != 80 {
		t.Fatalf("%d entries of acme written, %d listed; want 80", written, len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("acme's pages against the whole journal's order (-want +got):\n%s", diff)
	}
}

// TestJournalWriter appends entries through a running writer and reads them
// back newest first, with every filter.
func TestJournalWriter(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 16, FlushEvery: 10 * time.Millisecond, Logger: quietLogger()})
	w.Start()
	var all []registry.Entry
	pairs := [][2]string{{"acme", "a"}, {"acme", "b"}, {"globex", "a"}}
	for i := range 120 {
		p := pairs[i%len(pairs)]
		e := entry(i, p[0], p[1], t0.Add(time.Duration(i)*time.Second+time.Duration(i)*time.Microsecond))
		all = append(all, e)
		w.Append(e)
	}
	w.Stop()
	if w.Written() != 120 || w.Dropped() != 0 {
		t.Fatalf("Written() = %d, Dropped() = %d; want 120, 0", w.Written(), w.Dropped())
	}

	newestFirst := slices.Clone(all)
	slices.Reverse(newestFirst)
	filter := func(tenant, flow string, limit int) []registry.Entry {
		var out []registry.Entry
		for _, e := range newestFirst {
			if (tenant == "" || e.Tenant == tenant) && (flow == "" || e.Flow == flow) && len(out) < limit {
				out = append(out, e)
			}
		}
		return out
	}
	tests := []struct {
		name string
		q    registry.JournalQuery
		want []registry.Entry
	}{
		{"everything, 50 by default", registry.JournalQuery{}, filter("", "", 50)},
		{"limit 3", registry.JournalQuery{Limit: 3}, filter("", "", 3)},
		{"limit above the count", registry.JournalQuery{Limit: 1000}, filter("", "", 1000)},
		{"negative limit: the default", registry.JournalQuery{Limit: -1}, filter("", "", 50)},
		{"tenant", registry.JournalQuery{Tenant: "acme", Limit: 1000}, filter("acme", "", 1000)},
		{"flow of every tenant", registry.JournalQuery{Flow: "a", Limit: 1000}, filter("", "a", 1000)},
		{"tenant and flow", registry.JournalQuery{Tenant: "acme", Flow: "a", Limit: 1000}, filter("acme", "a", 1000)},
		{"tenant and flow, limit 5", registry.JournalQuery{Tenant: "globex", Flow: "a", Limit: 5}, filter("globex", "a", 5)},
		{"no such tenant", registry.JournalQuery{Tenant: "initech"}, nil},
		{"no such flow", registry.JournalQuery{Tenant: "globex", Flow: "b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, journal(t, r, tt.q)); diff != "" {
				t.Errorf("Journal(%+v) (-want +got):\n%s", tt.q, diff)
			}
		})
	}
	if len(filter("", "", 1000)) != 120 {
		t.Fatal("the test's own filter is wrong")
	}
}

// TestJournalLargeBatch: a batch of several multi-row statements and a
// remainder is written whole and in order.
func TestJournalLargeBatch(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 1000, FlushEvery: time.Hour, Logger: quietLogger()})
	w.Start()
	var want []registry.Entry
	for i := range 200 { // 64 + 64 + 64 + 8
		e := entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second))
		w.Append(e)
		want = append([]registry.Entry{e}, want...)
	}
	w.Stop()
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{Limit: 1000})); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
}

// TestJournalFullBatchWakesTheWriter: a full batch is written at once,
// long before the flush interval; fewer entries wait for it.
func TestJournalFullBatchWakesTheWriter(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 8, FlushEvery: time.Hour, Logger: quietLogger()})
	w.Start()
	defer w.Stop()
	for i := range 7 {
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	time.Sleep(50 * time.Millisecond)
	if n := w.Written(); n != 0 {
		t.Fatalf("Written() = %d with less than a batch waiting, want 0", n)
	}
	w.Append(entry(7, "acme", "f", t0.Add(7*time.Second)))
	if _, ok := waitFor[struct{}](t, 5*time.Second, nil, func() bool { return w.Written() == 8 }); !ok {
		t.Errorf("Written() = %d a while after the batch filled, want 8", w.Written())
	}
}

// TestJournalStopFlushes: entries waiting for their batch are written by
// Stop, long before the flush interval.
func TestJournalStopFlushes(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 1000, FlushEvery: time.Hour, Logger: quietLogger()})
	w.Start()
	var want []registry.Entry
	for i := range 10 {
		e := entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second))
		w.Append(e)
		want = append([]registry.Entry{e}, want...)
	}
	w.Stop()
	if w.Written() != 10 {
		t.Errorf("Written() = %d after Stop, want 10", w.Written())
	}
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{})); diff != "" {
		t.Errorf("journal after Stop (-want +got):\n%s", diff)
	}
	w.Stop() // a second Stop does nothing
	(&registry.JournalWriter{}).Stop()
	r.NewJournalWriter(registry.JournalConfig{}).Stop() // Stop without Start
}

// TestJournalDropsTheOldest: with a tiny buffer and a stopped writer,
// Append never blocks; the oldest entries are dropped and counted, and the
// newest are written once the writer runs.
func TestJournalDropsTheOldest(t *testing.T) {
	r, _ := newRegistry(t)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{Buffer: 4, FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	w.Start()
	w.Stop()

	var all []registry.Entry
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 {
			e := entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second))
			all = append(all, e)
			w.Append(e)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Append blocked on a full buffer")
	}
	if w.Dropped() != 6 {
		t.Errorf("Dropped() = %d, want 6", w.Dropped())
	}
	if !strings.Contains(logs.String(), `"event":"journal_dropped"`) {
		t.Errorf("no journal_dropped warning; log:\n%s", logs.String())
	}

	w.Start()
	w.Stop()
	if w.Written() != 4 {
		t.Errorf("Written() = %d, want 4", w.Written())
	}
	want := slices.Clone(all[6:])
	slices.Reverse(want)
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{})); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
}

// TestPruneJournal deletes the entries older than the time given, and only
// those.
func TestPruneJournal(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	var all []registry.Entry
	for i, ago := range []time.Duration{4 * time.Hour, 3 * time.Hour, 2 * time.Hour, time.Hour, 0} {
		e := entry(i, "acme", "f", t0.Add(-ago))
		all = append(all, e)
		w.Append(e)
	}
	w.Stop()

	ctx := context.Background()
	if n, err := r.PruneJournal(ctx, t0.Add(-5*time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneJournal before everything = %d, %v; want 0", n, err)
	}
	// An entry exactly at the limit is not older than it: it stays.
	n, err := r.PruneJournal(ctx, t0.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("PruneJournal deleted %d entries, want 2", n)
	}
	want := slices.Clone(all[2:])
	slices.Reverse(want)
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{})); diff != "" {
		t.Errorf("journal after pruning (-want +got):\n%s", diff)
	}
}

// A prune of more rows than one batch deletes them all, batch after
// batch, and nothing newer.
func TestPruneJournalInBatches(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	const old = 12345 // two batches and a part
	for i := range old {
		w.Append(entry(i, "acme", "f", t0.Add(-2*time.Hour)))
	}
	recent := []registry.Entry{entry(old, "acme", "f", t0.Add(-time.Minute)), entry(old+1, "acme", "g", t0)}
	for _, e := range recent {
		w.Append(e)
	}
	w.Stop()
	n, err := r.PruneJournal(context.Background(), t0.Add(-time.Hour))
	if err != nil || n != old {
		t.Fatalf("PruneJournal = %d, %v; want %d", n, err, old)
	}
	want := slices.Clone(recent)
	slices.Reverse(want)
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{Limit: 100})); diff != "" {
		t.Errorf("journal after pruning (-want +got):\n%s", diff)
	}
}

// TestJournalRetention: a writer with a Retention prunes old entries by
// itself, by the registry's clock.
func TestJournalRetention(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: time.Millisecond, Retention: time.Hour, PruneEvery: 5 * time.Millisecond, Logger: quietLogger()})
	w.Start()
	defer w.Stop()
	old := entry(1, "acme", "f", t0.Add(-2*time.Hour))
	recent := entry(2, "acme", "f", t0.Add(-time.Minute))
	w.Append(old)
	w.Append(recent)
	_, ok := waitFor[struct{}](t, 5*time.Second, nil, func() bool {
		got, err := r.Journal(context.Background(), registry.JournalQuery{})
		return err == nil && w.Written() == 2 && cmp.Equal([]registry.Entry{recent}, got, cmpopts.IgnoreFields(registry.Entry{}, "Row"))
	})
	if !ok {
		t.Errorf("after pruning: journal %v, written %d; want only the recent entry", journal(t, r, registry.JournalQuery{}), w.Written())
	}
}

// TestCapJournal keeps the newest entries written and deletes the older
// ones beyond the most kept, batch after batch; a journal within it loses
// nothing.
func TestCapJournal(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	const n, keep = 12345, 100
	var all []registry.Entry
	for i := range n {
		e := entry(i, "acme", "f", t0.Add(-time.Duration(n-i)*time.Second))
		all = append(all, e)
		w.Append(e)
	}
	w.Stop()
	ctx := context.Background()
	if got, err := r.CapJournal(ctx, n); err != nil || got != 0 {
		t.Fatalf("CapJournal(%d) of %d entries = %d, %v; want 0", n, n, got, err)
	}
	if got, err := r.CapJournal(ctx, keep); err != nil || got != n-keep {
		t.Fatalf("CapJournal(%d) = %d, %v; want %d", keep, got, err, n-keep)
	}
	want := slices.Clone(all[n-keep:])
	slices.Reverse(want)
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{Limit: 1000})); diff != "" {
		t.Errorf("journal after the cap (-want +got):\n%s", diff)
	}
}

// TestCapJournalOverHoles: the ids have holes (the retention prunes by
// time, and an entry is written when its execution ends, so an old one can
// have a recent id): the cap keeps the entries of the last max ids, which
// are fewer than max by the holes among them. (It kept exactly max, found
// by stepping through max rows of the table at every prune: the whole
// journal, every minute, once it was full.)
func TestCapJournalOverHoles(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	var all []registry.Entry
	for i := range 10 {
		at := t0.Add(-time.Duration(10-i) * time.Minute)
		if i >= 5 && i <= 7 {
			at = t0.Add(-2 * time.Hour) // long executions, written late
		}
		e := entry(i, "acme", "f", at)
		all = append(all, e)
		w.Append(e)
	}
	w.Start()
	w.Stop()
	ctx := context.Background()
	if n, err := r.PruneJournal(ctx, t0.Add(-time.Hour)); err != nil || n != 3 {
		t.Fatalf("PruneJournal = %d, %v; want 3", n, err)
	}
	// the ids left are 1–5, 9 and 10: the cap keeps the ids within 5 of
	// the newest (6–10), of which the holes 6–8 hold none
	if n, err := r.CapJournal(ctx, 5); err != nil || n != 5 {
		t.Fatalf("CapJournal(5) over 7 entries = %d, %v; want 5", n, err)
	}
	want := []registry.Entry{all[9], all[8]}
	if diff := cmp.Diff(want, journal(t, r, registry.JournalQuery{})); diff != "" {
		t.Errorf("journal after the cap (-want +got):\n%s", diff)
	}
}

// TestJournalMaxEntries: a writer with MaxEntries deletes the entries
// beyond it by itself, at its prunes, whatever the retention, and says so
// (journal_capped).
func TestJournalMaxEntries(t *testing.T) {
	r, _ := newRegistry(t)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: time.Millisecond, Retention: 24 * time.Hour, MaxEntries: 3,
		PruneEvery: 5 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)})
	var all []registry.Entry
	for i := range 5 { // before Start: written in one batch, so one prune deletes
		e := entry(i, "acme", "f", t0.Add(-time.Duration(5-i)*time.Minute))
		all = append(all, e)
		w.Append(e)
	}
	w.Start()
	defer w.Stop()
	want := slices.Clone(all[2:])
	slices.Reverse(want)
	_, ok := waitFor[struct{}](t, 5*time.Second, nil, func() bool {
		got, err := r.Journal(context.Background(), registry.JournalQuery{})
		return err == nil && w.Written() == 5 && cmp.Equal(want, got, cmpopts.IgnoreFields(registry.Entry{}, "Row")) &&
			strings.Contains(logs.String(), "journal_capped")
	})
	if !ok {
		t.Fatalf("journal %v, written %d; want the newest 3 and a journal_capped line; log:\n%s", journal(t, r, registry.JournalQuery{}), w.Written(), logs.String())
	}
	evs := logs.Events(t, "journal_capped")
	if len(evs) != 1 || evs[0]["deleted"] != 2.0 || evs[0]["max_entries"] != 3.0 {
		t.Errorf("journal_capped lines: %v, want one that deleted 2", evs)
	}
}

// BenchmarkJournalAppend measures Append with the writer running, and
// reports the rows the writer put in SQLite per second of the benchmark
// (Stop, which writes what is still buffered, included), and how many
// entries were dropped. "flood" appends as fast as it can, so the buffer
// fills and the oldest entries are dropped: rows/s is the writer's pace
// under a flood. "paced" waits whenever half the buffer is waiting, so
// nothing is dropped: rows/s is the writer's sustained pace. "run" is
// "paced" with entries alike but for their time, correlation ID, message
// id and duration, as a queue's worker writes them.
func BenchmarkJournalAppend(b *testing.B) {
	const buffer = 1 << 16
	for _, name := range []string{"flood", "paced", "run"} {
		paced := name != "flood"
		b.Run(name, func(b *testing.B) {
			r, _ := newRegistry(b)
			w := r.NewJournalWriter(registry.JournalConfig{Buffer: buffer, Logger: quietLogger()})
			entries := make([]registry.Entry, 1024)
			for i := range entries {
				entries[i] = entry(i, "acme", "order-intake", time.Time{})
				if name == "run" {
					alike := entry(0, "acme", "order-intake", time.Time{})
					alike.CorrelationID, alike.MsgID, alike.Duration = entries[i].CorrelationID, entries[i].MsgID, entries[i].Duration
					entries[i] = alike
				}
			}
			w.Start()
			b.ReportAllocs()
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				for paced && int64(i)-w.Written() > buffer/2 {
					time.Sleep(50 * time.Microsecond)
				}
				e := entries[i%len(entries)]
				e.At = t0.Add(time.Duration(i) * time.Microsecond) // in order, as executions end
				w.Append(e)
			}
			w.Stop()
			elapsed := time.Since(start)
			b.ReportMetric(float64(w.Written())/elapsed.Seconds(), "rows/s")
			b.ReportMetric(float64(w.Written()), "written")
			b.ReportMetric(float64(w.Dropped()), "dropped")
		})
	}
}

// TestJournalNewestFirstByTime: an entry is written when its execution
// ends, so a long execution that began first is written last; the journal
// still lists it by the time it began (the ids once ordered it), filtered
// or not, equal times in the order written.
func TestJournalNewestFirstByTime(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	w.Start()
	short := entry(1, "acme", "a", t0.Add(5*time.Second)) // began later, ended first
	long := entry(2, "acme", "a", t0.Add(time.Second))    // began first, ended last
	tie := entry(3, "acme", "a", t0.Add(5*time.Second))   // began with short, written after it
	for _, e := range []registry.Entry{short, long, tie} {
		w.Append(e)
	}
	w.Stop()
	want := []registry.Entry{tie, short, long}
	for _, q := range []registry.JournalQuery{{}, {Tenant: "acme"}, {Tenant: "acme", Flow: "a"}} {
		if diff := cmp.Diff(want, journal(t, r, q)); diff != "" {
			t.Errorf("Journal(%+v) (-want +got):\n%s", q, diff)
		}
	}
	q := registry.JournalQuery{Tenant: "acme", Flow: "a", Limit: 1}
	if diff := cmp.Diff(want[:1], journal(t, r, q)); diff != "" {
		t.Errorf("Journal(%+v) (-want +got):\n%s", q, diff)
	}
}

// TestJournalKeepsABatchTheDatabaseRefused: when another process holds
// registry.db's write lock longer than BusyTimeout, the writer's
// transaction fails (journal_write_failed) and the batch goes back to the
// buffer: it is written once the database takes it (it was thrown away).
func TestJournalKeepsABatchTheDatabaseRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("holds the write lock past BusyTimeout")
	}
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: 20 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)})
	w.Start()
	defer w.Stop()
	release := lockAsAnotherProcess(t, path)
	for i := range 3 {
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	deadline := time.Now().Add(registry.BusyTimeout + 10*time.Second)
	for len(logs.Events(t, "journal_write_failed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no journal_write_failed while the lock was held")
		}
		time.Sleep(50 * time.Millisecond)
	}
	release() // the other process's write is done
	w.Stop()
	if got := journal(t, r, registry.JournalQuery{}); len(got) != 3 {
		t.Errorf("after the lock was released and Stop: %d journal entries, want the 3 appended (Written %d, Dropped %d)", len(got), w.Written(), w.Dropped())
	}
}

// TestCatchUpPruneLetsDoorsIn: docs/decisions.md ("Pruning goes in
// batches"): a catch-up prune must not hold SQLite's write lock while
// doors wait to claim dedup keys. It pauses between batches longer than
// SQLite's busy handler sleeps, so a claim made during a prune of 4
// batches is done before the prune is (it once waited for all of it: with
// millions of rows, past BusyTimeout, a 503).
func TestCatchUpPruneLetsDoorsIn(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	exec(t, sideDB(t, path), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000)
		INSERT INTO journal (at, door, tenant, flow, version, correlation_id, msg_id, attempt, outcome, status, duration_us, error)
		SELECT i, 'run', 'acme', 'f', 1, 'c' || i, 0, 1, 'succeeded', 200, 5, '' FROM n`) // 4 batches of 5,000
	pruned := make(chan time.Time, 1)
	go func() {
		if n, err := r.PruneJournal(ctx, t0); err != nil || n != 20000 {
			t.Errorf("PruneJournal = %d, %v; want 20000", n, err)
		}
		pruned <- time.Now()
	}()
	time.Sleep(20 * time.Millisecond)
	if _, claim, err := r.Dedup().Claim(ctx, "acme", "f", "order-1", false, time.Minute); err != nil || claim == 0 {
		t.Errorf("Claim during the prune = %d, %v", claim, err)
	}
	claimed := time.Now()
	if done := <-pruned; !claimed.Before(done) {
		t.Errorf("a dedup claim made during a prune of 4 batches was done %v after the prune: it got the write lock only when the prune was done", claimed.Sub(done))
	}
}

// TestJournalClosedDropsWhatComesAfter: an entry appended after Close (at
// shutdown: a /run that outlived the deadline) is counted as dropped and
// logged, never written. It sat in the buffer, neither written nor
// counted.
func TestJournalClosedDropsWhatComesAfter(t *testing.T) {
	r, _ := newRegistry(t)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	w.Start()
	w.Append(entry(0, "acme", "f", t0))
	w.Close()
	w.Close()
	w.Append(entry(1, "acme", "f", t0.Add(time.Second)))
	if w.Written() != 1 || w.Dropped() != 1 {
		t.Errorf("Written() = %d, Dropped() = %d; want 1 and 1", w.Written(), w.Dropped())
	}
	if got := logs.Events(t, "journal_dropped"); len(got) != 1 || got[0]["correlation_id"] != entry(1, "acme", "f", t0).CorrelationID {
		t.Errorf("journal_dropped lines %v, want one naming the entry", got)
	}
	if n := len(journal(t, r, registry.JournalQuery{})); n != 1 {
		t.Errorf("%d entries in the journal, want 1", n)
	}
}

// TestJournalStopReturnsUnderTraffic: Stop writes what waited when it was
// called, not what keeps coming: a round wrote until the buffer was empty,
// so appends as fast as the writes kept Stop (and Close) from ever
// returning, and no prune ran meanwhile. What came during the last round
// waits for the next Start.
func TestJournalStopReturnsUnderTraffic(t *testing.T) {
	r, _ := newRegistry(t)
	// a small buffer, so that a round is short under the race detector
	// too: the appends keep it full all the same
	w := r.NewJournalWriter(registry.JournalConfig{Buffer: 4096, BatchSize: 256, Logger: quietLogger()})
	w.Start()
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	var appended atomic.Int64
	for range 2 { // two busy doors
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				w.Append(entry(i, "acme", "f", t0))
				appended.Add(1)
			}
		})
	}
	for w.Written() < 2_000 {
		time.Sleep(time.Millisecond)
	}
	before := w.Written()
	done := make(chan struct{})
	go func() { w.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Stop has not returned after 30 s of appends (%d written)", w.Written())
	}
	// the round in progress, then the last one: each writes no more than
	// the buffer held when it began (a Stop waited one round after
	// another, picked at random among the ready signals)
	if during := w.Written() - before; during > 2*4096 {
		t.Errorf("%d entries written while Stop waited, more than two rounds of a 4096-entry buffer", during)
	}
	stop.Store(true)
	wg.Wait()
	if w.Written()+w.Dropped() > appended.Load() {
		t.Errorf("%d written and %d dropped of %d appended", w.Written(), w.Dropped(), appended.Load())
	}
	// what came during and after the last round is written at the next
	// Start (but for what a full buffer dropped), then Close returns
	w.Start()
	deadline := time.Now().Add(30 * time.Second)
	for w.Written()+w.Dropped() < appended.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("after a new Start: %d written and %d dropped of %d appended", w.Written(), w.Dropped(), appended.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.Close()
}

// TestJournalRowsSharingColumns: a statement binds once the columns its
// rows share (a queue's worker writes runs of one flow, version, door and
// outcome); whatever its rows share, and however many kinds of statement
// a writer has prepared, every entry reads back as written, in order.
func TestJournalRowsSharingColumns(t *testing.T) {
	r, _ := newRegistry(t)
	w := r.NewJournalWriter(registry.JournalConfig{Logger: quietLogger()})
	var want []registry.Entry
	add := func(e registry.Entry) {
		e.At = t0.Add(time.Duration(len(want)) * time.Millisecond) // in order, newest last
		e.CorrelationID = fmt.Sprintf("corr-%05d", len(want))
		e.MsgID = int64(len(want) + 1)
		want = append(want, e)
		w.Append(e)
	}
	alike := registry.Entry{Door: "enqueue", Tenant: "acme", Flow: "order-intake", Version: 3, Attempt: 1, Outcome: "succeeded", Status: 200,
		Duration: 750 * time.Microsecond}
	// one statement of alike rows, then 20 in which row 5 differs in a
	// different set of the columns rows may share (more kinds of
	// statement than a writer keeps), then a short one of alike rows
	for range 64 {
		add(alike)
	}
	for set := 1; set <= 20; set++ {
		for row := range 64 {
			e := alike
			if row == 5 {
				if set&1 != 0 {
					e.Door = "cron"
				}
				if set&2 != 0 {
					e.Tenant, e.Flow = "globex", "billing"
				}
				if set&4 != 0 {
					e.Version, e.Attempt = 4, 2
				}
				if set&8 != 0 {
					e.Outcome, e.Status, e.Error = "failed", 502, "step call: 502 from upstream"
				}
				if set&16 != 0 {
					e.Status = 422
				}
			}
			add(e)
		}
	}
	for i := range 10 {
		add(entry(i, "acme", "mixed", time.Time{}))
	}
	w.Start()
	w.Stop()
	got := journal(t, r, registry.JournalQuery{Limit: len(want) + 1})
	slices.Reverse(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("journal (-written +read):\n%s", diff)
	}
}
