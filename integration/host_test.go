package integration

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// The host end to end, over the built binary: the /run examples of
// "Handling failures", the access gate, commits swapped under load, a
// graceful shutdown under load, signatures, the git webhook, the
// development mode and the configuration.

// exampleFlow reads flows-example/flows/acme/NAME.md with its example hosts
// pointed at the backend.
func exampleFlow(t *testing.T, name, backendURL string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "flows-example", "flows", "acme", name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for _, host := range []string{"https://orders.example.com", "https://alerts.example.com"} {
		s = strings.ReplaceAll(s, host, backendURL)
	}
	return s
}

// backendText is what the failing backend says; it must never reach a
// caller.
const backendText = "db-7 is down: backend secret text"

// waitRun polls /run until it answers 200 with want: GET /status shows a
// commit as soon as it is published, a moment before the live set that
// serves it is loaded.
func waitRun(t *testing.T, h *hostProc, tenant, flowName, key, body, want string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var r response
	for time.Since(start) < timeout {
		if r = h.run(tenant, flowName, key, body); r.status == 200 && r.body == want {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("/flows/%s/%s/run did not answer %s within %v; last %d %s", tenant, flowName, want, timeout, r.status, r.body)
	return 0
}

// waitDeployed polls /run until the gate lets key call tenant/flow (no 401,
// 403 or 404 any more).
func waitDeployed(t *testing.T, h *hostProc, tenant, flowName, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.run(tenant, flowName, key, `{}`)
		if r.status != 401 && r.status != 403 && r.status != 404 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not deployed within 5 s: %d %s", tenant, flowName, r.status, r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failuresBackend answers /ingest with 503 for order ids starting with
// DOWN, /status/{id} with the status its id names (A-201 → 201), /slow
// after 300 ms, and 200 otherwise.
func failuresBackend(t *testing.T) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var in struct{ OrderID string }
		json.NewDecoder(r.Body).Decode(&in)
		switch {
		case strings.HasPrefix(in.OrderID, "DOWN"):
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"message":%q}`, backendText)
		case strings.HasPrefix(r.URL.Path, "/status/"):
			id := strings.TrimPrefix(r.URL.Path, "/status/")
			code, _ := strconv.Atoi(strings.TrimPrefix(id, "A-"))
			if code < 200 {
				code = 200
			}
			w.WriteHeader(code)
			switch {
			case code == 404:
				w.Write([]byte(`{"message":"no such order"}`))
			case code >= 500:
				fmt.Fprintf(w, `{"message":%q}`, backendText)
			default:
				fmt.Fprintf(w, `{"orderId":%q,"state":"open"}`, id)
			}
		case r.URL.Path == "/slow":
			time.Sleep(300 * time.Millisecond)
			w.Write([]byte(`{"ok":true}`))
		default:
			w.Write([]byte(`{"accepted":true}`))
		}
	})
}

// noHandlerFlow is the first example of "Handling failures" without its
// ## Fault: section.
const noHandlerFlow = `---
flowmarkdown_version: "0.1"
flow: order-intake-nohandler
tenant: acme
effects: [http_egress]
---

## Step: check
` + "```validate" + `
$.orderId != null | "orderId is required" | syntactic
` + "```" + `

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
method: POST
`

// ceilingFlow reaches its duration ceiling in a call out.
const ceilingFlow = `---
flowmarkdown_version: "0.1"
flow: ceiling
tenant: acme
effects: [http_egress]
timeout_ms: 100
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/slow
method: POST

## Step: after
` + "```ntd" + `
{"done": true}
` + "```" + `
`

func TestHandlingFailuresExamples(t *testing.T) {
	be := failuresBackend(t)
	files := map[string]string{
		"access.yaml":                   accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/order-nohandler.md": strings.ReplaceAll(noHandlerFlow, "BACKEND", be.URL),
		"flows/acme/ceiling.md":         strings.ReplaceAll(ceilingFlow, "BACKEND", be.URL),
	}
	for _, name := range []string{"order-intake", "order-intake-basic", "order-intake-keep", "order-intake-absorb",
		"order-status", "forward-order", "forward-order-alerting"} {
		files["flows/acme/"+name+".md"] = exampleFlow(t, name, be.URL)
	}
	repo := newConfigRepo(t, files)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "order-intake-nohandler", acmeKey)

	type problem map[string]any
	decode := func(t *testing.T, r response) problem {
		t.Helper()
		var p problem
		if err := json.Unmarshal([]byte(r.body), &p); err != nil {
			t.Fatalf("body %q: %v", r.body, err)
		}
		return p
	}
	check := func(t *testing.T, r response, status int, contentType string) {
		t.Helper()
		if r.status != status {
			t.Errorf("status %d, want %d; body %s", r.status, status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != contentType {
			t.Errorf("Content-Type %q, want %q", ct, contentType)
		}
		if r.header.Get("X-Correlation-Id") == "" {
			t.Error("no X-Correlation-Id")
		}
		if strings.Contains(r.body, backendText) || strings.Contains(fmt.Sprint(r.header), backendText) {
			t.Errorf("the backend's error text reached the caller: %s", r.body)
		}
	}
	fields := func(t *testing.T, p problem, want problem) {
		t.Helper()
		for k, v := range want {
			if p[k] != v {
				t.Errorf("%s = %#v, want %#v (in %v)", k, p[k], v, p)
			}
		}
	}

	t.Run("the worked example as printed", func(t *testing.T) {
		// curl -i -X POST …/flows/acme/order-intake/run -H 'Content-Type: application/json' -d '{"total":0}'
		req, _ := http.NewRequest(http.MethodPost, h.url+"/flows/acme/order-intake/run", strings.NewReader(`{"total":0}`))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/1.1" || resp.Status != "400 Bad Request" {
			t.Errorf("status line %s %s, want HTTP/1.1 400 Bad Request", resp.Proto, resp.Status)
		}
		if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
			t.Errorf("Content-Type: %q", got)
		}
		if got := resp.Header.Get("Retry-After"); got != "30" {
			t.Errorf("Retry-After: %q", got)
		}
		const start = `{"type":"https://errors.example.com/order-intake","title":"Order could not be accepted",`
		if !strings.HasPrefix(string(body), start) {
			t.Errorf("body %s\nwant it to start %s", body, start)
		}
		r := response{status: resp.StatusCode, header: resp.Header, body: string(body)}
		fields(t, decode(t, r), problem{"detail": "orderId is required", "step": "check", "correlationId": resp.Header.Get("X-Correlation-Id")})
	})
	t.Run("the worked example: a semantic rule is 422", func(t *testing.T) {
		r := h.run("acme", "order-intake", acmeKey, `{"orderId":"A-1","total":0}`)
		check(t, r, 422, "application/problem+json")
		if r.header.Get("Retry-After") != "30" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
		fields(t, decode(t, r), problem{"type": "https://errors.example.com/order-intake", "title": "Order could not be accepted",
			"detail": "total must be positive", "step": "check", "orderId": "A-1"})
	})
	t.Run("the worked example: a downstream failure is 502", func(t *testing.T) {
		r := h.run("acme", "order-intake", acmeKey, `{"orderId":"DOWN-1","total":5}`)
		check(t, r, 502, "application/problem+json")
		if r.header.Get("Retry-After") != "30" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
		fields(t, decode(t, r), problem{"title": "Order could not be accepted", "step": "forward", "orderId": "DOWN-1",
			"correlationId": r.header.Get("X-Correlation-Id")})
	})
	t.Run("the worked example: success", func(t *testing.T) {
		r := h.run("acme", "order-intake", acmeKey, `{"orderId":"A-2","total":5}`)
		check(t, r, 200, "application/json")
		if r.body != `{"accepted":true}` {
			t.Errorf("body %s", r.body)
		}
	})
	t.Run("without a handler: a validate rule keeps its message", func(t *testing.T) {
		r := h.run("acme", "order-intake-nohandler", acmeKey, `{}`)
		check(t, r, 400, "application/json")
		if r.body != `{"error":"orderId is required","step":"check"}` {
			t.Errorf("body %s", r.body)
		}
	})
	t.Run("without a handler: a failed call out is 502 and says nothing", func(t *testing.T) {
		for _, f := range []string{"order-intake-nohandler", "forward-order"} {
			r := h.run("acme", f, acmeKey, `{"orderId":"DOWN-2"}`)
			check(t, r, 502, "application/json")
			if r.body != `{"ok":false,"error":"flow execution failed"}` {
				t.Errorf("%s: body %s", f, r.body)
			}
		}
	})
	t.Run("the failure is logged naming the flow and the step", func(t *testing.T) {
		r := h.do(http.MethodPost, "/flows/acme/forward-order/run", acmeKey, "application/json", `{"orderId":"DOWN-6"}`,
			"X-Correlation-ID", "trace-forward-502")
		check(t, r, 502, "application/json")
		var ev map[string]any
		for deadline := time.Now().Add(5 * time.Second); ev == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, e := range h.events("run_completed") {
				if e["correlation_id"] == "trace-forward-502" {
					ev = e
				}
			}
		}
		if ev == nil {
			t.Fatal("no run_completed event with the request's correlation ID")
		}
		if ev["tenant"] != "acme" || ev["flow"] != "forward-order" || ev["step"] != "forward" || ev["status"] != float64(502) {
			t.Errorf("run_completed: %v", ev)
		}
	})
	t.Run("the first example: response_status 400 for every failure", func(t *testing.T) {
		r := h.run("acme", "order-intake-basic", acmeKey, `{}`)
		check(t, r, 400, "application/problem+json")
		fields(t, decode(t, r), problem{"title": "Order rejected", "detail": "orderId is required", "step": "check",
			"correlationId": r.header.Get("X-Correlation-Id")})
		r = h.run("acme", "order-intake-basic", acmeKey, `{"orderId":"DOWN-3"}`)
		check(t, r, 400, "application/problem+json")
		fields(t, decode(t, r), problem{"title": "Order rejected", "step": "forward"})
	})
	t.Run("save_body keeps the request for the handler", func(t *testing.T) {
		r := h.run("acme", "order-intake-keep", acmeKey, `{"orderId":"A-9","total":0}`)
		check(t, r, 422, "application/json")
		if r.body != `{"title":"Order rejected","orderId":"A-9","detail":"total must be positive"}` {
			t.Errorf("body %s", r.body)
		}
	})
	t.Run("a handler that fails is 500 fault handler failed", func(t *testing.T) {
		before := len(be.received())
		r := h.run("acme", "forward-order-alerting", acmeKey, `{"orderId":"DOWN-4"}`)
		check(t, r, 500, "application/json")
		if r.body != `{"ok":false,"error":"fault handler failed"}` {
			t.Errorf("body %s", r.body)
		}
		// the notification of the handler was sent before it failed on purpose
		got := be.received()[before:]
		if len(got) != 2 || got[0].Path != "/ingest" || got[1].Path != "/notify" {
			t.Errorf("backend calls: %+v", got)
		}
	})
	t.Run("response_status 200 in a handler", func(t *testing.T) {
		r := h.run("acme", "order-intake-absorb", acmeKey, `{"orderId":"DOWN-5","total":5}`)
		check(t, r, 200, "application/json")
		fields(t, decode(t, r), problem{"accepted": false, "correlationId": r.header.Get("X-Correlation-Id")})
	})
	t.Run("a backend's status passed through", func(t *testing.T) {
		r := h.run("acme", "order-status", acmeKey, `{"orderId":"A-201"}`)
		check(t, r, 201, "application/json")
		if cc := r.header.Get("Cache-Control"); cc != "max-age=60" {
			t.Errorf("Cache-Control %q", cc)
		}
		r = h.run("acme", "order-status", acmeKey, `{"orderId":"A-404"}`)
		check(t, r, 404, "application/json")
		fields(t, decode(t, r), problem{"error": "order service refused the lookup", "status": float64(404), "message": "no such order"})
		if cc := r.header.Get("Cache-Control"); cc != "" {
			t.Errorf("Cache-Control %q survived into the fault sequence", cc)
		}
		r = h.run("acme", "order-status", acmeKey, `{"orderId":"A-503"}`)
		check(t, r, 502, "application/problem+json")
		fields(t, decode(t, r), problem{"title": "Order status lookup failed", "step": "proxy"})
		if cc := r.header.Get("Cache-Control"); cc != "" {
			t.Errorf("Cache-Control %q survived into the fault sequence", cc)
		}
	})
	t.Run("the duration ceiling is 500 naming a step", func(t *testing.T) {
		r := h.run("acme", "ceiling", acmeKey, `{}`)
		check(t, r, 500, "application/json")
		p := decode(t, r)
		fields(t, p, problem{"ok": false, "error": "duration ceiling of 100 ms reached"})
		if s, _ := p["step"].(string); s == "" {
			t.Errorf("no step named: %s", r.body)
		}
	})
}

// rawAnswer is an answer read off a raw connection.
type rawAnswer struct {
	resp    *http.Response
	body    string
	elapsed time.Duration
	closed  bool // the server closed the connection after answering
}

// rawExchange writes head (a request head whose body is never sent) on a
// new connection and reads the answer, with a deadline of 5 s.
func rawExchange(t *testing.T, baseURL, head string) rawAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within 5 s without the body: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	a := rawAnswer{resp: resp, body: string(body), elapsed: time.Since(start)}
	_, err = br.ReadByte()
	var ne net.Error
	a.closed = err != nil && !(errors.As(err, &ne) && ne.Timeout())
	return a
}

func TestGateEndToEnd(t *testing.T) {
	const (
		ordersKey  = "test-key-acme-orders"
		globexKey  = "test-key-globex"
		limitedKey = "test-key-acme-limited"
	)
	repo := newConfigRepo(t, map[string]string{
		"access.yaml": accessYAML(
			testKey{id: "acme-all", tenant: "acme", key: acmeKey},
			testKey{id: "acme-orders", tenant: "acme", key: ordersKey, flows: []string{"order-intake"}},
			testKey{id: "globex-all", tenant: "globex", key: globexKey},
			testKey{id: "acme-limited", tenant: "acme", key: limitedKey, rate: 1, burst: 1},
		),
		"flows/acme/hello.md":        helloFlow,
		"flows/acme/order-intake.md": strings.Replace(helloFlow, "flow: hello", "flow: order-intake", 1),
		"flows/globex/hello.md":      strings.Replace(helloFlow, "tenant: acme", "tenant: globex", 1),
	})
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)

	refusal := func(t *testing.T, r response, status int, msg string) {
		t.Helper()
		want := `{"ok":false,"error":` + strconv.Quote(msg) + `}`
		if r.status != status || r.body != want {
			t.Errorf("%d %s, want %d %s", r.status, r.body, status, want)
		}
		if r.header.Get("X-Correlation-Id") == "" {
			t.Error("no X-Correlation-Id")
		}
	}
	hello := "/flows/acme/hello/run"

	t.Run("no key announcing 1 GB: 401 without waiting for the body", func(t *testing.T) {
		a := rawExchange(t, h.url, "POST "+hello+" HTTP/1.1\r\nHost: nexus\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n")
		if a.resp.StatusCode != 401 || a.body != `{"ok":false,"error":"missing or unknown API key"}` {
			t.Errorf("%s %s", a.resp.Status, a.body)
		}
		if a.resp.Header.Get("WWW-Authenticate") != "Bearer" || a.resp.Header.Get("X-Correlation-Id") == "" {
			t.Errorf("headers %v", a.resp.Header)
		}
		if !a.closed {
			t.Error("the connection stayed open with 1 GB of body announced")
		}
		t.Logf("401 after %v", a.elapsed)
	})
	t.Run("no key, Expect: 100-continue, 10 GiB: 401, no 100 Continue", func(t *testing.T) {
		a := rawExchange(t, h.url, "POST "+hello+" HTTP/1.1\r\nHost: nexus\r\nExpect: 100-continue\r\nContent-Length: 10737418240\r\n\r\n")
		if a.resp.StatusCode != 401 {
			t.Errorf("first answer %s, want 401", a.resp.Status)
		}
	})
	t.Run("another tenant's key announcing 1 GB: 403 without the body", func(t *testing.T) {
		a := rawExchange(t, h.url, "POST "+hello+" HTTP/1.1\r\nHost: nexus\r\nAuthorization: Bearer "+globexKey+"\r\nContent-Length: 1000000000\r\n\r\n")
		if a.resp.StatusCode != 403 || a.body != `{"ok":false,"error":"key globex-all may not call acme/hello"}` {
			t.Errorf("%s %s", a.resp.Status, a.body)
		}
	})
	t.Run("another tenant's key", func(t *testing.T) {
		refusal(t, h.run("acme", "hello", globexKey, `{"name":"Ada"}`), 403, "key globex-all may not call acme/hello")
	})
	t.Run("not in the allowlist", func(t *testing.T) {
		refusal(t, h.run("acme", "hello", ordersKey, `{"name":"Ada"}`), 403, "key acme-orders may not call acme/hello")
		if r := h.run("acme", "order-intake", ordersKey, `{"name":"Ada"}`); r.status != 200 {
			t.Errorf("the allowlisted flow: %d %s", r.status, r.body)
		}
	})
	t.Run("unknown flow", func(t *testing.T) {
		refusal(t, h.run("acme", "nope", acmeKey, `{}`), 404, "no flow acme/nope is deployed")
	})
	t.Run("Acme as tenant", func(t *testing.T) {
		refusal(t, h.run("Acme", "hello", acmeKey, `{}`), 400, `invalid name "Acme" for tenant (flow "hello"): character 'A' at position 1 is not allowed`)
	})
	t.Run("dot-dot as tenant", func(t *testing.T) {
		for _, p := range []string{"/flows/../hello/run", "/flows/%2e%2e/hello/run"} {
			a := rawExchange(t, h.url, "POST "+p+" HTTP/1.1\r\nHost: nexus\r\nConnection: close\r\nAuthorization: Bearer "+acmeKey+"\r\nContent-Length: 2\r\n\r\n{}")
			want := `{"ok":false,"error":"invalid name \"..\" for tenant (flow \"hello\"): character '.' at position 1 is not allowed"}`
			if a.resp.StatusCode != 400 || a.body != want {
				t.Errorf("%s: %s %s", p, a.resp.Status, a.body)
			}
		}
	})
	t.Run("over the rate", func(t *testing.T) {
		// the first request may take the only token, or an earlier second may
		// have refilled it; within one second the bucket is empty
		var r response
		for i := 0; i < 3; i++ {
			if r = h.run("acme", "hello", limitedKey, `{"name":"Ada"}`); r.status == 429 {
				break
			}
		}
		refusal(t, r, 429, "rate limit exceeded")
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1", ra)
		}
		a := rawExchange(t, h.url, "POST "+hello+" HTTP/1.1\r\nHost: nexus\r\nAuthorization: Bearer "+limitedKey+"\r\nContent-Length: 1000000000\r\n\r\n")
		if a.resp.StatusCode != 429 || a.resp.Header.Get("Retry-After") == "" {
			t.Errorf("limited key announcing 1 GB: %s %v %s", a.resp.Status, a.resp.Header, a.body)
		}
	})
	t.Run("body over the ceiling", func(t *testing.T) {
		body := `{"name":"` + strings.Repeat("x", 1<<20) + `"}`
		refusal(t, h.run("acme", "hello", acmeKey, body), 413, "body exceeds 1048576 bytes")
		a := rawExchange(t, h.url, "POST "+hello+" HTTP/1.1\r\nHost: nexus\r\nAuthorization: Bearer "+acmeKey+"\r\nContent-Length: 1048577\r\n\r\n")
		if a.resp.StatusCode != 413 {
			t.Errorf("announced 1048577 bytes: %s %s", a.resp.Status, a.body)
		}
	})
	t.Run("bad bodies", func(t *testing.T) {
		for name, body := range map[string]string{
			"bad JSON":      `{"name":`,
			"duplicate key": `{"name":"a","name":"b"}`,
			"depth 65":      strings.Repeat("[", 65) + strings.Repeat("]", 65),
		} {
			r := h.run("acme", "hello", acmeKey, body)
			var got struct {
				OK    *bool
				Error string
			}
			json.Unmarshal([]byte(r.body), &got)
			if r.status != 400 || got.OK == nil || *got.OK || !strings.HasPrefix(got.Error, "invalid JSON") || r.header.Get("X-Correlation-Id") == "" {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
	})
	t.Run("text/csv", func(t *testing.T) {
		refusal(t, h.do(http.MethodPost, hello, acmeKey, "text/csv", "a,b\n"), 415, `unsupported content type "text/csv"`)
	})
	t.Run("the incoming correlation ID is echoed", func(t *testing.T) {
		for _, r := range []response{
			h.do(http.MethodPost, hello, acmeKey, "application/json", `{"name":"Ada"}`, "X-Correlation-ID", "trace-42"),
			h.do(http.MethodPost, hello, "", "application/json", `{"name":"Ada"}`, "X-Correlation-ID", "trace-42"),
			h.do(http.MethodGet, hello, acmeKey, "", "", "X-Correlation-ID", "trace-42"),
			h.do(http.MethodGet, "/nope", "", "", "", "X-Correlation-ID", "trace-42"),
			h.do(http.MethodPost, hello, "", "application/json", `{}`, "X-Request-ID", "trace-42"),
		} {
			if got := r.header.Get("X-Correlation-Id"); got != "trace-42" {
				t.Errorf("%d %s: X-Correlation-Id %q", r.status, r.body, got)
			}
		}
	})
}

func TestCommitSwapsUnderLoad(t *testing.T) {
	hi := strings.Replace(helloFlow, "hello, ", "hi, ", 1)
	repo := helloRepo(t)
	const poll = 200 * time.Millisecond // the harness's --poll
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)
	answers := map[string]string{helloFlow: `{"greeting":"hello, Ada"}`, hi: `{"greeting":"hi, Ada"}`}

	// waitAnswer polls /run until it answers want and returns how long it took.
	waitAnswer := func(want string, timeout time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		var r response
		for time.Since(start) < timeout {
			if r = h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status == 200 && r.body == want {
				return time.Since(start)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("/run did not answer %s within %v; last %d %s", want, timeout, r.status, r.body)
		return 0
	}

	// without load: a commit goes live at a poll (the latency, about one
	// poll interval plus the sync's own work, is logged, not bound: the
	// timeout is generous for a loaded machine)
	repo.commit(map[string]string{"flows/acme/hello.md": hi})
	took := waitAnswer(answers[hi], 10*time.Second)
	t.Logf("the commit was live after %v, with --poll %v", took.Round(time.Millisecond), poll)
	repo.commit(map[string]string{"flows/acme/hello.md": helloFlow})
	waitAnswer(answers[helloFlow], 10*time.Second)

	// under load: 16 clients, 20 swaps, no failed request
	var (
		stop          = make(chan struct{})
		wg            sync.WaitGroup
		total, failed atomic.Int64
		mu            sync.Mutex
		failures      []string
		seen          = map[string]int{}
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 10 * time.Second}
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, h.url+"/flows/acme/hello/run", strings.NewReader(`{"name":"Ada"}`))
				req.Header.Set("Authorization", "Bearer "+acmeKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				total.Add(1)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body := string(b)
				mu.Lock()
				seen[body]++
				if resp.StatusCode != 200 || body != answers[helloFlow] && body != answers[hi] {
					failed.Add(1)
					failures = append(failures, fmt.Sprintf("%d %s", resp.StatusCode, body))
				}
				mu.Unlock()
			}
		}()
	}
	current := helloFlow
	for i := 0; i < 20; i++ {
		if current == helloFlow {
			current = hi
		} else {
			current = helloFlow
		}
		commit := repo.commit(map[string]string{"flows/acme/hello.md": current})
		h.waitCommit(commit, 10*time.Second)
		waitAnswer(answers[current], 10*time.Second)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		if len(failures) > 10 {
			failures = failures[:10]
		}
		t.Errorf("%d of %d requests failed across 20 swaps; first: %q", n, total.Load(), failures)
	}
	if seen[answers[hi]] == 0 || seen[answers[helloFlow]] == 0 {
		t.Errorf("answers seen: %v", seen)
	}
	t.Logf("%d requests across 20 swaps: %v", total.Load(), seen)
}

func TestGracefulShutdownUnderLoad(t *testing.T) {
	be := failuresBackend(t)
	slow := `---
flowmarkdown_version: "0.1"
flow: slow
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: ` + be.URL + `/slow
method: POST
`
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":        accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/slow.md": slow,
	})
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "slow", acmeKey)
	baseline := len(be.received()) // the calls of waitDeployed

	type outcome struct {
		status int
		body   string
		retry  string // Retry-After
		err    error
		at     time.Time
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
		done     = make(chan struct{})
	)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}, Timeout: 15 * time.Second}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-done:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, h.url+"/flows/acme/slow/run", strings.NewReader(`{"orderId":"A-1"}`))
				req.Header.Set("Authorization", "Bearer "+acmeKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				o := outcome{err: err}
				if err == nil {
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					o.status, o.body, o.retry, o.err = resp.StatusCode, string(b), resp.Header.Get("Retry-After"), rerr
				}
				o.at = time.Now()
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if errors.Is(o.err, syscall.ECONNREFUSED) {
					return // the listener is closed: the shutdown has ended
				}
				if o.status == http.StatusServiceUnavailable {
					time.Sleep(10 * time.Millisecond) // the drain: not a busy loop
				}
			}
		}()
	}
	// wait until the load is running: 32 calls reached the backend
	deadline := time.Now().Add(10 * time.Second)
	for len(be.received()) < baseline+32 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls reached the backend in 10 s", len(be.received()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	sigterm := time.Now()
	code := h.stop(10 * time.Second)
	exited := time.Since(sigterm)
	// the clients stop on their first refused connection; give stragglers a bound
	go func() { time.Sleep(5 * time.Second); close(done) }()
	wg.Wait()

	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	ok, afterSignal, refused := 0, 0, 0
	var bad []string
	errKinds := map[string]int{}
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			kind := errorKind(o.err)
			if kind == connectionReset && o.at.Before(sigterm) {
				kind += " before SIGTERM"
			}
			errKinds[kind]++
		case o.status == 200 && o.body == `{"ok":true}`:
			ok++
			if o.at.After(sigterm) {
				afterSignal++
			}
		case o.status == 503 && o.body == `{"ok":false,"error":"the host is shutting down"}` && o.retry == "1" && o.at.After(sigterm):
			// a new request during the drain: the listener is open (its
			// /healthz answers), the doors refuse
			refused++
		default:
			bad = append(bad, fmt.Sprintf("%d %s", o.status, o.body))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d answers were neither 200 {\"ok\":true} nor, after SIGTERM, 503 shutting down: %q", len(bad), bad)
	}
	// every request that reached the flow got its answer: none was cut off
	if n := len(be.received()) - baseline; n != ok {
		t.Errorf("%d calls reached the backend but %d callers got a 200 (errors: %v)", n, ok, errKinds)
	}
	if afterSignal == 0 {
		t.Error("no request in flight at SIGTERM was answered after it")
	}
	for kind, n := range errKinds {
		if kind != "connection refused" && kind != "connection closed before the request was read" && kind != connectionReset {
			t.Errorf("%d requests failed with %s", n, kind)
		}
	}
	t.Logf("exit %d after %v; %d answered 200 (%d after SIGTERM), %d 503 shutting down; errors %v", code, exited, ok, afterSignal, refused, errKinds)
}

// TestHealthzAnswersDuringTheDrain: from SIGTERM until the requests in
// flight are answered, the host still takes connections: /healthz answers
// 200 (the process runs, and a liveness probe that failed mid-drain could
// have it killed), /readyz 503 (so that the load balancers take it out),
// and every other request 503 with Retry-After, its correlation ID and
// Connection: close. The request in flight is answered as before, and the
// listener closes when the process exits. The listener was closed at the
// signal: every probe was refused for the whole drain.
func TestHealthzAnswersDuringTheDrain(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(4 * time.Second)) // the drain lasts as long as the /run below
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	type answer struct {
		status int
		body   string
		retry  string // Retry-After
		id     string // X-Correlation-Id
		close  bool   // Connection: close
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}
	ask := func(method, path, key, id string) (answer, error) {
		req, err := http.NewRequest(method, h.url+path, strings.NewReader(`{"orderId":"A-1"}`))
		if err != nil {
			return answer{}, err
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Correlation-ID", id)
		resp, err := client.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(b), resp.Header.Get("Retry-After"), resp.Header.Get("X-Correlation-Id"), resp.Close}, err
	}
	type result struct {
		answer
		err error
	}
	inFlight := make(chan result, 1)
	go func() {
		a, err := ask(http.MethodPost, "/flows/acme/forward-order/run", acmeKey, "trace-in-flight")
		inFlight <- result{a, err}
	}()
	be.waitOn(t, "/ingest", 1, 5*time.Second)

	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// the signal is taken in moments: /readyz turns 503
	deadline := time.Now().Add(2 * time.Second)
	for {
		a, err := ask(http.MethodGet, "/readyz", "", "probe")
		if err != nil {
			t.Fatalf("GET /readyz after SIGTERM, with a request in flight: %v", err)
		}
		if a.status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz 2 s after SIGTERM, with a request in flight: %d %s, want 503", a.status, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const stopping = `{"ok":false,"error":"the host is shutting down"}`
	for _, tc := range []struct {
		method, path, key string
		want              answer
	}{
		{http.MethodGet, "/healthz", "", answer{status: 200, body: `{"ok":true}`}},
		{http.MethodGet, "/readyz", "", answer{status: 503, body: stopping}},
		{http.MethodPost, "/flows/acme/forward-order/run", acmeKey, answer{status: 503, body: stopping, retry: "1", close: true}},
		{http.MethodPost, "/flows/acme/forward-order/enqueue", acmeKey, answer{status: 503, body: stopping, retry: "1", close: true}},
		{http.MethodGet, "/status", h.adminKey, answer{status: 503, body: stopping, retry: "1", close: true}},
		{http.MethodGet, "/api/queues/acme/forward-order/dlq", h.adminKey, answer{status: 503, body: stopping, retry: "1", close: true}},
		{http.MethodGet, "/ui/", "", answer{status: 503, body: stopping, retry: "1", close: true}},
		{http.MethodGet, "/metrics", "", answer{status: 503, body: stopping, retry: "1", close: true}},
	} {
		id := "trace-" + strings.ReplaceAll(strings.Trim(tc.path, "/"), "/", "-")
		got, err := ask(tc.method, tc.path, tc.key, id)
		if err != nil {
			t.Errorf("%s %s during the drain: %v", tc.method, tc.path, err)
			continue
		}
		tc.want.id = id
		if tc.want.status == 200 || tc.path == "/readyz" {
			got.close, got.retry = false, "" // not asked of these
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(answer{})); diff != "" {
			t.Errorf("%s %s during the drain (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}

	if r := <-inFlight; r.err != nil || r.status != http.StatusOK || r.body != `{"ok":true}` || r.id != "trace-in-flight" {
		t.Errorf("the /run in flight at SIGTERM: %+v, want 200 {\"ok\":true} with its correlation ID", r)
	}
	select {
	case <-h.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("nexus serve did not exit once the request in flight was answered")
	}
	if code := h.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	if _, err := ask(http.MethodGet, "/healthz", "", "after"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("GET /healthz after the exit: %v, want the connection refused", err)
	}
	if evs := h.events("run_completed"); len(evs) != 1 || evs[0]["correlation_id"] != "trace-in-flight" || evs[0]["status"] != float64(200) {
		t.Errorf("run_completed lines %v, want the one of the request in flight, 200", evs)
	}
}

// TestHealthzAnswersWhileADeliveryFinishes: after SIGTERM the process
// waits for the queue delivery in flight as well as for the requests, and
// /healthz is answered for that wait too: the listener closes only when
// the delivery is done.
func TestHealthzAnswersWhileADeliveryFinishes(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	release := be.holdFirst("A-1")
	defer release()
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	be.waitOn(t, "/ingest", 1, 5*time.Second) // the delivery is held at the backend
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// the signal is taken in moments: /readyz turns 503, /healthz stays 200
	deadline := time.Now().Add(5 * time.Second)
	for h.do(http.MethodGet, "/readyz", "", "", "").status != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("GET /readyz still answers other than 503 5 s after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // well past the moment the requests in flight (none) were done
	if r := h.do(http.MethodGet, "/healthz", "", "", ""); r.status != http.StatusOK {
		t.Errorf("GET /healthz after SIGTERM with a delivery in flight: %d %s, want 200", r.status, r.body)
	}
	select {
	case <-h.exited:
		t.Fatal("nexus serve exited with a delivery in flight")
	default:
	}
	release()
	select {
	case <-h.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("nexus serve did not exit once the delivery in flight was answered")
	}
	if code := h.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	if evs := h.events("queue_processed"); len(evs) != 1 {
		t.Errorf("queue_processed lines %v, want the delivery in flight at SIGTERM", evs)
	}
}

// connectionReset is errorKind's kind of a connection reset.
const connectionReset = "connection reset"

// errorKind classifies a client error of the shutdown test.
func errorKind(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case strings.Contains(err.Error(), "server closed idle connection"),
		strings.Contains(err.Error(), "readLoopPeekFailLocked"),
		errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "unexpected EOF"):
		// a kept-alive connection closed while idle, before the server
		// read the request written on it (the backend count proves the
		// flow never saw it)
		return "connection closed before the request was read"
	case errors.Is(err, syscall.ECONNRESET):
		// a connection in the listener's backlog as it closed at the
		// exit (or one the drain server had not answered): the count of
		// the backend's calls proves no request that reached the flow
		// went unanswered
		return connectionReset
	default:
		return err.Error()
	}
}

// hubSignature is GitHub's X-Hub-Signature-256 of body.
func hubSignature(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func TestSecretEndToEnd(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "whsec_old_secret_for_tests_01", "whsec_new_secret_for_tests_02"
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir, args: []string{"--secret", oldSecret + "," + newSecret}})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)

	const body = `{"name":"Ada"}`
	signed := func(secret string, ts int64) response {
		sts := strconv.FormatInt(ts, 10)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(sts + "." + body))
		return h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", body,
			"X-Nexus-Timestamp", sts, "X-Nexus-Signature", "v1="+hex.EncodeToString(mac.Sum(nil)))
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if r := signed(newSecret, time.Now().Unix()); r.status == 200 || time.Now().After(deadline) {
			break // the live set of the commit is loaded
		}
	}
	if r := h.run("acme", "hello", acmeKey, body); r.status != 401 || r.header.Get("X-Correlation-Id") == "" {
		t.Errorf("unsigned: %d %s, want 401", r.status, r.body)
	}
	for _, s := range []string{oldSecret, newSecret} {
		if r := signed(s, time.Now().Unix()); r.status != 200 || r.body != `{"greeting":"hello, Ada"}` {
			t.Errorf("signed with %s: %d %s", s, r.status, r.body)
		}
	}
	if r := signed("whsec_not_configured", time.Now().Unix()); r.status != 401 {
		t.Errorf("signed with an unknown secret: %d %s", r.status, r.body)
	}
	if r := signed(newSecret, time.Now().Unix()-400); r.status != 401 {
		t.Errorf("signed 400 s ago: %d %s", r.status, r.body)
	}

	a := rawExchange(t, h.url, "POST /flows/acme/hello/run HTTP/1.1\r\nHost: nexus\r\nContent-Length: 1000000000\r\n\r\n")
	if a.resp.StatusCode != 401 || a.body != `{"ok":false,"error":"missing or unknown API key"}` {
		t.Errorf("unauthenticated, 1 GB announced: %s %s", a.resp.Status, a.body)
	}

	// the webhook wants GitHub's signature
	const payload = `{"ref":"refs/heads/main"}`
	if r := h.do(http.MethodPost, "/hooks/git", "", "application/json", payload); r.status != 401 {
		t.Errorf("unsigned hook: %d %s", r.status, r.body)
	}
	if r := h.do(http.MethodPost, "/hooks/git", "", "application/json", payload, "X-Hub-Signature-256", hubSignature("whsec_wrong", payload)); r.status != 401 {
		t.Errorf("hook with a wrong signature: %d %s", r.status, r.body)
	}
	if r := h.do(http.MethodPost, "/hooks/git", "", "application/json", payload, "X-Hub-Signature-256", hubSignature(newSecret, payload)); r.status != 202 || r.body != `{"sync":"started"}` {
		t.Errorf("signed hook: %d %s", r.status, r.body)
	}
}

func TestGitHookWithLongPoll(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir, args: []string{"--poll", "60s"}})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)

	commit := repo.commit(map[string]string{"flows/acme/hello.md": strings.Replace(helloFlow, "hello, ", "hi, ", 1)})
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.body != `{"greeting":"hello, Ada"}` {
		t.Fatalf("before the hook, with --poll 60s: %d %s", r.status, r.body)
	}
	start := time.Now()
	r := h.do(http.MethodPost, "/hooks/git", "", "application/json", `{"ref":"refs/heads/main"}`)
	if r.status != 202 || r.body != `{"sync":"started"}` || r.header.Get("X-Correlation-Id") == "" {
		t.Fatalf("hook: %d %s", r.status, r.body)
	}
	// live well before the next poll, 60 s after the start: the hook made
	// the sync. The bound is generous for a loaded machine; the latency is
	// logged.
	const bound = 20 * time.Second
	h.waitCommit(commit, bound)
	waitRun(t, h, "acme", "hello", acmeKey, `{"name":"Ada"}`, `{"greeting":"hi, Ada"}`, max(time.Until(start.Add(bound)), time.Second))
	t.Logf("live %v after the hook", time.Since(start).Round(time.Millisecond))
}

// launch starts nexus with exactly args, in dir, with the environment of
// the test minus its NEXUS_ variables plus env, and waits until it listens.
// Its stdout is returned; the process is killed when the test ends.
func launch(t *testing.T, dir string, args, env []string, adminKey string) (*hostProc, *jsonlogtest.Buffer) {
	t.Helper()
	h := &hostProc{t: t, adminKey: adminKey, exited: make(chan struct{})}
	h.cmd = exec.Command(nexusBinary(), args...)
	h.cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEXUS_") && !strings.HasPrefix(kv, "GOGC=") {
			h.cmd.Env = append(h.cmd.Env, kv) // the test's env decides these
		}
	}
	h.cmd.Env = append(h.cmd.Env, env...)
	stdout := &jsonlogtest.Buffer{}
	h.cmd.Stdout = stdout
	h.watch(args, nil, func() string { return "\nstdout:\n" + stdout.String() })
	return h, stdout
}

// waitBanner waits up to 10 s for the development mode's banner, which
// ends with "Ctrl-C stops", on stdout.
func waitBanner(t *testing.T, stdout *jsonlogtest.Buffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "Ctrl-C stops") {
		if time.Now().After(deadline) {
			t.Fatalf("no banner within 10 s; stdout:\n%s", stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shellWords splits a shell command line: words separated by blanks,
// single and double quotes, backslash-newline continuations.
func shellWords(s string) ([]string, error) {
	s = strings.ReplaceAll(s, "\\\n", " ")
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unclosed '")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				} else if s[i] == '$' {
					return nil, errors.New("a variable in double quotes")
				}
				cur.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New(`unclosed "`)
			}
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestDevMode(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	h, stdout := launch(t, cwd, []string{"serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", filepath.Join(state, "registry.db"), "--dev-flows", filepath.Join(repoRoot, "flows-example")}, nil, "")

	// the banner follows the start
	waitBanner(t, stdout)
	banner := stdout.String()
	key := regexp.MustCompile(`example key \(tenant acme\):\s+(\S+)`).FindStringSubmatch(banner)
	admin := regexp.MustCompile(`admin key \(/status, UI\):\s+(\S+)`).FindStringSubmatch(banner)
	ui := regexp.MustCompile(`management UI:\s+http://localhost:(\d+)(/ui/) `).FindStringSubmatch(banner)
	curl := regexp.MustCompile(`(?m)^\s*(curl (?:.*\\\n)*.*)$`).FindStringSubmatch(banner)
	if key == nil || admin == nil || curl == nil || ui == nil {
		t.Fatalf("banner without an example key, an admin key, the UI's address or a curl line:\n%s", banner)
	}
	words, err := shellWords(curl[1])
	if err != nil {
		t.Fatalf("the curl line %q: %v", curl[1], err)
	}
	method, url, data := "GET", "", ""
	header := http.Header{}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-X" && i+1 < len(words):
			method, i = words[i+1], i+1
		case w == "-H" && i+1 < len(words):
			name, value, _ := strings.Cut(words[i+1], ":")
			header.Add(name, strings.TrimSpace(value))
			i++
		case (w == "-d" || w == "--data") && i+1 < len(words):
			data, i = words[i+1], i+1
			if method == "GET" {
				method = "POST"
			}
		case strings.HasPrefix(w, "http://"):
			url = w
		default:
			t.Fatalf("the curl line has %q, which this test does not know: %q", w, curl[1])
		}
	}
	if header.Get("Authorization") != "Bearer "+key[1] {
		t.Errorf("the curl line sends %q, the banner's key is %q", header.Get("Authorization"), key[1])
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.url, "http://"))
	if !strings.Contains(url, ":"+port+"/") {
		t.Errorf("the curl line's URL %s does not name the port listened on, %s", url, port)
	}

	// the banner is printed once the first sync has published: its
	// example answers at once (before, the doors answer 503: starting)
	req, err := http.NewRequest(method, url, strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	status, body := resp.StatusCode, string(b)
	if status != 200 || !strings.HasPrefix(body, `{"greeting":"hello, Ada",`) {
		t.Errorf("the banner's request: %d %s", status, body)
	}

	// the printed admin key opens /status
	h.adminKey = admin[1]
	if r := h.do(http.MethodGet, "/status", admin[1], "", ""); r.status != 200 {
		t.Errorf("/status with the printed admin key: %d %s", r.status, r.body)
	}
	// and the printed UI address, on the port listened on
	if ui[1] != port {
		t.Errorf("the banner's UI address names port %s, the host listens on %s", ui[1], port)
	}
	if r := h.do(http.MethodGet, ui[2], admin[1], "", ""); r.status != 200 || !strings.Contains(r.body, `data-flow="acme/hello"`) {
		t.Errorf("%s with the printed admin key: %d %.300s", ui[2], r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(cwd, ".nexus-dev")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("with --db, the development mode wrote .nexus-dev into the working folder (%v)", err)
	}
	// the state directory it made is the owner's alone, as nexus serve's
	// is, and so no warning about it
	if info, err := os.Stat(state); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("the development mode's state directory: %v, %v; want mode 0700", info, err)
	}
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if evs := h.events("state_directory_open"); len(evs) != 0 {
		t.Errorf("the development mode warned of the state directory it made: %v", evs)
	}
}

func TestServeConfigFromTheEnvironment(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	commit := repo.git("rev-parse", "HEAD")
	env := []string{
		"NEXUS_LISTEN=127.0.0.1:0",
		"NEXUS_DB=" + filepath.Join(t.TempDir(), "state", "registry.db"),
		"NEXUS_REPO=" + repo.dir,
		"NEXUS_POLL=200ms",
		"NEXUS_ADMIN_KEY=env-admin-key",
		"NEXUS_MAX_BODY_BYTES=100",
		"NEXUS_LOG_FORMAT=json",
	}
	body := func(n int) string { return `{"name":"` + strings.Repeat("x", n-11) + `"}` }

	t.Run("from the environment", func(t *testing.T) {
		h, _ := launch(t, t.TempDir(), []string{"serve"}, env, "env-admin-key")
		if !strings.HasPrefix(h.url, "http://127.0.0.1:") {
			t.Errorf("listening on %s, want NEXUS_LISTEN's 127.0.0.1", h.url)
		}
		h.waitCommit(commit, 10*time.Second) // NEXUS_REPO and NEXUS_ADMIN_KEY
		waitRun(t, h, "acme", "hello", acmeKey, `{"name":"Ada"}`, `{"greeting":"hello, Ada"}`, 5*time.Second)
		if r := h.run("acme", "hello", acmeKey, body(100)); r.status != 200 {
			t.Errorf("100 bytes: %d %s", r.status, r.body)
		}
		if r := h.run("acme", "hello", acmeKey, body(101)); r.status != 413 || r.body != `{"ok":false,"error":"body exceeds 100 bytes"}` {
			t.Errorf("101 bytes under NEXUS_MAX_BODY_BYTES=100: %d %s", r.status, r.body)
		}
	})

	t.Run("a flag wins over its variable", func(t *testing.T) {
		env := append(append([]string(nil), env...), "NEXUS_LISTEN=256.0.0.1:1", "NEXUS_LOG_FORMAT=text", "NEXUS_SECRET=env-secret")
		h, _ := launch(t, t.TempDir(), []string{"serve", "--listen", "127.0.0.1:0", "--admin-key", "flag-admin-key",
			"--max-body-bytes", "200", "--log-format", "json", "--secret", "flag-secret"}, env, "flag-admin-key")
		h.waitCommit(commit, 10*time.Second)
		const ada = `{"name":"Ada"}`
		if r := h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", ada, docQueueSignature("env-secret", ada)...); r.status != 401 {
			t.Errorf("a run signed with NEXUS_SECRET's secret when --secret is given: %d %s", r.status, r.body)
		}
		if r := h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", ada, docQueueSignature("flag-secret", ada)...); r.status != 200 || r.body != `{"greeting":"hello, Ada"}` {
			t.Errorf("a run signed with --secret's secret: %d %s", r.status, r.body)
		}
		if r := h.do(http.MethodGet, "/status", "env-admin-key", "", ""); r.status != 401 {
			t.Errorf("/status with NEXUS_ADMIN_KEY's key when --admin-key is given: %d", r.status)
		}
		signed := func(b string) response {
			return h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", b, docQueueSignature("flag-secret", b)...)
		}
		if r := signed(body(200)); r.status != 200 {
			t.Errorf("200 bytes under --max-body-bytes 200: %d %s", r.status, r.body)
		}
		if r := signed(body(201)); r.status != 413 || r.body != `{"ok":false,"error":"body exceeds 200 bytes"}` {
			t.Errorf("201 bytes: %d %s", r.status, r.body)
		}
	})
}

