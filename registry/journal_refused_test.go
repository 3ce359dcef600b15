package registry_test

import (
	"testing"
	"time"

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
