package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
	"github.com/nexushq/nexus/flow"
)

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// view is the comparable form of an engine.Result.
type view struct {
	Status         int
	Header         map[string]string
	Body           string
	Outcome        engine.Outcome
	Err            string
	ErrKind        engine.Kind
	HandlerErr     string
	HandlerErrKind engine.Kind
	Step           string
	Replay         bool
}

// viewOf turns an engine.Result into a view. With names, only those headers are
// kept (when present); without, every header of the answer.
func viewOf(r engine.Result, names ...string) view {
	v := view{Status: r.Status, Body: string(r.Body), Outcome: r.Outcome, Step: r.Step, Replay: r.Replay}
	v.Header = map[string]string{}
	for k, vals := range r.Header {
		if len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, k) }) {
			continue
		}
		v.Header[http.CanonicalHeaderKey(k)] = strings.Join(vals, ", ")
	}
	if r.Err != nil {
		v.Err, v.ErrKind = r.Err.Error(), r.Err.Kind
	}
	if r.HandlerErr != nil {
		v.HandlerErr, v.HandlerErrKind = r.HandlerErr.Error(), r.HandlerErr.Kind
	}
	return v
}

// hdr builds the header map of a view: name, value, name, value...
func hdr(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// jsonHdr is the header set of a JSON answer with correlation ID cid,
// plus extra name/value pairs.
func jsonHdr(cid string, extra ...string) map[string]string {
	return hdr(append([]string{"Content-Type", "application/json", "X-Correlation-Id", cid}, extra...)...)
}

func checkView(t *testing.T, got engine.Result, want view, names ...string) {
	t.Helper()
	if diff := cmp.Diff(want, viewOf(got, names...)); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
}

// flowSource writes a flow file: the front matter (tenant acme, effects
// http_egress and queue_publish declared) with extra keys, then body.
func flowSource(name, front, body string) string {
	return "---\nflowmarkdown_version: \"0.1\"\nflow: " + name +
		"\ntenant: acme\neffects: [http_egress, queue_publish]\n" + front + "---\n\n" + body
}

// compile compiles src after replacing each old, new pair of repl.
func compile(t testing.TB, src string, repl ...string) *flow.Flow {
	t.Helper()
	if len(repl) > 0 {
		src = strings.NewReplacer(repl...).Replace(src)
	}
	f, err := flow.Compile("test.md", []byte(src))
	if err != nil {
		t.Fatalf("flow does not compile:\n%v\n---\n%s", err, src)
	}
	return f
}

// example compiles a flow of the documentation's example repo, with the
// replacements repl applied to its source (hosts to test backends).
func example(t testing.TB, name string, repl ...string) *flow.Flow {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "flows-example", "flows", "acme", name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	return compile(t, string(src), repl...)
}

func parse(t testing.TB, s string) any {
	t.Helper()
	v, err := flow.ParseJSON([]byte(s), 512)
	if err != nil {
		t.Fatalf("bad test document %s: %v", s, err)
	}
	return v
}

// run executes f on the JSON document doc with correlation ID c-1 through
// the run door; mods adjust the request. It may stop the test: call it
// from the test's goroutine only (elsewhere, build the request with
// newRequest first and call e.Run).
func run(t testing.TB, e *engine.Engine, f *flow.Flow, doc string, mods ...func(*engine.Request)) engine.Result {
	t.Helper()
	return e.Run(context.Background(), newRequest(t, f, doc, mods...))
}

// newRequest is the request run makes: f on the JSON document doc with
// correlation ID c-1 through the run door, adjusted by mods.
func newRequest(t testing.TB, f *flow.Flow, doc string, mods ...func(*engine.Request)) engine.Request {
	t.Helper()
	req := engine.Request{Flow: f, Doc: parse(t, doc), CorrelationID: "c-1", Door: engine.DoorRun}
	for _, m := range mods {
		m(&req)
	}
	return req
}

// recorded is one request a backend received.
type recorded struct {
	Method string
	URI    string
	Header http.Header
	Body   string
}

// backend is a real HTTP server that counts and records its calls.
type backend struct {
	*httptest.Server
	calls   atomic.Int64
	arrived chan struct{} // closed at the first call
	mu      sync.Mutex
	reqs    []recorded
}

func newBackend(t testing.TB, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{arrived: make(chan struct{})}
	var first sync.Once
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, recorded{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: string(body)})
		b.mu.Unlock()
		b.calls.Add(1)
		first.Do(func() { close(b.arrived) })
		h(w, r)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) requests() []recorded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

