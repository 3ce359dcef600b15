package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The queue end to end, over the built binary: the /enqueue door of
// "Queues, retries and the DLQ", publishing from a flow, fault handlers on
// the queue door, and the metrics, log events and journal rows queue
// traffic leaves behind. The helpers here are shared by dlq_test.go,
// cron_test.go and crash_test.go.

// endpointHostRE matches the example hosts in the endpoint: lines of the
// example flows.
var endpointHostRE = regexp.MustCompile(`(endpoint: "?)https://[a-z]+\.example\.com`)

// queueExample reads flows-example/flows/acme/NAME.md with the hosts of its
// endpoints pointed at backendURL, then applies the replacements (pairs of
// old and new text; each old text must be in the file).
func queueExample(t *testing.T, name, backendURL string, replacements ...string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "flows-example", "flows", "acme", name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	s := endpointHostRE.ReplaceAllString(string(src), "${1}"+backendURL)
	for i := 0; i+1 < len(replacements); i += 2 {
		if !strings.Contains(s, replacements[i]) {
			t.Fatalf("%s.md has no %q to replace", name, replacements[i])
		}
		s = strings.Replace(s, replacements[i], replacements[i+1], 1)
	}
	return s
}

// hit is one request a loopback backend received, with its arrival time
// and the time its connection was accepted.
type hit struct {
	at, connAt time.Time
	method     string
	path       string
	header     http.Header
	body       string
}

// loopback is a backend that records every request with its arrival time
// and answers with the status its answer function picks (200 {"ok":true}
// by default, or the status set with setStatus).
type loopback struct {
	*backend
	status atomic.Int64
	delay  atomic.Int64 // nanoseconds to wait before answering

	mu     sync.Mutex
	hits   []hit
	answer func(h hit) int
}

func newLoopback(t *testing.T) *loopback {
	l := &loopback{}
	l.status.Store(http.StatusOK)
	l.backend = newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := hit{at: time.Now(), connAt: connAccepted(r), method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: string(body)}
		l.mu.Lock()
		l.hits = append(l.hits, h)
		answer := l.answer
		l.mu.Unlock()
		if d := time.Duration(l.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done(): // the caller is gone
			}
		}
		code := int(l.status.Load())
		if answer != nil {
			code = answer(h)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code >= 200 && code <= 299 {
			w.Write([]byte(`{"ok":true}`))
		} else {
			w.Write([]byte(`{"message":"the loopback backend is refusing calls"}`))
		}
	})
	return l
}

func (l *loopback) setStatus(code int) { l.status.Store(int64(code)) }

func (l *loopback) setAnswer(f func(h hit) int) {
	l.mu.Lock()
	l.answer = f
	l.mu.Unlock()
}