// nexus serve sets the collector's target to 200 unless GOGC is set; the
// runtime's own gauge on /metrics says which is in force.
func TestServeGCPercent(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"by default", nil, "go_gc_gogc_percent 200\n"},
		{"GOGC wins", []string{"GOGC=100"}, "go_gc_gogc_percent 100\n"},
		{"GOGC=50 wins", []string{"GOGC=50"}, "go_gc_gogc_percent 50\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := launch(t, t.TempDir(), []string{"serve", "--listen", "127.0.0.1:0", "--repo", repo.dir,
				"--db", filepath.Join(t.TempDir(), "state", "registry.db")}, tc.env, "")
			r := h.do(http.MethodGet, "/metrics", "", "", "")
			if r.status != 200 || !strings.Contains(r.body, tc.want) {
				i := strings.Index(r.body, "go_gc_gogc_percent ")
				t.Errorf("/metrics: %d, want %q, have %.40q", r.status, tc.want, r.body[max(i, 0):])
			}
		})
	}
}

// A host that follows a repo, on a new state directory, is not ready
// and its doors answer 503 with Retry-After: 1 until the repo's first
// sync publishes (here: until the repo exists); it was ready at once, and
// every key unknown (401) until then.
func TestServeReadyAfterTheFirstPublication(t *testing.T) {
	t.Parallel()
	later := filepath.Join(t.TempDir(), "config-repo")
	h, _ := launch(t, t.TempDir(), []string{"serve", "--listen", "127.0.0.1:0", "--repo", later, "--poll", "200ms",
		"--db", filepath.Join(t.TempDir(), "state", "registry.db")}, []string{"NEXUS_LOG_FORMAT=json"}, "")
	const why = `{"ok":false,"error":"the host is starting: the repo's first sync has not published yet"}`
	if r := h.do(http.MethodGet, "/readyz", "", "", ""); r.status != 503 || r.body != why {
		t.Errorf("/readyz before the repo exists: %d %s, want 503 %s", r.status, r.body, why)
	}
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != 503 || r.body != why || r.header.Get("Retry-After") != "1" {
		t.Errorf("/run before the repo exists: %d %s (Retry-After %q), want 503 %s", r.status, r.body, r.header.Get("Retry-After"), why)
	}
	repo := helloRepo(t)
	if err := os.Rename(repo.dir, later); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := h.do(http.MethodGet, "/readyz", "", "", "")
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 30 s after the repo was made: %d %s", r.status, r.body)
		}
	}
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != 200 || r.body != `{"greeting":"hello, Ada"}` {
		t.Errorf("/run once ready: %d %s", r.status, r.body)
	}
}