// answer returns a handler writing status, content type and body, plus
// the extra headers given as name, value pairs.
func answer(status int, contentType, body string, extra ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(extra); i += 2 {
			w.Header().Set(extra[i], extra[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// slow returns a handler that answers 200 {} after d, unless the caller
// gives up first; cancelled receives one value when the request's context
// was cancelled.
func slow(d time.Duration, cancelled chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			if cancelled != nil {
				cancelled <- struct{}{}
			}
		case <-time.After(d):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{}`)
		}
	}
}

// inFlight is a transport (engine.NewTransport's) that passes a call's
// cancellation (the flow's ceiling, read_timeout_ms) on only once b has
// the request. Those ceilings are real time: on a loaded machine one came
// before the request had left (the dial or the write not done, the
// backend never called: seen with 100 ms under -race on 2 busy cores),
// and a test that the ceiling stops a call in flight had none in flight.
// Held, the cancellation still decides the step's outcome and still
// reaches the backend; the call's own end (an answer) is not held.
func inFlight(b *backend) http.RoundTripper {
	return holdCancel{arrived: b.arrived, next: engine.NewTransport()}
}

type holdCancel struct {
	arrived <-chan struct{}
	next    http.RoundTripper
}

func (h holdCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	context.AfterFunc(r.Context(), func() {
		select {
		case <-h.arrived:
		case <-time.After(10 * time.Second): // the test's waitFor has failed
		}
		cancel(context.Cause(r.Context()))
	})
	return h.next.RoundTrip(r.WithContext(ctx))
}

// closedAddr returns a host:port nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitFor waits for one value on ch, failing after a generous bound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Errorf("%s did not happen", what)
	}
}

const secret = "DOWNSTREAM-SECRET-TEXT"

// ---------------------------------------------------------------------------
// The status table
// ---------------------------------------------------------------------------

func TestStatus(t *testing.T) {
	got := map[engine.Kind]int{}
	for _, k := range []engine.Kind{
		engine.KindSyntactic, engine.KindSemantic, engine.KindDedupKey, engine.KindCorrelationOpen, engine.KindCorrelationRefused,
		engine.KindEffect, engine.KindStateUnavailable, engine.KindDefect, engine.KindBranchTimeout, engine.KindDeadline,
		engine.KindHandlerFailed, engine.KindInternal,
	} {
		got[k] = engine.Status(k)
	}
	want := map[engine.Kind]int{
		engine.KindSyntactic:          400,
		engine.KindSemantic:           422,
		engine.KindDedupKey:           400,
		engine.KindCorrelationOpen:    409,
		engine.KindCorrelationRefused: 422,
		engine.KindEffect:             502,
		engine.KindStateUnavailable:   503,
		engine.KindDefect:             500,
		engine.KindBranchTimeout:      500,
		engine.KindDeadline:           500,
		engine.KindHandlerFailed:      500,
		engine.KindInternal:           500,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Status table (-want +got):\n%s", diff)
	}
}

// ---------------------------------------------------------------------------
// Every row of the status table, without and with a ## Fault: handler
// ---------------------------------------------------------------------------

// handlerSection is the fault handler appended to a flow for the "with a
// handler" half of TestStatusRows.
const handlerSection = `
## Fault: handle
response_header_x_handled: yes
~~~ntd
{"handled": "{{ $.fault_error }}", "step": "{{ $.fault_step }}", "cid": "{{ $.fault_correlation_id }}"}
~~~
`

func TestStatusRows(t *testing.T) {
	fail503 := newBackend(t, answer(503, "application/json", `{"error":"`+secret+`"}`))
	xmlAnswer := newBackend(t, answer(200, "application/xml", `<order><id>A-1</id></order>`))
	dead := closedAddr(t)
	xmlPub := &enginetest.Publisher{}

	type row struct {
		name    string
		front   string
		body    string
		doc     string
		repl    []string
		store   func() *enginetest.Dedup
		pub     engine.Publisher
		without view
		with    view // the flow with handlerSection appended
	}
	failingStore := func() *enginetest.Dedup {
		d := &enginetest.Dedup{}
		d.Fail(errors.New("store offline"))
		return d
	}
	const checkSyntactic = `
## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
~~~
`
	const checkSemantic = `
## Step: check
~~~validate
$.total > 0 | "total must be positive"
~~~
`
	const forward = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
`
	flowFailed := `{"ok":false,"error":"flow execution failed"}`
	rows := []row{
		{
			name: "validate syntactic", body: checkSyntactic, doc: `{"total":1}`,
			without: view{Status: 400, Header: jsonHdr("c-1"), Body: `{"error":"orderId is required","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'check': validation failed (Syntactic): orderId is required", ErrKind: engine.KindSyntactic},
			with: view{Status: 400, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"orderId is required","step":"check","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Syntactic): orderId is required", ErrKind: engine.KindSyntactic},
		},
		{
			name: "validate semantic", body: checkSemantic, doc: `{"total":0}`,
			without: view{Status: 422, Header: jsonHdr("c-1"), Body: `{"error":"total must be positive","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic},
			with: view{Status: 422, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"total must be positive","step":"check","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic},
		},
		{
			// a rule whose expression errors fails as semantic, with the
			// evaluation error as its message
			name: "validate rule that cannot be evaluated", body: checkSemantic, doc: `{}`,
			without: view{Status: 422, Header: jsonHdr("c-1"), Body: `{"error":"cannot compare null with number using >","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'check': validation failed (Semantic): cannot compare null with number using >", ErrKind: engine.KindSemantic},
			with: view{Status: 422, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"cannot compare null with number using >","step":"check","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Semantic): cannot compare null with number using >", ErrKind: engine.KindSemantic},
		},
		{
			// as semantic whatever kind the rule is marked: the rule did not
			// judge the message, so its kind says nothing
			name: "syntactic rule that cannot be evaluated", doc: `{}`,
			body: "\n## Step: check\n~~~validate\n$.total > 0 | \"total must be positive\" | syntactic\n~~~\n",
			without: view{Status: 422, Header: jsonHdr("c-1"), Body: `{"error":"cannot compare null with number using >","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'check': validation failed (Semantic): cannot compare null with number using >", ErrKind: engine.KindSemantic},
			with: view{Status: 422, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"cannot compare null with number using >","step":"check","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Semantic): cannot compare null with number using >", ErrKind: engine.KindSemantic},
		},
		{
			// Before any step: the handler does not run (it handles failures
			// of the step sequence); the status is the table's either way.
			name: "dedup_key renders empty", front: "dedup_key: \"{{ $.orderId }}\"\n",
			body: checkSemantic, doc: `{"total":3}`, store: func() *enginetest.Dedup { return &enginetest.Dedup{} },
			without: view{Status: 400, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"dedup_key produced nothing from this message"}`,
				Outcome: engine.Failed, Err: "dedup_key produced nothing from this message", ErrKind: engine.KindDedupKey},
			with: view{Status: 400, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"dedup_key produced nothing from this message"}`,
				Outcome: engine.Failed, Err: "dedup_key produced nothing from this message", ErrKind: engine.KindDedupKey},
		},
		{
			name: "effect failed: backend 503", body: forward, doc: `{"orderId":"A-1"}`, repl: []string{"BACKEND", fail503.URL},
			without: view{Status: 502, Header: jsonHdr("c-1"), Body: flowFailed,
				Outcome: engine.Failed, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
			with: view{Status: 502, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"effect handler failed: HTTP 503 Service Unavailable","step":"forward","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			name: "effect failed: transport error", body: forward, doc: `{"orderId":"A-1"}`, repl: []string{"BACKEND", "http://" + dead},
			without: view{Status: 502, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err:     `step 'forward': effect handler failed: Post "http://` + dead + `/ingest": dial tcp ` + dead + `: connect: connection refused`,
				ErrKind: engine.KindEffect},
			with: view{Status: 502, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"effect handler failed: Post \"http://` + dead + `/ingest\": dial tcp ` + dead + `: connect: connection refused","step":"forward","cid":"c-1"}`,
				Outcome: engine.FaultHandled,
				Err:     `step 'forward': effect handler failed: Post "http://` + dead + `/ingest": dial tcp ` + dead + `: connect: connection refused`,
				ErrKind: engine.KindEffect},
		},
		{
			name: "effect failed: queue_publish refused", doc: `{"orderId":"A-1"}`,
			body: "\n## Step: hand-off\neffects: [queue_publish]\nqueue: order-fulfilment\n",
			pub:  &enginetest.Publisher{Err: errors.New("flow acme/order-fulfilment is not live")},
			without: view{Status: 502, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err: "step 'hand-off': effect handler failed: flow acme/order-fulfilment is not live", ErrKind: engine.KindEffect},
			with: view{Status: 502, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"effect handler failed: flow acme/order-fulfilment is not live","step":"hand-off","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'hand-off': effect handler failed: flow acme/order-fulfilment is not live", ErrKind: engine.KindEffect},
		},
		{
			name: "flow state unavailable: dedup store failing", front: "dedup_key: \"{{ $.orderId }}\"\n",
			body: checkSemantic, doc: `{"orderId":"A-1","total":3}`, store: failingStore,
			without: view{Status: 503, Header: jsonHdr("c-1", "Retry-After", "1"),
				Body:    `{"ok":false,"error":"flow state is unavailable; try again"}`,
				Outcome: engine.Failed, Err: "flow state is unavailable: reading the dedup store: store offline", ErrKind: engine.KindStateUnavailable},
			with: view{Status: 503, Header: jsonHdr("c-1", "Retry-After", "1"),
				Body:    `{"ok":false,"error":"flow state is unavailable; try again"}`,
				Outcome: engine.Failed, Err: "flow state is unavailable: reading the dedup store: store offline", ErrKind: engine.KindStateUnavailable},
		},
		{
			name: "defect: ntd hole cannot be evaluated", doc: `{"a":"text"}`,
			body: "\n## Step: shape\n~~~ntd\n{\"big\": {{ $.a > 1 }}}\n~~~\n",
			without: view{Status: 500, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err: "step 'shape': ntd: cannot compare string with number using >: string \"text\" is not a number", ErrKind: engine.KindDefect},
			with: view{Status: 500, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"ntd: cannot compare string with number using >: string \"text\" is not a number","step":"shape","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'shape': ntd: cannot compare string with number using >: string \"text\" is not a number", ErrKind: engine.KindDefect},
		},
		{
			name: "defect: response_status renders no status", doc: `{"code":"abc"}`,
			body: "\n## Step: reply\nresponse_status: \"{{ $.code }}\"\n",
			without: view{Status: 500, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err: `step 'reply': response_status rendered "abc", which is not a status code`, ErrKind: engine.KindDefect},
			with: view{Status: 500, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"response_status rendered \"abc\", which is not a status code","step":"reply","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: `step 'reply': response_status rendered "abc", which is not a status code`, ErrKind: engine.KindDefect},
		},
		{
			name: "defect: response_status below 200", doc: `{}`,
			body: "\n## Step: reply\nresponse_status: 150\n",
			without: view{Status: 500, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err: "step 'reply': response_status 150 is below 200: an answer cannot be informational", ErrKind: engine.KindDefect},
			with: view{Status: 500, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"response_status 150 is below 200: an answer cannot be informational","step":"reply","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'reply': response_status 150 is below 200: an answer cannot be informational", ErrKind: engine.KindDefect},
		},
		{
			name: "defect: XML document to queue_publish", doc: `{"orderId":"A-1"}`, repl: []string{"BACKEND", xmlAnswer.URL},
			body: forward + "\n## Step: hand-off\neffects: [queue_publish]\nqueue: order-fulfilment\n",
			pub:  xmlPub,
			without: view{Status: 500, Header: jsonHdr("c-1"), Body: flowFailed, Outcome: engine.Failed,
				Err: "step 'hand-off': queue_publish needs a JSON document", ErrKind: engine.KindDefect},
			with: view{Status: 500, Header: jsonHdr("c-1", "X-Handled", "yes"),
				Body:    `{"handled":"queue_publish needs a JSON document","step":"hand-off","cid":"c-1"}`,
				Outcome: engine.FaultHandled, Err: "step 'hand-off': queue_publish needs a JSON document", ErrKind: engine.KindDefect},
		},
	}
	for _, r := range rows {
		for _, withHandler := range []bool{false, true} {
			name := r.name + "/without handler"
			src := flowSource("rows", r.front, r.body)
			want := r.without
			if withHandler {
				name = r.name + "/with handler"
				src += handlerSection
				want = r.with
			}
			t.Run(name, func(t *testing.T) {
				cfg := engine.Config{Publisher: r.pub}
				if r.store != nil {
					cfg.Dedup = r.store()
				}
				res := run(t, engine.New(cfg), compile(t, src, r.repl...), r.doc)
				checkView(t, res, want)
				if strings.Contains(string(res.Body), secret) {
					t.Errorf("the downstream's text travelled into the answer: %s", res.Body)
				}
			})
		}
	}
	if n := fail503.calls.Load(); n != 2 {
		t.Errorf("503 backend called %d times, want 2", n)
	}
	if msgs := xmlPub.Messages(); len(msgs) != 0 {
		t.Errorf("an XML document was published: %+v", msgs)
	}
}

// ---------------------------------------------------------------------------
// The duration ceiling
// ---------------------------------------------------------------------------

func TestDurationCeilingCancelsCallInFlight(t *testing.T) {
	for _, withHandler := range []bool{false, true} {
		name := "without handler"
		if withHandler {
			name = "with handler"
		}
		t.Run(name, func(t *testing.T) {
			cancelled := make(chan struct{}, 1)
			b := newBackend(t, slow(2*time.Second, cancelled))
			src := flowSource("ceiling", "timeout_ms: 100\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: after
~~~ntd
{"never": true}
~~~
`)
			if withHandler {
				src += handlerSection
			}
			// The ceiling's 500 (the backend would answer after 2 s and
			// the flow go on to "after") and the backend's cancellation
			// prove the ceiling stopped the call in flight.
			res := run(t, engine.New(engine.Config{Transport: inFlight(b)}), compile(t, src, "BACKEND", b.URL), `{"orderId":"A-1"}`)
			checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"),
				Body:    `{"ok":false,"error":"duration ceiling of 100 ms reached","step":"forward"}`,
				Outcome: engine.Failed, Err: "step 'forward': duration ceiling of 100 ms reached", ErrKind: engine.KindDeadline})
			waitFor(t, cancelled, "cancellation of the backend call")
		})
	}
}

func TestDurationCeilingInFaultHandler(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	b := newBackend(t, slow(2*time.Second, cancelled))
	src := flowSource("ceiling-fault", "timeout_ms: 100\n", `
## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
~~~

## Fault: notify
effects: [http_egress]
endpoint: BACKEND/notify
`)
	res := run(t, engine.New(engine.Config{Transport: inFlight(b)}), compile(t, src, "BACKEND", b.URL), `{}`)
	// the ceiling reached inside the fault sequence is a failed handler,
	// and "when a fault handler itself fails, last_error is the main
	// sequence's error": Err stays the main sequence's, the ceiling is the
	// handler's error (the engine once reported the ceiling as Err)
	checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"),
		Body:    `{"ok":false,"error":"duration ceiling of 100 ms reached","step":"notify"}`,
		Outcome: engine.Failed,
		Err:     "step 'check': validation failed (Syntactic): orderId is required", ErrKind: engine.KindSyntactic,
		HandlerErr: "step 'notify': duration ceiling of 100 ms reached", HandlerErrKind: engine.KindDeadline})
	waitFor(t, cancelled, "cancellation of the notify call")
}

// TestDurationCeilingHoldsForAStepThatRunsPastIt: a step cannot be stopped
// in the middle of a match (a pattern the message carries costs up to its
// bound each time), so the ceiling is looked at between a validate step's
// rules and after the last step: a flow whose last step ran past
// timeout_ms answered 200 long after it (5.7 s against 100 ms was seen),
// and one whose slow rule came before a failing one answered that rule's
// 422. Each rule here takes tens of milliseconds on any machine, the
// ceiling is 1 ms.
func TestDurationCeilingHoldsForAStepThatRunsPastIt(t *testing.T) {
	slow := `matches($.v, $.p) | "no match"` + "\n"
	doc := `{"p":"[\\p{L}]{0,600}c","v":"` + strings.Repeat("ab", 2000) + `c"}`
	for _, c := range []struct{ name, rules string }{
		{"the last step", slow + slow},
		{"a rule after a slow one", slow + `false | "the second rule"` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := flowSource("slow-check", "timeout_ms: 1\n", "\n## Step: check\n~~~validate\n"+c.rules+"~~~\n")
			res := run(t, engine.New(engine.Config{}), compile(t, src), doc)
			checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"),
				Body:    `{"ok":false,"error":"duration ceiling of 1 ms reached","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'check': duration ceiling of 1 ms reached", ErrKind: engine.KindDeadline})
		})
	}
	// within the ceiling, the same flow answers as before
	src := flowSource("slow-check", "", "\n## Step: check\n~~~validate\n"+slow+"~~~\n")
	if res := run(t, engine.New(engine.Config{}), compile(t, src), doc); res.Status != 200 {
		t.Errorf("within the ceiling: %d %s", res.Status, res.Body)
	}
}

// blockingPublisher accepts a message only when the execution's context is
// done, and reports success anyway: the step takes the whole ceiling.
type blockingPublisher struct{ calls atomic.Int64 }

func (p *blockingPublisher) Publish(ctx context.Context, _, _ string, _ []byte, _ string) error {
	p.calls.Add(1)
	<-ctx.Done()
	return nil
}

func TestDurationCeilingBetweenStepsNamesNextStep(t *testing.T) {
	src := flowSource("ceiling-between", "timeout_ms: 100\n", `
## Step: hand-off
effects: [queue_publish]
queue: order-fulfilment

## Step: next
~~~ntd
{"never": true}
~~~
`)
	pub := &blockingPublisher{}
	res := run(t, engine.New(engine.Config{Publisher: pub}), compile(t, src), `{"orderId":"A-1"}`)
	checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"),
		Body:    `{"ok":false,"error":"duration ceiling of 100 ms reached","step":"next"}`,
		Outcome: engine.Failed, Err: "step 'next': duration ceiling of 100 ms reached", ErrKind: engine.KindDeadline})
	if n := pub.calls.Load(); n != 1 {
		t.Errorf("publisher called %d times, want 1", n)
	}
}

// TestFaultHeaderRemove: handling-failures.md: "fault_header_<name>: is
// the deprecated spelling [of response_header_<name>], again confined to
// ## Fault: sections", and flow-file.md's step keys table lists
// `fault_status`, `fault_header_<name>` as the deprecated spellings of
// `response_status` and `response_header_…`. `fault_header_remove: [x]`,
// the old spelling of `response_header_remove: [x]`, is compiled as a
// header named "Remove" whose value is the literal "[x-internal]": the
// header to remove stays, and a bogus `Remove:` header is sent.
func TestFaultHeaderRemove(t *testing.T) {
	src := flowSource("fault-remove", "", `
## Step: tag
response_header_x_internal: secret-route
~~~ntd
{{ $ }}
~~~

## Step: check
~~~validate
$.ok == true | "not ok"
~~~

## Fault: answer
fault_header_remove: [x-internal]
~~~ntd
{"rejected": true}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src), `{"ok":false}`)
	if res.Status != 422 {
		t.Fatalf("status %d, want 422: %s", res.Status, res.Body)
	}
	if v := res.Header.Values("Remove"); len(v) > 0 {
		t.Errorf("the answer carries a header Remove: %q", v)
	}
	if v := res.Header.Get("X-Internal"); v != "" {
		t.Errorf("X-Internal: %q was not removed by fault_header_remove", v)
	}
}

// ---------------------------------------------------------------------------
// The fault sequence: failing handler, status and headers across the entry
// ---------------------------------------------------------------------------

func TestFaultHandlerFails(t *testing.T) {
	notify := newBackend(t, answer(503, "text/plain", secret))
	cases := []struct {
		name  string
		fault string
		want  view
	}{
		{
			name:  "ntd defect in the handler",
			fault: "\n## Fault: report\n~~~ntd\n{\"x\": {{ $.fault_step > 1 }}}\n~~~\n",
			want:  view{HandlerErr: "step 'report': ntd: cannot compare string with number using >: string \"check\" is not a number", HandlerErrKind: engine.KindDefect},
		},
		{
			name:  "failed call in the handler",
			fault: "\n## Fault: notify\neffects: [http_egress]\nendpoint: " + notify.URL + "/notify\n",
			want:  view{HandlerErr: "step 'notify': effect handler failed: HTTP 503 Service Unavailable", HandlerErrKind: engine.KindEffect},
		},
		{
			name:  "response_status template rendering no status in the handler",
			fault: "\n## Fault: report\nresponse_status: \"{{ $.fault_step }}\"\n~~~ntd\n{\"x\": 1}\n~~~\n",
			want:  view{HandlerErr: `step 'report': response_status rendered "", which is not a status code`, HandlerErrKind: engine.KindDefect},
		},
		{
			name:  "validate rule in the handler",
			fault: "\n## Fault: report\nresponse_status: 200\n~~~ntd\n{\"x\": 1}\n~~~\n\n## Fault: decline\n~~~validate\n$.x == 2 | \"declined\" | syntactic\n~~~\n",
			want:  view{HandlerErr: "step 'decline': validation failed (Syntactic): declined", HandlerErrKind: engine.KindSyntactic},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := flowSource("failing-handler", "", `
## Step: decorate
response_header_x_trace: t-1
response_status: 201

## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
~~~
`+c.fault)
			res := run(t, engine.New(engine.Config{}), compile(t, src), `{}`)
			want := c.want
			want.Status = 500
			want.Header = jsonHdr("c-1")
			want.Body = `{"ok":false,"error":"fault handler failed"}`
			want.Outcome = engine.Failed
			want.Err = "step 'check': validation failed (Syntactic): orderId is required"
			want.ErrKind = engine.KindSyntactic
			checkView(t, res, want)
		})
	}
}

func TestStatusAndHeadersAcrossFaultEntry(t *testing.T) {
	src := flowSource("across", "", `
## Step: decorate
response_status: 201
response_header_x_trace: t-1
response_header_content_type: application/vnd.acme+json
~~~ntd
{{ $ }}
~~~

## Step: check
response_status: 202
response_header_x_check: yes
~~~validate
$.ok == true | "not ok"
~~~

## Fault: report
~~~ntd
{"error": "{{ $.fault_error }}"}
~~~
`)
	f := compile(t, src)
	e := engine.New(engine.Config{})
	cases := []struct {
		name string
		doc  string
		want view
	}{
		{
			// headers set before the failure survive; the status set before
			// the failure does not, and the failing step contributed nothing
			name: "failure", doc: `{"ok":false}`,
			want: view{Status: 422,
				Header: hdr("Content-Type", "application/vnd.acme+json", "X-Correlation-Id", "c-1", "X-Trace", "t-1"),
				Body:   `{"error":"not ok"}`, Outcome: engine.FaultHandled,
				Err: "step 'check': validation failed (Semantic): not ok", ErrKind: engine.KindSemantic},
		},
		{
			name: "success", doc: `{"ok":true}`,
			want: view{Status: 202,
				Header: hdr("Content-Type", "application/vnd.acme+json", "X-Correlation-Id", "c-1", "X-Trace", "t-1", "X-Check", "yes"),
				Body:   `{"ok":true}`, Outcome: engine.Succeeded},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkView(t, run(t, e, f, c.doc), c.want) })
	}
}

func TestFaultStatusOverrides(t *testing.T) {
	b := newBackend(t, answer(503, "application/json", `{"e":"`+secret+`"}`))
	const main = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
`
	cases := []struct {
		name  string
		fault string
		want  view
	}{
		{"response_status literal", "\n## Fault: report\nresponse_status: 409\n~~~ntd\n{\"r\": 1}\n~~~\n",
			view{Status: 409, Body: `{"r":1}`}},
		{"fault_status deprecated spelling", "\n## Fault: report\nfault_status: 409\nfault_header_x_old: yes\n~~~ntd\n{\"r\": 1}\n~~~\n",
			view{Status: 409, Body: `{"r":1}`, Header: jsonHdr("c-1", "X-Old", "yes")}},
		{"absorb with 200", "\n## Fault: absorb\nresponse_status: 200\n~~~ntd\n{\"accepted\": false}\n~~~\n",
			view{Status: 200, Body: `{"accepted":false}`}},
		{"later fault step wins", "\n## Fault: one\nresponse_status: 409\n\n## Fault: two\nresponse_status: 418\n~~~ntd\n{\"r\": 2}\n~~~\n",
			view{Status: 418, Body: `{"r":2}`}},
		{"natural status when no fault step sets one", "\n## Fault: report\n~~~ntd\n{\"r\": 3}\n~~~\n",
			view{Status: 502, Body: `{"r":3}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("overrides", "", main+c.fault), "BACKEND", b.URL), `{}`)
			want := c.want
			if want.Header == nil {
				want.Header = jsonHdr("c-1")
			}
			want.Outcome = engine.FaultHandled
			want.Err = "step 'forward': effect handler failed: HTTP 503 Service Unavailable"
			want.ErrKind = engine.KindEffect
			checkView(t, res, want)
		})
	}
}

