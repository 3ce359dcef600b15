package host_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// settledGoroutines waits for the goroutine count to stop falling and
// returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 40 {
		time.Sleep(25 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n && m == runtime.NumGoroutine() {
			n = m
			break
		}
		n = m
	}
	return n
}

// TestDedupWaitEndsWithItsCaller: a duplicate /run of a deduplicating
// flow whose first delivery still runs waits for it, polling the dedup
// store; when its caller hangs up the wait ends (it holds no key and has
// run nothing). It once went on for the flow's whole timeout_ms, keeping
// its goroutines and its store queries: a caller sending duplicates and
// hanging up piled them up.
func TestDedupWaitEndsWithItsCaller(t *testing.T) {
	be := newHeldBackend(t)
	calls, free := &be.calls, be.free
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/dd.md"] = flowFile("acme", "dd", "effects: [http_egress]\ndedup_key: \"{{ $.id }}\"\ntimeout_ms: 60000\n",
		"## Step: call\neffects: [http_egress]\nendpoint: "+be.URL+"/x\nread_timeout_ms: 60000\n")
	fx.publish(files, testAccessYAML(), "c2")
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	post := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/flows/acme/dd/run", strings.NewReader(`{"id":"k1"}`))
		req.Header.Set("Authorization", "Bearer "+keyAcmeAll)
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		if resp, err := post(context.Background()); err == nil {
			resp.Body.Close()
		}
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	before := settledGoroutines()

	const dups = 20
	for range dups {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if resp, err := post(ctx); err == nil {
			resp.Body.Close()
			t.Fatalf("a duplicate was answered %d while the first delivery runs", resp.StatusCode)
		}
		cancel()
	}
	client.CloseIdleConnections()
	// the server notices the hang-ups (at once, or later on a loaded
	// machine: the waits it ends would otherwise go on for 60 s)
	after := settledGoroutines()
	for deadline := time.Now().Add(10 * time.Second); after-before >= dups/2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = settledGoroutines()
	}
	free()
	<-firstDone
	if grew := after - before; grew >= dups/2 {
		t.Errorf("%d duplicates whose callers hung up left %d goroutines behind (%d → %d), still polling the dedup store for the flow's 60 s ceiling; want the wait to end with its caller",
			dups, grew, before, after)
	}
}

// TestSignatureHeaderCountedBeforeItIsSplit: an X-Nexus-Signature of
// 60,000 commas is refused as "too many signatures" without being split
// whole (it cost a slice of 60,001 strings, about 1 MiB, per request).
func TestSignatureHeaderCountedBeforeItIsSplit(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{"whsec_test"} })
	ts := strconv.FormatInt(t0.Unix(), 10)
	cost := func(sig string) (uint64, string) {
		least, body := uint64(1<<62), ""
		for range 3 {
			r := signedRun(`{}`, ts, sig)
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			w := fx.serve(r)
			runtime.ReadMemStats(&m1)
			least, body = min(least, m1.TotalAlloc-m0.TotalAlloc), w.Body.String()
		}
		return least, body
	}
	small, smallBody := cost(strings.Repeat("v1=0,", 9))
	large, largeBody := cost(strings.Repeat(",", 60000))
	if !strings.Contains(smallBody, "too many signatures") || !strings.Contains(largeBody, "too many signatures") {
		t.Fatalf("answers %s and %s, want both to be too many signatures", smallBody, largeBody)
	}
	if extra := int64(large) - int64(small); extra > 256<<10 {
		t.Errorf("a 60,000-comma X-Nexus-Signature cost %d KiB more to refuse than 9 values; want the count checked before the header is split", extra>>10)
	}
}

// hangsOnce is a backend whose first call hangs until its caller goes (a
// stop cutting the delivery short), and whose later calls answer
// {"ok":true}; calls counts them.
func hangsOnce(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	calls := new(atomic.Int32)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) > 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(be.Close)
	return be, calls
}