// NEXUS_ADMIN_KEY or NEXUS_SECRET set and empty (a secret file found
// empty) counts as not set, as every empty variable does, and is said at
// the start: the UI closed, the doors unsigned.
func TestServeWarnsOfAnEmptyKeyVariable(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	for _, tc := range []struct {
		env  []string
		want []string // the settings warned of
	}{
		{[]string{"NEXUS_ADMIN_KEY=", "NEXUS_SECRET="}, []string{"NEXUS_ADMIN_KEY", "NEXUS_SECRET"}},
		{[]string{"NEXUS_SECRET="}, []string{"NEXUS_SECRET"}},
		{nil, nil},
	} {
		h, _ := launch(t, t.TempDir(), []string{"serve", "--listen", "127.0.0.1:0", "--repo", repo.dir,
			"--db", filepath.Join(t.TempDir(), "state", "registry.db")}, tc.env, "")
		waitGate(t, h, "acme", "hello", acmeKey)
		var got []string
		for _, ev := range h.events("empty_setting") {
			got = append(got, fmt.Sprint(ev["setting"]))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("env %q: empty_setting lines for %q, want %q", tc.env, got, tc.want)
		}
		if r := h.do(http.MethodGet, "/status", "", "", ""); r.status != http.StatusNotFound {
			t.Errorf("env %q: /status answered %d, want 404 (no admin key: closed)", tc.env, r.status)
		}
		if r := h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", `{}`); r.status != 200 {
			t.Errorf("env %q: an unsigned run answered %d, want 200 (no secret)", tc.env, r.status)
		}
	}
}

