package host_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// A message whose first attempt failed under dedup_on_failure: absorb, and
// whose process died (kill -9) after the failure was recorded under its key
// but before its retry was scheduled, is delivered again from the log at
// the next start as a first attempt. The failure its key holds is its own:
// it runs again and is retried, not acknowledged as a duplicate of itself
// (it was, its failure final without a retry or a dead letter). A true
// duplicate (another message with the key, even one carrying the same
// correlation ID, or one with the same id in a queue whose id counter was
// lost) still receives the recorded failure.
func TestRedeliveredFirstAttemptIsNotItsOwnDuplicate(t *testing.T) {
	be, calls := unavailableBackend(t)
	srv, delivery := absorbServer(t, newFixture(t, nil), be.URL, "", "")
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	m := delivery(1, 1)
	m.EnqueuedAt, m.CorrelationID = at, "order-A-1"
	sameCorrelation := delivery(2, 1)
	sameCorrelation.EnqueuedAt, sameCorrelation.CorrelationID = at.Add(time.Millisecond), "order-A-1"
	sameIDAnewQueue := delivery(1, 1) // ids start again at 1 in a queue whose counter was lost
	sameIDAnewQueue.EnqueuedAt, sameIDAnewQueue.CorrelationID = at.Add(time.Hour), "order-A-1"
	steps := []struct {
		name      string
		d         queue.Delivery
		wantKind  queue.VerdictKind
		wantCalls int32
	}{
		{"message 1, attempt 1, fails (its failure recorded, then the kill before its retry is written)", m, queue.VerdictRetry, 1},
		{"message 1 delivered again from the log at the restart, attempt 1, runs and is retried", m, queue.VerdictRetry, 2},
		{"another message with the key and the same correlation ID gets the recorded failure", sameCorrelation, queue.VerdictAck, 2},
		{"a message with the same id, its queue's counter lost, gets the recorded failure", sameIDAnewQueue, queue.VerdictAck, 2},
		{"message 1, attempt 2, runs and is retried", func() queue.Delivery { d := m; d.Attempt = 2; return d }(), queue.VerdictRetry, 3},
		{"message 1 delivered again once more, attempt 1, still runs", m, queue.VerdictRetry, 4},
	}
	for _, s := range steps {
		v := srv.Handle(context.Background(), s.d)
		if v.Kind != s.wantKind || calls.Load() != s.wantCalls {
			t.Fatalf("%s: verdict %v (%s), %d backend calls; want %v, %d calls", s.name, v.Kind, v.Outcome, calls.Load(), s.wantKind, s.wantCalls)
		}
	}
}

// The same through a real queue and worker: the queue's files copied when
// message 1's first attempt has failed and recorded its failure, before
// the worker writes its retry (the state a kill -9 leaves), then a worker
// over the copy. Message 1 is delivered again as attempt 1, with its id and
// enqueue time read back from the log; it runs and its retry is scheduled.
func TestRedeliveredFirstAttemptFromTheLogIsRetried(t *testing.T) {
	be, calls := unavailableBackend(t)
	srv, _ := absorbServer(t, newFixture(t, nil), be.URL, "", "")
	clk := clocktest.New(t0)
	root, crashed := t.TempDir(), t.TempDir()
	open := func(root string) *queue.Queue {
		q, _, err := queue.Open(root, "acme", "absorb", queue.Options{Now: clk.Now, GatherWait: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	type seen struct {
		d queue.Delivery
		v queue.Verdict
	}
	run := func(q *queue.Queue, before func()) seen {
		got := make(chan seen, 1)
		w := queue.NewWorker(q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
				v := srv.Handle(ctx, d)
				before() // the kill falls here: the failure recorded, the retry not written
				select {
				case got <- seen{d, v}:
				default:
				}
				return v
			})})
		w.Start()
		s := <-got
		w.Stop()
		return s
	}

	q := open(root)
	if _, err := q.Append(queue.NewMessage{Source: "enqueue", CorrelationID: "order-A-1", Payload: []byte(`{"orderId":"A-1"}`)}); err != nil {
		t.Fatal(err)
	}
	first := run(q, func() {
		if err := os.CopyFS(crashed, os.DirFS(root)); err != nil {
			t.Error(err)
		}
	})
	if first.v.Kind != queue.VerdictRetry {
		t.Fatalf("message 1, attempt 1: verdict %v (%s), want a retry", first.v.Kind, first.v.Outcome)
	}
	q2 := open(crashed)
	if rs, err := q2.Retries(); err != nil || len(rs) != 0 {
		t.Fatalf("retries in the copy = %v, %v; want none (the kill came before the retry was written)", rs, err)
	}
	again := run(q2, func() {})
	if again.d.ID != first.d.ID || again.d.Attempt != 1 || !again.d.EnqueuedAt.Equal(first.d.EnqueuedAt) {
		t.Fatalf("delivered at the restart: message %d attempt %d enqueued %v; want message %d attempt 1 enqueued %v",
			again.d.ID, again.d.Attempt, again.d.EnqueuedAt, first.d.ID, first.d.EnqueuedAt)
	}
	rs, err := q2.Retries()
	if err != nil {
		t.Fatal(err)
	}
	if again.v.Kind != queue.VerdictRetry || calls.Load() != 2 || len(rs) != 1 || rs[0].ID != first.d.ID || rs[0].Attempt != 2 {
		t.Errorf("message 1 delivered again at the restart: verdict %v (%s), %d backend calls, retries %+v; want it run (2 calls) and its attempt 2 scheduled, not acknowledged as its own duplicate",
			again.v.Kind, again.v.Outcome, calls.Load(), rs)
	}
}