// ---------------------------------------------------------------------------
// The documentation's examples
// ---------------------------------------------------------------------------

func TestOrderIntakeBasic(t *testing.T) {
	ok := newBackend(t, answer(200, "application/json", `{"accepted":true}`))
	down := newBackend(t, answer(503, "text/plain", secret))
	problem := func(detail, step string) view {
		return view{Status: 400,
			Header:  hdr("Content-Type", "application/problem+json", "X-Correlation-Id", "c-1"),
			Body:    `{"title":"Order rejected","detail":"` + detail + `","step":"` + step + `","correlationId":"c-1"}`,
			Outcome: engine.FaultHandled}
	}
	cases := []struct {
		name string
		be   *backend
		doc  string
		want view
	}{
		{"missing orderId", ok, `{"total":1}`, func() view {
			v := problem("orderId is required", "check")
			v.Err, v.ErrKind = "step 'check': validation failed (Syntactic): orderId is required", engine.KindSyntactic
			return v
		}()},
		{"downstream outage answers the literal 400 too", down, `{"orderId":"A-1"}`, func() view {
			v := problem("effect handler failed: HTTP 503 Service Unavailable", "forward")
			v.Err, v.ErrKind = "step 'forward': effect handler failed: HTTP 503 Service Unavailable", engine.KindEffect
			return v
		}()},
		{"success", ok, `{"orderId":"A-1"}`,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"accepted":true}`, Outcome: engine.Succeeded}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := example(t, "order-intake-basic", "https://orders.example.com", c.be.URL)
			checkView(t, run(t, engine.New(engine.Config{}), f, c.doc), c.want)
		})
	}
	if got := ok.requests(); len(got) != 1 || got[0].Method != "POST" || got[0].URI != "/ingest" || got[0].Body != `{"orderId":"A-1"}` {
		t.Errorf("backend requests: %+v", got)
	}
}

func TestOrderIntakeWorkedExample(t *testing.T) {
	ok := newBackend(t, answer(200, "application/json", `{"accepted": true, "id": "ORD-1"}`))
	down := newBackend(t, answer(503, "application/json", `{"reason":"`+secret+`"}`))
	problem := func(status int, detail, step, orderID, errText string, kind engine.Kind) view {
		return view{Status: status,
			Header: hdr("Content-Type", "application/problem+json", "Retry-After", "30", "X-Correlation-Id", "c-1"),
			Body: `{"type":"https://errors.example.com/order-intake","title":"Order could not be accepted","detail":"` + detail +
				`","step":"` + step + `","orderId":"` + orderID + `","correlationId":"c-1"}`,
			Outcome: engine.FaultHandled, Err: errText, ErrKind: kind}
	}
	cases := []struct {
		name string
		be   *backend
		doc  string
		want view
	}{
		{"the documented curl: total 0, no orderId", ok, `{"total":0}`,
			problem(400, "orderId is required", "check", "", "step 'check': validation failed (Syntactic): orderId is required", engine.KindSyntactic)},
		{"total not positive", ok, `{"orderId":"A-1","total":0}`,
			problem(422, "total must be positive", "check", "A-1", "step 'check': validation failed (Semantic): total must be positive", engine.KindSemantic)},
		{"downstream unavailable", down, `{"orderId":"A-2","total":5}`,
			problem(502, "effect handler failed: HTTP 503 Service Unavailable", "forward", "A-2",
				"step 'forward': effect handler failed: HTTP 503 Service Unavailable", engine.KindEffect)},
		{"accepted", ok, `{"orderId":"A-3","total":5}`,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"accepted":true,"id":"ORD-1"}`, Outcome: engine.Succeeded}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := example(t, "order-intake", "https://orders.example.com", c.be.URL)
			res := run(t, engine.New(engine.Config{}), f, c.doc)
			checkView(t, res, c.want)
			if strings.Contains(string(res.Body), secret) {
				t.Errorf("the downstream's text travelled into the answer: %s", res.Body)
			}
		})
	}
	if got := ok.requests(); len(got) != 1 || got[0].Body != `{"orderId":"A-3","total":5}` {
		t.Errorf("backend requests: %+v", got)
	}
}

func TestOrderIntakeKeep(t *testing.T) {
	down := newBackend(t, answer(502, "text/html", "<h1>"+secret+"</h1>"))
	f := example(t, "order-intake-keep", "https://orders.example.com", down.URL)
	cases := []struct {
		name string
		doc  string
		want view
	}{
		{"validate failure reads the kept request", `{"orderId":"A-1","total":0}`,
			view{Status: 422, Header: jsonHdr("c-1"), Body: `{"title":"Order rejected","orderId":"A-1","detail":"total must be positive"}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic}},
		{"downstream failure reads the kept request", `{"orderId":"A-9","total":3}`,
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"title":"Order rejected","orderId":"A-9","detail":"effect handler failed: HTTP 502 Bad Gateway"}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 502 Bad Gateway", ErrKind: engine.KindEffect}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkView(t, run(t, engine.New(engine.Config{}), f, c.doc), c.want) })
	}
}