// A short admin key is served, with a warning at the start; a long one,
// such as nexus key generate prints, without.
func TestServeWarnsOfAShortAdminKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"admin-test-key", 1},
		{"nxk_9db1714c5dab63aa3821642078dd84ff94a5662286504f45002269bb4a2e0c1e", 0},
	} {
		h := startHost(t, hostOptions{admin: tc.key})
		evs := h.events("weak_admin_key")
		if len(evs) != tc.want {
			t.Errorf("--admin-key of %d characters: %d weak_admin_key lines, want %d: %v", len(tc.key), len(evs), tc.want, evs)
		}
		if tc.want > 0 && len(evs) > 0 && !strings.Contains(fmt.Sprint(evs[0]["msg"]), "14 characters long") {
			t.Errorf("the warning does not say how long the key is: %v", evs[0])
		}
		if r := h.do(http.MethodGet, "/status", tc.key, "", ""); r.status != 200 {
			t.Errorf("/status with the key: %d", r.status)
		}
	}
}

// The password of an https repo URL (basic auth) is in no log line, nor
// its user name (which may be a token: the started line shows it as
// redacted), nor in /status, whose sync_error says the repo is unreachable.
func TestServeLogsNoRepoPassword(t *testing.T) {
	t.Parallel()
	h := startHost(t, hostOptions{repo: "https://deploy:ghp_SECRETTOKEN123@127.0.0.1:1/config.git"})
	waitEvents(t, h, "sync_unreachable", 1, nil, 10*time.Second)
	started := h.events("started")
	if len(started) != 1 || started[0]["repo"] != "https://redacted@127.0.0.1:1/config.git" {
		t.Errorf("the started line's repo: %v", started)
	}
	for _, line := range h.logLines() {
		if strings.Contains(line, "ghp_SECRETTOKEN123") {
			t.Errorf("a log line holds the password:\n%s", line)
		}
	}
	// /status says the sync keeps failing, without the password either
	r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
	var st struct {
		SyncError *struct {
			Failures int    `json:"failures"`
			Error    string `json:"error"`
		} `json:"sync_error"`
	}
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.SyncError == nil || st.SyncError.Failures < 1 ||
		!strings.Contains(st.SyncError.Error, "127.0.0.1:1") || strings.Contains(r.body, "ghp_SECRETTOKEN123") {
		t.Errorf("/status with an unreachable repo: %d %s, want its sync_error, without the password", r.status, r.body)
	}
}

