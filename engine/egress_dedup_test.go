package engine_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// TestHTTPEgressConnectTimeoutBoundsTheTLSHandshake: a TLS server that
// accepts the TCP connection but never answers the ClientHello fails the
// step after connect_timeout_ms (it once ran to the transport's fixed 10 s
// handshake timeout or the flow's ceiling).
func TestHTTPEgressConnectTimeoutBoundsTheTLSHandshake(t *testing.T) {
	addr := stallingTLS(t)
	src := flowSource("tls-stall", "timeout_ms: 4000\n", `
## Step: forward
effects: [http_egress]
endpoint: https://ADDR/ingest
connect_timeout_ms: 200
read_timeout_ms: 300
`)
	// Unbounded, the handshake would run into the flow's 4 s ceiling and
	// answer its 500 (KindDeadline): the 502 effect failure is the
	// evidence that connect_timeout_ms cut it short, no timing needed.
	res := run(t, engine.New(engine.Config{}), compile(t, src, "ADDR", addr), `{}`)
	if v := viewOf(res); v.Status != 502 || v.ErrKind != engine.KindEffect {
		t.Errorf("with connect_timeout_ms 200 and read_timeout_ms 300 a stalled TLS handshake answered %d %s (err %v, kind %v); want a 502 effect failure",
			v.Status, v.Body, v.Err, v.ErrKind)
	}
}

