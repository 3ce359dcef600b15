package queue_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// A retry's attempt is a uint32 in segment.log.retry, and so is a dead
// letter's count of attempts: a policy allowing more attempts than that
// (a handler other than the compiler's flows, which bound
// queue_max_attempts at queue.MaxAttempts) dead-letters the message at
// attempt MaxAttempts. It scheduled attempt 2^32, written as attempt 0.
func TestWorkerAttemptsStopAtWhatTheRecordHolds(t *testing.T) {
	if queue.MaxAttempts != math.MaxUint32 {
		t.Fatalf("MaxAttempts = %d, want %d (the records' uint32)", queue.MaxAttempts, uint32(math.MaxUint32))
	}
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	m := put(t, q, "again")
	if err := q.SaveRetries([]queue.Retry{{ID: m.ID, Offset: m.Offset, Attempt: queue.MaxAttempts, Due: wt0}}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(clk)
	startWorker(t, q, queue.WorkerConfig{Clock: clk,
		Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
			return queue.Verdict{Kind: queue.VerdictRetry, Error: "down", Policy: queue.RetryPolicy{MaxAttempts: 1 << 40, BackoffFactor: 1}}
		})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, 5*time.Second)
	want := []string{fmt.Sprintf("again#1/a%d@0s", queue.MaxAttempts)}
	if got := rec.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries = %v\nwant         %v", got, want)
	}
	if dl := deadLetters(t, q); len(dl) != 1 || dl[0].Attempts != queue.MaxAttempts {
		t.Errorf("dead letters = %+v, want the message after %d attempts", dl, queue.MaxAttempts)
	}
	if rs, err := q.Retries(); err != nil || len(rs) != 0 {
		t.Errorf("retries = %+v, %v; want none", rs, err)
	}
}
