package host_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// RetryPolicy answers the live flow's queue_* keys (the queue asks it for
// a delivery whose handler panicked), its defaults for a flow that sets
// none, and false for a flow that is not live.
func TestRetryPolicyOfTheLiveFlow(t *testing.T) {
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/slow.md"] = flowFile("acme", "slow",
		"queue_max_attempts: 7\nqueue_initial_delay_ms: 250\nqueue_backoff_factor: 1.5\nqueue_max_delay_ms: 9000\n", echoSteps)
	fx.publish(files, testAccessYAML(), "c2")
	for _, c := range []struct {
		flow string
		want queue.RetryPolicy
		ok   bool
	}{
		{"slow", queue.RetryPolicy{MaxAttempts: 7, InitialDelay: 250 * time.Millisecond, BackoffFactor: 1.5, MaxDelay: 9 * time.Second}, true},
		{"echo", queue.DefaultRetryPolicy, true},
		{"nope", queue.RetryPolicy{}, false},
	} {
		got, ok := fx.server.RetryPolicy("acme", c.flow)
		if ok != c.ok {
			t.Errorf("RetryPolicy(acme, %s) ok = %v, want %v", c.flow, ok, c.ok)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("RetryPolicy(acme, %s) (-want +got):\n%s", c.flow, diff)
		}
	}
	// a host with no live set yet knows no flow
	if _, ok := newUnloadedFixture(t, nil).server.RetryPolicy("acme", "slow"); ok {
		t.Error("RetryPolicy of a host with no live set answered a policy")
	}
}
