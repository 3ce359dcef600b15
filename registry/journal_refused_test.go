package registry_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestRefusedJournalBatchDoesNotBlockTheOthers: only a busy database is
// worth waiting for: a batch SQLite refuses for what it holds (a
// constraint; here a trigger standing for one) is dropped and counted, and
// the entries after it are written (it once came back at every round, and
// the journal stopped for the life of the process).
func TestRefusedJournalBatchDoesNotBlockTheOthers(t *testing.T) {
	r, _ := newRegistry(t)
	exec(t, sideDB(t, r.Path()), `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 1, FlushEvery: 5 * time.Millisecond, Logger: quietLogger()})
	w.Start()
	defer w.Stop()
	w.Append(entry(0, "poison", "f", t0))
	time.Sleep(50 * time.Millisecond) // the poisoned batch is refused a few times
	for i := 1; i <= 3; i++ {
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Written() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := w.Written(); got < 3 {
		t.Errorf("Written() = %d after 5 s, want the 3 good entries written past the refused one", got)
	}
}

// TestRefusedJournalEntryDropsOnlyItself: of a batch SQLite refuses for
// what one entry holds, only that entry is dropped: the others are written
// one at a time (the whole batch, up to 1024 entries, was dropped).
func TestRefusedJournalEntryDropsOnlyItself(t *testing.T) {
	r, _ := newRegistry(t)
	exec(t, sideDB(t, r.Path()), `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 4, FlushEvery: 5 * time.Millisecond, Logger: quietLogger()})
	// one batch: a refused entry and three good ones
	w.Append(entry(0, "poison", "f", t0))
	for i := 1; i <= 3; i++ {
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	w.Start()
	w.Stop()
	if w.Written() != 3 || w.Dropped() != 1 {
		t.Errorf("written %d, dropped %d; want the 3 good entries written and the refused one dropped", w.Written(), w.Dropped())
	}
}

// TestOneByOneBusyEntryGoesBack: a batch refused for what one entry holds
// is written one entry at a time; an entry refused then only for the
// moment (the database busy between two single writes) goes back to the
// buffer like any busy batch, and is written later (it was dropped with
// the poisoned one). A trigger answers "database is locked" for tenant
// "later" (what isBusy recognises) until it is removed.
func TestOneByOneBusyEntryGoesBack(t *testing.T) {
	r, _ := newRegistry(t)
	side := sideDB(t, r.Path())
	exec(t, side, `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	exec(t, side, `CREATE TRIGGER busy BEFORE INSERT ON journal WHEN NEW.tenant = 'later'
		BEGIN SELECT RAISE(ABORT, 'database is locked'); END`)
	w := r.NewJournalWriter(registry.JournalConfig{BatchSize: 2, FlushEvery: 5 * time.Millisecond, Logger: quietLogger()})
	w.Append(entry(0, "poison", "f", t0))
	w.Append(entry(1, "later", "f", t0.Add(time.Second)))
	w.Start()
	defer w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for w.Dropped() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	exec(t, side, `DROP TRIGGER busy`) // the lock is gone
	w.Stop()
	if w.Written() != 1 || w.Dropped() != 1 {
		t.Errorf("written %d, dropped %d; want the entry refused as busy kept and written (1), only the poisoned one dropped (1)", w.Written(), w.Dropped())
	}
}

// TestStopForgetsWhatItCountsAsDropped: the entries Stop counts as dropped
// (the database refused them after its tries) leave the buffer, so a
// writer started again does not write them too (one entry was counted
// both dropped and written). The busy refusal is a trigger answering
// "database is locked", without waiting BusyTimeout three times.
func TestStopForgetsWhatItCountsAsDropped(t *testing.T) {
	r, _ := newRegistry(t)
	side := sideDB(t, r.Path())
	exec(t, side, `CREATE TRIGGER busy BEFORE INSERT ON journal
		BEGIN SELECT RAISE(ABORT, 'database is locked'); END`)
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: 5 * time.Millisecond, Logger: quietLogger()})
	w.Append(entry(0, "acme", "f", t0))
	w.Start()
	w.Stop() // the entry is refused at every try: lost, counted
	if w.Dropped() != 1 {
		t.Fatalf("after Stop: dropped %d, want 1", w.Dropped())
	}
	exec(t, side, `DROP TRIGGER busy`)
	w.Start()
	w.Stop()
	if got := len(journal(t, r, registry.JournalQuery{})); w.Written()+w.Dropped() != 1 {
		t.Errorf("one entry appended: written %d, dropped %d (%d rows in the journal); an entry counted lost must not be written later (or not be counted lost)", w.Written(), w.Dropped(), got)
	}
}

// TestJournalKeepsWhatAFullDiskRefuses: a disk full (or failing) refuses
// a batch for the moment, not for what it holds: the entries stay in the
// buffer and are written once the operator made room (they were dropped).
// A trigger answers "database or disk is full" until it is removed.
func TestJournalKeepsWhatAFullDiskRefuses(t *testing.T) {
	r, _ := newRegistry(t)
	side := sideDB(t, r.Path())
	exec(t, side, `CREATE TRIGGER full BEFORE INSERT ON journal
		BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
	logs := &jsonlogtest.Buffer{}
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: 5 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)})
	w.Append(entry(0, "acme", "f", t0))
	w.Append(entry(1, "acme", "f", t0.Add(time.Second)))
	w.Start()
	defer w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for len(logs.Events(t, "journal_write_failed")) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	exec(t, side, `DROP TRIGGER full`) // room made
	w.Stop()
	if w.Written() != 2 || w.Dropped() != 0 {
		t.Errorf("written %d, dropped %d; want both entries kept through the full disk and written", w.Written(), w.Dropped())
	}
}