// While the branch's head is a refused commit, the sync's last success
// stays where it was (an alert on its age fires), and the refusal counts
// once.
func TestSyncMetricsOnARefusedHead(t *testing.T) {
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	repo.commit(map[string]string{"flows/acme/hello.md": "---\nflowmarkdown_version: \"0.1\"\nflow: hello\ntenant: acme\nqueue_max_attempts: 0\n---\n"})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)
	scrape := func() (success, failures string) {
		r := h.do(http.MethodGet, "/metrics", "", "", "")
		s := regexp.MustCompile(`(?m)^nexus_sync_last_success_timestamp_seconds (\S+)$`).FindStringSubmatch(r.body)
		f := regexp.MustCompile(`(?m)^nexus_sync_failures_total (\S+)$`).FindStringSubmatch(r.body)
		if s == nil || f == nil {
			t.Fatalf("no sync metrics in /metrics:\n%s", r.body)
		}
		return s[1], f[1]
	}
	s1, f1 := scrape()
	time.Sleep(time.Second) // five polls of 200 ms on the refused head
	s2, f2 := scrape()
	if s1 != s2 || f1 != "1" || f2 != "1" {
		t.Errorf("on a refused head: last success %s then %s, failures %s then %s; want it unmoved and one failure", s1, s2, f1, f2)
	}

	// restarted on the refused head, the last success is the registry's
	// (what /status says), not 0, which an alert on its age reads as
	// decades without a sync
	h.stop(10 * time.Second)
	h = startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)
	s3, _ := scrape()
	var st struct {
		SyncedAt time.Time `json:"synced_at"`
	}
	if r := h.do(http.MethodGet, "/status", h.adminKey, "", ""); json.Unmarshal([]byte(r.body), &st) != nil || st.SyncedAt.IsZero() {
		t.Fatalf("/status after the restart: %d %s", r.status, r.body)
	}
	last, err := strconv.ParseFloat(s3, 64)
	if err != nil || !time.Unix(0, int64(last*1e9)).Truncate(time.Second).Equal(st.SyncedAt.Truncate(time.Second)) {
		t.Errorf("after a restart on the refused head, the last success is %s; want /status's synced_at %v", s3, st.SyncedAt)
	}
}

