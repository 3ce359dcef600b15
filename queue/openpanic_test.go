package queue_test

import (
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// panicOnceFS panics on the first open of segment.log (any panic in Open:
// a bug in recovery, an FS implementation), then behaves.
type panicOnceFS struct {
	queue.OS
	done atomic.Bool
}

func (p *panicOnceFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	if filepath.Base(name) == "segment.log" && p.done.CompareAndSwap(false, true) {
		panic("boom in Open")
	}
	return p.OS.OpenFile(name, flag, perm)
}

// TestManagerPanicInOpenLeavesNothingBehind: a panic inside Open
// (recovered by net/http for an /enqueue) must not leave the queue's
// opening in place: every later submission to the queue would wait for it
// for ever, and its slot of the budget would never be given back.
func TestManagerPanicInOpenLeavesNothingBehind(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, _ := newManager(t, clk, rec.handler("m", ack), 2, &panicOnceFS{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Open did not panic: the test's file system did not stand for a panic in Open")
			}
		}()
		m.Append("acme", "a", enqueue("a1"))
	}()
	if taken, _ := m.Budget(); taken != 0 {
		t.Errorf("%d slots of the budget taken after the panic, want 0", taken)
	}
	done := make(chan error, 1)
	go func() { _, err := m.Append("acme", "a", enqueue("a2")); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the second submission: %v", err)
		}
	case <-time.After(3 * time.Second):
		taken, _ := m.Budget()
		t.Fatalf("the second submission to acme/a still waits after 3 s (budget taken %d, no queue open)", taken)
	}
}
