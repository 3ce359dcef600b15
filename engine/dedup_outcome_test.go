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