func TestServeBadValues(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	base := []string{"serve", "--listen", "127.0.0.1:0", "--db", db}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string // in the error line
	}{
		{"--poll abc", []string{"--poll", "abc"}, nil, "abc"},
		{"NEXUS_POLL=abc", nil, []string{"NEXUS_POLL=abc"}, "abc"},
		{"--log-format xml", []string{"--log-format", "xml"}, nil, "xml"},
		{"NEXUS_LOG_FORMAT=xml", nil, []string{"NEXUS_LOG_FORMAT=xml"}, "xml"},
		{"--max-body-bytes abc", []string{"--max-body-bytes", "abc"}, nil, "abc"},
		{"NEXUS_MAX_BODY_BYTES=abc", nil, []string{"NEXUS_MAX_BODY_BYTES=abc"}, "abc"},
		{"--max-body-bytes 0", []string{"--max-body-bytes", "0"}, nil, "max-body-bytes"},
		{"--poll 0s", []string{"--poll", "0s"}, nil, "poll"},
		{"--shutdown-grace 0s", []string{"--shutdown-grace", "0s"}, nil, "--shutdown-grace must be at least 1s"},
		{"NEXUS_SHUTDOWN_GRACE=soon", nil, []string{"NEXUS_SHUTDOWN_GRACE=soon"}, `NEXUS_SHUTDOWN_GRACE="soon" is not a duration`},
		{"an unknown flag", []string{"--pol", "10s"}, nil, "pol"},
		{"an argument", []string{"extra"}, nil, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := nexusCmd(t.TempDir(), append(append([]string(nil), base...), tc.args...)...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "NEXUS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := startChild(cmd); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
			err := cmd.Wait()
			timer.Stop()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit %v, want 2; stderr:\n%s", err, stderr.String())
			}
			out := stderr.String()
			if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic:") {
				t.Fatalf("a stack trace:\n%s", out)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "nexus serve: ") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("first line %q, want a one-line error naming %q", lines[0], tc.want)
			}
			// the error is one line, and nothing follows it (the usage
			// repeated at every restart of a misconfigured host flooded its log)
			if len(lines) > 1 {
				t.Errorf("the error runs over more than one line:\n%s", out)
			}
		})
	}
}

