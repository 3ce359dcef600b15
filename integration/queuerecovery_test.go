package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The queue's housekeeping and recovery across restarts, over the built
// binary: what the idle-queue sweep does with a lock another process holds,
// and what a restart makes of damaged side files.

// TestQueueSweepPassesOverAHeldAppendLock: after a restart two queues are
// idle with no worker. Another process holds the append lock of the first
// (flock(2) on append.lock, as nexus dlq replay and discard take it). The
// sweep passes over it, deletes the second's files, and SIGTERM ends the
// server promptly: the sweep once waited for the lock, and the shutdown for
// the sweep.
func TestQueueSweepPassesOverAHeldAppendLock(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the minute of the housekeeping task")
	}
	t.Parallel()
	be := newLoopback(t)
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL),
	}, hostOptions{}, "forward-order", "sync-invoices")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":5}`)
	waitEvents(t, h, "queue_processed", 2, nil, 10*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	// the queues are swept in order: forward-order, held, comes first
	held := filepath.Join(queuesRoot(h.db), "acme", "forward-order")
	lock, err := os.OpenFile(filepath.Join(held, "append.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitEvents(t, h2, "queue_files_deleted", 1, field("flow", "sync-invoices"), 80*time.Second)
	if evs := h2.events("queue_files_deleted"); len(evs) != 1 {
		t.Errorf("queue_files_deleted: %v, want only sync-invoices': forward-order's append lock is held", evs)
	}
	if !exists(filepath.Join(held, "segment.log")) {
		t.Errorf("%s lost its segment.log while another process held its append lock", held)
	}
	// generous for a loaded machine; the sweep held up by the lock made
	// it wait for as long as the lock was held
	start := time.Now()
	if code := h2.stop(20 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start))
}

// TestRestartDamagedCheckpointReported: the server is killed with m-1 and
// m-2 delivered and m-3 at the backend, and a bit of segment.log.ckpt is
// flipped. The restart reports it (queue_damage, naming the file), reads
// it as 0 and delivers every message again, m-4 after them: the
// checkpoint was read as 0 without a word.
func TestRestartDamagedCheckpointReported(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	// m-1's first delivery is held until m-2 and m-3 are in the log (an
	// idle moment between them would drain m-1 away: not delivered again
	// then, rightly), m-3's until the test ends
	first, third := make(chan struct{}), make(chan struct{})
	defer close(third)
	var heldFirst, heldThird atomic.Bool
	be.setAnswer(func(x hit) int {
		switch {
		case strings.Contains(x.body, `"m-1"`) && heldFirst.CompareAndSwap(false, true):
			<-first
		case strings.Contains(x.body, `"m-3"`) && heldThird.CompareAndSwap(false, true):
			<-third
		}
		return http.StatusOK
	})
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	for i := 1; i <= 3; i++ {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"m-%d"}`, i))
	}
	close(first)
	be.waitOn(t, "/ingest", 3, 5*time.Second) // m-1 and m-2 delivered, m-3 held at the backend
	h.kill()

	ckpt := filepath.Join(queuesRoot(h.db), "acme", "forward-order", "segment.log.ckpt")
	b, err := os.ReadFile(ckpt)
	if err != nil || len(b) != 16 {
		b = []byte("not a checkpoint") // none written yet: damage all the same
	} else {
		b[8] ^= 0x01 // one bit of the value flipped
	}
	if err := os.WriteFile(ckpt, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := len(be.on("/ingest"))

	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"m-4"}`)
	ev := waitEvents(t, h2, "queue_damage", 1, field("file", "segment.log.ckpt"), 5*time.Second)[0]
	if ev["tenant"] != "acme" || ev["flow"] != "forward-order" || ev["torn"] != false || ev["reason"] == "" {
		t.Errorf("queue_damage: %v, want acme/forward-order, not torn, with a reason", ev)
	}
	eventually(t, 10*time.Second, "m-1 to m-4 delivered after the restart", func() bool {
		seen := map[string]bool{}
		for _, x := range be.on("/ingest")[before:] {
			for i := 1; i <= 4; i++ {
				if strings.Contains(x.body, fmt.Sprintf(`"m-%d"`, i)) {
					seen[fmt.Sprint(i)] = true
				}
			}
		}
		return len(seen) == 4
	})
}