// holdFirst makes the backend hold the first request whose body holds
// marker, unanswered, until release is called (once); every other request
// is answered 200.
func (l *loopback) holdFirst(marker string) (release func()) {
	done := make(chan struct{})
	var held atomic.Bool
	l.setAnswer(func(x hit) int {
		if strings.Contains(x.body, marker) && held.CompareAndSwap(false, true) {
			<-done
		}
		return http.StatusOK
	})
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// on returns the requests so far whose path starts with prefix.
func (l *loopback) on(prefix string) []hit {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []hit
	for _, h := range l.hits {
		if strings.HasPrefix(h.path, prefix) {
			out = append(out, h)
		}
	}
	return out
}

// waitOn waits until at least n requests on prefix arrived and returns them.
func (l *loopback) waitOn(t *testing.T, prefix string, n int, timeout time.Duration) []hit {
	t.Helper()
	var got []hit
	eventually(t, timeout, fmt.Sprintf("%d requests on %s", n, prefix), func() bool {
		got = l.on(prefix)
		return len(got) >= n
	})
	return got
}

// waitBody waits until a request on prefix with exactly body arrived and
// returns the first such request.
func (l *loopback) waitBody(t *testing.T, prefix, body string, timeout time.Duration) hit {
	t.Helper()
	var got hit
	eventually(t, timeout, fmt.Sprintf("%s delivered to %s", body, prefix), func() bool {
		for _, x := range l.on(prefix) {
			if x.body == body {
				got = x
				return true
			}
		}
		return false
	})
	return got
}

// eventually polls cond every 10 ms until it holds, failing the test after
// timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEvents waits until the host logged at least n events named event for
// which match holds (nil matches all) and returns them.
func waitEvents(t *testing.T, h *hostProc, event string, n int, match func(map[string]any) bool, timeout time.Duration) []map[string]any {
	t.Helper()
	var got []map[string]any
	deadline := time.Now().Add(timeout)
	for {
		got = got[:0]
		for _, e := range h.events(event) {
			if match == nil || match(e) {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events within %v, want %d: %v", len(got), event, timeout, n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// field matches an event whose key has the value want (numbers compared as
// their decimal text).
func field(key string, want any) func(map[string]any) bool {
	return func(e map[string]any) bool { return fmt.Sprint(e[key]) == fmt.Sprint(want) }
}

// both matches an event when all the matchers do.
func both(ms ...func(map[string]any) bool) func(map[string]any) bool {
	return func(e map[string]any) bool {
		for _, m := range ms {
			if !m(e) {
				return false
			}
		}
		return true
	}
}

// waitGate polls until the gate lets key call tenant/flow: a /run with a
// body that does not parse gets past the gate and is refused 400, so no flow
// runs and nothing is queued while waiting.
func waitGate(t *testing.T, h *hostProc, tenant, flowName, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.run(tenant, flowName, key, `{`)
		if r.status == http.StatusBadRequest {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not deployed within 10 s: %d %s", tenant, flowName, r.status, r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// enqueue posts body to /flows/{tenant}/{flow}/enqueue as JSON.
func (h *hostProc) enqueue(tenant, flowName, key, body string, header ...string) response {
	h.t.Helper()
	return h.do(http.MethodPost, "/flows/"+tenant+"/"+flowName+"/enqueue", key, "application/json", body, header...)
}

// mustEnqueue enqueues body and returns the message id of the 202.
func mustEnqueue(t *testing.T, h *hostProc, tenant, flowName, key, body string, header ...string) uint64 {
	t.Helper()
	r := h.enqueue(tenant, flowName, key, body, header...)
	if r.status != http.StatusAccepted {
		t.Fatalf("enqueue to %s/%s: %d %s", tenant, flowName, r.status, r.body)
	}
	id, err := strconv.ParseUint(r.header.Get("X-Nexus-Message-Id"), 10, 64)
	if err != nil {
		t.Fatalf("enqueue to %s/%s: X-Nexus-Message-Id %q", tenant, flowName, r.header.Get("X-Nexus-Message-Id"))
	}
	return id
}

// oneAttemptHost runs the example forward-order flow against be with a
// single attempt a message: a failure is a dead letter at once.
func oneAttemptHost(t *testing.T, be *loopback) (*hostProc, *configRepo) {
	t.Helper()
	return queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL, "queue_max_attempts: 5", "queue_max_attempts: 1"),
	}, hostOptions{}, "forward-order")
}

// queueHost commits files (access.yaml with acmeKey added when absent) to
// a new config repo, starts a host on it and waits until flows are callable.
func queueHost(t *testing.T, files map[string]string, o hostOptions, flows ...string) (*hostProc, *configRepo) {
	t.Helper()
	if _, ok := files["access.yaml"]; !ok {
		files["access.yaml"] = accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})
	}
	repo := newConfigRepo(t, files)
	o.repo = repo.dir
	h := startHost(t, o)
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	for _, f := range flows {
		waitGate(t, h, "acme", f, acmeKey)
	}
	return h, repo
}

// waitCommitT is hostProc.waitCommit failing t, for subtests.
func waitCommitT(t *testing.T, h *hostProc, commit string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
		var st struct {
			Commit *string `json:"commit"`
		}
		if r.status == http.StatusOK && json.Unmarshal([]byte(r.body), &st) == nil && st.Commit != nil && *st.Commit == commit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit %s not live within %v; /status: %d %s", commit, timeout, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queuesRoot is the queue folder of the server whose --db is db.
func queuesRoot(db string) string { return filepath.Join(filepath.Dir(db), "queues") }

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// snapshot is every file and folder under root: folders map to "dir",
// files to the SHA-256 of their content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// diffSnapshots describes what changed between two snapshots.
func diffSnapshots(before, after map[string]string) []string {
	var d []string
	for k, v := range after {
		if w, ok := before[k]; !ok {
			d = append(d, "created "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		}
	}
	sort.Strings(d)
	return d
}

// metricValue finds the sample of the metric name whose labels include
// labels, in Prometheus' text format.
func metricValue(text, name string, labels map[string]string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		set, value, ok := strings.Cut(strings.TrimPrefix(line, name), " ")
		if !ok {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(set, k+"="+strconv.Quote(v)) {
				match = false
			}
		}
		if match {
			f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// uuidRE is a lowercase UUID v4, the form of a generated correlation ID.
var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestQueueEnqueueDoor(t *testing.T) {
	t.Parallel()
	const (
		globexKey  = "test-key-globex"
		ordersKey  = "test-key-acme-orders"
		limitedKey = "test-key-acme-limited"
	)
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"access.yaml": accessYAML(
			testKey{id: "acme-all", tenant: "acme", key: acmeKey},
			testKey{id: "acme-orders", tenant: "acme", key: ordersKey, flows: []string{"forward-order"}},
			testKey{id: "globex-all", tenant: "globex", key: globexKey},
			testKey{id: "acme-limited", tenant: "acme", key: limitedKey, flows: []string{"limited"}, rate: 1, burst: 1},
		),
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL),
		"flows/acme/quiet.md":         strings.NewReplacer("flow: forward-order", "flow: quiet").Replace(queueExample(t, "forward-order", be.URL)),
		"flows/acme/limited.md":       strings.NewReplacer("flow: forward-order", "flow: limited").Replace(queueExample(t, "forward-order", be.URL)),
		"flows/globex/hello.md":       strings.Replace(helloFlow, "tenant: acme", "tenant: globex", 1),
	}, hostOptions{}, "forward-order", "sync-invoices", "quiet", "limited")
	root := queuesRoot(h.db)

	t.Run("the curl of the doc on a fresh queue", func(t *testing.T) {
		// curl -i -X POST …/flows/acme/forward-order/enqueue -H 'Content-Type: application/json' -d '{"orderId":"A-1","total":42}'
		req, _ := http.NewRequest(http.MethodPost, h.url+"/flows/acme/forward-order/enqueue", strings.NewReader(`{"orderId":"A-1","total":42}`))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Correlation-ID", "trace-enqueue-doc")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/1.1" || resp.Status != "202 Accepted" {
			t.Errorf("status line %s %s, want HTTP/1.1 202 Accepted", resp.Proto, resp.Status)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		if want := `{"queued":true,"offset":0,"tenant":"acme","flow":"forward-order"}`; string(body) != want {
			t.Errorf("body %s\nwant %s", body, want)
		}
		if id := resp.Header.Get("X-Nexus-Message-Id"); id != "1" {
			t.Errorf("X-Nexus-Message-Id %q, want 1", id)
		}
		if cid := resp.Header.Get("X-Correlation-Id"); cid != "trace-enqueue-doc" {
			t.Errorf("X-Correlation-Id %q, want the request's", cid)
		}
		for _, f := range []string{"segment.log", "segment.log.seq"} {
			if !exists(filepath.Join(root, "acme", "forward-order", f)) {
				t.Errorf("no %s in %s after the 202", f, filepath.Join(root, "acme", "forward-order"))
			}
		}
		// the flow runs later, on the worker, with the correlation ID of the submission
		got := be.waitOn(t, "/ingest", 1, 5*time.Second)
		if got[0].body != `{"orderId":"A-1","total":42}` || got[0].header.Get("X-Correlation-Id") != "trace-enqueue-doc" {
			t.Errorf("the backend got %s with X-Correlation-Id %q", got[0].body, got[0].header.Get("X-Correlation-Id"))
		}
	})

	t.Run("ids and offsets count on", func(t *testing.T) {
		r := h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-2","total":1}`)
		var a struct {
			Queued bool
			Offset int64
			Tenant string
			Flow   string
		}
		if r.status != 202 || json.Unmarshal([]byte(r.body), &a) != nil || !a.Queued || a.Tenant != "acme" || a.Flow != "forward-order" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if id := r.header.Get("X-Nexus-Message-Id"); id != "2" {
			t.Errorf("X-Nexus-Message-Id %q, want 2", id)
		}
		// the log is emptied once drained, so the offset is 0 again or
		// the byte offset after the first message; it is never negative
		if a.Offset < 0 {
			t.Errorf("offset %d", a.Offset)
		}
		if cid := r.header.Get("X-Correlation-Id"); !uuidRE.MatchString(cid) {
			t.Errorf("generated X-Correlation-Id %q is not a lowercase UUID v4", cid)
		}
		r = h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-3","total":1}`, "X-Request-ID", "trace-request-id")
		if r.status != 202 || r.header.Get("X-Nexus-Message-Id") != "3" || r.header.Get("X-Correlation-Id") != "trace-request-id" {
			t.Errorf("%d %s id %q correlation %q", r.status, r.body, r.header.Get("X-Nexus-Message-Id"), r.header.Get("X-Correlation-Id"))
		}
		// an incoming ID of 129 characters is replaced by a generated one, which the run carries
		r = h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-4","total":1}`, "X-Correlation-ID", strings.Repeat("x", 129))
		cid := r.header.Get("X-Correlation-Id")
		if r.status != 202 || !uuidRE.MatchString(cid) {
			t.Errorf("with a 129-character X-Correlation-ID: %d, X-Correlation-Id %q", r.status, cid)
		}
		got := be.waitBody(t, "/ingest", `{"orderId":"A-4","total":1}`, 5*time.Second)
		if got.header.Get("X-Correlation-Id") != cid {
			t.Errorf("the run carries X-Correlation-Id %q, the 202 said %q", got.header.Get("X-Correlation-Id"), cid)
		}
	})

	t.Run("an XML body is flattened to JSON", func(t *testing.T) {
		before := len(be.on("/ingest"))
		r := h.do(http.MethodPost, "/flows/acme/forward-order/enqueue", acmeKey, "application/xml", `<order><id>A-1</id></order>`, "X-Correlation-ID", "trace-xml")
		if r.status != 202 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var got hit
		eventually(t, 5*time.Second, "the XML message delivered", func() bool {
			for _, x := range be.on("/ingest")[before:] {
				if x.header.Get("X-Correlation-Id") == "trace-xml" {
					got = x
					return true
				}
			}
			return false
		})
		if got.body != `{"id":"A-1"}` {
			t.Errorf("stored and delivered as %s, want {\"id\":\"A-1\"}", got.body)
		}
	})

	t.Run("a flow that fails on /run still answers 202", func(t *testing.T) {
		if r := h.run("acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":0}`); r.status != 422 {
			t.Errorf("/run: %d %s, want 422", r.status, r.body)
		}
		r := h.enqueue("acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":0}`)
		if r.status != 202 || r.body != `{"queued":true,"offset":0,"tenant":"acme","flow":"sync-invoices"}` || r.header.Get("X-Nexus-Message-Id") != "1" {
			t.Errorf("/enqueue: %d %s id %q", r.status, r.body, r.header.Get("X-Nexus-Message-Id"))
		}
	})

	t.Run("refusals write nothing", func(t *testing.T) {
		refusal := func(t *testing.T, r response, status int, msg string) {
			t.Helper()
			want := `{"ok":false,"error":` + strconv.Quote(msg) + `}`
			if r.status != status || (msg != "" && r.body != want) {
				t.Errorf("%d %s, want %d %s", r.status, r.body, status, want)
			}
			if r.header.Get("X-Correlation-Id") == "" {
				t.Errorf("%d without X-Correlation-Id", r.status)
			}
		}
		quiet := "/flows/acme/quiet/enqueue"
		r := h.enqueue("acme", "quiet", "", `{}`)
		refusal(t, r, 401, "missing or unknown API key")
		if r.header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("401 without WWW-Authenticate: Bearer: %v", r.header)
		}
		refusal(t, h.enqueue("acme", "quiet", "not-a-key", `{}`), 401, "missing or unknown API key")
		a := rawExchange(t, h.url, "POST "+quiet+" HTTP/1.1\r\nHost: nexus\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n")
		if a.resp.StatusCode != 401 {
			t.Errorf("no key announcing 1 GB: %s %s, want 401 without the body", a.resp.Status, a.body)
		}
		refusal(t, h.enqueue("acme", "quiet", globexKey, `{}`), 403, "key globex-all may not call acme/quiet")
		refusal(t, h.enqueue("acme", "quiet", ordersKey, `{}`), 403, "key acme-orders may not call acme/quiet")
		refusal(t, h.enqueue("acme", "nope", acmeKey, `{}`), 404, "no flow acme/nope is deployed")
		refusal(t, h.enqueue("Acme", "quiet", acmeKey, `{}`), 400, `invalid name "Acme" for tenant (flow "quiet"): character 'A' at position 1 is not allowed`)
		refusal(t, h.enqueue("acme", "quiet", acmeKey, `{"name":"`+strings.Repeat("x", 1<<20)+`"}`), 413, "body exceeds 1048576 bytes")
		refusal(t, h.do(http.MethodPost, quiet, acmeKey, "text/csv", "a,b\n"), 415, `unsupported content type "text/csv"`)
		refusal(t, h.enqueue("acme", "quiet", acmeKey, `{"orderId":`), 400, "")
		refusal(t, h.enqueue("acme", "quiet", acmeKey, `{"a":1,"a":2}`), 400, "")
		for _, dir := range []string{"acme/quiet", "acme/nope", "Acme", "globex"} {
			if exists(filepath.Join(root, dir)) {
				t.Errorf("a refused submission created %s", filepath.Join(root, dir))
			}
		}

		// over the rate: the refused submissions take no message id
		accepted := 0
		var limited response
		for i := 0; i < 5; i++ {
			r := h.enqueue("acme", "limited", limitedKey, `{"orderId":"R-`+strconv.Itoa(i)+`"}`)
			switch r.status {
			case 202:
				accepted++
			case 429:
				limited = r
			default:
				t.Fatalf("limited key: %d %s", r.status, r.body)
			}
		}
		refusal(t, limited, 429, "rate limit exceeded")
		if limited.header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		time.Sleep(1100 * time.Millisecond) // one token back in the bucket
		r = h.enqueue("acme", "limited", limitedKey, `{"orderId":"R-last"}`)
		if want := strconv.Itoa(accepted + 1); r.status != 202 || r.header.Get("X-Nexus-Message-Id") != want {
			t.Errorf("after %d accepted and the rest refused 429: %d id %q, want id %s", accepted, r.status, r.header.Get("X-Nexus-Message-Id"), want)
		}
	})

	t.Run("with --secret, an unsigned submission is 401 and writes nothing", func(t *testing.T) {
		be2 := newLoopback(t)
		h2, _ := queueHost(t, map[string]string{
			"flows/acme/forward-order.md": queueExample(t, "forward-order", be2.URL),
		}, hostOptions{args: []string{"--secret", "whsec_queue_test_secret"}})
		var r response
		eventually(t, 10*time.Second, "the flow deployed", func() bool {
			r = h2.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
			return r.status != 404
		})
		if r.status != 401 || r.header.Get("X-Correlation-Id") == "" {
			t.Errorf("unsigned: %d %s", r.status, r.body)
		}
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		r = h2.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-1"}`, "X-Nexus-Timestamp", ts, "X-Nexus-Signature", "v1="+strings.Repeat("0", 64))
		if r.status != 401 {
			t.Errorf("wrongly signed: %d %s", r.status, r.body)
		}
		if p := filepath.Join(queuesRoot(h2.db), "acme"); exists(p) {
			t.Errorf("refused submissions created %s", p)
		}
	})

	t.Run("no worker can start: 503 and nothing written", func(t *testing.T) {
		be2 := newLoopback(t)
		h2, _ := queueHost(t, map[string]string{
			"flows/acme/forward-order.md": queueExample(t, "forward-order", be2.URL),
			"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be2.URL),
		}, hostOptions{args: []string{"--max-workers", "1"}}, "forward-order", "sync-invoices")
		mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
		r := h2.enqueue("acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":5}`)
		if r.status != 503 || r.header.Get("X-Correlation-Id") == "" {
			t.Errorf("a second queue with --max-workers 1: %d %s", r.status, r.body)
		}
		if p := filepath.Join(queuesRoot(h2.db), "acme", "sync-invoices"); exists(p) {
			t.Errorf("the refused submission created %s", p)
		}
	})
}

func TestQueuePublishHandoff(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/order-handoff.md":    queueExample(t, "order-handoff", be.URL),
		"flows/acme/order-fulfilment.md": queueExample(t, "order-fulfilment", be.URL),
	}, hostOptions{}, "order-handoff", "order-fulfilment")

	r := h.do(http.MethodPost, "/flows/acme/order-handoff/run", acmeKey, "application/json", `{"orderId":"A-7"}`, "X-Correlation-ID", "trace-handoff-7")
	if r.status != 202 {
		t.Fatalf("order-handoff /run: %d %s", r.status, r.body)
	}
	var receipt map[string]any
	if err := json.Unmarshal([]byte(r.body), &receipt); err != nil {
		t.Fatalf("receipt %s: %v", r.body, err)
	}
	if receipt["accepted"] != true || receipt["orderId"] != "A-7" || receipt["queue"] != "order-fulfilment" || receipt["correlationId"] != "trace-handoff-7" {
		t.Errorf("receipt %s", r.body)
	}

	got := be.waitOn(t, "/orders/", 1, 5*time.Second)
	call := got[0]
	if call.method != http.MethodPut || call.path != "/orders/A-7/reservation" {
		t.Errorf("fulfilment call %s %s", call.method, call.path)
	}
	var task map[string]any
	if err := json.Unmarshal([]byte(call.body), &task); err != nil {
		t.Fatalf("fulfilment body %q: %v", call.body, err)
	}
	if len(task) != 2 || task["orderId"] != "A-7" || task["requestedBy"] != "trace-handoff-7" {
		t.Errorf("the published message %s, want the built task {orderId, requestedBy: the original correlation ID}", call.body)
	}
	for name, want := range map[string]string{
		"X-Correlation-Id": "trace-handoff-7",
		"X-Requested-By":   "trace-handoff-7",
		"Idempotency-Key":  "order-A-7",
		"X-Attempt":        "1",
	} {
		if v := call.header.Get(name); v != want {
			t.Errorf("fulfilment call %s: %q, want %q", name, v, want)
		}
	}
	pub := waitEvents(t, h, "queue_enqueued", 1, field("flow", "order-fulfilment"), 5*time.Second)[0]
	if pub["tenant"] != "acme" || pub["correlation_id"] != "trace-handoff-7" || fmt.Sprint(pub["msg_id"]) != "1" {
		t.Errorf("queue_enqueued of the publication: %v", pub)
	}
	done := waitEvents(t, h, "queue_processed", 1, field("flow", "order-fulfilment"), 5*time.Second)[0]
	if done["outcome"] != "succeeded" || done["correlation_id"] != "trace-handoff-7" {
		t.Errorf("queue_processed of the fulfilment: %v", done)
	}

	// a task without a usable orderId is filtered: acknowledged, never retried
	r = h.do(http.MethodPost, "/flows/acme/order-handoff/run", acmeKey, "application/json", `{"orderId":"bad id!"}`, "X-Correlation-ID", "trace-handoff-bad")
	if r.status != 202 {
		t.Fatalf("order-handoff /run: %d %s", r.status, r.body)
	}
	waitEvents(t, h, "queue_filtered", 1, field("correlation_id", "trace-handoff-bad"), 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := len(be.on("/orders/")); n != 1 {
		t.Errorf("%d fulfilment calls, want only the first: the filtered task must not call out", n)
	}
	if r := nexus(t, "", "dlq", "list", "--db", h.db); r.code != 0 || r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list: %d %q %s", r.code, r.stdout, r.stderr)
	}
}

func TestQueueFaultHandlerAcks(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := queueHost(t, map[string]string{
		// the worked example of "Handling failures", with retries it never gets to use
		"flows/acme/order-intake.md": queueExample(t, "order-intake", be.URL,
			"effects: [http_egress]\n---", "effects: [http_egress]\nqueue_max_attempts: 5\nqueue_initial_delay_ms: 100\n---"),
	}, hostOptions{}, "order-intake")

	mustEnqueue(t, h, "acme", "order-intake", acmeKey, `{"orderId":"DOWN-1","total":5}`, "X-Correlation-ID", "trace-fault-acked")
	ev := waitEvents(t, h, "queue_processed", 1, field("correlation_id", "trace-fault-acked"), 5*time.Second)[0]
	if ev["outcome"] != "fault_handled" || fmt.Sprint(ev["attempt"]) != "1" || fmt.Sprint(ev["msg_id"]) != "1" {
		t.Errorf("queue_processed: %v, want outcome fault_handled on attempt 1", ev)
	}
	time.Sleep(500 * time.Millisecond) // a retry, were there one, would be due after 100 ms
	if n := len(be.on("/ingest")); n != 1 {
		t.Errorf("%d calls to the backend, want 1: the handled fault acknowledged the message", n)
	}
	if evs := h.events("queue_retry_scheduled"); len(evs) != 0 {
		t.Errorf("retries scheduled: %v", evs)
	}
	if evs := h.events("dlq_moved"); len(evs) != 0 {
		t.Errorf("dead-lettered: %v", evs)
	}
	if r := nexus(t, "", "dlq", "list", "--db", h.db); r.code != 0 || r.stdout != "DLQ is empty\n" {
		t.Errorf("dlq list: %d %q %s", r.code, r.stdout, r.stderr)
	}
	var row string
	eventually(t, 10*time.Second, "a journal row of the queued run", func() bool {
		r := nexus(t, "", "journal", "--db", h.db, "--flow", "order-intake")
		row = r.stdout
		return strings.Contains(r.stdout, "trace-fault-acked")
	})
	if !regexp.MustCompile(`(?m)^\S+ enqueue +acme/order-intake v1 fault_handled 502 \d+ms attempt=1 correlation_id=trace-fault-acked msg_id=1`).MatchString(row) {
		t.Errorf("journal row:\n%s\nwant door enqueue, outcome fault_handled, status 502, attempt 1, msg_id 1", row)
	}
}

func TestQueueFaultHandlerThatFailsDeadLetters(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/notify") {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	h, _ := queueHost(t, map[string]string{
		// notify-then-give-up, with shorter delays: 100, 200, 400 ms
		"flows/acme/forward-order-alerting.md": queueExample(t, "forward-order-alerting", be.URL,
			"queue_initial_delay_ms: 2000", "queue_initial_delay_ms: 100"),
	}, hostOptions{}, "forward-order-alerting")

	mustEnqueue(t, h, "acme", "forward-order-alerting", acmeKey, `{"orderId":"DOWN-9"}`, "X-Correlation-ID", "trace-alerting")
	moved := waitEvents(t, h, "dlq_moved", 1, nil, 10*time.Second)[0]
	if moved["correlation_id"] != "trace-alerting" || fmt.Sprint(moved["attempts"]) != "4" {
		t.Errorf("dlq_moved: %v", moved)
	}
	ingest, notify := be.on("/ingest"), be.on("/notify")
	if len(ingest) != 4 || len(notify) != 4 {
		t.Fatalf("%d calls to /ingest and %d to /notify, want 4 and 4: one notification per attempt", len(ingest), len(notify))
	}
	for i, n := range notify {
		var alert map[string]any
		if err := json.Unmarshal([]byte(n.body), &alert); err != nil {
			t.Fatalf("notification %s: %v", n.body, err)
		}
		if fmt.Sprint(alert["attempt"]) != strconv.Itoa(i+1) || alert["door"] != "enqueue" || alert["step"] != "forward" ||
			alert["correlationId"] != "trace-alerting" || alert["flow"] != "forward-order-alerting" {
			t.Errorf("notification %d: %s", i+1, n.body)
		}
		if n.at.Before(ingest[i].at) {
			t.Errorf("notification %d arrived before attempt %d", i+1, i+1)
		}
	}
	if evs := h.events("queue_processed"); len(evs) != 0 {
		t.Errorf("a failed handler acknowledged the message: %v", evs)
	}
	r := nexus(t, "", "dlq", "list", "--db", h.db)
	want := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n\n  id=1 tenant=acme flow=forward-order-alerting\n    enqueued_at: \S+Z\n    failed_at:   \S+Z\n    attempts:    4\n    last_error:  step 'forward': effect handler failed: HTTP 503 Service Unavailable\n$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Errorf("dlq list: %d\n%s%s\nwant the entry with 4 attempts and the error of the main sequence, as without a handler", r.code, r.stdout, r.stderr)
	}
}

func TestQueueMetricsAndEvents(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "DOWN") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	tick := `---
flowmarkdown_version: "0.1"
flow: heartbeat
tenant: acme
effects: [http_egress]
schedule: "@every 1s"
schedule_input: {"job": "heartbeat"}
---

## Step: post
effects: [http_egress]
endpoint: ` + be.URL + `/tick
method: POST
`
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL,
			"queue_max_attempts: 5", "queue_max_attempts: 2", "queue_initial_delay_ms: 500", "queue_initial_delay_ms: 1000"),
		"flows/acme/heartbeat.md": tick,
	}, hostOptions{}, "forward-order")

	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"OK-1"}`, "X-Correlation-ID", "trace-metrics-ok")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"DOWN-1"}`, "X-Correlation-ID", "trace-metrics-down")

	// while the retry waits (a second), it is pending
	scheduled := waitEvents(t, h, "queue_retry_scheduled", 1, nil, 5*time.Second)[0]
	var m response
	var pending float64
	for deadline := time.Now().Add(700 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = h.do(http.MethodGet, "/metrics", "", "", "")
		if pending, _ = metricValue(m.body, "nexus_queue_retries_pending", map[string]string{"tenant": "acme", "flow": "forward-order"}); pending == 1 {
			break
		}
	}
	if pending != 1 && len(h.events("dlq_moved")) == 0 {
		t.Errorf("nexus_queue_retries_pending during the retry's delay: %v (retry scheduled %v)", pending, scheduled)
	}
	waitEvents(t, h, "dlq_moved", 1, nil, 5*time.Second)
	waitEvents(t, h, "cron_tick", 2, nil, 5*time.Second)
	be.waitOn(t, "/tick", 1, 5*time.Second)

	eventually(t, 5*time.Second, "the metrics after the traffic", func() bool {
		m = h.do(http.MethodGet, "/metrics", "", "", "")
		v, ok := metricValue(m.body, "nexus_queue_dead_letters", map[string]string{"tenant": "acme", "flow": "forward-order"})
		return ok && v == 1
	})
	fo := map[string]string{"tenant": "acme", "flow": "forward-order"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   func(float64) bool
	}{
		{"nexus_queue_depth", fo, func(v float64) bool { return v >= 0 }},
		{"nexus_queue_retries_pending", fo, func(v float64) bool { return v == 0 }},
		{"nexus_queue_dead_letters", fo, func(v float64) bool { return v == 1 }},
		{"nexus_queue_delivered_total", map[string]string{"tenant": "acme", "flow": "forward-order", "outcome": "succeeded"}, func(v float64) bool { return v == 1 }},
		{"nexus_queue_delivered_total", map[string]string{"tenant": "acme", "flow": "heartbeat", "outcome": "succeeded"}, func(v float64) bool { return v >= 1 }},
		{"nexus_requests_total", map[string]string{"door": "enqueue", "status": "202"}, func(v float64) bool { return v == 2 }},
		{"nexus_execution_duration_seconds_count", map[string]string{"door": "enqueue"}, func(v float64) bool { return v == 3 }},
		{"nexus_execution_duration_seconds_count", map[string]string{"door": "cron"}, func(v float64) bool { return v >= 1 }},
		// two enqueues and at least one cron tick were appended
		{"nexus_queue_commit_messages_sum", nil, func(v float64) bool { return v >= 3 }},
		{"nexus_queue_fsync_duration_seconds_count", nil, func(v float64) bool { return v >= 1 }},
		// the worker budget: forward-order's and heartbeat's, of 256
		{"nexus_queue_workers", nil, func(v float64) bool { return v == 2 }},
		{"nexus_queue_worker_budget", nil, func(v float64) bool { return v == 256 }},
	} {
		if v, ok := metricValue(m.body, c.name, c.labels); !ok || !c.want(v) {
			t.Errorf("%s%v = %v (found %v)", c.name, c.labels, v, ok)
		}
	}

	// the log events, with their fields
	enq := waitEvents(t, h, "queue_enqueued", 2, field("flow", "forward-order"), time.Second)
	if fmt.Sprint(enq[0]["msg_id"]) != "1" || fmt.Sprint(enq[1]["msg_id"]) != "2" || enq[0]["correlation_id"] != "trace-metrics-ok" || enq[0]["tenant"] != "acme" {
		t.Errorf("queue_enqueued: %v", enq)
	}
	ok := waitEvents(t, h, "queue_processed", 1, field("correlation_id", "trace-metrics-ok"), time.Second)[0]
	if ok["outcome"] != "succeeded" || fmt.Sprint(ok["msg_id"]) != "1" || fmt.Sprint(ok["attempt"]) != "1" || ok["flow"] != "forward-order" {
		t.Errorf("queue_processed: %v", ok)
	}
	retry := h.events("queue_retry_scheduled")[0]
	if retry["correlation_id"] != "trace-metrics-down" || fmt.Sprint(retry["msg_id"]) != "2" || fmt.Sprint(retry["attempt"]) != "1" || retry["flow"] != "forward-order" {
		t.Errorf("queue_retry_scheduled: %v", retry)
	}
	moved := h.events("dlq_moved")[0]
	if moved["correlation_id"] != "trace-metrics-down" || fmt.Sprint(moved["msg_id"]) != "2" || fmt.Sprint(moved["attempt"]) != "2" || moved["tenant"] != "acme" {
		t.Errorf("dlq_moved: %v", moved)
	}
	if ws := waitEvents(t, h, "worker_started", 2, nil, time.Second); len(ws) != 2 {
		t.Errorf("worker_started: %v", ws)
	} else {
		flows := []string{fmt.Sprint(ws[0]["flow"]), fmt.Sprint(ws[1]["flow"])}
		sort.Strings(flows)
		if flows[0] != "forward-order" || flows[1] != "heartbeat" {
			t.Errorf("worker_started for %v, want forward-order and heartbeat", flows)
		}
	}
	ct := h.events("cron_tick")[0]
	if ct["tenant"] != "acme" || ct["flow"] != "heartbeat" || ct["correlation_id"] == "" || ct["msg_id"] == nil {
		t.Errorf("cron_tick: %v", ct)
	}

	// the journal: one row per attempt, with door, attempt and msg_id
	var out string
	eventually(t, 10*time.Second, "the journal rows of the queue traffic", func() bool {
		out = nexus(t, "", "journal", "--db", h.db, "--limit", "200").stdout
		return strings.Count(out, "trace-metrics-down") == 2 && strings.Contains(out, "trace-metrics-ok") && strings.Contains(out, " cron ")
	})
	for _, re := range []string{
		`(?m)^\S+ enqueue +acme/forward-order v1 succeeded 200 \d+ms attempt=1 correlation_id=trace-metrics-ok msg_id=1$`,
		`(?m)^\S+ enqueue +acme/forward-order v1 failed 502 \d+ms attempt=1 correlation_id=trace-metrics-down msg_id=2 error=`,
		`(?m)^\S+ enqueue +acme/forward-order v1 failed 502 \d+ms attempt=2 correlation_id=trace-metrics-down msg_id=2 error=`,
		`(?m)^\S+ cron +acme/heartbeat v1 succeeded 200 \d+ms attempt=1 correlation_id=\S+ msg_id=\d+$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no journal row matching %s in:\n%s", re, out)
		}
	}
}