func TestNotifyThenGiveUp(t *testing.T) {
	orders := newBackend(t, answer(503, "application/json", `{"e":"`+secret+`"}`))
	alerts := newBackend(t, answer(202, "application/json", `{"queued":true}`))
	f := example(t, "forward-order-alerting",
		"https://orders.example.com", orders.URL, "https://alerts.example.com", alerts.URL)
	e := engine.New(engine.Config{})
	for attempt := 1; attempt <= 3; attempt++ {
		res := run(t, e, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.Door, r.Attempt = engine.DoorEnqueue, attempt })
		checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"fault handler failed"}`,
			Outcome: engine.Failed,
			Err:     "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect,
			HandlerErr: "step 'decline': validation failed (Semantic): handled, but still a failed delivery", HandlerErrKind: engine.KindSemantic})
		if n := alerts.calls.Load(); n != int64(attempt) {
			t.Errorf("attempt %d: notify backend called %d times in all, want %d", attempt, n, attempt)
		}
	}
	reqs := alerts.requests()
	if len(reqs) == 0 {
		t.Fatal("no notification sent")
	}
	want := `{"text":"order forwarding failed","tenant":"acme","flow":"forward-order-alerting","door":"enqueue","attempt":2,` +
		`"step":"forward","error":"effect handler failed: HTTP 503 Service Unavailable","correlationId":"c-1"}`
	if len(reqs) > 1 {
		if diff := cmp.Diff(want, reqs[1].Body); diff != "" {
			t.Errorf("notification of attempt 2 (-want +got):\n%s", diff)
		}
	}
	if got := reqs[0].Header.Get("X-Correlation-Id"); got != "c-1" {
		t.Errorf("notification X-Correlation-Id = %q", got)
	}
}

func TestXMLOrderIntakeAnswers201(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"stored":true}`))
	f := example(t, "xml-order-intake", "https://orders.example.com", b.URL)
	res := run(t, engine.New(engine.Config{}), f, `{"id":"A-1"}`)
	checkView(t, res, view{Status: 201, Header: jsonHdr("c-1"),
		Body: `{"accepted":true,"orderId":"A-1","backendStatus":200}`, Outcome: engine.Succeeded})
	if got := b.requests(); len(got) != 1 || got[0].Body != `{"orderId":"A-1","source":"xml","receivedVia":"run"}` {
		t.Errorf("backend requests: %+v", got)
	}
}

func TestOrderHandoffPublishes(t *testing.T) {
	pub := &enginetest.Publisher{}
	f := example(t, "order-handoff")
	res := run(t, engine.New(engine.Config{Publisher: pub}), f, `{"orderId":"A-1","extra":"x"}`, func(r *engine.Request) { r.CorrelationID = "c-77" })
	checkView(t, res, view{Status: 202, Header: jsonHdr("c-77"),
		Body: `{"accepted":true,"orderId":"A-1","queue":"order-fulfilment","correlationId":"c-77"}`, Outcome: engine.Succeeded})
	want := []enginetest.Message{{Tenant: "acme", Flow: "order-fulfilment", Payload: `{"orderId":"A-1","requestedBy":"c-77"}`, CorrelationID: "c-77"}}
	if diff := cmp.Diff(want, pub.Messages()); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

func TestQueuePublish(t *testing.T) {
	src := flowSource("publisher", "", `
## Step: build
~~~ntd
{ "z": {{ $.n }},  "a": [ 1, "two" ], "cid": "{{ ctx.correlation_id }}" }
~~~

## Step: hand-off
effects: [queue_publish]
queue: order-fulfilment
`)
	f := compile(t, src)
	t.Run("payload is the previous output, compact, in the flow's tenant", func(t *testing.T) {
		pub := &enginetest.Publisher{}
		res := run(t, engine.New(engine.Config{Publisher: pub}), f, `{"n":3}`)
		checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"z":3,"a":[1,"two"],"cid":"c-1"}`, Outcome: engine.Succeeded})
		want := []enginetest.Message{{Tenant: "acme", Flow: "order-fulfilment", Payload: `{"z":3,"a":[1,"two"],"cid":"c-1"}`, CorrelationID: "c-1"}}
		if diff := cmp.Diff(want, pub.Messages()); diff != "" {
			t.Errorf("published (-want +got):\n%s", diff)
		}
	})
	t.Run("refused publication", func(t *testing.T) {
		pub := &enginetest.Publisher{Err: errors.New("no worker can be started for acme/order-fulfilment")}
		res := run(t, engine.New(engine.Config{Publisher: pub}), f, `{"n":3}`)
		checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
			Outcome: engine.Failed, Err: "step 'hand-off': effect handler failed: no worker can be started for acme/order-fulfilment", ErrKind: engine.KindEffect})
	})
	t.Run("no publisher", func(t *testing.T) {
		res := run(t, engine.New(engine.Config{}), f, `{"n":3}`)
		checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
			Outcome: engine.Failed, Err: "step 'hand-off': effect handler failed: queue_publish is not available in this process", ErrKind: engine.KindEffect})
	})
}

// ---------------------------------------------------------------------------
// response_status and response headers
// ---------------------------------------------------------------------------

func TestResponseStatus(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		doc   string
		be    http.HandlerFunc
		names []string
		want  view
	}{
		{
			name: "201 on a successful flow",
			body: "\n## Step: created\nresponse_status: 201\n~~~ntd\n{\"id\": \"{{ $.id }}\"}\n~~~\n",
			doc:  `{"id":"X"}`,
			want: view{Status: 201, Header: jsonHdr("c-1"), Body: `{"id":"X"}`, Outcome: engine.Succeeded},
		},
		{
			name: "last step that ran wins",
			body: "\n## Step: one\nresponse_status: 201\n\n## Step: two\nresponse_status: 202\n\n## Step: three\nwhen: $.never == true\nresponse_status: 203\n",
			doc:  `{}`,
			want: view{Status: 202, Header: jsonHdr("c-1"), Body: `{}`, Outcome: engine.Succeeded},
		},
		{
			name: "template reads the step's output, not its input",
			body: "\n## Step: shape\nresponse_status: \"{{ $.code }}\"\n~~~ntd\n{\"code\": 203}\n~~~\n",
			doc:  `{"code":500}`,
			want: view{Status: 203, Header: jsonHdr("c-1"), Body: `{"code":203}`, Outcome: engine.Succeeded},
		},
		{
			name: "204 is sent without a body, and so without a type",
			body: "\n## Step: done\nresponse_status: 204\n~~~ntd\n{\"ignored\": true}\n~~~\n",
			doc:  `{}`,
			want: view{Status: 204, Header: hdr("X-Correlation-Id", "c-1"), Body: "", Outcome: engine.Succeeded},
		},
		{
			name: "304 is sent without a body, and so without a type",
			body: "\n## Step: done\nresponse_status: 304\n",
			doc:  `{"a":1}`,
			want: view{Status: 304, Header: hdr("X-Correlation-Id", "c-1"), Body: "", Outcome: engine.Succeeded},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("status", "", c.body)), c.doc)
			checkView(t, res, c.want, c.names...)
			if c.want.Status == 204 || c.want.Status == 304 {
				if res.Body != nil {
					t.Errorf("Body = %q, want nil", res.Body)
				}
			}
		})
	}
}

func TestHTTPStatusPassThrough(t *testing.T) {
	const main = `
## Step: proxy
effects: [http_egress]
endpoint: BACKEND/lookup
response_status: "{{ ctx.HTTP_SC }}"
`
	const fault = `
## Fault: relay
response_status: "{{ ctx.HTTP_SC }}"
~~~ntd
{"detail": "{{ $.fault_error }}", "partner": {{ ctx.HTTP_RESPONSE_BODY }}}
~~~
`
	cases := []struct {
		name        string
		status      int
		body        string
		withHandler bool
		want        view
	}{
		{"201 passes through", 201, `{"id":1}`, false,
			view{Status: 201, Header: jsonHdr("c-1"), Body: `{"id":1}`, Outcome: engine.Succeeded}},
		{"202 passes through", 202, `{"queued":true}`, false,
			view{Status: 202, Header: jsonHdr("c-1"), Body: `{"queued":true}`, Outcome: engine.Succeeded}},
		{"204 passes through without a body", 204, "", false,
			view{Status: 204, Header: hdr("X-Correlation-Id", "c-1"), Outcome: engine.Succeeded}},
		{"404 fails the effect: no handler", 404, `{"missing":"` + secret + `"}`, false,
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
				Err: "step 'proxy': effect handler failed: HTTP 404 Not Found", ErrKind: engine.KindEffect}},
		{"404 fails the effect: the handler passes it through", 404, `{"missing":"A-1"}`, true,
			view{Status: 404, Header: jsonHdr("c-1"), Body: `{"detail":"effect handler failed: HTTP 404 Not Found","partner":{"missing":"A-1"}}`,
				Outcome: engine.FaultHandled, Err: "step 'proxy': effect handler failed: HTTP 404 Not Found", ErrKind: engine.KindEffect}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(c.status, "application/json", c.body))
			src := flowSource("proxy", "", main)
			if c.withHandler {
				src += fault
			}
			res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
			if c.status == 204 {
				checkView(t, res, c.want) // no Content-Type
				if res.Body != nil {
					t.Errorf("Body = %q, want nil", res.Body)
				}
				return
			}
			checkView(t, res, c.want)
			if !c.withHandler && strings.Contains(string(res.Body), secret) {
				t.Errorf("the downstream's text travelled into the answer: %s", res.Body)
			}
		})
	}
}

func TestResponseHeaders(t *testing.T) {
	cases := []struct {
		name string
		body string
		want map[string]string
	}{
		{
			name: "set, removed, set again, case-insensitive",
			body: `
## Step: one
response_header_x_internal: secret
response_header_x_ephemeral: tmp
response_header_x_keep: 1
response_header_x_mixed: first

## Step: two
response_header_remove: [X-INTERNAL, x-ephemeral]
response_header_X_MIXED: second

## Step: three
response_header_x_ephemeral: back

## Step: four
response_header_x_keep: 2
response_header_remove: [x-Keep]

## Step: five
response_header_remove: [x-five]
response_header_x_five: set-after-remove
`,
			want: jsonHdr("c-1", "X-Ephemeral", "back", "X-Mixed", "second", "X-Five", "set-after-remove"),
		},
		{
			name: "names are built from the key",
			body: "\n## Step: one\nresponse_header_retry_after: 60\nresponse_header_content_type: application/problem+json\n",
			want: hdr("Retry-After", "60", "Content-Type", "application/problem+json", "X-Correlation-Id", "c-1"),
		},
		{
			name: "x_correlation_id replaces the platform's",
			body: "\n## Step: one\nresponse_header_x_correlation_id: abc123\n",
			want: hdr("Content-Type", "application/json", "X-Correlation-Id", "abc123"),
		},
		{
			name: "values are literal",
			body: "\n## Step: one\nresponse_header_x_raw: \"{{ $.a }}\"\n",
			want: jsonHdr("c-1", "X-Raw", "{{ $.a }}"),
		},
		{
			name: "a skipped step contributes no headers",
			body: "\n## Step: one\nwhen: $.a == 2\nresponse_header_x_skipped: yes\n",
			want: jsonHdr("c-1"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("headers", "", c.body)), `{"a":1}`)
			checkView(t, res, view{Status: 200, Header: c.want, Body: `{"a":1}`, Outcome: engine.Succeeded})
		})
	}
}

// ---------------------------------------------------------------------------
// Condition fences and when:
// ---------------------------------------------------------------------------

func TestConditionFence(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"ok":true}`))
	src := flowSource("fence", "", `
## Step: tag
response_status: 201
response_header_x_tag: yes
~~~ntd
{{ $ }}
~~~

## Step: only-eu
~~~condition
$.region == "eu"
~~~

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: report
~~~ntd
{"never": true}
~~~
`)
	f := compile(t, src, "BACKEND", b.URL)
	e := engine.New(engine.Config{})
	t.Run("false ends the execution as filtered", func(t *testing.T) {
		res := run(t, e, f, `{"region":"us"}`)
		checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"filtered":true,"step":"only-eu"}`,
			Outcome: engine.Filtered, Step: "only-eu"}, "Content-Type", "X-Correlation-Id")
		if n := b.calls.Load(); n != 0 {
			t.Errorf("backend called %d times after the fence", n)
		}
	})
	t.Run("true goes on", func(t *testing.T) {
		res := run(t, e, f, `{"region":"eu"}`)
		checkView(t, res, view{Status: 201, Header: jsonHdr("c-1", "X-Tag", "yes"), Body: `{"ok":true}`, Outcome: engine.Succeeded})
	})
}

func TestConditionFenceInFault(t *testing.T) {
	src := flowSource("fault-fence", "", `
## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
~~~

## Fault: describe
response_header_x_described: yes
~~~ntd
{"detail": "{{ $.fault_error }}", "notify": false}
~~~

## Fault: stop-unless-notify
~~~condition
$.notify == true
~~~

## Fault: never
response_status: 299
response_header_x_never: yes
~~~ntd
{"unreachable": true}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src), `{}`)
	checkView(t, res, view{Status: 400, Header: jsonHdr("c-1", "X-Described", "yes"),
		Body:    `{"detail":"orderId is required","notify":false}`,
		Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Syntactic): orderId is required", ErrKind: engine.KindSyntactic})
}

