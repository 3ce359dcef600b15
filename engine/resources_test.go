package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// TestEgressResponseHeadersAreBounded: a backend's headers are bounded as
// its body is: 8 MiB of headers fail the call instead of being copied into
// ctx.HTTP_RESPONSE_HEADERS (Go's default bound is 10 MiB).
func TestEgressResponseHeadersAreBounded(t *testing.T) {
	big := strings.Repeat("h", 80<<10)
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("X-Big-%d", i)
	}
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		for _, n := range names {
			h[n] = []string{big} // 100 × 80 KiB: 8 MiB of headers
		}
		h["Content-Type"] = []string{"application/json"}
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(b.Close)
	const ceiling = 64 << 10
	e := engine.New(engine.Config{MaxResponseBytes: ceiling})
	f := compile(t, flowSource("big-headers", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: "+b.URL+"/ingest\n"))
	var least uint64 = 1 << 62
	var res engine.Result
	for range 3 {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		res = run(t, e, f, `{}`)
		runtime.ReadMemStats(&m1)
		least = min(least, m1.TotalAlloc-m0.TotalAlloc)
	}
	if least > 8<<20 {
		t.Errorf("a call whose answer carries 8 MiB of headers, on an engine whose answers are capped at %d bytes, allocated %d MiB and answered %d (err %v); want the headers bounded as the body is (MaxResponseHeaderBytes), the step failing",
			ceiling, least>>20, res.Status, res.Err)
	}
}

// TestCancelledExecutionIsNotRecordedForDedup: an execution of a
// deduplicating flow whose context is cancelled while its call is in
// flight (not its ceiling: the queue worker cancels a delivery when its
// stop's grace runs out, and delivers the message again at the next
// start) releases its key instead of recording a failure, so the next
// delivery of the key runs, under dedup_on_failure: absorb too.
func TestCancelledExecutionIsNotRecordedForDedup(t *testing.T) {
	var calls atomic.Int32
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) > 1 {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(b.Close)
	f := compile(t, flowSource("cut-short", "timeout_ms: 20000\ndedup_key: \"{{ $.id }}\"\ndedup_on_failure: absorb\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 15000
`), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel() // the worker's stop grace ran out
	}()
	first := e.Run(ctx, newRequest(t, f, `{"id":"A-1"}`, func(r *engine.Request) { r.Door, r.NoBody = engine.DoorEnqueue, true }))
	again := e.Run(context.Background(), newRequest(t, f, `{"id":"A-1"}`, func(r *engine.Request) { r.Door, r.NoBody = engine.DoorEnqueue, true }))
	if again.Replay || calls.Load() != 2 {
		t.Errorf("the first execution was cancelled during its call (%d %s, err %v); the message delivered again answered %d %s (replay %v) after %d backend calls; want the cut-short execution left unrecorded and the delivery run again (2 calls)",
			first.Status, first.Body, first.Err, again.Status, again.Body, again.Replay, calls.Load())
	}
}
