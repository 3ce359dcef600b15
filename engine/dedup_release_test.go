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
	src := flowSource("dedup-release-refused", "dedup_key: \"{{ $.orderId }}\"\ntimeout_ms: 1000\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
response_status: "{{ $.status }}"
`)
	f := compile(t, src, "BACKEND", b.URL)
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