func TestQueueWorkerResolvesLatest(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/v1") || strings.Contains(x.body, "DOWN") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	version := func(path string) string {
		return queueExample(t, "forward-order", be.URL, "queue_initial_delay_ms: 500", "queue_initial_delay_ms: 2000",
			"/ingest", path)
	}
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": version("/v1/ingest"),
		"flows/acme/hello.md":         helloFlow,
	}, hostOptions{}, "forward-order")

	t.Run("a retry runs the version live when its turn comes", func(t *testing.T) {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`, "X-Correlation-ID", "trace-latest")
		be.waitOn(t, "/v1/", 1, 5*time.Second)
		c := repo.commit(map[string]string{"flows/acme/forward-order.md": version("/v2/ingest")})
		waitCommitT(t, h, c, 10*time.Second)
		got := be.waitOn(t, "/v2/", 1, 5*time.Second)[0]
		if got.header.Get("X-Correlation-Id") != "trace-latest" {
			t.Errorf("the retry on v2: %+v", got)
		}
		ev := waitEvents(t, h, "queue_processed", 1, field("correlation_id", "trace-latest"), 5*time.Second)[0]
		if fmt.Sprint(ev["attempt"]) != "2" {
			t.Errorf("queue_processed: %v", ev)
		}
		eventually(t, 10*time.Second, "the journal row of the retry on v2", func() bool {
			out := nexus(t, "", "journal", "--db", h.db, "--flow", "forward-order").stdout
			return regexp.MustCompile(`(?m)^\S+ enqueue +acme/forward-order v2 succeeded 200 \d+ms attempt=2 correlation_id=trace-latest msg_id=1$`).MatchString(out)
		})
	})

	t.Run("a message of a flow no longer deployed is dropped", func(t *testing.T) {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"DOWN-1"}`, "X-Correlation-ID", "trace-dropped")
		waitEvents(t, h, "queue_retry_scheduled", 1, field("correlation_id", "trace-dropped"), 5*time.Second)
		calls := len(be.on("/v2/"))
		c := repo.commit(map[string]string{"flows/acme/forward-order.md": ""})
		waitCommitT(t, h, c, 10*time.Second)
		ev := waitEvents(t, h, "queue_dropped", 1, nil, 5*time.Second)[0]
		if ev["correlation_id"] != "trace-dropped" || ev["flow"] != "forward-order" || !strings.Contains(fmt.Sprint(ev["error"]), "no flow acme/forward-order is deployed") {
			t.Errorf("queue_dropped: %v", ev)
		}
		time.Sleep(500 * time.Millisecond)
		if n := len(be.on("/v2/")); n != calls {
			t.Errorf("%d more calls after the flow was withdrawn", n-calls)
		}
		if evs := h.events("dlq_moved"); len(evs) != 0 {
			t.Errorf("dead-lettered: %v", evs)
		}
		if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
			t.Errorf("dlq list:\n%s", r.stdout)
		}
	})
}