// cutAtFirstCall is a delivery's context that ends once the backend has
// its first call: the stop's grace running out mid-delivery.
func cutAtFirstCall(t *testing.T, calls *atomic.Int32) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for calls.Load() == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	return ctx
}

// TestInterruptedDeliveryIsNotAbsorbed: a delivery the worker's stop cuts
// short (past its grace) is made again at the next start. For a flow with
// dedup_key and dedup_on_failure: absorb, the cancelled execution is not
// recorded as the key's failure, so the delivery made again runs and
// calls the backend (it once received the recorded "failure", acknowledged
// as a replay: the message was gone though no attempt had run to its end).
func TestInterruptedDeliveryIsNotAbsorbed(t *testing.T) {
	be, calls := hangsOnce(t)
	srv, delivery := absorbServer(t, newFixture(t, nil), be.URL, "timeout_ms: 20000\n", "read_timeout_ms: 15000\n")
	d := delivery(1, 1)

	ctx := cutAtFirstCall(t, calls)
	cut := srv.Handle(ctx, d)
	if cut.Kind != queue.VerdictInterrupted {
		t.Errorf("the delivery cut short: verdict %+v, want VerdictInterrupted (the worker takes the engine's word for it)", cut)
	}
	again := srv.Handle(context.Background(), d)
	if calls.Load() != 2 {
		t.Errorf("message 1 cut short by the stop (verdict %+v), delivered again at the next start: verdict %+v after %d backend calls; want it run again (2 calls), not acknowledged with the cut-short execution's recorded answer",
			cut.Kind, again, calls.Load())
	}
}

// TestInterruptedDeliveryIsNotAFailedAttempt: a delivery the stop cut short
// (not the message's failure, nor an attempt: it runs again at the next
// start with the same attempt) has no journal row; it was recorded as a
// failed attempt 1, then again as the attempt 1 that succeeded.
func TestInterruptedDeliveryIsNotAFailedAttempt(t *testing.T) {
	be, calls := hangsOnce(t)
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/forward.md"] = flowFile("acme", "forward", "effects: [http_egress]\ntimeout_ms: 20000\n",
		"## Step: forward\neffects: [http_egress]\nendpoint: "+be.URL+"/ingest\nmethod: POST\nread_timeout_ms: 15000\n")
	fx.publish(files, testAccessYAML(), "c2")
	jw := fx.reg.NewJournalWriter(registry.JournalConfig{FlushEvery: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	jw.Start()
	defer jw.Stop()
	srv := host.New(host.Config{Live: fx.reg, Status: fx.reg, Engine: engine.New(engine.Config{Dedup: fx.reg.Dedup()}),
		Journal: jw, Metrics: host.NewMetrics(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	d := queue.Delivery{Message: queue.Message{ID: 1, Source: engine.DoorEnqueue, CorrelationID: "m1",
		Payload: []byte(`{"orderId":"A-1"}`)}, Tenant: "acme", Flow: "forward", Attempt: 1}

	ctx := cutAtFirstCall(t, calls)
	if v := srv.Handle(ctx, d); v.Kind != queue.VerdictInterrupted {
		t.Fatalf("the delivery cut short: verdict %+v, want VerdictInterrupted", v)
	}
	if v := srv.Handle(context.Background(), d); v.Kind != queue.VerdictAck {
		t.Fatalf("delivered again at the next start: verdict %+v, want acknowledged", v)
	}
	jw.Stop()
	got, err := fx.reg.Journal(context.Background(), registry.JournalQuery{Tenant: "acme", Flow: "forward"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		if e.Attempt == 1 && e.Outcome == "failed" {
			t.Errorf("the journal records the delivery cut short by the stop as a failed attempt 1 (status %d, error %q); rows: %d. "+
				"It was neither a failure nor an attempt: the same attempt then succeeded", e.Status, e.Error, len(got))
		}
	}
}
