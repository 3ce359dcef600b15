package queue_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// TestRetryDueAtRestartBeforeTheCheckpoint: a process dies (kill -9,
// no power cut) after m1's first attempt failed and was scheduled, while a
// later message runs and before the checkpoint passed m1. At the next
// start m1's retry is due at once: it goes first, ends (ack), leaves the
// schedule. The worker now starts past the furthest scheduled message;
// the reader, from the checkpoint before m1, read m1 again, no longer
// scheduled, and delivered it once more as a first attempt.
func TestRetryDueAtRestartBeforeTheCheckpoint(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, "m1")
	put(t, q, "m2")
	parked := make(chan struct{})
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		switch string(d.Payload) {
		case "m1":
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}, Error: "503"}
		default:
			close(parked)
			<-ctx.Done()
			return queue.Verdict{Kind: queue.VerdictInterrupted}
		}
	})})
	<-parked
	if ckpt, _ := q.Checkpoint(); ckpt != 0 {
		t.Fatalf("checkpoint while m2 runs = %d, want 0", ckpt)
	}
	if rs := retries(t, q); len(rs) != 1 {
		t.Fatalf("retries while m2 runs: %v", rs)
	}
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	clk.Advance(30 * time.Second) // the downtime: m1's retry is due

	q2 := openQ(t, crashed, clk, nil)
	n := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w2", ack)})
	clk.WaitCalls(t, n+1)
	var again []string
	for _, d := range rec.all() {
		if d.Worker == "w2" {
			again = append(again, fmt.Sprintf("%s/a%d", d.Payload, d.Attempt))
		}
	}
	if want := []string{"m1/a2", "m2/a1"}; fmt.Sprint(again) != fmt.Sprint(want) {
		t.Errorf("after the crash: %v, want %v (m1 acknowledged at attempt 2, then delivered again as a first attempt)", again, want)
	}
}
