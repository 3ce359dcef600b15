package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// A handler that panics on a message of a flow the worker's Policy knows
// is retried with that flow's policy (its attempts and its backoff), not
// the default one; a flow Policy does not know keeps the default.
func TestWorkerHandlerPanicUsesFlowPolicy(t *testing.T) {
	flowPolicy := queue.RetryPolicy{MaxAttempts: 4, InitialDelay: 5 * time.Second, BackoffFactor: 1, MaxDelay: time.Minute}
	for _, c := range []struct {
		name     string
		policy   func(tenant, flow string) (queue.RetryPolicy, bool)
		want     []string
		attempts int
	}{
		{"flow known", func(tenant, flow string) (queue.RetryPolicy, bool) {
			if tenant != "acme" || flow != wFlow {
				return queue.RetryPolicy{}, false
			}
			return flowPolicy, true
		}, []string{"bomb#1/a1@0s", "bomb#1/a2@5s", "bomb#1/a3@10s", "bomb#1/a4@15s"}, 4},
		{"flow unknown", func(string, string) (queue.RetryPolicy, bool) { return queue.RetryPolicy{}, false },
			[]string{"bomb#1/a1@0s", "bomb#1/a2@1s", "bomb#1/a3@3s"}, 3},
		{"no Policy", nil, []string{"bomb#1/a1@0s", "bomb#1/a2@1s", "bomb#1/a3@3s"}, 3},
		{"Policy panics too", func(string, string) (queue.RetryPolicy, bool) { panic("policy") },
			[]string{"bomb#1/a1@0s", "bomb#1/a2@1s", "bomb#1/a3@3s"}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q := openQ(t, root, clk, nil)
			rec := newRecorder(clk)
			put(t, q, "bomb")
			startWorker(t, q, queue.WorkerConfig{Clock: clk, Policy: c.policy,
				Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict { panic("boom") })})
			clk.WaitCalls(t, 1)
			stepFor(t, clk, time.Minute)
			if got := rec.all(); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("deliveries = %v\nwant         %v", got, c.want)
			}
			if dl := deadLetters(t, q); len(dl) != 1 || dl[0].Attempts != c.attempts {
				t.Errorf("dead letters = %+v, want the message after %d attempts", dl, c.attempts)
			}
		})
	}
}
