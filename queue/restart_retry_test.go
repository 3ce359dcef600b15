package queue_test

import (
	"context"
	"fmt"
	"os"
	"strings"
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

// TestManagerStopWorkersWithPublishAndReplay: while StopWorkers waits for
// a delivery in flight, that delivery publishes to a queue not yet open
// and to one whose worker is being stopped, and a request replays a dead
// letter of a third queue: nothing deadlocks, all three are taken, none
// is delivered, and Stop then closes the queues.
func TestManagerStopWorkersWithPublishAndReplay(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	var m *queue.Manager
	var pubErrs [2]error
	m, _ = newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		switch string(d.Payload) {
		case "dl":
			return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "x"}
		case "pub":
			close(inFlight)
			<-release
			_, pubErrs[0] = m.Append("acme", "fresh", enqueue("published-fresh"))
			_, pubErrs[1] = m.Append("acme", "c", enqueue("published-c"))
		}
		return ack(ctx, d)
	}), 0, nil)
	if _, err := m.Append("acme", "d", enqueue("dl")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("acme", "c", enqueue("c0")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 2)
	eventually(t, "the dead letter", func() bool { i, _ := m.Info("acme", "d"); return i.DeadLetters == 1 })
	if _, err := m.Append("acme", "a", enqueue("pub")); err != nil {
		t.Fatal(err)
	}
	<-inFlight
	stopped := make(chan struct{})
	go func() { m.StopWorkers(); close(stopped) }()
	time.Sleep(20 * time.Millisecond) // StopWorkers is waiting for the delivery
	replayed := make(chan error, 1)
	go func() {
		dl, err := m.Peek("acme", "d")
		if err != nil {
			replayed <- err
			return
		}
		ids, err := dl.PendingIDs()
		if err != nil || len(ids) != 1 {
			replayed <- fmt.Errorf("pending %v %v", ids, err)
			return
		}
		_, err = m.Replay("acme", "d", ids[0], "replay", "cid-r")
		replayed <- err
	}()
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("StopWorkers did not return: deadlock")
	}
	select {
	case err := <-replayed:
		if err != nil {
			t.Errorf("Replay during StopWorkers: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Replay did not return")
	}
	if pubErrs[0] != nil || pubErrs[1] != nil {
		t.Errorf("publishes during StopWorkers: %v", pubErrs)
	}
	done := make(chan struct{})
	go func() { m.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	for _, d := range rec.all() {
		if strings.HasPrefix(d.Payload, "published") || d.Source == "replay" {
			t.Errorf("delivered after StopWorkers: %v", d)
		}
	}
}
