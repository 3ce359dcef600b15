package host_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
)

// A queued duplicate of a key whose first delivery failed, under
// dedup_on_failure: absorb, receives the recorded answer: acknowledged,
// not retried, the backend not called again. The failing message's own
// retry runs again.
func TestHandleAbsorbedDuplicate(t *testing.T) {
	be, calls := unavailableBackend(t)
	srv, delivery := absorbServer(t, newFixture(t, nil), be.URL, "", "")
	if v := srv.Handle(context.Background(), delivery(1, 1)); v.Kind != queue.VerdictRetry {
		t.Fatalf("message 1, attempt 1: %+v, want a retry (the backend answers 503)", v)
	}
	v := srv.Handle(context.Background(), delivery(2, 1))
	replays := 0 // once in its log line: twice was a duplicate JSON key
	for _, a := range v.Attrs {
		if a.Key == "replay" {
			replays++
		}
	}
	if v.Kind != queue.VerdictAck || calls.Load() != 1 || replays != 1 {
		t.Errorf("message 2 with the same key: %+v (%d \"replay\" attributes) after %d backend calls; want it acknowledged with the recorded answer, replay once, 1 call", v, replays, calls.Load())
	}
	if v := srv.Handle(context.Background(), delivery(1, 2)); v.Kind != queue.VerdictRetry || calls.Load() != 2 {
		t.Errorf("message 1, attempt 2: %+v after %d backend calls; want it run again (2 calls) and retried", v, calls.Load())
	}
}

// A /run whose caller hangs up goes on to its end (within its ceiling):
// the call out completes, and a deduplicating flow records the flow's
// answer, which the caller's retry then receives.
func TestRunOutlivesItsCaller(t *testing.T) {
	be := newHeldBackend(t)
	calls := &be.calls
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/forward.md"] = flowFile("acme", "forward", "effects: [http_egress]\ndedup_key: \"{{ $.orderId }}\"\n",
		"## Step: forward\neffects: [http_egress]\nendpoint: "+be.URL+"/ingest\nmethod: POST\n")
	fx.publish(files, testAccessYAML(), "c2")
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)
	post := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/flows/acme/forward/run", strings.NewReader(`{"orderId":"A-1"}`))
		req.Header.Set("Authorization", "Bearer "+keyAcmeAll)
		req.Header.Set("Content-Type", "application/json")
		return http.DefaultClient.Do(req)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel() // the caller hangs up while the flow calls out
	}()
	if _, err := post(ctx); err == nil {
		t.Fatal("the first request was not cut off")
	}
	time.Sleep(200 * time.Millisecond) // the server notices the hang-up (the request's context ends)
	be.free()                          // then the backend answers
	var resp *http.Response
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		resp, err = post(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break // 503: the first execution is still recording its answer
		}
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Nexus-Idempotent-Replay") != "true" || calls.Load() != 1 {
		t.Errorf("the caller's retry: %d %s (replay %q) after %d backend calls; want the first execution's 200 replayed, 1 call",
			resp.StatusCode, body, resp.Header.Get("X-Nexus-Idempotent-Replay"), calls.Load())
	}
}

// A Content-Length is not reserved before the bytes arrive: callers that
// announce the ceiling and send one byte cost the host what they send.
func TestAnnouncedLengthIsNotReserved(t *testing.T) {
	const limit = 16 << 20
	fx := newFixture(t, func(c *host.Config) { c.MaxBodyBytes = limit })
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const conns = 10
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /flows/acme/echo/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", keyAcmeAll, limit)
	}
	time.Sleep(300 * time.Millisecond) // the handlers are reading
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 32<<20 {
		t.Errorf("%d connections that sent 1 byte each hold %d MiB", conns, grew>>20)
	}
}

// queue_publish refuses, before anything is written, a message its
// target's worker could not read (nested deeper than a door accepts),
// rather than leaving it for the worker to dead-letter, and one its
// target's doors would refuse as too large.
func TestPublishRefusesWhatItsTargetCannotRead(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	cfg := fx.cfg
	cfg.Metrics = host.NewMetrics() // a server of its own over the same state
	srv := host.New(cfg)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	err := srv.Publish(context.Background(), "acme", "echo", []byte(deep), "cid-1")
	if err == nil || !strings.Contains(err.Error(), "the message for acme/echo is not a document its worker can read") {
		t.Errorf("Publish of a document nested 200 deep: %v", err)
	}
	if c := fx.counts(t, "acme", "echo"); c.Total != 0 {
		t.Errorf("the refused message was written: %+v", c)
	}
	if err := srv.Publish(context.Background(), "acme", "echo", []byte(`{"a":{"b":1}}`), "cid-2"); err != nil {
		t.Errorf("Publish of a plain document: %v", err)
	}
	// a message over the target's max_body_bytes (16), which its doors
	// answer with a 413, is refused as well; it was queued
	big := `{"text":"0123456789"}`
	err = srv.Publish(context.Background(), "acme", "small", []byte(big), "cid-3")
	if want := "the message for acme/small is 21 bytes, over its ceiling of 16"; err == nil || err.Error() != want {
		t.Errorf("Publish of %d bytes to a flow of max_body_bytes 16: %v, want %q", len(big), err, want)
	}
	if c := fx.counts(t, "acme", "small"); c.Total != 0 {
		t.Errorf("the message over the ceiling was written: %+v", c)
	}
}