func TestWhen(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"called":true}`))
	src := flowSource("when", "", `
## Step: a
when: $.mode == "a"
response_status: 201
response_header_x_branch: a
~~~ntd
{"branch": "a"}
~~~

## Step: b
when: $.mode == "b"
response_status: 202
response_header_x_branch: b
~~~ntd
{"branch": "b"}
~~~

## Step: call
when: $.mode == "call"
effects: [http_egress]
endpoint: BACKEND/x
`)
	f := compile(t, src, "BACKEND", b.URL)
	e := engine.New(engine.Config{})
	cases := []struct {
		doc  string
		want view
	}{
		{`{"mode":"a"}`, view{Status: 201, Header: jsonHdr("c-1", "X-Branch", "a"), Body: `{"branch":"a"}`, Outcome: engine.Succeeded}},
		{`{"mode":"b"}`, view{Status: 202, Header: jsonHdr("c-1", "X-Branch", "b"), Body: `{"branch":"b"}`, Outcome: engine.Succeeded}},
		{`{"mode":"c"}`, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"mode":"c"}`, Outcome: engine.Succeeded}},
		{`{"mode":"call"}`, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"called":true}`, Outcome: engine.Succeeded}},
	}
	for _, c := range cases {
		t.Run(c.doc, func(t *testing.T) { checkView(t, run(t, e, f, c.doc), c.want) })
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("backend called %d times, want 1 (only when mode is call)", n)
	}
}

// ---------------------------------------------------------------------------
// ctx variables
// ---------------------------------------------------------------------------

func TestCtxVariables(t *testing.T) {
	src := flowSource("vars", "", `
## Step: keep
save_body: original
~~~ntd
{"wrapped": {{ $ }}}
~~~

## Step: show
~~~ntd
{"cid": "{{ ctx.correlation_id }}", "tenant": "{{ ctx.tenant }}", "flow": "{{ ctx.flow }}", "version": {{ ctx.version }}, "door": "{{ ctx.door }}", "attempt": {{ ctx.attempt }}, "saved": {{ ctx.original }}, "input": {{ ctx.input }}, "now": {{ $.wrapped.n }}}
~~~
`)
	f := compile(t, src)
	cases := []struct {
		name string
		req  func(*engine.Request)
		want string
	}{
		{"run door, attempt defaults to 1", func(r *engine.Request) { r.Version = 3 },
			`{"cid":"c-1","tenant":"acme","flow":"vars","version":3,"door":"run","attempt":1,"saved":{"wrapped":{"n":5}},"input":{"n":5},"now":5}`},
		{"enqueue door, third attempt", func(r *engine.Request) {
			r.Version, r.Door, r.Attempt, r.CorrelationID = 7, engine.DoorEnqueue, 3, "q-9"
		},
			`{"cid":"q-9","tenant":"acme","flow":"vars","version":7,"door":"enqueue","attempt":3,"saved":{"wrapped":{"n":5}},"input":{"n":5},"now":5}`},
		{"cron door", func(r *engine.Request) { r.Version, r.Door = 1, engine.DoorCron },
			`{"cid":"c-1","tenant":"acme","flow":"vars","version":1,"door":"cron","attempt":1,"saved":{"wrapped":{"n":5}},"input":{"n":5},"now":5}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, engine.New(engine.Config{}), f, `{"n":5}`, c.req)
			cid := res.Header.Get("X-Correlation-Id")
			checkView(t, res, view{Status: 200, Header: jsonHdr(cid), Body: c.want, Outcome: engine.Succeeded})
		})
	}
}

// TestNullDocument holds that a message that is the JSON null reaches the
// flow as null: only an empty body is {}, and that is the door's to make. A
// rule requiring a document refuses it, and an echo answers null.
func TestNullDocument(t *testing.T) {
	e := engine.New(engine.Config{})
	t.Run("validate", func(t *testing.T) {
		f := compile(t, flowSource("nulls", "", "## Step: check\n```validate\n$ != null | \"a document is required\" | syntactic\n```\n\n## Step: echo\n```ntd\n{{ $ }}\n```\n"))
		checkView(t, run(t, e, f, `null`), view{Status: 400, Header: jsonHdr("c-1"), Outcome: engine.Failed,
			Body: `{"error":"a document is required","step":"check"}`,
			Err:  "step 'check': validation failed (Syntactic): a document is required", ErrKind: engine.KindSyntactic})
		checkView(t, run(t, e, f, `{}`), view{Status: 200, Header: jsonHdr("c-1"), Body: `{}`, Outcome: engine.Succeeded})
	})
	t.Run("echo", func(t *testing.T) {
		f := compile(t, flowSource("echo-null", "", "## Step: echo\n```ntd\n{\"doc\": {{ $ }}, \"input\": {{ ctx.input }}}\n```\n"))
		checkView(t, run(t, e, f, `null`), view{Status: 200, Header: jsonHdr("c-1"), Body: `{"doc":null,"input":null}`, Outcome: engine.Succeeded})
	})
}

func TestNTDHoles(t *testing.T) {
	src := flowSource("holes", "", `
## Step: shape
~~~ntd
{
  "s": "{{ $.missing }}",
  "w": {{ $.missing }},
  "o": "{{ $.obj }}",
  "a": "{{ $.arr }}",
  "n": "{{ $.num }}",
  "b": {{ $.bool }},
  "mix": "id-{{ $.num }}-{{ $.s }}",
  "esc": "{{ $.quote }}",
  "whole": {{ $.obj }},
  "expr": {{ $.num * 2 + 1 }},
  "list": [ {{ $.s }}, "{{ upper($.s) }}", {{ len($.arr) }} ]
}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src),
		`{"obj":{"k":"v","z":[1]},"arr":[1,"x"],"num":42,"bool":true,"s":"a","quote":"say \"hi\"\n"}`)
	checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"), Outcome: engine.Succeeded,
		Body: `{"s":"","w":null,"o":"{\"k\":\"v\",\"z\":[1]}","a":"[1,\"x\"]","n":"42","b":true,"mix":"id-42-a",` +
			`"esc":"say \"hi\"\n","whole":{"k":"v","z":[1]},"expr":85,"list":["a","A",2]}`})
}

func TestFaultDescription(t *testing.T) {
	down := newBackend(t, answer(503, "application/json", `{"e":"`+secret+`"}`))
	src := flowSource("describe", "", `
## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
~~~

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: describe
~~~ntd
{"error": "{{ $.fault_error }}", "step": "{{ $.fault_step }}", "cid": "{{ $.fault_correlation_id }}", "input": {{ ctx.input }}}
~~~
`)
	f := compile(t, src, "BACKEND", down.URL)
	cases := []struct {
		name       string
		doc        string
		faultError string
		want       view
	}{
		{"validate failure: the MESSAGE alone", `{}`, "orderId is required",
			view{Status: 400, Header: jsonHdr("c-1"),
				Body:    `{"error":"orderId is required","step":"check","cid":"c-1","input":{"fault_step":"check","fault_error":"orderId is required","fault_correlation_id":"c-1"}}`,
				Outcome: engine.FaultHandled, Err: "step 'check': validation failed (Syntactic): orderId is required", ErrKind: engine.KindSyntactic}},
		{"effect failure: the platform's text", `{"orderId":"A-1"}`, "effect handler failed: HTTP 503 Service Unavailable",
			view{Status: 502, Header: jsonHdr("c-1"),
				Body:    `{"error":"effect handler failed: HTTP 503 Service Unavailable","step":"forward","cid":"c-1","input":{"fault_step":"forward","fault_error":"effect handler failed: HTTP 503 Service Unavailable","fault_correlation_id":"c-1"}}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, engine.New(engine.Config{}), f, c.doc)
			checkView(t, res, c.want)
			if res.Err == nil {
				t.Fatal("Err is nil")
			}
			if got := res.Err.FaultError(); got != c.faultError {
				t.Errorf("FaultError() = %q, want %q", got, c.faultError)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// http_egress
// ---------------------------------------------------------------------------

func TestHTTPEgressRequest(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"ok":true}`))
	src := flowSource("egress", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/orders/{{ $.id }}?note={{ $.note }}
method: PUT
headers: {"Idempotency-Key": "{{ ctx.correlation_id }}", "X-Order": "order-{{ $.id }}", "X-Correlation-ID": "mine"}
`)
	// (the platform's X-Correlation-ID replaces one in headers: docs/decisions.md)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{"id":"A 1/2","note":"x&y=z?","n":1,"nested":{"b":2,"a":[true,null]}}`)
	checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"ok":true}`, Outcome: engine.Succeeded})
	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("backend got %d requests, want 1", len(reqs))
	}
	type sent struct {
		Method, URI, Body                            string
		ContentType, Correlation, Idempotency, Order string
	}
	r := reqs[0]
	got := sent{r.Method, r.URI, r.Body,
		r.Header.Get("Content-Type"), r.Header.Get("X-Correlation-Id"), r.Header.Get("Idempotency-Key"), r.Header.Get("X-Order")}
	want := sent{"PUT", "/orders/A%201%2F2?note=x%26y%3Dz%3F", `{"id":"A 1/2","note":"x&y=z?","n":1,"nested":{"b":2,"a":[true,null]}}`,
		"application/json", "c-1", "c-1", "order-A 1/2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request sent (-want +got):\n%s", diff)
	}
}

// TestHTTPEgressEndpointHoleIsNoDotSegment holds what docs/decisions.md
// promises of an endpoint's holes, "a value cannot add a path segment", for
// the values "." and "..": left as they are they would be dot-segments, and
// /customers/../orders is /orders to any server that normalises the path
// (RFC 3986 §5.2.4), and so is %2E%2E to one that decodes it first
// (§6.2.2.2). The step fails; nothing reaches a backend.
func TestHTTPEgressEndpointHoleIsNoDotSegment(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{}`))
	f := compile(t, flowSource("dots", "", "## Step: call\neffects: [http_egress]\nendpoint: BACKEND/customers/{{ $.id }}/orders\nmethod: GET\n"), "BACKEND", b.URL)
	e := engine.New(engine.Config{})
	for _, id := range []string{"..", "."} {
		res := run(t, e, f, `{"id":"`+id+`"}`)
		want := `step 'call': endpoint: the URL's path holds the segment "` + id + `", which would name another resource: refused`
		if res.Status != http.StatusInternalServerError || res.Err == nil || res.Err.Error() != want {
			t.Errorf("id %q: status %d, %v; want 500 and %s", id, res.Status, res.Err, want)
		}
	}
	if res := run(t, e, f, `{"id":"..."}`); res.Status != http.StatusOK {
		t.Fatalf(`id "...": status %d %s`, res.Status, res.Body)
	}
	var got []string
	for _, r := range b.requests() {
		got = append(got, r.URI)
	}
	want := []string{"/customers/.../orders"} // the refused ids reached no backend
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request URIs (-want +got):\n%s", diff)
	}
}

