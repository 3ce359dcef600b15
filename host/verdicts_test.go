package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/queue"
)

// Each way a queued delivery can end, turned into the queue's verdict as
// queues-retries-dlq.md and handling-failures.md's one status table say:
// every failure of the flow (400, 422, 502, 500, a failed fault handler
// included) is an attempt retried with the flow's own queue_* keys, and
// dead-lettered at the last; a false condition fence and a fault handler
// that answers acknowledge the message (filtered, fault_handled), on any
// attempt; a flow no longer deployed drops it. (503, flow state
// unavailable, uses no attempt: TestDedupStoreUnavailableUsesNoAttempt; a
// corrupt artifact dead-letters at once: the integration tests.)
func TestQueuedDeliveryVerdicts(t *testing.T) {
	be, _ := unavailableBackend(t)
	fx := newFixture(t, nil)
	files := testFlows()
	add := func(name, frontMatter, steps string) {
		files["flows/acme/"+name+".md"] = flowFile("acme", name, frontMatter, steps)
	}
	const fails = "## Step: check\n```validate\n$.x != null | \"x is required\"\n```\n"
	add("syntactic", "queue_max_attempts: 4\nqueue_initial_delay_ms: 250\nqueue_backoff_factor: 1.5\nqueue_max_delay_ms: 9000\n",
		"## Step: check\n```validate\n$.x != null | \"x is required\" | syntactic\n```\n")
	add("semantic", "", fails)
	add("egress", "effects: [http_egress]\n", "## Step: forward\neffects: [http_egress]\nendpoint: "+be.URL+"/ingest\nmethod: POST\n")
	add("defect", "", "## Step: answer\nresponse_status: \"{{ $.status }}\"\n```ntd\n{}\n```\n")
	add("nokey", "dedup_key: \"{{ $.orderId }}\"\n", echoSteps)
	add("handlerfails", "", fails+"\n## Fault: report\n```validate\n$.never != null | \"the handler fails too\"\n```\n")
	add("fence", "", "## Step: gate\n```condition\n$.x != null\n```\n")
	add("handled", "", fails+"\n## Fault: report\n```ntd\n{\"error\": \"{{ $.fault_error }}\"}\n```\n")
	fx.publish(files, testAccessYAML(), "c2")

	keys := queue.RetryPolicy{MaxAttempts: 4, InitialDelay: 250 * time.Millisecond, BackoffFactor: 1.5, MaxDelay: 9 * time.Second}
	type verdict struct {
		Kind    queue.VerdictKind
		Outcome string
		Policy  queue.RetryPolicy
		Error   string
	}
	retry := func(p queue.RetryPolicy, err string) verdict {
		return verdict{Kind: queue.VerdictRetry, Policy: p, Error: err}
	}
	for _, c := range []struct {
		flow string
		want verdict
	}{
		{"syntactic", retry(keys, "step 'check': validation failed (Syntactic): x is required")},
		{"semantic", retry(queue.DefaultRetryPolicy, "step 'check': validation failed (Semantic): x is required")},
		{"egress", retry(queue.DefaultRetryPolicy, "step 'forward': effect handler failed: HTTP 503 Service Unavailable")},
		{"defect", retry(queue.DefaultRetryPolicy, `step 'answer': response_status rendered "", which is not a status code`)},
		{"nokey", retry(queue.DefaultRetryPolicy, "dedup_key produced nothing from this message")},
		// last_error is the main sequence's error
		{"handlerfails", retry(queue.DefaultRetryPolicy, "step 'check': validation failed (Semantic): x is required")},
		{"fence", verdict{Kind: queue.VerdictAck, Outcome: "filtered"}},
		{"handled", verdict{Kind: queue.VerdictAck, Outcome: "fault_handled"}},
		{"withdrawn", verdict{Kind: queue.VerdictDrop, Error: "no flow acme/withdrawn is deployed"}},
	} {
		for attempt := 1; attempt <= 2; attempt++ {
			v := fx.server.Handle(context.Background(), queue.Delivery{
				Message: queue.Message{ID: 7, Source: engine.DoorEnqueue, CorrelationID: "order-A-1", EnqueuedAt: t0, Payload: []byte(`{"orderId":""}`)},
				Tenant:  "acme", Flow: c.flow, Attempt: attempt,
			})
			got := verdict{Kind: v.Kind, Outcome: v.Outcome, Policy: v.Policy, Error: v.Error}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s, attempt %d (-want +got):\n%s", c.flow, attempt, diff)
			}
		}
	}
}
