package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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

// stallingPublisher holds every publication until its context ends, then
// fails it; it says when one began.
type stallingPublisher struct{ began chan struct{} }

func (p *stallingPublisher) Publish(ctx context.Context, _, _ string, _ []byte, _ string) error {
	p.began <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestResultSaysWhetherTheRunnerCutItShort: Result.Interrupted is the
// engine's one decision that an execution failed because its runner's
// context ended (a worker stopping past its grace), so that the worker
// does not read its context again and disagree with the dedup store. The
// flow's own ceiling, a failure of the flow's own, and a success as the
// context ends are not interruptions.
func TestResultSaysWhetherTheRunnerCutItShort(t *testing.T) {
	publish := "\n## Step: hand-off\neffects: [queue_publish]\nqueue: order-fulfilment\n"
	for _, c := range []struct {
		name, front, body string
		cancel            bool // the runner's context ends once the publication began
		want              bool
	}{
		{"cut short", "", publish, true, true},
		{"cut short, with a dedup key", "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\n", publish, true, true},
		{"the flow's ceiling", "timeout_ms: 50\n", publish, false, false},
		{"the flow's ceiling, with a dedup key", "timeout_ms: 50\ndedup_key: \"{{ $.orderId }}\"\n", publish, false, false},
		{"a failure of the flow's own", "", "\n## Step: check\n~~~validate\n$.ok == true | \"not ok\"\n~~~\n", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, flowSource("cut-short", c.front, c.body))
			pub := &stallingPublisher{began: make(chan struct{}, 1)}
			e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}, Publisher: pub})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-pub.began:
					if c.cancel {
						cancel()
					}
				case <-ctx.Done(): // nothing was published: the deferred cancel
				}
			}()
			res := e.Run(ctx, newRequest(t, f, `{"orderId":"A-1","ok":false}`))
			if res.Outcome != engine.Failed || res.Interrupted != c.want {
				t.Errorf("outcome %v (%v), interrupted %v; want failed, interrupted %v", res.Outcome, res.Err, res.Interrupted, c.want)
			}
		})
	}
	// a success as the context ends stands
	f := compile(t, flowSource("cut-short", "", publish))
	ctx, cancel := context.WithCancel(context.Background())
	e := engine.New(engine.Config{Publisher: &cancellingPublisher{cancel: cancel}})
	if res := e.Run(ctx, newRequest(t, f, `{"orderId":"A-1"}`)); res.Outcome != engine.Succeeded || res.Interrupted {
		t.Errorf("a success as the context ended: outcome %v (%v), interrupted %v", res.Outcome, res.Err, res.Interrupted)
	}
}

// TestDedupLeaseOutlastsTheStoresWait: a claim's lease outlasts the flow's
// ceiling by the longest the store may wait to record the answer
// (Config.DedupCommitWait; the registry's busy timeout) and 5 s more. It
// was 5 s in all, shorter than the registry's 10 s wait for another
// process's write lock: an execution stopped at its ceiling whose record
// waited for the lock could lose its key to a duplicate, which ran too.
func TestDedupLeaseOutlastsTheStoresWait(t *testing.T) {
	f := compile(t, flowSource("lease", "timeout_ms: 2000\ndedup_key: \"{{ $.orderId }}\"\n", "\n## Step: answer\n~~~ntd\n{}\n~~~\n"))
	for _, c := range []struct {
		wait, want time.Duration
	}{
		{0, 2*time.Second + engine.DefaultDedupCommitWait + 5*time.Second},
		{30 * time.Second, 2*time.Second + 35*time.Second},
	} {
		store := &enginetest.Dedup{}
		res := engine.New(engine.Config{Dedup: store, DedupCommitWait: c.wait}).Run(context.Background(), newRequest(t, f, `{"orderId":"A-1"}`))
		if res.Outcome != engine.Succeeded {
			t.Fatalf("outcome %v (%v)", res.Outcome, res.Err)
		}
		if got := store.Leases(); len(got) != 1 || got[0] != c.want {
			t.Errorf("DedupCommitWait %v: leases %v, want [%v]", c.wait, got, c.want)
		}
	}
}