func TestQueueFIFOOnFirstDelivery(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	const n = 50
	ids := make([]uint64, n)
	// submitted one after another, from one client
	for i := 0; i < n; i++ {
		ids[i] = mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"seq":%d}`, i))
	}
	got := be.waitOn(t, "/ingest", n, 10*time.Second)
	for i, x := range got {
		if want := fmt.Sprintf(`{"seq":%d}`, i); x.body != want {
			t.Fatalf("delivery %d is %s, want %s: first deliveries follow the order of submission", i+1, x.body, want)
		}
		if ids[i] != uint64(i+1) {
			t.Errorf("submission %d got message id %d", i+1, ids[i])
		}
	}
}

func TestQueueOffsets(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	release := make(chan struct{})
	be.setAnswer(func(x hit) int {
		<-release
		return http.StatusOK
	})
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	offset := func(r response) int64 {
		t.Helper()
		var a struct{ Offset int64 }
		if r.status != 202 || json.Unmarshal([]byte(r.body), &a) != nil {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return a.Offset
	}
	segment := filepath.Join(queuesRoot(h.db), "acme", "forward-order", "segment.log")

	// the first delivery is held at the backend: the log grows
	var offsets []int64
	for i := 0; i < 3; i++ {
		offsets = append(offsets, offset(h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-`+strconv.Itoa(i)+`"}`)))
		if i == 0 {
			be.waitOn(t, "/ingest", 1, 5*time.Second)
		}
	}
	info, err := os.Stat(segment)
	if err != nil {
		t.Fatal(err)
	}
	if offsets[0] != 0 || offsets[1] <= 0 || offsets[2] <= offsets[1] || info.Size() <= offsets[2] {
		t.Errorf("offsets %v in a log of %d bytes, want 0 and then the byte offsets of each message", offsets, info.Size())
	}
	// frames of equal payload size are of equal size
	if offsets[2]-offsets[1] != offsets[1]-offsets[0] {
		t.Errorf("offsets %v: messages of the same size take different room", offsets)
	}
	close(release)
	be.waitOn(t, "/ingest", 3, 5*time.Second)

	// drained: the log is emptied in place, offsets start at 0, ids count on
	eventually(t, 5*time.Second, "segment.log emptied by the drain", func() bool {
		info, err := os.Stat(segment)
		return err == nil && info.Size() == 0
	})
	r := h.enqueue("acme", "forward-order", acmeKey, `{"orderId":"A-9"}`)
	if offset(r) != 0 || r.header.Get("X-Nexus-Message-Id") != "4" {
		t.Errorf("after the drain: %s id %q, want offset 0 and id 4", r.body, r.header.Get("X-Nexus-Message-Id"))
	}
}

