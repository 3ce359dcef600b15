package host_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// A flow's queue_* keys changed by a new commit while a message waits for
// its retry: the attempt runs on the version live when its turn comes
// (queues-retries-dlq.md, "The worker resolves latest when it picks a
// message up"), and that version's keys decide what follows the attempt:
// whether it is the last one, and the delay before the next. The due time
// of the retry already waiting is the one written to disk when it was
// scheduled (absolute timestamps); a new commit does not move it.
func TestRetryPolicyChangedWhileAMessageWaits(t *testing.T) {
	fx := newFixture(t, nil)
	files := testFlows()
	publish := func(frontMatter, commit string) {
		files["flows/acme/pol.md"] = flowFile("acme", "pol", frontMatter, "## Step: check\n```validate\n$.ok == true | \"not ok\"\n```\n")
		fx.publish(files, testAccessYAML(), commit)
	}
	publish("queue_max_attempts: 2\nqueue_initial_delay_ms: 1000\n", "c1")

	clk := clocktest.New(t0)
	q, _, err := queue.Open(t.TempDir(), "acme", "pol", queue.Options{Now: clk.Now, GatherWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	m, err := q.Append(queue.NewMessage{Source: "enqueue", CorrelationID: "order-A-1", Payload: []byte(`{"ok":false}`)})
	if err != nil {
		t.Fatal(err)
	}
	type attempt struct {
		Attempt int
		At      time.Duration
		Kind    queue.VerdictKind
		Max     int
	}
	got := make(chan attempt, 8)
	w := queue.NewWorker(q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
			v := fx.server.Handle(ctx, d)
			got <- attempt{d.Attempt, clk.Now().Sub(t0), v.Kind, v.Policy.MaxAttempts}
			return v
		})})
	w.Start()
	t.Cleanup(w.Stop)
	next := func(step string) attempt {
		t.Helper()
		select {
		case a := <-got:
			return a
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no delivery within 10 s", step)
		}
		return attempt{}
	}
	wantRetry := func(step string, want queue.Retry) {
		t.Helper()
		clk.WaitDeadline(t, want.Due) // the worker waits for it: the schedule is written
		rs, err := q.Retries()
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].ID != want.ID || rs[0].Attempt != want.Attempt || !rs[0].Due.Equal(want.Due) {
			t.Fatalf("%s: the retry schedule is %+v, want attempt %d of message %d due at %v", step, rs, want.Attempt, want.ID, want.Due)
		}
	}

	// attempt 1 on c1 (2 attempts, 1 s): attempt 2 due in 1 s
	if a, want := next("attempt 1"), (attempt{1, 0, queue.VerdictRetry, 2}); a != want {
		t.Fatalf("attempt 1 (-want +got):\n%s", cmp.Diff(want, a))
	}
	wantRetry("after attempt 1", queue.Retry{ID: m.ID, Attempt: 2, Due: t0.Add(time.Second)})

	// c2 raises the budget and the delays while attempt 2 waits: it stays
	// due in 1 s; it fails on c2, which is not its last attempt there, and
	// c2's delay after attempt 2 applies (10 s × 3¹)
	publish("queue_max_attempts: 4\nqueue_initial_delay_ms: 10000\nqueue_backoff_factor: 3\n", "c2")
	clk.AdvanceTo(t0.Add(time.Second))
	if a, want := next("attempt 2"), (attempt{2, time.Second, queue.VerdictRetry, 4}); a != want {
		t.Fatalf("attempt 2 (-want +got):\n%s", cmp.Diff(want, a))
	}
	wantRetry("after attempt 2", queue.Retry{ID: m.ID, Attempt: 3, Due: t0.Add(31 * time.Second)})

	// c3 lowers the budget to 2 while attempt 3 waits: attempt 3 runs at
	// its time, on c3, and, past c3's last attempt, is dead-lettered
	publish("queue_max_attempts: 2\n", "c3")
	clk.AdvanceTo(t0.Add(31 * time.Second))
	if a, want := next("attempt 3"), (attempt{3, 31 * time.Second, queue.VerdictRetry, 2}); a != want {
		t.Fatalf("attempt 3 (-want +got):\n%s", cmp.Diff(want, a))
	}
	var dl []queue.DeadLetter
	for deadline := time.Now().Add(10 * time.Second); len(dl) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if dl, _, err = q.DeadLetters(); err != nil {
			t.Fatal(err)
		}
	}
	if len(dl) != 1 || dl[0].ID != m.ID || dl[0].Attempts != 3 || dl[0].LastError != "step 'check': validation failed (Semantic): not ok" {
		t.Errorf("dead letters %+v, want message %d after 3 attempts", dl, m.ID)
	}
	// the worker clears the retry entry after it writes the dead letter:
	// wait for it, as for the dead letter
	var rs []queue.Retry
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if rs, err = q.Retries(); err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 || !time.Now().Before(deadline) {
			break
		}
	}
	if len(rs) != 0 {
		t.Errorf("the retry schedule after the dead letter: %+v, want empty", rs)
	}
}