// TestHTTPEgressEndpointHoleStaysOneSegment: the request a backend
// receives has the path the endpoint names. Literal characters a path
// cannot carry as they are (| ^ é) are percent-encoded, and a hole's
// value stays inside its segment whatever it holds: a / is %2F, and a
// ../ is %2E%2E%2F, so that a backend that decodes before it normalizes
// still sees one segment. A literal | in the endpoint made Go's client
// write the path again from its decoded form, so a hole's %2F went out
// as a /.
func TestHTTPEgressEndpointHoleStaysOneSegment(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{}`))
	e := engine.New(engine.Config{})
	tests := []struct {
		name, endpoint, doc, want string
	}{
		{"slash", "/orders/{{ $.id }}/lines", `{"id":"a/b"}`, "/orders/a%2Fb/lines"},
		{"dot-dot-slash", "/orders/{{ $.id }}/lines", `{"id":"../admin"}`, "/orders/%2E%2E%2Fadmin/lines"},
		{"dot-dot-slash after a literal bar", "/a|b/{{ $.id }}", `{"id":"../../admin"}`, "/a%7Cb/%2E%2E%2F%2E%2E%2Fadmin"},
		{"slash after literal caret and e-acute", "/caf\u00e9^x/{{ $.id }}", `{"id":"x/y"}`, "/caf%C3%A9%5Ex/x%2Fy"},
		{"backslash dot-dot", "/files/{{ $.id }}", `{"id":"..\\etc"}`, "/files/%2E%2E%5Cetc"},
		{"dots beside a slash in a name", "/files/{{ $.id }}", `{"id":"v1.2/x.json"}`, "/files/v1.2%2Fx.json"},
		{"literals in the query", "/q?a={{ $.id }}&b=x|y", `{"id":"1/2"}`, "/q?a=1%2F2&b=x%7Cy"},
	}
	for i, tt := range tests {
		src := flowSource(fmt.Sprintf("seg%d", i), "", "## Step: call\neffects: [http_egress]\nendpoint: BACKEND"+tt.endpoint+"\nmethod: GET\n")
		res := run(t, e, compile(t, src, "BACKEND", b.URL), tt.doc)
		if res.Status != http.StatusOK {
			t.Errorf("%s: status %d, %v", tt.name, res.Status, res.Err)
			continue
		}
		reqs := b.requests()
		if got := reqs[len(reqs)-1].URI; got != tt.want {
			t.Errorf("%s: the backend got %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestHTTPEgressEndpointEmptySegment: a hole that is a whole path segment
// and renders empty (a missing id) fails the step, 500, before any call:
// /orders/{{ $.id }} without an id would call /orders/, another resource.
// A hole beside literal text, or in the query, may render empty.
func TestHTTPEgressEndpointEmptySegment(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{}`))
	e := engine.New(engine.Config{})
	tests := []struct {
		name, endpoint, doc, want string
	}{
		{"last segment, missing", "/orders/{{ $.id }}", `{}`, `step 'call': endpoint: the hole {{ $.id }} renders an empty path segment, so the URL would name another resource: refused`},
		{"last segment, empty string", "/orders/{{ $.id }}", `{"id":""}`, `step 'call': endpoint: the hole {{ $.id }} renders an empty path segment, so the URL would name another resource: refused`},
		{"middle segment", "/orders/{{ $.id }}/lines", `{"id":null}`, `step 'call': endpoint: the hole {{ $.id }} renders an empty path segment, so the URL would name another resource: refused`},
		{"two holes, both empty", "/orders/{{ $.a }}{{ $.b }}?x=1", `{}`, `step 'call': endpoint: the hole {{ $.a }} renders an empty path segment, so the URL would name another resource: refused`},
		{"two holes, one empty", "/orders/{{ $.a }}{{ $.b }}", `{"b":"7"}`, "/orders/7"},
		{"beside literal text", "/orders/o-{{ $.id }}", `{}`, "/orders/o-"},
		{"in the query", "/orders?id={{ $.id }}", `{}`, "/orders?id="},
	}
	for i, tt := range tests {
		src := flowSource(fmt.Sprintf("empty%d", i), "", "## Step: call\neffects: [http_egress]\nendpoint: BACKEND"+tt.endpoint+"\nmethod: GET\n")
		before := len(b.requests())
		res := run(t, e, compile(t, src, "BACKEND", b.URL), tt.doc)
		reqs := b.requests()
		if !strings.HasPrefix(tt.want, "/") {
			if res.Status != http.StatusInternalServerError || res.Err == nil || res.Err.Error() != tt.want || res.Err.Kind != engine.KindDefect {
				t.Errorf("%s: status %d, %v; want 500 and %s", tt.name, res.Status, res.Err, tt.want)
			}
			if len(reqs) != before {
				t.Errorf("%s: the backend got %s", tt.name, reqs[len(reqs)-1].URI)
			}
			continue
		}
		if res.Status != http.StatusOK || len(reqs) != before+1 {
			t.Errorf("%s: status %d, %v, %d requests", tt.name, res.Status, res.Err, len(reqs)-before)
			continue
		}
		if got := reqs[len(reqs)-1].URI; got != tt.want {
			t.Errorf("%s: the backend got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestHTTPEgressAnswers(t *testing.T) {
	const forward = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
`
	cases := []struct {
		name string
		be   http.HandlerFunc
		cfg  engine.Config
		want view
	}{
		{"JSON answer is compact and keeps its key order",
			answer(200, "application/json; charset=utf-8", "{ \"z\" : 1,\n  \"a\" : [ 1, 2 ], \"m\": {\"y\": null, \"b\": \"<&>\"} }"), engine.Config{},
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"z":1,"a":[1,2],"m":{"y":null,"b":"<&>"}}`, Outcome: engine.Succeeded}},
		{"+json answer is JSON",
			answer(200, "application/vnd.acme+json", `{"v": 1}`), engine.Config{},
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"v":1}`, Outcome: engine.Succeeded}},
		{"XML answer stays XML",
			answer(200, "application/xml", `<order id="7"><line>a</line></order>`), engine.Config{},
			view{Status: 200, Header: hdr("Content-Type", "application/xml", "X-Correlation-Id", "c-1"),
				Body: `<order id="7"><line>a</line></order>`, Outcome: engine.Succeeded}},
		{"text answer is text",
			answer(200, "text/plain", "plain words"), engine.Config{},
			view{Status: 200, Header: hdr("Content-Type", "text/plain; charset=utf-8", "X-Correlation-Id", "c-1"),
				Body: "plain words", Outcome: engine.Succeeded}},
		{"answer at the response ceiling",
			answer(200, "application/json", `{"d":"`+strings.Repeat("x", 56)+`"}`), engine.Config{MaxResponseBytes: 64},
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"d":"` + strings.Repeat("x", 56) + `"}`, Outcome: engine.Succeeded}},
		{"answer over the response ceiling",
			answer(200, "application/json", `{"d":"`+strings.Repeat("x", 57)+`"}`), engine.Config{MaxResponseBytes: 64},
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
				Err: "step 'forward': effect handler failed: the answer's body exceeds 64 bytes", ErrKind: engine.KindEffect}},
		{"redirect is a failure and is not followed",
			func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/ingest" {
					http.Redirect(w, r, "/elsewhere", http.StatusFound)
					return
				}
				io.WriteString(w, `{"followed":true}`)
			}, engine.Config{},
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
				Err: "step 'forward': effect handler failed: HTTP 302 Found", ErrKind: engine.KindEffect}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, c.be)
			res := run(t, engine.New(c.cfg), compile(t, flowSource("answers", "", forward), "BACKEND", b.URL), `{"orderId":"A-1"}`)
			checkView(t, res, c.want)
			if n := b.calls.Load(); n != 1 {
				t.Errorf("backend called %d times, want 1", n)
			}
		})
	}
}

func TestHTTPResponseInFaultHandler(t *testing.T) {
	b := newBackend(t, answer(422, "application/json", `{"code":"E42","message":"sku unknown"}`, "X-Partner-Trace", "t-9"))
	src := flowSource("partner-error", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: relay
response_header_content_type: application/problem+json
~~~ntd
{"status": {{ ctx.HTTP_SC }}, "partner": {{ ctx.HTTP_RESPONSE_BODY }}, "code": "{{ ctx.HTTP_RESPONSE_BODY.code }}", "trace": "{{ ctx.HTTP_RESPONSE_HEADERS["X-Partner-Trace"] }}"}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{"orderId":"A-1"}`)
	checkView(t, res, view{Status: 502, Header: hdr("Content-Type", "application/problem+json", "X-Correlation-Id", "c-1"),
		Body:    `{"status":422,"partner":{"code":"E42","message":"sku unknown"},"code":"E42","trace":"t-9"}`,
		Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 422 Unprocessable Entity", ErrKind: engine.KindEffect})
}

func TestHTTPResponseVariablesAfterSuccess(t *testing.T) {
	b := newBackend(t, answer(201, "application/json", `{"id":"ORD-1"}`, "Location", "/orders/ORD-1"))
	src := flowSource("after-call", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: receipt
~~~ntd
{"sc": {{ ctx.HTTP_SC }}, "body": {{ ctx.HTTP_RESPONSE_BODY }}, "location": "{{ ctx.HTTP_RESPONSE_HEADERS.Location }}", "id": "{{ $.id }}"}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
	checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"),
		Body: `{"sc":201,"body":{"id":"ORD-1"},"location":"/orders/ORD-1","id":"ORD-1"}`, Outcome: engine.Succeeded})
}

func TestReadTimeoutIsAnEffectFailure(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	b := newBackend(t, slow(2*time.Second, cancelled))
	src := flowSource("read-timeout", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 100
`)
	res := run(t, engine.New(engine.Config{Transport: inFlight(b)}), compile(t, src, "BACKEND", b.URL), `{}`)
	v := viewOf(res)
	// the text after "effect handler failed: " is the transport's
	if rest, ok := strings.CutPrefix(v.Err, "step 'forward': effect handler failed: "); ok && rest != "" {
		v.Err = "step 'forward': effect handler failed: …"
	}
	want := view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
		Err: "step 'forward': effect handler failed: …", ErrKind: engine.KindEffect}
	// read_timeout_ms bounds the wait for the answer by itself: the
	// call's deadline was once connect_timeout_ms + read_timeout_ms (5000
	// + 100 ms), and a backend taking 2 s to answer made the step succeed
	// (the 502 and the backend's cancellation are the evidence: no timing)
	if diff := cmp.Diff(want, v); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	if res.Status == 502 {
		waitFor(t, cancelled, "cancellation of the backend call")
	}
}

// blackhole returns the address of a loopback listener whose accept queue
// is full and never drained: the kernel drops further SYNs, so a dial to it
// hangs until the dialer's timeout, as one to a host that drops packets.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // room for one connection
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// fill the queue, then check that the next dial hangs
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return addr
			}
			t.Fatalf("dialing the full listener: %v, want a timeout (is net.ipv4.tcp_abort_on_overflow set?)", err)
		}
		t.Cleanup(func() { c.Close() })
		if i == 8 {
			t.Fatal("a listener with a backlog of 0 took 8 connections without accepting one")
		}
	}
}

// connect_timeout_ms bounds the dial: a host that drops the connection's
// packets fails the step after it, as an effect failure (502), not after
// the default 5 s or the read timeout.
func TestConnectTimeoutIsAnEffectFailure(t *testing.T) {
	addr := blackhole(t)
	src := flowSource("connect-timeout", "", `
## Step: forward
effects: [http_egress]
endpoint: http://ADDR/ingest
connect_timeout_ms: 300
read_timeout_ms: 10000
`)
	start := time.Now()
	res := run(t, engine.New(engine.Config{}), compile(t, src, "ADDR", addr), `{}`)
	took := time.Since(start)
	if res.Status != 502 || res.Err == nil || res.Err.Kind != engine.KindEffect || !strings.Contains(res.Err.Error(), "timeout") {
		t.Errorf("status %d, error %v; want 502 and an effect failure naming the timeout", res.Status, res.Err)
	}
	if took > 3*time.Second {
		t.Errorf("Run took %v with connect_timeout_ms: 300 (the default is 5 s)", took)
	}
}