func TestQueueTwoProcessesShareOneSequence(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)

	const perClient, clients = 40, 8
	var (
		mu  sync.Mutex
		ids = map[string]string{} // message id → payload
		wg  sync.WaitGroup
	)
	for _, h := range []*hostProc{h1, h2} {
		for k := 0; k < clients; k++ {
			wg.Add(1)
			go func(h *hostProc, k int) {
				defer wg.Done()
				for i := 0; i < perClient; i++ {
					body := fmt.Sprintf(`{"id":"%s-%d-%d"}`, strings.TrimPrefix(h.url, "http://"), k, i)
					req, _ := http.NewRequest(http.MethodPost, h.url+"/flows/acme/forward-order/enqueue", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+acmeKey)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 202 {
						t.Errorf("%s: %d", body, resp.StatusCode)
						return
					}
					id := resp.Header.Get("X-Nexus-Message-Id")
					mu.Lock()
					if prev, ok := ids[id]; ok {
						t.Errorf("message id %s given to %s and to %s", id, prev, body)
					}
					ids[id] = body
					mu.Unlock()
				}
			}(h, k)
		}
	}
	wg.Wait()
	const total = 2 * clients * perClient
	for i := 1; i <= total; i++ {
		if _, ok := ids[strconv.Itoa(i)]; !ok {
			t.Errorf("no message got id %d: ids are not 1…%d", i, total)
			break
		}
	}
	got := be.waitOn(t, "/ingest", total, 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	seen := map[string]int{}
	for _, x := range be.on("/ingest") {
		seen[x.body]++
	}
	for _, body := range ids {
		if seen[body] != 1 {
			t.Errorf("%s delivered %d times", body, seen[body])
		}
	}
	t.Logf("%d messages through two processes, %d deliveries; delivered by the first %d, by the second %d", total, len(got),
		len(h1.events("queue_processed")), len(h2.events("queue_processed")))
}

