package queue_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// TestManagerPoisonedQueueKeepsItsBudgetSlot: a poisoned queue leaves the
// manager's open queues at once (reopen) but is reopened only once its old
// worker has stopped. Meanwhile it keeps its slot of the residency budget:
// another flow's first submission is refused, and the message the
// poisoned queue acknowledged before the failed fdatasync is delivered by
// the reopened queue's worker.
func TestManagerPoisonedQueueKeepsItsBudgetSlot(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, release := slowManager(t, clk, rec, hooks, 1)

	if _, err := m.Append("acme", "a", enqueue("slow")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1) // "slow" is being delivered
	acked, err := m.Append("acme", "a", enqueue("acked"))
	if err != nil {
		t.Fatal(err)
	}
	// acked (answered 202) waits behind slow; then a failed fdatasync
	hooks.failNextSync()
	if _, err := m.Append("acme", "a", enqueue("lost?")); !errors.Is(err, queue.ErrPoisoned) {
		t.Fatalf("Append with a failing fdatasync: %v", err)
	}
	// another flow's first submission while the old worker finishes
	if _, err := m.Append("acme", "b", enqueue("b1")); !errors.Is(err, queue.ErrBudget) {
		t.Errorf("acme/b's first submission while acme/a is reopened: %v, want ErrBudget (the slot is acme/a's)", err)
	}
	release()

	deadline := time.Now().Add(3 * time.Second)
	for !slices.ContainsFunc(rec.all(), func(d delivery) bool { return d.ID == acked.ID && d.Payload == "acked" }) {
		if time.Now().After(deadline) {
			_, err := m.Append("acme", "a", enqueue("again"))
			t.Fatalf("message %d of acme/a was acknowledged but is never delivered: the poisoned queue was not reopened "+
				"(its budget slot went to acme/b); a new submission to acme/a now gets %v; deliveries %v", acked.ID, err, rec.all())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestManagerStopLetsADeliveryInFlightPublish: Stop waits for the delivery
// in flight, and until the workers have stopped the queues take appends,
// so that a delivery which publishes to another queue (queue_publish) runs
// to its end instead of failing into a retry or a dead letter.
func TestManagerStopLetsADeliveryInFlightPublish(t *testing.T) {
	clk := clocktest.New(wt0)
	var m *queue.Manager
	inFlight, release := make(chan struct{}), make(chan struct{})
	published := make(chan error, 2)
	rec := newRecorder(clk)
	root := filepath.Join(t.TempDir(), "queues")
	m = queue.NewManager(queue.ManagerConfig{Root: root, Clock: clk, Logger: quietLog(), Poll: time.Hour, Now: clk.Now,
		StopGrace: time.Hour, Handler: rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
			if d.Flow != "a" {
				return ack(ctx, d)
			}
			close(inFlight)
			<-release                                   // Stop has begun meanwhile
			for _, target := range []string{"b", "c"} { // open with its worker, and not yet open
				_, err := m.Append("acme", target, enqueue("published"))
				published <- err
				if err != nil {
					return queue.Verdict{Kind: queue.VerdictRetry, Error: err.Error(), Policy: queue.RetryPolicy{MaxAttempts: 1}}
				}
			}
			return ack(ctx, d)
		})})
	if _, _, err := m.Queue("acme", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("acme", "a", enqueue("order")); err != nil {
		t.Fatal(err)
	}
	<-inFlight
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	// Stop has no signal of its own: give it a generous moment to begin
	// (were it slower, the publishes would only be tested before it)
	time.Sleep(100 * time.Millisecond)
	close(release)
	<-stopped
	for range 2 {
		if err := <-published; err != nil {
			t.Errorf("a delivery in flight at shutdown could not publish: %v", err)
		}
	}
	if p, err := queue.Peek(root, "acme", "a", nil); err != nil {
		t.Fatal(err)
	} else if n, err := p.DeadLetterCount(); err != nil || n != 0 {
		t.Errorf("acme/a has %d dead letters (%v) after Stop, want none: the delivery ran to its end", n, err)
	}
	// c had no worker (opened during Stop): its message waits in its log
	if c, err := queue.ReadCounts(root, "acme", "c", nil); err != nil || c.Total != 1 || c.Processed != 0 {
		t.Errorf("acme/c after Stop: %+v, %v; want the published message waiting", c, err)
	}
	if _, _, err := m.Queue("acme", "d"); err == nil {
		t.Error("a queue opened after Stop returned")
	}
}

// TestManagerDeliveredCountsSurviveAReopen: nexus_queue_delivered_total
// is a counter: when a failed fdatasync makes the manager reopen the queue
// with a new worker, the counts go on from where they were.
func TestManagerDeliveredCountsSurviveAReopen(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, _ := newManager(t, clk, rec.handler("m", ack), 0, hooks)
	for _, p := range []string{"one", "two", "three"} {
		if _, err := m.Append("acme", "a", enqueue(p)); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func() int64 {
		for _, info := range m.Queues() {
			if info.Tenant == "acme" && info.Flow == "a" {
				return info.State.Delivered["succeeded"]
			}
		}
		return -1
	}
	eventually(t, "three are counted", func() bool { return delivered() == 3 })
	clk.WaitCalls(t, 1) // the worker is idle, its housekeeping (and its fdatasync) done
	hooks.failNextSync()
	if _, err := m.Append("acme", "a", enqueue("lost?")); !errors.Is(err, queue.ErrPoisoned) {
		t.Fatalf("Append with a failing fdatasync: %v", err)
	}
	if _, _, err := m.Queue("acme", "a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := delivered(); n < 3 {
		t.Errorf("nexus_queue_delivered_total{outcome=\"succeeded\"} went from 3 to %d in a running process after the queue was reopened", n)
	}
}