// ---------------------------------------------------------------------------
// Deduplication
// ---------------------------------------------------------------------------

const dedupFlow = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: answer
response_status: 201
response_header_x_order: seen
~~~ntd
{"orderId": "{{ ctx.input.orderId }}", "backend": {{ $ }}}
~~~
`

const dedupFault = `
## Fault: report
response_header_x_fault: yes
~~~ntd
{"rejected": "{{ $.fault_error }}"}
~~~
`

func TestDedupReplay(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"n":1}`))
	f := compile(t, flowSource("dedup", "dedup_key: \"{{ $.orderId }}\"\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
	first := run(t, e, f, `{"orderId":"A-1"}`)
	checkView(t, first, view{Status: 201, Header: jsonHdr("c-1", "X-Order", "seen"),
		Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded})
	second := run(t, e, f, `{"orderId":"A-1","other":"ignored"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	checkView(t, second, view{Status: 201, Header: jsonHdr("c-2", "X-Order", "seen", "X-Nexus-Idempotent-Replay", "true"),
		Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded, Replay: true})
	other := run(t, e, f, `{"orderId":"A-2"}`)
	checkView(t, other, view{Status: 201, Header: jsonHdr("c-1", "X-Order", "seen"),
		Body: `{"orderId":"A-2","backend":{"n":1}}`, Outcome: engine.Succeeded})
	if n := b.calls.Load(); n != 2 {
		t.Errorf("backend called %d times, want 2 (once per key)", n)
	}
}

// A queued delivery (NoBody) gets no answer built, unless the flow
// deduplicates: the answer recorded for a later duplicate on /run is the
// whole one.
func TestNoBody(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{"n":1}`))
	plain := compile(t, flowSource("plain", "", dedupFlow), "BACKEND", b.URL)
	deduped := compile(t, flowSource("dedup", "dedup_key: \"{{ $.orderId }}\"\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
	queued := func(r *engine.Request) { r.Door, r.NoBody = engine.DoorEnqueue, true }

	checkView(t, run(t, e, plain, `{"orderId":"A-1"}`, queued), view{Status: 201, Header: map[string]string{}, Outcome: engine.Succeeded})
	checkView(t, run(t, e, deduped, `{"orderId":"A-1"}`, queued), view{Status: 201, Header: jsonHdr("c-1", "X-Order", "seen"),
		Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded})
	replay := run(t, e, deduped, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	checkView(t, replay, view{Status: 201, Header: jsonHdr("c-2", "X-Order", "seen", "X-Nexus-Idempotent-Replay", "true"),
		Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded, Replay: true})
}

func TestDedupOnFailure(t *testing.T) {
	cases := []struct {
		name       string
		front      string
		fault      string
		wantCalls  int64
		wantReplay bool
		first      view
	}{
		{
			name: "fault handled, rerun (the default)", front: "", fault: dedupFault, wantCalls: 2,
			first: view{Status: 502, Header: jsonHdr("c-1", "X-Fault", "yes"),
				Body:    `{"rejected":"effect handler failed: HTTP 503 Service Unavailable"}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			name: "fault handled with response_status 200, rerun", front: "dedup_on_failure: rerun\n",
			fault: "\n## Fault: absorb\nresponse_status: 200\n~~~ntd\n{\"accepted\": false}\n~~~\n", wantCalls: 2,
			first: view{Status: 200, Header: jsonHdr("c-1"), Body: `{"accepted":false}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			name: "fault handled, absorb", front: "dedup_on_failure: absorb\n", fault: dedupFault, wantCalls: 1, wantReplay: true,
			first: view{Status: 502, Header: jsonHdr("c-1", "X-Fault", "yes"),
				Body:    `{"rejected":"effect handler failed: HTTP 503 Service Unavailable"}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			name: "failed without handler, rerun", front: "", wantCalls: 2,
			first: view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
				Outcome: engine.Failed, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			name: "failed without handler, absorb", front: "dedup_on_failure: absorb\n", wantCalls: 1, wantReplay: true,
			first: view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
				Outcome: engine.Failed, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
		{
			// a failed handler's 500 is a finished execution: recorded
			name: "fault handler failed, absorb", front: "dedup_on_failure: absorb\n", wantCalls: 1, wantReplay: true,
			fault: "\n## Fault: broken\nresponse_status: \"{{ $.nope }}\"\n",
			first: view{Status: 500, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"fault handler failed"}`,
				Outcome: engine.Failed, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect,
				HandlerErr: `step 'broken': response_status rendered "", which is not a status code`, HandlerErrKind: engine.KindDefect},
		},
		{
			// a 503 answer is never recorded, not even under absorb
			name: "fault answers 503, absorb", front: "dedup_on_failure: absorb\n",
			fault: "\n## Fault: busy\nresponse_status: 503\nresponse_header_retry_after: 5\n~~~ntd\n{\"busy\": true}\n~~~\n", wantCalls: 2,
			first: view{Status: 503, Header: jsonHdr("c-1", "Retry-After", "5"), Body: `{"busy":true}`,
				Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(503, "text/plain", secret))
			f := compile(t, flowSource("dedup-fail", "dedup_key: \"{{ $.orderId }}\"\n"+c.front, dedupFlow+c.fault), "BACKEND", b.URL)
			e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
			first := run(t, e, f, `{"orderId":"A-1"}`)
			checkView(t, first, c.first)
			second := run(t, e, f, `{"orderId":"A-1"}`)
			want := c.first
			if c.wantReplay {
				want.Header = withHeader(want.Header, "X-Nexus-Idempotent-Replay", "true")
				want.Replay = true
				want.Err, want.ErrKind, want.HandlerErr, want.HandlerErrKind = "", 0, "", 0
			}
			checkView(t, second, want)
			if n := b.calls.Load(); n != c.wantCalls {
				t.Errorf("backend called %d times, want %d", n, c.wantCalls)
			}
		})
	}
}

// The duration ceiling's 500 is a finished execution: its row is committed
// (as a failure), so under absorb a duplicate gets it replayed and the
// backend is not called again.
func TestDedupCeilingIsRecorded(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	b := newBackend(t, slow(2*time.Second, cancelled))
	f := compile(t, flowSource("dedup-ceiling", "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\ntimeout_ms: 200\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Transport: inFlight(b), Dedup: &enginetest.Dedup{}})
	want := `{"ok":false,"error":"duration ceiling of 200 ms reached","step":"forward"}`
	first := run(t, e, f, `{"orderId":"A-1"}`)
	if first.Status != 500 || string(first.Body) != want || first.Replay {
		t.Fatalf("first delivery: %d %s (replay %v), want 500 %s", first.Status, first.Body, first.Replay, want)
	}
	second := run(t, e, f, `{"orderId":"A-1"}`)
	if second.Status != 500 || string(second.Body) != want || !second.Replay {
		t.Errorf("duplicate: %d %s (replay %v), want the recorded 500 replayed", second.Status, second.Body, second.Replay)
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("backend called %d times, want 1", n)
	}
}

// withHeader returns a copy of m with the name, value pairs added.
func withHeader(m map[string]string, kv ...string) map[string]string {
	c := map[string]string{}
	for k, v := range m {
		c[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i]] = kv[i+1]
	}
	return c
}

// panickingPublisher panics on its first call and accepts every later one.
type panickingPublisher struct{ calls atomic.Int64 }

func (p *panickingPublisher) Publish(context.Context, string, string, []byte, string) error {
	if p.calls.Add(1) == 1 {
		panic("publisher broke")
	}
	return nil
}

func TestDedupInternalErrorIsNotRecorded(t *testing.T) {
	src := flowSource("dedup-internal", "dedup_key: \"{{ $.orderId }}\"\ntimeout_ms: 300\n", `
## Step: hand-off
effects: [queue_publish]
queue: order-fulfilment
`)
	f := compile(t, src)
	pub := &panickingPublisher{}
	// the store's clock stands still, so a claim left behind never expires
	frozen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	store := &enginetest.Dedup{Now: func() time.Time { return frozen }}
	e := engine.New(engine.Config{Dedup: store, Publisher: pub, DedupPoll: 5 * time.Millisecond})
	first := run(t, e, f, `{"orderId":"A-1"}`)
	v := viewOf(first)
	v.Err = strings.SplitN(v.Err, "\n", 2)[0]
	if diff := cmp.Diff(view{Status: 500, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"internal error"}`,
		Outcome: engine.Failed, Err: "internal error", ErrKind: engine.KindInternal}, v); diff != "" {
		t.Errorf("first delivery (-want +got):\n%s", diff)
	}
	// the panic does not unwind past the release of the dedup key: the
	// next delivery runs again at once, rather than waiting for the lease
	// of a first delivery that has ended and answering 503
	second := run(t, e, f, `{"orderId":"A-1"}`)
	checkView(t, second, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"orderId":"A-1"}`, Outcome: engine.Succeeded})
	if n := pub.calls.Load(); n != 2 {
		t.Errorf("publisher called %d times, want 2", n)
	}
}

func TestDedupStoreFailsOnCommit(t *testing.T) {
	for _, retry := range []bool{false, true} {
		store := &enginetest.Dedup{}
		b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			store.Fail(errors.New("store went away"))
			answer(200, "application/json", `{"n":1}`)(w, r)
		})
		f := compile(t, flowSource("dedup-commit", "dedup_key: \"{{ $.orderId }}\"\n", dedupFlow), "BACKEND", b.URL)
		res := run(t, engine.New(engine.Config{Dedup: store}), f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.Retry = retry })
		checkView(t, res, view{Status: 503, Header: jsonHdr("c-1", "Retry-After", "1"),
			Body:    `{"ok":false,"error":"flow state is unavailable; try again"}`,
			Outcome: engine.Failed, Err: "flow state is unavailable: recording the answer: store went away", ErrKind: engine.KindStateUnavailable})
		if n := b.calls.Load(); n != 1 {
			t.Errorf("retry %v: backend called %d times, want 1", retry, n)
		}
	}
}