// TestBufferFullWarnsEvenAfterOtherDrops: the warning of a full buffer
// (journal_dropped at its 1st, 2nd, 4th… overflow) counts overflows alone;
// it shared the count of every drop, so after two entries the database
// refused the first overflow said nothing.
func TestBufferFullWarnsEvenAfterOtherDrops(t *testing.T) {
	r, _ := newRegistry(t)
	exec(t, sideDB(t, r.Path()), `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{Buffer: 4, FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	w.Append(entry(0, "poison", "f", t0))
	w.Append(entry(1, "poison", "f", t0.Add(time.Second)))
	w.Start()
	w.Stop() // both refused for what they hold: dropped (logged as journal_write_failed)
	if w.Dropped() != 2 {
		t.Fatalf("Dropped() = %d after two refused entries, want 2", w.Dropped())
	}
	for i := 2; i < 7; i++ { // 5 entries into a buffer of 4, the writer stopped: one overflow
		w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	if w.Dropped() != 3 {
		t.Fatalf("Dropped() = %d, want 3", w.Dropped())
	}
	if got := logs.Events(t, "journal_dropped"); len(got) == 0 {
		t.Errorf("the buffer overflowed and dropped an execution, but no journal_dropped warning was logged (log:\n%s)", logs.String())
	}
}

// TestRefusedJournalEntriesLogSparsely: entries the database refuses for
// what they hold are logged at the 1st, 2nd, 4th, 8th… (with the count so
// far), not each: a database refusing every write for good wrote one line
// per execution, at traffic rate. Every one is still dropped and counted.
func TestRefusedJournalEntriesLogSparsely(t *testing.T) {
	r, _ := newRegistry(t)
	exec(t, sideDB(t, r.Path()), `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	for i := range 100 {
		w.Append(entry(i, "poison", "f", t0.Add(time.Duration(i)*time.Second)))
	}
	w.Start()
	w.Stop()
	if w.Dropped() != 100 || w.Written() != 0 {
		t.Fatalf("dropped %d, written %d; want all 100 dropped", w.Dropped(), w.Written())
	}
	var counts []any
	for _, e := range logs.Events(t, "journal_write_failed") {
		counts = append(counts, e["refused"])
	}
	if want := []any{1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0}; !slices.Equal(counts, want) {
		t.Errorf("journal_write_failed lines with refused %v, want %v", counts, want)
	}
}

// TestBufferFullWarnsAgainAfterItDrained: a full buffer that drops entries
// again after the writer has caught up (a second burst, hours later) is
// warned of again, from its 1st overflow, with the drops of this overflow
// alone: the count ran over the writer's whole life, so a burst that
// dropped a million entries left the next one, short of two million, with
// no warning at all.
func TestBufferFullWarnsAgainAfterItDrained(t *testing.T) {
	r, _ := newRegistry(t)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{Buffer: 4, FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	burst := func(from int) {
		for i := from; i < from+9; i++ { // 9 entries into a buffer of 4, the writer stopped: 5 overflows
			w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Second)))
		}
	}
	burst(0)
	w.Start()
	w.Stop() // the 4 left are written: the buffer has drained
	burst(100)
	w.Start()
	w.Stop()
	if w.Dropped() != 10 || w.Written() != 8 {
		t.Fatalf("dropped %d, written %d; want 10 and 8", w.Dropped(), w.Written())
	}
	var counts []any
	for _, e := range logs.Events(t, "journal_dropped") {
		counts = append(counts, e["dropped"])
	}
	if want := []any{1.0, 2.0, 4.0, 1.0, 2.0, 4.0}; !slices.Equal(counts, want) {
		t.Errorf("journal_dropped lines with dropped %v, want %v (log:\n%s)", counts, want, logs.String())
	}
}

// TestRefusedJournalEntriesWarnAgainAfterACleanRound: entries refused
// again after the writer has written a round with none refused (a later
// bad entry, hours after) are logged again from the 1st, with the count
// of this run alone, as a full buffer is warned of again once it has
// drained: counted over the writer's whole life, the 3rd refusal of the
// day went unsaid, and the 5th, 6th and 7th. A database that refuses every
// entry for good still logs sparsely (TestRefusedJournalEntriesLogSparsely).
func TestRefusedJournalEntriesWarnAgainAfterACleanRound(t *testing.T) {
	r, _ := newRegistry(t)
	exec(t, sideDB(t, r.Path()), `CREATE TRIGGER poison BEFORE INSERT ON journal WHEN NEW.tenant = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused for good'); END`)
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: time.Hour, Logger: logs.Logger(slog.LevelInfo)})
	round := func(tenant string, from int) { // 3 entries, written (or refused) in one round
		for i := from; i < from+3; i++ {
			w.Append(entry(i, tenant, "f", t0.Add(time.Duration(i)*time.Second)))
		}
		w.Start()
		w.Stop()
	}
	round("poison", 0)
	round("acme", 10) // written, none refused: the run of refusals is over
	round("poison", 20)
	if w.Dropped() != 6 || w.Written() != 3 {
		t.Fatalf("dropped %d, written %d; want 6 and 3", w.Dropped(), w.Written())
	}
	var counts []any
	for _, e := range logs.Events(t, "journal_write_failed") {
		counts = append(counts, e["refused"])
	}
	if want := []any{1.0, 2.0, 1.0, 2.0}; !slices.Equal(counts, want) {
		t.Errorf("journal_write_failed lines with refused %v, want %v (log:\n%s)", counts, want, logs.String())
	}
}