// TestHTTPFramingEndToEnd: malformed framing is refused by the server
// before any flow runs, each refusal in the platform's JSON with an
// X-Correlation-Id and Connection: close, the ones net/http writes itself
// before any handler (400, 431, 501) too: those were its plain text
// ("431 Request Header Fields Too Large") without a correlation ID.
func TestHTTPFramingEndToEnd(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)

	const line = "POST /flows/acme/hello/run HTTP/1.1\r\n"
	auth := "Authorization: Bearer " + acmeKey + "\r\n"
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"space before the colon", line + "Host: nexus\r\n" + auth + "Content-Length : 2\r\n\r\n{}", 400},
		{"two different Content-Lengths", line + "Host: nexus\r\n" + auth + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
		{"Content-Length -1", line + "Host: nexus\r\n" + auth + "Content-Length: -1\r\n\r\n{}", 400},
		{"Content-Length +2", line + "Host: nexus\r\n" + auth + "Content-Length: +2\r\n\r\n{}", 400},
		{"no Host", line + auth + "Content-Length: 2\r\n\r\n{}", 400},
		{"bare LF in a chunk size", line + "Host: nexus\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", 400},
		{"Transfer-Encoding gzip", line + "Host: nexus\r\n" + auth + "Transfer-Encoding: gzip\r\n\r\n", 501},
		{"headers over 64 KiB", line + "Host: nexus\r\n" + auth + "X-Pad: " + strings.Repeat("a", 70<<10) + "\r\nContent-Length: 2\r\n\r\n{}", 431},
		{"an encoded slash in a name", "POST /flows/a%2Fb/hello/run HTTP/1.1\r\nHost: nexus\r\nConnection: close\r\n" + auth + "Content-Length: 2\r\n\r\n{}", 404},
		{"GET on the run route", "GET /flows/acme/hello/run HTTP/1.1\r\nHost: nexus\r\nConnection: close\r\n" + auth + "\r\n", 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := rawExchange(t, h.url, tc.request)
			if a.resp.StatusCode != tc.status {
				t.Errorf("%s %q, want %d", a.resp.Status, a.body, tc.status)
			}
			type answer struct {
				JSON, Correlated, Refusal, Close bool
			}
			got := answer{
				JSON:       a.resp.Header.Get("Content-Type") == "application/json",
				Correlated: a.resp.Header.Get("X-Correlation-Id") != "",
				Refusal:    strings.HasPrefix(a.body, `{"ok":false,"error":"`) && strings.HasSuffix(a.body, `"}`),
				Close:      a.resp.Close && a.closed,
			}
			if diff := cmp.Diff(answer{true, true, true, true}, got); diff != "" {
				t.Errorf("%s %q %v (-want +got):\n%s", a.resp.Status, a.body, a.resp.Header, diff)
			}
		})
	}
	if n := len(h.events("run_completed")); n > 1 {
		t.Errorf("%d flow runs, want only the one of waitDeployed", n)
	}
}

// TestRestartServesTheStoredFlowsWhileTheRepoIsUnreachable: on start the
// host serves the live set stored in the registry at once, before its first
// fetch (server.md): restarted on the same state directory with its repo
// unreachable, it answers /run with the flows last synced and /status with
// their commit, and goes on doing so after its fetch fails.
func TestRestartServesTheStoredFlowsWhileTheRepoIsUnreachable(t *testing.T) {
	t.Parallel()
	h, repo := queueHost(t, map[string]string{"flows/acme/hello.md": helloFlow}, hostOptions{}, "hello")
	head := repo.git("rev-parse", "HEAD")
	if code := h.stop(10 * time.Second); code != 0 {
		t.Fatalf("the first host exited %d", code)
	}

	h = startHost(t, hostOptions{db: h.db, repo: "https://127.0.0.1:1/config.git"})
	check := func(when string) {
		t.Helper()
		if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != http.StatusOK || r.body != `{"greeting":"hello, Ada"}` {
			t.Errorf("%s: /run answered %d %s, want the stored flow's 200", when, r.status, r.body)
		}
		r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
		var st struct {
			Commit string `json:"commit"`
		}
		if json.Unmarshal([]byte(r.body), &st); r.status != http.StatusOK || st.Commit != head {
			t.Errorf("%s: /status %d %s, want commit %s", when, r.status, r.body, head)
		}
	}
	check("as soon as the host listens")
	waitEvents(t, h, "sync_unreachable", 1, nil, 10*time.Second)
	check("after the fetch failed")
}

// TestSyncFailedLogsEveryError: server.md has a refused commit "report
// the failed commit and its errors" through the log event sync_failed too:
// its line lists every error, as /status does (it once held the first).
func TestSyncFailedLogsEveryError(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	broken := func(name string) string {
		return "---\nflowmarkdown_version: \"0.1\"\nflow: " + name + "\ntenant: acme\n---\n\n## Step: a\nbogus_key_" + name + ": 1\n"
	}
	repo.commit(map[string]string{
		"flows/acme/one.md": broken("one"),
		"flows/acme/two.md": broken("two"),
	})
	ev := waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)[0]
	line, _ := json.Marshal(ev)
	for _, file := range []string{"flows/acme/one.md", "flows/acme/two.md"} {
		if !strings.Contains(string(line), file) {
			t.Errorf("the sync_failed line does not report the error of %s:\n%s", file, line)
		}
	}
	// /status has both, so the errors exist
	r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
	if !strings.Contains(r.body, "flows/acme/one.md") || !strings.Contains(r.body, "flows/acme/two.md") {
		t.Fatalf("/status does not list both errors: %s", r.body)
	}
}

// TestOptionsStarEchoesCorrelationID: "every answer echoes" the
// correlation ID; OPTIONS * reaches the router too, instead of net/http's
// silent 200.
func TestOptionsStarEchoesCorrelationID(t *testing.T) {
	t.Parallel()
	h := startHost(t, hostOptions{})
	a := rawExchange(t, h.url, "OPTIONS * HTTP/1.1\r\nHost: nexus\r\nX-Correlation-ID: trace-options\r\nConnection: close\r\n\r\n")
	if got := a.resp.Header.Get("X-Correlation-Id"); got != "trace-options" {
		t.Errorf("OPTIONS *: %d, X-Correlation-Id %q, want the request's trace-options", a.resp.StatusCode, got)
	}
	// the router's own answer to a method it does not serve, for comparison
	r := h.do(http.MethodOptions, "/flows/acme/hello/run", "", "", "", "X-Correlation-ID", "trace-options")
	if r.header.Get("X-Correlation-Id") != "trace-options" {
		t.Fatalf("OPTIONS on a door: %d %v", r.status, r.header)
	}
}