func TestQueuePublishRefusals(t *testing.T) {
	t.Parallel()
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.Write([]byte(`<task><orderId>A-1</orderId></task>`))
	})
	xmlHandoff := `---
flowmarkdown_version: "0.1"
flow: xml-handoff
tenant: acme
effects: [http_egress, queue_publish]
---

## Step: fetch
effects: [http_egress]
endpoint: ` + be.URL + `/task
method: GET

## Step: hand-off
effects: [queue_publish]
queue: order-fulfilment
`
	// publishes a JSON document to a flow that is not deployed
	ghostHandoff := strings.NewReplacer("flow: xml-handoff", "flow: ghost-handoff", "queue: order-fulfilment", "queue: ghost",
		"endpoint: "+be.URL+"/task\nmethod: GET", "endpoint: "+be.URL+"/task\nmethod: GET\n\n## Step: as-json\n```ntd\n{\"orderId\": \"A-9\"}\n```").Replace(xmlHandoff)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/order-handoff.md":    queueExample(t, "order-handoff", be.URL),
		"flows/acme/order-fulfilment.md": queueExample(t, "order-fulfilment", be.URL),
		"flows/acme/forward-order.md":    queueExample(t, "forward-order", be.URL),
		"flows/acme/xml-handoff.md":      xmlHandoff,
		"flows/acme/ghost-handoff.md":    ghostHandoff,
	}, hostOptions{args: []string{"--max-workers", "1"}}, "order-handoff", "xml-handoff", "forward-order", "ghost-handoff")
	fulfilment := filepath.Join(queuesRoot(h.db), "acme", "order-fulfilment")

	t.Run("the target is not deployed: the step fails before the write", func(t *testing.T) {
		r := h.do(http.MethodPost, "/flows/acme/ghost-handoff/run", acmeKey, "application/json", `{}`, "X-Correlation-ID", "trace-ghost")
		if r.status != 502 {
			t.Errorf("/run: %d %s, want 502 (the effect failed)", r.status, r.body)
		}
		ev := waitEvents(t, h, "run_completed", 1, field("correlation_id", "trace-ghost"), 5*time.Second)[0]
		if ev["step"] != "hand-off" || !strings.Contains(fmt.Sprint(ev["error"]), "no flow acme/ghost is deployed") {
			t.Errorf("run_completed: %v, want the step hand-off and the target named", ev)
		}
		if ghost := filepath.Join(queuesRoot(h.db), "acme", "ghost"); exists(ghost) {
			t.Errorf("the refused publication created %s", ghost)
		}
	})

	t.Run("an XML document is refused naming the step", func(t *testing.T) {
		r := h.do(http.MethodPost, "/flows/acme/xml-handoff/run", acmeKey, "application/json", `{}`, "X-Correlation-ID", "trace-xml-publish")
		if r.status != 500 {
			t.Errorf("/run: %d %s, want 500 (a defect in the flow)", r.status, r.body)
		}
		ev := waitEvents(t, h, "run_completed", 1, field("correlation_id", "trace-xml-publish"), 5*time.Second)[0]
		if ev["step"] != "hand-off" || !strings.Contains(fmt.Sprint(ev["error"]), "JSON") {
			t.Errorf("run_completed: %v, want the step hand-off named and the need for JSON", ev)
		}
		if exists(fulfilment) {
			t.Errorf("the refused publication created %s", fulfilment)
		}
	})

	t.Run("no worker can be started: the step fails before the write", func(t *testing.T) {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`) // the budget of one worker, spent
		r := h.do(http.MethodPost, "/flows/acme/order-handoff/run", acmeKey, "application/json", `{"orderId":"A-7"}`, "X-Correlation-ID", "trace-no-budget")
		if r.status != 502 {
			t.Errorf("/run: %d %s, want 502 (the effect failed)", r.status, r.body)
		}
		ev := waitEvents(t, h, "run_completed", 1, field("correlation_id", "trace-no-budget"), 5*time.Second)[0]
		if ev["step"] != "hand-off" {
			t.Errorf("run_completed: %v", ev)
		}
		if exists(fulfilment) {
			t.Errorf("the refused publication created %s", fulfilment)
		}
		if evs := h.events("queue_enqueued"); len(evs) != 1 {
			t.Errorf("queue_enqueued: %v, want only the submission to forward-order", evs)
		}
	})

	t.Run("queue: is checked at compile time", func(t *testing.T) {
		dir := t.TempDir()
		for _, c := range []struct{ queue, want string }{
			{"../x", `invalid name "../x"`},
			{"globex/fulfilment", `invalid name "globex/fulfilment"`},
			{"", "no queue:"},
		} {
			src := strings.Replace(xmlHandoff, "queue: order-fulfilment", "queue: "+c.queue, 1)
			if c.queue == "" {
				src = strings.Replace(xmlHandoff, "queue: order-fulfilment\n", "", 1)
			}
			writeFiles(t, dir, map[string]string{"flows/acme/xml-handoff.md": src})
			r := nexus(t, "", "validate", filepath.Join(dir, "flows"))
			if r.code != 1 || !strings.Contains(r.stdout+r.stderr, c.want) {
				t.Errorf("queue: %q: exit %d\n%s%s\nwant an error with %q", c.queue, r.code, r.stdout, r.stderr, c.want)
			}
		}
	})
}

func TestQueueMetricsAfterRestart(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL, "queue_max_attempts: 5", "queue_max_attempts: 1"),
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL,
			"effects: [http_egress]\n---", "effects: [http_egress]\nqueue_initial_delay_ms: 60000\n---"),
	}, hostOptions{}, "forward-order", "sync-invoices")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":0}`)
	waitEvents(t, h, "dlq_moved", 1, nil, 5*time.Second)
	waitEvents(t, h, "queue_retry_scheduled", 1, nil, 5*time.Second)
	gauges := func(h *hostProc) (dead, retries float64, deadOK, retriesOK bool) {
		m := h.do(http.MethodGet, "/metrics", "", "", "")
		dead, deadOK = metricValue(m.body, "nexus_queue_dead_letters", map[string]string{"tenant": "acme", "flow": "forward-order"})
		retries, retriesOK = metricValue(m.body, "nexus_queue_retries_pending", map[string]string{"tenant": "acme", "flow": "sync-invoices"})
		return
	}
	// the worker counts a retry pending once the schedule is written,
	// just after it logs queue_retry_scheduled
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d, r, dok, rok := gauges(h)
		if d == 1 && r == 1 && dok && rok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("before the restart: dead letters %v (%v), retries pending %v (%v)", d, dok, r, rok)
		}
	}
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	// The queue gauges cover the queues on disk, not only those this process has opened:
	// after a restart a pending dead letter and a pending retry stay in /metrics.
	if d, r, dok, rok := gauges(h2); d != 1 || r != 1 || !dok || !rok {
		t.Errorf("after a restart, before any submission: nexus_queue_dead_letters{acme,forward-order} = %v (present %v), "+
			"nexus_queue_retries_pending{acme,sync-invoices} = %v (present %v); want 1 and 1, as on disk", d, dok, r, rok)
	}
	if r := dlqCLI(t, h.db, "list"); !strings.HasPrefix(r.stdout, "DLQ: 1 pending message(s)\n") {
		t.Errorf("dlq list:\n%s", r.stdout)
	}
}

func TestQueueIdleFilesDeletedKeepIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the minute of the housekeeping task")
	}
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/invoices") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL,
			"effects: [http_egress]\n---", "effects: [http_egress]\nqueue_max_attempts: 1\n---"),
	}, hostOptions{}, "forward-order", "sync-invoices")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-2"}`)
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":5}`)
	waitEvents(t, h, "queue_processed", 2, nil, 5*time.Second)
	waitEvents(t, h, "dlq_moved", 1, nil, 5*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	// after a restart nothing is submitted: no worker runs for either queue
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	ev := waitEvents(t, h2, "queue_files_deleted", 1, nil, 80*time.Second)[0]
	if ev["tenant"] != "acme" || ev["flow"] != "forward-order" {
		t.Errorf("queue_files_deleted: %v", ev)
	}
	time.Sleep(200 * time.Millisecond)
	if evs := h2.events("queue_files_deleted"); len(evs) != 1 {
		t.Errorf("queue_files_deleted: %v, want only forward-order's: sync-invoices holds a dead letter", evs)
	}
	dir := filepath.Join(queuesRoot(h.db), "acme", "forward-order")
	if exists(filepath.Join(dir, "segment.log")) {
		t.Errorf("%s still has its segment.log", dir)
	}
	if !exists(filepath.Join(dir, "segment.log.seq")) {
		t.Logf("segment.log.seq is gone; the id counter must be kept elsewhere")
	}
	if r := dlqCLI(t, h.db, "list"); !regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n` + dlqEntryRE(1, "sync-invoices", 1, "step 'push': effect handler failed: HTTP 503 Service Unavailable") + `$`).MatchString(r.stdout) {
		t.Errorf("dlq list after the housekeeping:\n%s%s", r.stdout, r.stderr)
	}
	// the next submission recreates the files; the ids are never reissued
	if id := mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"A-3"}`); id != 3 {
		t.Errorf("X-Nexus-Message-Id %d after the files were deleted, want 3", id)
	}
	waitEvents(t, h2, "queue_processed", 1, field("msg_id", 3), 5*time.Second)
}

