package queue_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
)

// A worker.lock deleted by hand while a worker leads (taken for a stale
// lock): the worker locks the file at the path again at its next idle
// moment, so that no other process's worker finds it free, and says so.
func TestWorkerLockDeletedIsLockedAgain(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), Handler: newRecorder(clk).handler("w", ack)})
	eventually(t, "the worker leads", func() bool { return w.State().Leading })
	clk.WaitCalls(t, 1) // idle, waiting for its next poll
	path := queueFile(root, "worker.lock")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.Wake()
	eventually(t, "worker.lock is locked again", func() bool { return queue.HeldAtPath(t, path) })
	if !w.State().Leading {
		t.Error("the worker no longer leads")
	}
	eventually(t, "the new lock is logged", func() bool { return strings.Contains(logs.String(), "worker_lock_replaced") })
	if ev := logs.Events(t, "worker_lock_replaced"); len(ev) != 1 || ev[0]["file"] != path {
		t.Errorf("worker_lock_replaced events = %v, want one naming %s", ev, path)
	}
}

// A worker.lock deleted while a worker leads, and another process's worker
// elected on the file made again: the first stands by at its next idle
// moment, with an error naming the file, so that one worker delivers.
func TestWorkerLockDeletedAndTakenElsewhereStandsBy(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	q2 := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	rec := newRecorder(clk)
	w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), Handler: rec.handler("one", ack)})
	eventually(t, "the first worker leads", func() bool { return w1.State().Leading })
	clk.WaitCalls(t, 1) // idle, waiting for its next poll
	path := queueFile(root, "worker.lock")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w2 := startWorker(t, q2, queue.WorkerConfig{Clock: clk, Handler: rec.handler("two", ack)})
	eventually(t, "the second worker leads", func() bool { return w2.State().Leading })
	w1.Wake()
	eventually(t, "the first worker stands by", func() bool { return !w1.State().Leading })
	put(t, q2, `{"n":1}`)
	w2.Wake()
	if got := rec.wait(t, 1); got[0].Worker != "two" {
		t.Errorf("deliveries = %v, want the second worker's", got)
	}
	ev := logs.Events(t, "worker_failed")
	if len(ev) != 1 || !strings.Contains(ev[0]["error"].(string), path) {
		t.Errorf("worker_failed events = %v, want one naming %s", ev, path)
	}
}

// segment.log.ckpt deleted by hand while a worker runs: the worker writes
// its checkpoint to a file at the path again at its next idle moment, so
// that a restart does not deliver the processed messages again and the
// log can be emptied. The file goes once the worker is idle after a first
// message: its first idle moment empties the log (housekeeping), so a
// wait for the checkpoint to reach the first message's end raced the
// drain, and timed out when the drain came first.
func TestCheckpointDeletedWhileTheWorkerRuns(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, `{"n":1}`)
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w", ack)})
	rec.wait(t, 1)
	clk.WaitCalls(t, 1) // idle, waiting for its next poll: housekeeping is not due again within it
	if err := os.Remove(queueFile(root, "segment.log.ckpt")); err != nil {
		t.Fatal(err)
	}
	put(t, q, `{"n":2}`)
	w.Wake()
	rec.wait(t, 2)
	w.Stop()
	c, err := q.Checkpoint()
	size, _ := q.Size()
	if err != nil || size == 0 || c != size {
		t.Fatalf("after the worker stopped: checkpoint %d, %v; want the end of the log, %d", c, err, size)
	}
}