// A later attempt of a queued message (Retry) skips the dedup check
// (flow-file.md, "a retry of the same queued message skips the dedup
// check"): it runs whatever its key holds. It holds the key when the key is
// free or holds a failure (under rerun and under absorb alike) and records
// its answer, which a duplicate then gets replayed; a success another
// delivery recorded stands, and so does another execution's hold on the
// key, which the retry does not wait for.
func TestDedupRetry(t *testing.T) {
	for _, policy := range []string{"", "dedup_on_failure: absorb\n"} {
		t.Run("policy "+strings.TrimSpace(policy), func(t *testing.T) {
			var n atomic.Int32
			var fail atomic.Bool
			fail.Store(true)
			b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if fail.Load() {
					answer(503, "text/plain", "down")(w, r)
					return
				}
				answer(200, "application/json", fmt.Sprintf(`{"n":%d}`, n.Load()))(w, r)
			})
			f := compile(t, flowSource("dedup-retry", "dedup_key: \"{{ $.orderId }}\"\n"+policy, dedupFlow), "BACKEND", b.URL)
			store := &enginetest.Dedup{}
			e := engine.New(engine.Config{Dedup: store})
			queued := func(attempt int) func(r *engine.Request) {
				return func(r *engine.Request) {
					r.Door, r.NoBody, r.Attempt, r.Retry = engine.DoorEnqueue, true, attempt, attempt > 1
				}
			}
			duplicate := func(key, want string) {
				t.Helper()
				dup := run(t, e, f, `{"orderId":"`+key+`"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
				if got := string(dup.Body); !dup.Replay || dup.Status != 201 || got != want {
					t.Errorf("a duplicate of %s on /run: status %d, replay %v, body %s; want the recorded 201 %s", key, dup.Status, dup.Replay, got, want)
				}
			}
			retry := func(key string, attempt int, want engine.Outcome) {
				t.Helper()
				if r := run(t, e, f, `{"orderId":"`+key+`"}`, queued(attempt)); r.Outcome != want || r.Replay {
					t.Errorf("attempt %d of %s: %v (replay %v), want it run and %v", attempt, key, r.Outcome, r.Replay, want)
				}
			}
			if r := run(t, e, f, `{"orderId":"A-1"}`, queued(1)); r.Outcome != engine.Failed {
				t.Fatalf("attempt 1: %v, want failed (the backend answers 503)", r.Outcome)
			}
			fail.Store(false)
			retry("A-1", 2, engine.Succeeded) // over its own recorded failure
			duplicate("A-1", `{"orderId":"A-1","backend":{"n":2}}`)
			// a recorded success does not stop a retry, and stands whatever
			// the retry's outcome
			retry("A-1", 3, engine.Succeeded)
			fail.Store(true)
			retry("A-1", 4, engine.Failed)
			duplicate("A-1", `{"orderId":"A-1","backend":{"n":2}}`)

			// another execution holding the key: the retry runs without
			// waiting for it and records nothing over its hold
			fail.Store(false)
			_, holder, err := store.Claim(context.Background(), "acme", "dedup-retry", "B-1", false, time.Hour)
			if err != nil || holder == 0 {
				t.Fatalf("Claim of B-1 = %d, %v; want a claim", holder, err)
			}
			retry("B-1", 2, engine.Succeeded)
			if answer, c, err := store.Claim(context.Background(), "acme", "dedup-retry", "B-1", true, time.Hour); err != nil || c != 0 || answer != nil {
				t.Errorf("Claim of B-1 after the retry = %q, %d, %v; want it still held", answer, c, err)
			}
			if err := store.Release(context.Background(), "acme", "dedup-retry", "B-1", holder); err != nil {
				t.Fatal(err)
			}
			if answer, c, err := store.Claim(context.Background(), "acme", "dedup-retry", "B-1", false, time.Hour); err != nil || c == 0 {
				t.Errorf("Claim of B-1 once its holder released it = %q, %d, %v; want it free (the retry recorded nothing)", answer, c, err)
			}
			if got := b.calls.Load(); got != 5 {
				t.Errorf("backend called %d times, want 5 (one per attempt)", got)
			}
		})
	}
}

// countingDedup counts the calls to Claim.
type countingDedup struct {
	*enginetest.Dedup
	claims atomic.Int32
}

func (d *countingDedup) Claim(ctx context.Context, tenant, flow, key string, rerunFailed bool, lease time.Duration) ([]byte, int64, error) {
	d.claims.Add(1)
	return d.Dedup.Claim(ctx, tenant, flow, key, rerunFailed, lease)
}

// While a retry runs holding its key, a duplicate waits for it and gets
// its answer, as it waits for any first delivery.
func TestDedupDuplicateWaitsForARetry(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			answer(503, "text/plain", "down")(w, r)
			return
		}
		<-release
		answer(200, "application/json", `{"n":2}`)(w, r)
	})
	f := compile(t, flowSource("dedup-wait", "dedup_key: \"{{ $.orderId }}\"\n", dedupFlow), "BACKEND", b.URL)
	store := &countingDedup{Dedup: &enginetest.Dedup{}}
	e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond})
	queued := func(attempt int) func(r *engine.Request) {
		return func(r *engine.Request) {
			r.Door, r.NoBody, r.Attempt, r.Retry = engine.DoorEnqueue, true, attempt, attempt > 1
		}
	}
	if r := run(t, e, f, `{"orderId":"A-1"}`, queued(1)); r.Outcome != engine.Failed {
		t.Fatalf("attempt 1: %v, want failed", r.Outcome)
	}
	done := make(chan engine.Result)
	retryReq := newRequest(t, f, `{"orderId":"A-1"}`, queued(2))
	go func() { done <- e.Run(context.Background(), retryReq) }()
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond) // until the retry's call is in flight
	}
	claims := store.claims.Load()
	dup := make(chan engine.Result)
	dupReq := newRequest(t, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
	go func() { dup <- e.Run(context.Background(), dupReq) }()
	for deadline := time.Now().Add(10 * time.Second); store.claims.Load() < claims+3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // the duplicate did not find the key held
			close(release)
			t.Fatalf("the duplicate claimed %d times while the retry ran, want it polling", store.claims.Load()-claims)
		}
	}
	close(release)
	if r := <-done; r.Outcome != engine.Succeeded || r.Replay {
		t.Errorf("the retry: %v (replay %v), want succeeded", r.Outcome, r.Replay)
	}
	if r := <-dup; !r.Replay || string(r.Body) != `{"orderId":"A-1","backend":{"n":2}}` {
		t.Errorf("the duplicate: replay %v, body %s; want the retry's answer replayed", r.Replay, r.Body)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("backend called %d times, want 2 (the duplicate waited)", got)
	}
}

func TestDedupConcurrentDuplicates(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		answer(200, "application/json", `{"n":1}`)(w, r)
	})
	f := compile(t, flowSource("dedup-concurrent", "dedup_key: \"{{ $.orderId }}\"\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}, DedupPoll: 5 * time.Millisecond})
	const n = 16
	doc := parse(t, `{"orderId":"A-1"}`)
	results := make([]engine.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.Run(context.Background(), engine.Request{Flow: f, Doc: doc, CorrelationID: "c-1", Door: engine.DoorRun})
		}()
	}
	wg.Wait()
	if got := b.calls.Load(); got != 1 {
		t.Errorf("backend called %d times, want 1", got)
	}
	replays := 0
	for i, r := range results {
		if r.Replay {
			replays++
		}
		v := viewOf(r)
		delete(v.Header, "X-Nexus-Idempotent-Replay")
		v.Replay = false
		want := view{Status: 201, Header: jsonHdr("c-1", "X-Order", "seen"), Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded}
		if diff := cmp.Diff(want, v); diff != "" {
			t.Errorf("delivery %d (-want +got):\n%s", i, diff)
		}
	}
	if replays != n-1 {
		t.Errorf("%d replays, want %d", replays, n-1)
	}
}

func TestDedupTTL(t *testing.T) {
	var clock atomic.Int64
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	store := &enginetest.Dedup{Now: func() time.Time { return base.Add(time.Duration(clock.Load())) }}
	b := newBackend(t, answer(200, "application/json", `{"n":1}`))
	f := compile(t, flowSource("dedup-ttl", "dedup_key: \"{{ $.orderId }}\"\ndedup_ttl_ms: 60000\n", dedupFlow), "BACKEND", b.URL)
	e := engine.New(engine.Config{Dedup: store})
	okView := view{Status: 201, Header: jsonHdr("c-1", "X-Order", "seen"), Body: `{"orderId":"A-1","backend":{"n":1}}`, Outcome: engine.Succeeded}
	replay := okView
	replay.Header = withHeader(okView.Header, "X-Nexus-Idempotent-Replay", "true")
	replay.Replay = true

	checkView(t, run(t, e, f, `{"orderId":"A-1"}`), okView)
	clock.Store(int64(59 * time.Second))
	checkView(t, run(t, e, f, `{"orderId":"A-1"}`), replay)
	clock.Store(int64(61 * time.Second))
	checkView(t, run(t, e, f, `{"orderId":"A-1"}`), okView)
	if n := b.calls.Load(); n != 2 {
		t.Errorf("backend called %d times, want 2", n)
	}
}

func TestDedupAbsorbExample(t *testing.T) {
	var down atomic.Bool
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			answer(503, "text/plain", secret)(w, r)
			return
		}
		answer(200, "application/json", `{"accepted":true}`)(w, r)
	})
	f := example(t, "order-intake-absorb", "https://orders.example.com", b.URL)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})

	down.Store(true)
	absorbed := view{Status: 200, Header: jsonHdr("c-1"),
		Body:    `{"accepted":false,"detail":"effect handler failed: HTTP 503 Service Unavailable","correlationId":"c-1"}`,
		Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect}
	checkView(t, run(t, e, f, `{"orderId":"A-1","total":3}`), absorbed)
	down.Store(false)
	// the handled failure committed as a failure: the duplicate runs again
	success := view{Status: 200, Header: jsonHdr("c-1"), Body: `{"accepted":true}`, Outcome: engine.Succeeded}
	checkView(t, run(t, e, f, `{"orderId":"A-1","total":3}`), success)
	// and the success is remembered
	replay := success
	replay.Header = withHeader(success.Header, "X-Nexus-Idempotent-Replay", "true")
	replay.Replay = true
	checkView(t, run(t, e, f, `{"orderId":"A-1","total":3}`), replay)
	if n := b.calls.Load(); n != 2 {
		t.Errorf("backend called %d times, want 2", n)
	}
}

// A failed call's text, which a fault handler may show its caller as
// $.fault_error, names the endpoint without its query (where an API key
// lives): Go's "Post "URL": cause", the URL cut.
func TestTransportErrorHidesTheQuery(t *testing.T) {
	src := flowSource("leak", "", `
## Step: forward
effects: [http_egress]
endpoint: http://127.0.0.1:1/ingest?api_key=s3cr3t-partner-key
method: POST

## Fault: problem-detail
response_header_content_type: application/problem+json
~~~ntd
{"detail": "{{ $.fault_error }}"}
~~~
`)
	r := run(t, engine.New(engine.Config{}), compile(t, src), `{"orderId":"A-1"}`)
	if strings.Contains(string(r.Body), "s3cr3t") || !strings.Contains(string(r.Body), `effect handler failed: Post \"http://127.0.0.1:1/ingest\": dial tcp`) {
		t.Errorf("the fault handler's answer: %d %s", r.Status, r.Body)
	}
}

// TestPanicInFaultSequenceKeepsTheMainError: a panic inside the fault
// sequence answers the platform's 500, and the delivery's error stays the
// main sequence's (the panic is the handler's error), as for the ceiling;
// it once replaced the main error, which the journal and a queue's
// last_error then lost.
func TestPanicInFaultSequenceKeepsTheMainError(t *testing.T) {
	src := flowSource("fault-panic", "", `
## Step: check
~~~validate
$.ok == true | "not ok"
~~~

## Fault: hand-off
effects: [queue_publish]
queue: order-fulfilment
`)
	res := run(t, engine.New(engine.Config{Publisher: &panickingPublisher{}}), compile(t, src), `{"ok":false}`)
	if res.Status != 500 || res.Err == nil || res.Err.Kind != engine.KindSemantic || res.HandlerErr == nil || res.HandlerErr.Kind != engine.KindInternal {
		t.Errorf("status %d, error %v, handler error %v; want 500, the validate failure, and the panic as the handler's error", res.Status, res.Err, res.HandlerErr)
	}
}

// TestRenderedStatus: a response_status template's text is a status code
// when it is three digits from 100 to 599, blanks around them aside;
// "+201" and "0201", which strconv.Atoi reads as 201, are step errors, as
// handling-failures.md says of a template rendering something that is not
// a status.
func TestRenderedStatus(t *testing.T) {
	f := compile(t, flowSource("reply", "", "\n## Step: reply\nresponse_status: \"{{ $.code }}\"\n"))
	e := engine.New(engine.Config{})
	for _, c := range []struct {
		code string
		want int
	}{
		{"201", 201}, {" 202 ", 202}, {"599", 599},
		{"+201", 500}, {"0201", 500}, {"20", 500}, {"2010", 500}, {"600", 500}, {"099", 500}, {"2 1", 500}, {"", 500},
	} {
		r := run(t, e, f, `{"code":"`+c.code+`"}`)
		if r.Status != c.want {
			t.Errorf("rendered %q: status %d, want %d (error %v)", c.code, r.Status, c.want, r.Err)
		}
		if c.want == 500 && (r.Err == nil || !strings.Contains(r.Err.Error(), "which is not a status code")) {
			t.Errorf("rendered %q: error %v, want one saying it is not a status code", c.code, r.Err)
		}
	}
}