// TestHTTPEgressFailureOverTheCeilingKeepsItsStatus: a non-2xx answer
// whose body exceeds the ceiling still sets ctx.HTTP_SC and fails with
// "effect handler failed: HTTP 503 Service Unavailable" (flow-file.md),
// not with the body's size.
func TestHTTPEgressFailureOverTheCeilingKeepsItsStatus(t *testing.T) {
	b := newBackend(t, answer(503, "text/plain", strings.Repeat("x", 200)))
	src := flowSource("big-503", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: pass
response_status: "{{ ctx.HTTP_SC }}"
~~~ntd
{"detail": "{{ $.fault_error }}"}
~~~
`)
	e := engine.New(engine.Config{MaxResponseBytes: 64})
	res := run(t, e, compile(t, src, "BACKEND", b.URL), `{}`)
	want := `{"detail":"effect handler failed: HTTP 503 Service Unavailable"}`
	if res.Status != 503 || string(res.Body) != want {
		t.Errorf("got %d %s (err %v, handler err %v); want 503 %s", res.Status, res.Body, res.Err, res.HandlerErr, want)
	}
}

// TestHTTPEgressFailureExcerptEndsOnACharacter: the excerpt of a failed
// call's body kept for the log (Err.Detail) is cut between characters: a
// body of two-byte characters cut at 512 bytes once ended on half a
// character, which the log's JSON wrote as U+FFFD.
func TestHTTPEgressFailureExcerptEndsOnACharacter(t *testing.T) {
	b := newBackend(t, answer(502, "text/plain; charset=utf-8", "x"+strings.Repeat("é", 400)))
	src := flowSource("excerpt", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n")
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
	if res.Err == nil {
		t.Fatalf("got %d %s, want the call's failure", res.Status, res.Body)
	}
	want := "x" + strings.Repeat("é", 255) + "…"
	if d := res.Err.Detail; d != want {
		t.Errorf("the excerpt is %d bytes ending %q (valid UTF-8: %v); want %d bytes ending %q",
			len(d), d[max(len(d)-7, 0):], utf8.ValidString(d), len(want), want[len(want)-7:])
	}
}

// TestDedupDuplicateHasAWholeCeilingAfterItsWait: a duplicate that waited
// for the first delivery (which then failed, so under rerun the duplicate
// runs) has a whole timeout_ms for its own execution: the wait does not
// count against it. The first call takes 1.5 s, the duplicate's own 1 s,
// under timeout_ms 2000: each fits its ceiling by 0.5 s or more, and the
// wait and the duplicate's call together (2.5 s) do not.
func TestDedupDuplicateHasAWholeCeilingAfterItsWait(t *testing.T) {
	var calls atomic.Int32
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(1500 * time.Millisecond)
			answer(503, "text/plain", "down")(w, r)
			return
		}
		time.Sleep(time.Second)
		answer(200, "application/json", `{"n":2}`)(w, r)
	})
	f := compile(t, flowSource("dedup-wait-ceiling", "dedup_key: \"{{ $.orderId }}\"\ntimeout_ms: 2000\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}, DedupPoll: 5 * time.Millisecond})
	first := make(chan engine.Result)
	firstReq := newRequest(t, f, `{"orderId":"A-1"}`)
	go func() { first <- e.Run(context.Background(), firstReq) }()
	for calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	dup := e.Run(context.Background(), newRequest(t, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" }))
	took := time.Since(start)
	if v := viewOf(<-first); v.Status != 502 || v.ErrKind != engine.KindEffect || !strings.Contains(v.Err, "HTTP 503") {
		t.Errorf("the first delivery answered %d %s (err %v, kind %v); want a 502 effect failure on the backend's 503, within its ceiling",
			v.Status, v.Body, v.Err, v.ErrKind)
	}
	if dup.Status != 201 || calls.Load() != 2 {
		t.Errorf("the duplicate (waited, then ran a 1 s execution under timeout_ms 2000) answered %d %s after %v, %d backend calls; want 201 from a run of its own (2 calls)",
			dup.Status, dup.Body, took, calls.Load())
	}
}

// TestHTTPEgressVarsAreThisCallsOnly: ctx.HTTP_SC and HTTP_RESPONSE_BODY
// describe the last call's answer; a call that got none (a transport
// error) leaves them unset, not an earlier call's, so a fault handler
// passing the status through cannot answer 200 for a call that never
// reached its backend.
func TestHTTPEgressVarsAreThisCallsOnly(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"n":1}`))
	src := flowSource("stale", "", `
## Step: lookup
effects: [http_egress]
endpoint: BACKEND/lookup

## Step: forward
effects: [http_egress]
endpoint: http://CLOSED/ingest

## Fault: pass
response_status: "{{ ctx.HTTP_SC }}"
~~~ntd
{"backend": {{ ctx.HTTP_RESPONSE_BODY }}, "detail": "{{ $.fault_error }}"}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL, "CLOSED", closedAddr(t)), `{}`)
	if res.Status == 200 || strings.Contains(string(res.Body), `"n":1`) {
		t.Errorf("the fault handler of a failed call to an unreachable host answered %d %s: ctx.HTTP_SC and ctx.HTTP_RESPONSE_BODY are the previous call's", res.Status, res.Body)
	}
}

// slowCommit is a store whose Commit takes a while (a registry write
// waiting on SQLite's lock or an fsync).
type slowCommit struct {
	*enginetest.Dedup
	delay time.Duration
}

func (s *slowCommit) Commit(ctx context.Context, tenant, flow, key string, claim int64, answer []byte, failed bool, ttl time.Duration) error {
	time.Sleep(s.delay)
	return s.Dedup.Commit(ctx, tenant, flow, key, claim, answer, failed, ttl)
}

// TestDedupLeaseOutlastsTheCeiling: an execution stopped at its ceiling
// has time to record its answer (the lease is timeout_ms and a grace): a
// slow commit does not let a concurrent duplicate take the key and call
// the backend again. Under absorb, the next duplicate gets the recorded
// 500 replayed.
func TestDedupLeaseOutlastsTheCeiling(t *testing.T) {
	b := newBackend(t, slow(2*time.Second, nil))
	f := compile(t, flowSource("dedup-lease", "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\ntimeout_ms: 300\n", dedupFlow), "BACKEND", b.URL)
	store := &slowCommit{Dedup: &enginetest.Dedup{}, delay: 100 * time.Millisecond}
	e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond})
	first := make(chan engine.Result)
	firstReq := newRequest(t, f, `{"orderId":"A-1"}`)
	go func() { first <- e.Run(context.Background(), firstReq) }()
	for b.calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	dup := e.Run(context.Background(), engine.Request{Flow: f, Doc: parse(t, `{"orderId":"A-1"}`), CorrelationID: "c-2", Door: engine.DoorRun})
	<-first
	// the duplicate gave up waiting at its own ceiling (503, try again),
	// or got the recorded answer: never a run of its own
	if n := b.calls.Load(); n != 1 || !dup.Replay && dup.Status != http.StatusServiceUnavailable {
		t.Errorf("backend called %d times; duplicate answered %d %s replay=%v; want 1 call, and the duplicate 503 or the first's 500 replayed", n, dup.Status, dup.Body, dup.Replay)
	}
	again := e.Run(context.Background(), engine.Request{Flow: f, Doc: parse(t, `{"orderId":"A-1"}`), CorrelationID: "c-3", Door: engine.DoorRun})
	if n := b.calls.Load(); n != 1 || !again.Replay || again.Status != http.StatusInternalServerError {
		t.Errorf("backend called %d times; the next duplicate answered %d %s replay=%v; want the first's 500 replayed (absorb)", n, again.Status, again.Body, again.Replay)
	}
}

// TestDedupReplayKeepsTheFlowsCorrelationHeader: flow-file.md, Precise
// answers: "`response_header_x_correlation_id` replaces the platform's
// `X-Correlation-ID` header", and Deduplication: a later delivery "receives
// the recorded answer". The first delivery answers the flow's own
// X-Correlation-Id; its replay answers the platform's (the request's
// correlation ID) instead, because the recorded header set is stripped of
// X-Correlation-Id whoever set it (withoutCorrelation) and the replay sets
// the request's.
func TestDedupReplayKeepsTheFlowsCorrelationHeader(t *testing.T) {
	src := flowSource("dedup-cid", "dedup_key: \"{{ $.orderId }}\"\n", `
## Step: answer
response_header_x_correlation_id: abc123
~~~ntd
{"orderId": "{{ $.orderId }}"}
~~~
`)
	f := compile(t, src)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
	first := run(t, e, f, `{"orderId":"A-1"}`)
	const want = "abc123"
	if got := first.Header.Get("X-Correlation-Id"); got != want {
		t.Fatalf("first answer: X-Correlation-Id %q, want %q", got, want)
	}
	second := run(t, e, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	if !second.Replay {
		t.Fatalf("second delivery was not a replay: %+v", second)
	}
	if got := second.Header.Get("X-Correlation-Id"); got != want {
		t.Errorf("replayed answer: X-Correlation-Id %q, want the flow's %q (as recorded)", got, want)
	}
}

// TestExcerptKeepsWhatTheCutDoesNotSplit: the excerpt is cut between
// characters by moving the cut back, not by deleting every byte that is
// not UTF-8: a Latin-1 error body longer than 512 bytes lost its letters
// ("Ung\xfcltig" became "Ungltig"), while a shorter one kept them.
func TestExcerptKeepsWhatTheCutDoesNotSplit(t *testing.T) {
	body := "Ung\xfcltig: " + strings.Repeat("a", 600)
	b := newBackend(t, answer(502, "text/plain; charset=iso-8859-1", body))
	src := flowSource("excerpt", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n")
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
	if res.Err == nil {
		t.Fatalf("got %d %s, want the call's failure", res.Status, res.Body)
	}
	want := body[:512] + "…"
	if d := res.Err.Detail; d != want {
		t.Errorf("the excerpt starts %q (%d bytes); want %q… (%d bytes): only a character the cut splits may be left out", d[:12], len(d), want[:12], len(want))
	}
}

// failedCommit is a store that cannot record an answer (a full disk), and
// whose Release fails its first refusals times too.
type failedCommit struct {
	*enginetest.Dedup
	refusals atomic.Int64
	releases atomic.Int64 // Release calls
}

func (s *failedCommit) Commit(context.Context, string, string, string, int64, []byte, bool, time.Duration) error {
	return errors.New("disk full")
}

func (s *failedCommit) Release(ctx context.Context, tenant, flow, key string, claim int64) error {
	s.releases.Add(1)
	if s.refusals.Add(-1) >= 0 {
		return errors.New("disk full")
	}
	return s.Dedup.Release(ctx, tenant, flow, key, claim)
}

// TestDedupKeyLetGoWhenTheAnswerCannotBeRecorded: an execution whose
// answer the store cannot record (503) lets its key go, trying again in
// the background while the store refuses that too: the next delivery runs.
// The key stayed held until its lease ended (the ceiling and a grace), and
// the next delivery waited its whole ceiling for an execution that was
// over, answering 503 "still running".
func TestDedupKeyLetGoWhenTheAnswerCannotBeRecorded(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"ok":true}`))
	f := compile(t, flowSource("dedup-unrecorded", "dedup_key: \"{{ $.orderId }}\"\ntimeout_ms: 2000\n", dedupFlow), "BACKEND", b.URL)
	store := &failedCommit{Dedup: &enginetest.Dedup{}}
	store.refusals.Store(2)
	e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond})
	first := run(t, e, f, `{"orderId":"A-1"}`)
	if first.Status != http.StatusServiceUnavailable || b.calls.Load() != 1 {
		t.Fatalf("first delivery: %d %s after %d calls; want 503 (its answer not recorded) after 1", first.Status, first.Body, b.calls.Load())
	}
	next := run(t, e, f, `{"orderId":"A-1"}`)
	if b.calls.Load() != 2 || strings.Contains(string(next.Body), "still running") {
		t.Errorf("next delivery: %d %s, backend called %d times; want it run (2 calls), the key let go", next.Status, next.Body, b.calls.Load())
	}
	if n := store.releases.Load(); n < 3 {
		t.Errorf("%d Release calls, want the 2 refused and one that worked", n)
	}
}
