//go:build linux

package registry_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestJournalOnAFullDiskUnderTrafficLogsNotEveryRound: on a full disk with
// traffic still coming, the buffer fills; every round then takes a batch,
// is refused, and puts it back into a buffer the appends meanwhile filled.
// The journal_dropped line of that is logged at the 1st, 2nd, 4th, 8th…
// time, as journal_write_failed is; it was logged at every round.
func TestJournalOnAFullDiskUnderTrafficLogsNotEveryRound(t *testing.T) {
	dir := smallDisk(t, 4<<20)
	r := open(t, filepath.Join(dir, "registry.db"), registry.Options{})
	var logs jsonlogtest.Buffer
	w := r.NewJournalWriter(registry.JournalConfig{Buffer: 64, BatchSize: 16, FlushEvery: 2 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)})
	w.Start()
	defer w.Stop()
	fillDisk(t, dir)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			w.Append(entry(i, "acme", "f", t0.Add(time.Duration(i)*time.Millisecond)))
			if i%8 == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	time.Sleep(time.Second)
	stop.Store(true)
	<-done
	failed := len(logs.Events(t, "journal_write_failed"))
	putBack := 0
	for _, e := range logs.Events(t, "journal_dropped") {
		if m, _ := e["msg"].(string); strings.Contains(m, "the database refused them and the buffer is full") {
			putBack++
		}
	}
	t.Logf("journal_write_failed lines: %d; putBack journal_dropped lines: %d", failed, putBack)
	if putBack > 40 {
		t.Errorf("%d journal_dropped lines from putBack in one second of a full disk (journal_write_failed: %d): a line per refused round", putBack, failed)
	}
}
