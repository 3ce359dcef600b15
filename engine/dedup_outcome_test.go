package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// cancellingPublisher accepts the message, and the runner's context is
// cancelled meanwhile (a worker's stop grace running out just as the
// publication went through).
type cancellingPublisher struct {
	cancel context.CancelFunc
	calls  atomic.Int64
}

func (p *cancellingPublisher) Publish(context.Context, string, string, []byte, string) error {
	p.calls.Add(1)
	p.cancel()
	return nil
}

// TestSucceededExecutionCutShortKeepsItsDedupRecord: an execution that
// succeeded as its runner's context ended (the worker acknowledges it: only
// a failure is an interrupted delivery) keeps its dedup record, so the next
// delivery of the key is answered the recorded success instead of running
// the effects again.
func TestSucceededExecutionCutShortKeepsItsDedupRecord(t *testing.T) {
	src := flowSource("dedup-cut", "dedup_key: \"{{ $.orderId }}\"\n", `
## Step: hand-off
effects: [queue_publish]
queue: order-fulfilment
`)
	f := compile(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	pub := &cancellingPublisher{cancel: cancel}
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}, Publisher: pub})
	queued := func(r *engine.Request) { r.Door, r.NoBody, r.Attempt = engine.DoorEnqueue, true, 1 }
	first := e.Run(ctx, newRequest(t, f, `{"orderId":"A-1"}`, queued))
	if first.Outcome != engine.Succeeded {
		t.Fatalf("first delivery: %v (%v), want succeeded", first.Outcome, first.Err)
	}
	second := e.Run(context.Background(), newRequest(t, f, `{"orderId":"A-1"}`, queued, func(r *engine.Request) { r.CorrelationID = "c-2" }))
	if !second.Replay || pub.calls.Load() != 1 {
		t.Errorf("second delivery of the key: replay %v, %d publications; want the recorded success replayed and 1 publication", second.Replay, pub.calls.Load())
	}
}

// TestPanicInFaultSequenceReleasesTheDedupKey: a panic in the fault
// sequence is the platform's failure (KindInternal, in HandlerErr), which
// runDeduplicated releases rather than records, as for a panic anywhere
// else: under absorb the next delivery of the key runs (the 500 was once
// recorded and replayed, and a queued message acknowledged and lost).
func TestPanicInFaultSequenceReleasesTheDedupKey(t *testing.T) {
	src := flowSource("dedup-fault-panic", "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\n", `
## Step: check
~~~validate
$.ok == true | "not ok"
~~~

## Fault: hand-off
effects: [queue_publish]
queue: order-fulfilment
`)
	f := compile(t, src)
	pub := &panickingPublisher{} // panics at its first call only
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}, Publisher: pub})
	first := run(t, e, f, `{"orderId":"A-1","ok":false}`)
	if first.Status != 500 || first.HandlerErr == nil || first.HandlerErr.Kind != engine.KindInternal {
		t.Fatalf("first delivery: %d, handler error %v; want the panic's 500", first.Status, first.HandlerErr)
	}
	second := run(t, e, f, `{"orderId":"A-1","ok":false}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	if second.Replay || pub.calls.Load() != 2 {
		t.Fatalf("second delivery of the key: replay %v (status %d), %d publications; want it run again (the platform's failure is not recorded)", second.Replay, second.Status, pub.calls.Load())
	}
}