// TestDevRepoIsTheOwnersAlone: the state directory is its owner's alone
// (docs/decisions.md), the development mode's repo in it too: its folders
// 0700 and its files 0600 (they were 0755 and 0644).
func TestDevRepoIsTheOwnersAlone(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	_, stdout := launch(t, cwd, []string{"serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", filepath.Join(state, "registry.db"), "--dev-flows", filepath.Join(repoRoot, "flows-example")}, nil, "")
	waitBanner(t, stdout)
	for _, rel := range []string{"dev-repo", "dev-repo/flows", "dev-repo/access.yaml", "dev-repo/flows/acme/hello.md"} {
		info, err := os.Stat(filepath.Join(state, rel))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s in the state directory has mode %#o, want %#o", rel, got, want)
		}
	}
}

// TestLogFormatOnATerminal: "--log-format | NEXUS_LOG_FORMAT | json (text
// for a terminal)": with neither set and a terminal as stderr, nexus serve
// logs text; with the variable set, what it says (it logged JSON to a
// terminal too). The variable set and empty counts as not set, as every
// setting's does (it logged JSON to a terminal).
func TestLogFormatOnATerminal(t *testing.T) {
	for _, format := range []string{"", "json", setEmpty} {
		first := firstLineOnATerminal(t, format)
		if json := strings.HasPrefix(first, "{"); json != (format == "json") {
			t.Errorf("NEXUS_LOG_FORMAT=%q, a terminal as stderr: the first line is %s", format, strings.TrimSpace(first))
		}
	}
}

// setEmpty, as firstLineOnATerminal's format, sets NEXUS_LOG_FORMAT to "".
const setEmpty = "(set and empty)"

// firstLineOnATerminal starts nexus serve with a pseudo-terminal as its
// stderr (NEXUS_LOG_FORMAT=format unless "") and returns its first line.
func firstLineOnATerminal(t *testing.T, format string) string {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		missingTool(t, "TestLogFormatOnATerminal", fmt.Sprintf("no pseudo-terminal: %v", err))
		return ""
	}
	defer master.Close()
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the terminal: %v", err)
	}
	cmd := exec.Command(nexusBinary(), "serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "state", "registry.db"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEXUS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	switch format {
	case "":
	case setEmpty:
		cmd.Env = append(cmd.Env, "NEXUS_LOG_FORMAT=")
	default:
		cmd.Env = append(cmd.Env, "NEXUS_LOG_FORMAT="+format)
	}
	cmd.Stderr = slave
	if err := startChild(cmd); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(master).ReadString('\n')
		lines <- l
	}()
	var first string
	select {
	case first = <-lines:
	case <-time.After(10 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	if first == "" {
		t.Fatal("no log line on the terminal within 10 s")
	}
	return first
}

// TestDevBannerKeepsAGivenAdminKey: the development mode prints the admin
// key it generates; one the operator gave (NEXUS_ADMIN_KEY, perhaps the
// production key exported in the shell) is a secret it does not print,
// as the usage does not. The banner printed it on stdout.
func TestDevBannerKeepsAGivenAdminKey(t *testing.T) {
	t.Parallel()
	const secret = "given-admin-key-5c1e0f7a9b2d4e6f8a0c"
	cwd := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	_, stdout := launch(t, cwd, []string{"serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", filepath.Join(state, "registry.db"), "--dev-flows", filepath.Join(repoRoot, "flows-example")}, []string{"NEXUS_ADMIN_KEY=" + secret}, secret)
	waitBanner(t, stdout)
	banner := stdout.String()
	if strings.Contains(banner, secret) || !strings.Contains(banner, "admin key (/status, UI):  the one given (--admin-key or NEXUS_ADMIN_KEY; not shown)") {
		t.Errorf("the banner shows the given admin key, or does not say it is not shown:\n%s", banner)
	}
}

// TestDevModeRefusesForeignHosts: the development mode listens on the
// loopback only so that nobody else can call the example flows with the
// example key the README publishes, or fill the disk through /enqueue
// (docs/decisions.md, "Development mode"). A web page the developer opens
// reaches the loopback all the same by DNS rebinding: its own name
// (rebind.attacker.example) resolves to 127.0.0.1, the browser then treats
// the host as the page's own origin, and fetch() may send any header,
// Authorization with the published key included. The only trace of it the
// host sees is the Host header, which names the attacker's domain; a host
// on the loopback must refuse a Host that is not a loopback name
// (localhost, 127.0.0.1, [::1]), as the dev servers of webpack, Vite and
// Jupyter do. It served it; now it answers 421.
func TestDevModeRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	h, stdout := launch(t, cwd, []string{"serve", "--dev", "--listen", "127.0.0.1:0",
		"--db", filepath.Join(state, "registry.db"), "--dev-flows", filepath.Join(repoRoot, "flows-example")}, nil, "")
	waitBanner(t, stdout)
	const exampleKey = "nxk_example_acme_5f2c9d0e7b1a4c3d8e6f" // README.md
	port := h.url[strings.LastIndexByte(h.url, ':')+1:]

	send := func(host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, h.url+"/flows/acme/hello/run", strings.NewReader(`{"name":"Ada"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+exampleKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// the developer's own requests still answer
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port} {
		if status, body := send(host); status != http.StatusOK {
			t.Errorf("Host %s: %d %s, want 200", host, status, body)
		}
	}
	// a rebound name does not
	for _, host := range []string{"rebind.attacker.example:" + port, "7f000001.attacker.example:" + port} {
		if status, body := send(host); status != http.StatusMisdirectedRequest || !strings.Contains(body, "is not this host") {
			t.Errorf("Host %s (a DNS-rebinding page): %d %s; want 421, the example flow not run for a foreign origin", host, status, body)
		}
	}
}

// TestOversizedWebhookAnsweredAtOnce: with --secret, a webhook whose
// Content-Length is over its 25 MiB ceiling is answered 413 at once, the
// connection closed, though not a byte of the body was sent; it waited
// for the body (the server's read timeout) to read 25 MiB of it first.
func TestOversizedWebhookAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	const secret = "whsec_secret_for_tests_03"
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir, args: []string{"--secret", secret}})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	a := rawExchange(t, h.url, "POST /hooks/git HTTP/1.1\r\nHost: nexus\r\nContent-Type: application/json\r\n"+
		"X-Hub-Signature-256: "+hubSignature(secret, "{}")+"\r\nContent-Length: 26214401\r\n\r\n")
	if a.resp.StatusCode != 413 || a.body != `{"ok":false,"error":"the webhook body exceeds 26214400 bytes"}` {
		t.Errorf("signed, 25 MiB + 1 announced: %s %s", a.resp.Status, a.body)
	}
	if !a.closed {
		t.Error("the connection stayed open after the 413")
	}
}

// TestDevModeBannerSigned: with --secret, every door wants a signature, and
// the banner's "Try it" says so and signs its request as the README does,
// the secret read from NEXUS_SECRET (not printed). Run as printed, in a
// shell whose NEXUS_SECRET holds one of the secrets, it answers the
// greeting; the unsigned curl it printed before answered 401.
func TestDevModeBannerSigned(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"sh", "openssl", "curl", "cut", "date"} {
		if _, err := exec.LookPath(tool); err != nil {
			missingTool(t, "TestDevModeBannerSigned", tool+" is not installed")
		}
	}
	const secrets = "old-dev-secret,new-dev-secret"
	state := filepath.Join(t.TempDir(), "state")
	_, stdout := launch(t, t.TempDir(), []string{"serve", "--dev", "--listen", "127.0.0.1:0", "--secret", secrets,
		"--db", filepath.Join(state, "registry.db"), "--dev-flows", filepath.Join(repoRoot, "flows-example")}, nil, "")
	waitBanner(t, stdout)
	banner := stdout.String()
	if strings.Contains(banner, "dev-secret") {
		t.Errorf("the banner shows the secret:\n%s", banner)
	}
	block := regexp.MustCompile(`(?s)Try it \(([^\n]*)\):\n\n(.*?)\n\n`).FindStringSubmatch(banner)
	if block == nil {
		t.Fatalf("banner without a Try it block:\n%s", banner)
	}
	if !strings.Contains(block[1], "signature") || !strings.Contains(block[1], "NEXUS_SECRET") {
		t.Errorf("the Try it line %q does not say the request is signed, with NEXUS_SECRET", block[1])
	}
	for _, secret := range strings.Split(secrets, ",") {
		sh := exec.Command("sh", "-c", "set -e\n"+block[2])
		sh.Env = append(os.Environ(), "NEXUS_SECRET="+secret)
		var out, errOut bytes.Buffer
		sh.Stdout, sh.Stderr = &out, &errOut
		if err := sh.Run(); err != nil {
			t.Fatalf("the banner's request: %v\n%s\n%s", err, errOut.String(), block[2])
		}
		if !strings.HasPrefix(out.String(), `{"greeting":"hello, Ada",`) {
			t.Errorf("the banner's request, signed with %q, answered %q, want the greeting\n%s", secret, out.String(), block[2])
		}
	}
}