// TestRunDuplicatesAtOnce sends two identical requests at once to a
// deduplicating flow over the registry's dedup store: the second waits for
// the first and receives its answer, marked as a replay; the backend is
// called once.
func TestRunDuplicatesAtOnce(t *testing.T) {
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		calls.Add(1)
		time.Sleep(300 * time.Millisecond) // the duplicate arrives meanwhile
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":1}`)
	}))
	t.Cleanup(backend.Close)
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/dd.md"] = flowFile("acme", "dd", "effects: [http_egress]\ndedup_key: \"{{ $.id }}\"\n",
		"## Step: call\neffects: [http_egress]\nendpoint: "+backend.URL+"/x\n")
	fx.publish(files, testAccessYAML(), "c2")

	var wg sync.WaitGroup
	res := make([]*httptest.ResponseRecorder, 2)
	for i := range res {
		wg.Go(func() { res[i] = fx.serve(runRequest("acme", "dd", keyAcmeAll, `{"id":"k1"}`)) })
	}
	wg.Wait()
	replays := 0
	for i, w := range res {
		if w.Code != http.StatusOK || w.Body.String() != `{"ok":1}` {
			t.Errorf("answer %d: %d %s, want 200 {\"ok\":1}", i, w.Code, w.Body)
		}
		if w.Header().Get(engine.HeaderReplay) == "true" {
			replays++
		}
	}
	if n := calls.Load(); n != 1 || replays != 1 {
		t.Errorf("backend called %d times, %d replays; want 1 and 1", n, replays)
	}
}

// TestEchoingRefusalsCarryNosniff: the doors' 400 for a bad name echoes
// what the caller sent (flow.AppendJSON keeps '<' and '>'), and the
// router's 404 and 405 the path as sent, escaped; like the management
// API's refusals they carry X-Content-Type-Options: nosniff. A GET of
// /<script>… is a link anyone can send.
func TestEchoingRefusalsCarryNosniff(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct {
		r      *http.Request
		markup bool // the body echoes the markup
	}{
		{newRequest(http.MethodGet, "/%3Cscript%3Ealert(1)%3C/script%3E", ""), false},
		{newRequest(http.MethodGet, "/flows/acme/%3Cimg%20src=x%3E/run", ""), false},
		{runRequest("acme", "%3Cb%20onmouseover=alert(1)%3E", keyAcmeAll, `{}`), true},
	} {
		r := tc.r
		w := fx.serve(r)
		if strings.Contains(w.Body.String(), "<") != tc.markup {
			t.Errorf("%s %s: %d %s: the body echoes the markup: %t, want %t", r.Method, r.URL.Path, w.Code, w.Body, !tc.markup, tc.markup)
		}
		if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d, %s): X-Content-Type-Options = %q, want nosniff", r.Method, r.URL.Path, w.Code, w.Body, got)
		}
	}
}

