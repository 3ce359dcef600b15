package queue_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
)

// A queue that always has a retry pending (a flow that keeps failing)
// still applies the operators' discards to dlq.log at its idle moments:
// the discarded body leaves the disk within a Poll or two, and
// dlq_discarded is logged. Housekeeping waited for an empty retry
// schedule, so on such a queue dlq.log kept every discarded body for as
// long as the failures went on.
func TestHousekeepingAppliesDiscardsWithRetriesPending(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	dead := put(t, q, "secret-body")
	put(t, q, "failing")
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(0), Poll: time.Second,
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
			if string(d.Payload) == "secret-body" {
				return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "bad"}
			}
			return queue.Verdict{Kind: queue.VerdictRetry, Error: "down",
				Policy: queue.RetryPolicy{MaxAttempts: 100, InitialDelay: time.Hour, BackoffFactor: 1, MaxDelay: time.Hour}}
		})})
	clk.WaitCalls(t, 1)
	if rs, err := q.Retries(); err != nil || len(rs) != 1 {
		t.Fatalf("retries = %v, %v; want the failing message's", rs, err)
	}
	if err := q.Mark(dead.ID, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	stepFor(t, clk, 5*time.Second)
	b, err := os.ReadFile(queueFile(root, "dlq.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "secret-body") {
		t.Error("dlq.log still holds the discarded body with a retry pending")
	}
	if ev := logs.Events(t, "dlq_discarded"); len(ev) != 1 {
		t.Errorf("dlq_discarded events = %v, want 1", ev)
	}
	if rs, err := q.Retries(); err != nil || len(rs) != 1 {
		t.Errorf("retries = %v, %v; want the failing message's still", rs, err)
	}
}
