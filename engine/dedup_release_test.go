package engine_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
	"github.com/nexushq/nexus/flow"
)

// refusingRelease is a store whose Release fails its first refusals times
// (a full disk, the registry locked), as failedCommit's does; its Commit
// works.
type refusingRelease struct {
	*enginetest.Dedup
	refusals atomic.Int64
}

func (s *refusingRelease) Release(ctx context.Context, tenant, flow, key string, claim int64) error {
	if s.refusals.Add(-1) >= 0 {
		return errors.New("disk full")
	}
	return s.Dedup.Release(ctx, tenant, flow, key, claim)
}

// forwardingFlow is a flow deduplicated by $.orderId, with a ceiling of
// 1 s, that answers the status its backend's JSON gives.
func forwardingFlow(t *testing.T, name, backend string) *flow.Flow {
	t.Helper()
	src := flowSource(name, "dedup_key: \"{{ $.orderId }}\"\ntimeout_ms: 1000\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
response_status: "{{ $.status }}"
`)
	return compile(t, src, "BACKEND", backend)
}

// TestDedupKeyLetGoWhenItsReleaseFails: docs/decisions.md,
// Deduplication: when the store cannot take what the execution leaves
// (the registry locked, a full disk), "the execution answers 503 and lets
// its key go in the background ... the next delivery runs ... rather than
// waiting its whole ceiling for an execution that is over and answering
// 503 until the lease ends". An execution that answered 503 (not
// recorded) whose Release is refused once keeps the key for its whole
// lease (timeout_ms + 15 s): the next delivery waits its ceiling and
// answers 503 "still running".
func TestDedupKeyLetGoWhenItsReleaseFails(t *testing.T) {
	var calls atomic.Int32
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			answer(200, "application/json", `{"status":503}`)(w, r)
			return
		}
		answer(200, "application/json", `{"status":200}`)(w, r)
	})
	f := forwardingFlow(t, "dedup-release-refused", b.URL)
	store := &refusingRelease{Dedup: &enginetest.Dedup{}}
	store.refusals.Store(1)
	e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond})
	first := run(t, e, f, `{"orderId":"A-1"}`)
	if first.Status != http.StatusServiceUnavailable {
		t.Fatalf("first delivery answered %d %s; want 503", first.Status, first.Body)
	}
	time.Sleep(300 * time.Millisecond) // a background release has had its chances
	next := run(t, e, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	if calls.Load() != 2 || strings.Contains(string(next.Body), "try again") {
		t.Errorf("next delivery answered %d %s with %d backend calls; want it run (2 calls): the first execution is over and nothing was recorded, its key must be let go",
			next.Status, next.Body, calls.Load())
	}
}

// TestCloseStopsTheBackgroundReleases: every goroutine has an owner that
// stops it. Close ends the background release of a key the store keeps
// refusing (tried again after pauses up to 5 s until the lease ends,
// here 16 s away) and waits for it, so that the store can be closed after
// it: no Release reaches the store once Close has returned, and one
// called for after Close starts nothing.
func TestCloseStopsTheBackgroundReleases(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"status":503}`))
	f := forwardingFlow(t, "dedup-release-close", b.URL)
	store := &countingRelease{Dedup: &enginetest.Dedup{}}
	e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond, DedupCommitWait: time.Second})
	if res := run(t, e, f, `{"orderId":"A-1"}`); res.Status != http.StatusServiceUnavailable {
		t.Fatalf("first delivery answered %d %s; want 503", res.Status, res.Body)
	}
	time.Sleep(400 * time.Millisecond) // tried in the background, and refused, a few times
	if store.calls.Load() < 2 {
		t.Fatalf("%d Release calls, want the background release's tries", store.calls.Load())
	}
	start := time.Now()
	e.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close returned after %v: it waited out a pause", d)
	}
	after := store.calls.Load()
	if res := run(t, e, f, `{"orderId":"B-1"}`); res.Status != http.StatusServiceUnavailable {
		t.Fatalf("a delivery after Close answered %d %s; want 503", res.Status, res.Body)
	}
	time.Sleep(400 * time.Millisecond)
	if got := store.calls.Load(); got != after+1 { // B-1's own Release, in the execution
		t.Errorf("%d Release calls after Close, want 1 (the execution's own): a background release went on", got-after)
	}
	e.Close() // again: nothing
}

// countingRelease is a store whose Release always fails, and counts.
type countingRelease struct {
	*enginetest.Dedup
	calls atomic.Int64
}

func (s *countingRelease) Release(ctx context.Context, tenant, flow, key string, claim int64) error {
	s.calls.Add(1)
	return errors.New("disk full")
}