// TestGateRefusalsDoNotWaitForTheBody: a caller the gate refuses (401,
// 400 for a name, 403, 404, 429) whose request announces a body it has not
// sent (a Content-Length under 256 KiB, or chunked) gets its answer at
// once, the body never pulled off the socket (queues-retries-dlq.md;
// server.md: the gate runs "before one byte of the body is read"). It got
// none: net/http read the unread body before writing the refusal, and
// waited for it (in nexus serve, up to ReadTimeout, 60 s).
func TestGateRefusalsDoNotWaitForTheBody(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	// spend acme-limited's one token (rate 1, burst 1, and the clock is
	// fake: it never refills)
	if w := fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)); w.Code != http.StatusOK {
		t.Fatalf("first request of the limited key: %d %s", w.Code, w.Body)
	}
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, door, path, key string
		status                int
	}{
		{"401 no key", "run", "/flows/acme/echo/run", "", http.StatusUnauthorized},
		{"401 no key on enqueue", "enqueue", "/flows/acme/echo/enqueue", "", http.StatusUnauthorized},
		{"400 bad tenant name", "run", "/flows/Acme/echo/run", keyAcmeAll, http.StatusBadRequest},
		{"403 another tenant", "run", "/flows/globex/shipment/run", keyAcmeAll, http.StatusForbidden},
		{"404 not deployed", "enqueue", "/flows/acme/nope/enqueue", keyAcmeAll, http.StatusNotFound},
		{"429 rate", "run", "/flows/acme/echo/run", keyAcmeLimited, http.StatusTooManyRequests},
	} {
		for _, framing := range []string{"Content-Length: 1000", "Transfer-Encoding: chunked"} {
			t.Run(tc.name+"/"+framing, func(t *testing.T) {
				t.Parallel()
				head := "POST " + tc.path + " HTTP/1.1\r\nHost: nexus.test\r\nContent-Type: application/json\r\n" + framing + "\r\n"
				if tc.key != "" {
					head += "Authorization: Bearer " + tc.key + "\r\n"
				}
				resp, body, err := rawExchange(t, srv, head+"\r\n", 2*time.Second)
				if err != nil {
					t.Fatalf("no answer within 2 s while the body was not sent (the refusal waits for the body): %v", err)
				}
				if resp.StatusCode != tc.status || !strings.HasPrefix(body, `{"ok":false,"error":`) {
					t.Errorf("answer %s %s, want %d", resp.Status, body, tc.status)
				}
			})
		}
	}
}

// TestBodyReadTimeoutAnswer: a body that does not arrive before the
// server's read deadline is 408 with fixed words. It was a 400 quoting Go's
// network error, which names the host's address and port and the caller's.
func TestBodyReadTimeoutAnswer(t *testing.T) {
	fx := newFixture(t, nil)
	srv := httptest.NewUnstartedServer(fx.handler)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	head := "POST /flows/acme/echo/run HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer " + keyAcmeAll +
		"\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"a\":"
	resp, body, err := rawExchange(t, srv, head, 5*time.Second)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	host, _, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if strings.Contains(body, host) || strings.Contains(body, "tcp") || strings.Contains(body, "->") {
		t.Errorf("the answer shows the connection's addresses (Go's net error): %s", body)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %s, want 408 Request Timeout for a body that did not arrive in time", resp.Status)
	}
}

// rawExchange writes head (a request line and headers, ended by the blank
// line) and then nothing else over a fresh connection to srv, and reads one
// answer, waiting up to wait. It returns the answer, or the error of a
// caller who got none.
func rawExchange(t *testing.T, srv *httptest.Server, head string, wait time.Duration) (*http.Response, string, error) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, "", err
	}
	return resp, string(b), nil
}

// A dead letter's replay runs the flow again though its key holds the
// failure that dead-lettered it, under dedup_on_failure: absorb too
// (queues-retries-dlq.md: a replay starts again with the full budget, and
// one into a downstream still failing goes straight back), while a
// duplicate delivered by the enqueue door is still answered with the
// recorded failure. Once the replay succeeds, the key holds its success,
// which a duplicate and a second replay receive.
func TestReplayRunsAgainUnderAbsorb(t *testing.T) {
	var calls, failing atomic.Int32
	failing.Store(1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if failing.Load() == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"accepted":true}`))
	}))
	t.Cleanup(be.Close)
	srv, delivery := absorbServer(t, newFixture(t, nil), be.URL, "", "")
	replay := func(id uint64) queue.Delivery {
		d := delivery(id, 1)
		d.Source = queue.SourceReplay
		return d
	}
	steps := []struct {
		name      string
		d         queue.Delivery
		downOK    bool
		wantKind  queue.VerdictKind
		wantCalls int32
	}{
		{"message 1 fails", delivery(1, 1), false, queue.VerdictRetry, 1},
		{"a duplicate gets the recorded failure", delivery(2, 1), false, queue.VerdictAck, 1},
		{"a replay into a downstream still failing runs and goes back", replay(3), false, queue.VerdictRetry, 2},
		{"a replay once the downstream mends runs and succeeds", replay(4), true, queue.VerdictAck, 3},
		{"a duplicate then gets the recorded success", delivery(5, 1), true, queue.VerdictAck, 3},
		{"so does another replay", replay(6), true, queue.VerdictAck, 3},
	}
	for _, s := range steps {
		if s.downOK {
			failing.Store(0)
		}
		v := srv.Handle(context.Background(), s.d)
		if v.Kind != s.wantKind || calls.Load() != s.wantCalls {
			t.Fatalf("%s: verdict %v (%s), %d backend calls; want %v, %d calls", s.name, v.Kind, v.Outcome, calls.Load(), s.wantKind, s.wantCalls)
		}
	}
}

// unavailableBackend is a backend that answers every request 503, and the
// count of the requests it received.
func unavailableBackend(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	calls := new(atomic.Int32)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(be.Close)
	return be, calls
}