func TestQueueDefaultRetries(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		// sync-invoices sets none of the four keys: 3 attempts, 1000 and 2000 ms apart
		"flows/acme/sync-invoices.md": queueExample(t, "sync-invoices", be.URL),
	}, hostOptions{}, "sync-invoices")
	// every attempt of an invalid invoice fails at check, before any call out:
	// the attempts are seen in the retry events and the dead letter
	mustEnqueue(t, h, "acme", "sync-invoices", acmeKey, `{"invoiceId":"I-1","total":0}`, "X-Correlation-ID", "trace-defaults")
	moved := waitEvents(t, h, "dlq_moved", 1, nil, 30*time.Second)[0]
	retries := h.events("queue_retry_scheduled")
	if len(retries) != 2 || fmt.Sprint(retries[0]["delay_ms"]) != "1000" || fmt.Sprint(retries[1]["delay_ms"]) != "2000" {
		t.Errorf("queue_retry_scheduled: %v, want delays of 1000 and 2000 ms", retries)
	}
	if fmt.Sprint(moved["attempts"]) != "3" || moved["last_error"] != invoiceError {
		t.Errorf("dlq_moved: %v", moved)
	}
	var times []time.Time
	for _, e := range append(retries, moved) {
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["time"]))
		if err != nil {
			t.Fatalf("event time %v: %v", e["time"], err)
		}
		times = append(times, at)
	}
	// the delays are checked exactly above (delay_ms); from the times of
	// the failures, no attempt comes early, and lateness on a loaded
	// machine gets generous slack
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		if gap := times[i+1].Sub(times[i]); gap < want-50*time.Millisecond || gap > want+10*time.Second {
			t.Errorf("attempt %d failed %v after attempt %d, want %v", i+2, gap, i+1, want)
		} else {
			t.Logf("attempt %d failed %v after attempt %d (delay %v)", i+2, gap.Round(time.Millisecond), i+1, want)
		}
	}
	if n := len(be.received()); n != 0 {
		t.Errorf("%d calls out from an invoice that fails its check", n)
	}
}

// retryDedupFlow deduplicates by orderId and posts to BACKEND/dedup/{outcome};
// two attempts, 3 s apart.
const retryDedupFlow = `---
flowmarkdown_version: "0.1"
flow: retry-dedup
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
queue_max_attempts: 2
queue_initial_delay_ms: 3000
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/dedup/{{ $.outcome }}
method: POST
`

// TestQueueRetrySkipsDedupCheck: "a retry of the same queued message skips
// the dedup check" (flow-file.md, Precise answers). A queued message fails
// its first attempt; meanwhile /run delivers the same key successfully,
// which records a success; the message's second attempt still runs (the
// backend is called again, and the message is dead-lettered when it fails
// again) instead of receiving the recorded success, and the success stands
// for the duplicates after it.
func TestQueueRetrySkipsDedupCheck(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/dedup/fail") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, _ := queueHost(t, map[string]string{
		"flows/acme/retry-dedup.md": strings.ReplaceAll(retryDedupFlow, "BACKEND", be.URL),
	}, hostOptions{}, "retry-dedup")
	id := mustEnqueue(t, h, "acme", "retry-dedup", acmeKey, `{"orderId":"R1","outcome":"fail"}`)
	waitEvents(t, h, "queue_retry_scheduled", 1, field("msg_id", id), 15*time.Second)

	if r := h.run("acme", "retry-dedup", acmeKey, `{"orderId":"R1","outcome":"ok"}`); r.status != http.StatusOK || r.header.Get("X-Nexus-Idempotent-Replay") != "" {
		t.Fatalf("/run of the same key after the failed attempt: %d %s (replay %q), want it run and 200", r.status, r.body, r.header.Get("X-Nexus-Idempotent-Replay"))
	}
	if r := h.run("acme", "retry-dedup", acmeKey, `{"orderId":"R1","outcome":"ok"}`); r.header.Get("X-Nexus-Idempotent-Replay") != "true" {
		t.Fatalf("a duplicate /run: %d %s, want the recorded success replayed", r.status, r.body)
	}

	moved := waitEvents(t, h, "dlq_moved", 1, field("msg_id", id), 20*time.Second)
	if got := fmt.Sprint(moved[0]["attempt"]); got != "2" {
		t.Errorf("dlq_moved: attempt %s, want 2", got)
	}
	if hits := be.on("/dedup/fail"); len(hits) != 2 {
		t.Errorf("the backend got %d calls for the queued message, want 2 (its second attempt skips the dedup check)", len(hits))
	}
	for _, e := range h.events("queue_processed") {
		if fmt.Sprint(e["msg_id"]) == fmt.Sprint(id) {
			t.Errorf("the queued message was acknowledged (%v), want it run again and dead-lettered", e)
		}
	}
	if r := h.run("acme", "retry-dedup", acmeKey, `{"orderId":"R1","outcome":"ok"}`); r.status != http.StatusOK || r.header.Get("X-Nexus-Idempotent-Replay") != "true" {
		t.Errorf("a duplicate /run after the dead letter: %d %s (replay %q), want the recorded success replayed", r.status, r.body, r.header.Get("X-Nexus-Idempotent-Replay"))
	}
}
