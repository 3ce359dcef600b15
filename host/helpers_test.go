package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The tests of this package run the real gate, body reader, parser and
// engine over a real registry in a temporary folder; only the clock and
// the git syncer are fakes.

// t0 is the fake clock's starting time.
var t0 = time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)

// The keys of the fixture's access.yaml.
const (
	keyAcmeAll     = "key-acme-all"     // acme-all: tenant acme, every flow
	keyAcmeOrders  = "key-acme-orders"  // acme-orders: tenant acme, [order-intake]
	keyGlobex      = "key-globex"       // globex-all: tenant globex, every flow
	keyAcmeLimited = "key-acme-limited" // acme-limited: tenant acme, every flow, rate 1 burst 1
	keyAcmeSlow    = "key-acme-slow"    // acme-slow: tenant acme, every flow, rate 0.4 burst 1
	keyRevoked     = "key-acme-revoked" // in no access.yaml
)

// testAccessYAML is the fixture's access.yaml.
func testAccessYAML() string {
	entry := func(id, tenant, key, flows, extra string) string {
		sum := sha256.Sum256([]byte(key))
		return fmt.Sprintf("  - id: %s\n    tenant: %s\n    sha256: %s\n    flows: [%s]\n%s", id, tenant, hex.EncodeToString(sum[:]), flows, extra)
	}
	return "keys:\n" +
		entry("acme-all", "acme", keyAcmeAll, `"*"`, "") +
		entry("acme-orders", "acme", keyAcmeOrders, "order-intake", "") +
		entry("globex-all", "globex", keyGlobex, `"*"`, "") +
		entry("acme-limited", "acme", keyAcmeLimited, `"*"`, "    rate: 1\n    burst: 1\n") +
		entry("acme-slow", "acme", keyAcmeSlow, `"*"`, "    rate: 0.4\n    burst: 1\n")
}

// flowFile is a flow file of tenant/name with extra front matter lines and
// the given steps.
func flowFile(tenant, name, frontMatter, steps string) string {
	return "---\nflowmarkdown_version: \"0.1\"\nflow: " + name + "\ntenant: " + tenant + "\n" + frontMatter + "---\n\n" + steps
}

// echoSteps answer the parsed message itself.
const echoSteps = "## Step: echo\n```ntd\n{{ $ }}\n```\n"

// testFlows are the fixture's flows: path → source.
func testFlows() map[string]string {
	return map[string]string{
		"flows/acme/echo.md":         flowFile("acme", "echo", "", echoSteps),
		"flows/acme/small.md":        flowFile("acme", "small", "max_body_bytes: 16\n", echoSteps),
		"flows/acme/order-intake.md": flowFile("acme", "order-intake", "", "## Step: answer\n```ntd\n{\"accepted\": true}\n```\n"),
		"flows/acme/hello.md": flowFile("acme", "hello", "", "## Step: check\n```validate\n$.name != null | \"name is required\" | syntactic\n```\n\n"+
			"## Step: greet\n```ntd\n{\"greeting\": \"hello, {{ $.name }}\", \"correlationId\": \"{{ ctx.correlation_id }}\"}\n```\n"),
		"flows/globex/shipment.md": flowFile("globex", "shipment", "", echoSteps),
	}
}

// fakeSyncer counts Trigger calls.
type fakeSyncer struct{ n atomic.Int64 }

func (s *fakeSyncer) Trigger() { s.n.Add(1) }

// fixture is a Server over a real registry holding testFlows and
// testAccessYAML.
type fixture struct {
	t       testing.TB
	reg     *registry.Registry
	clock   *clocktest.Fake
	metrics *host.Metrics
	syncer  *fakeSyncer
	server  *host.Server
	handler http.Handler
}

const fixtureCommit = "0123456789abcdef0123456789abcdef01234567"

// newFixture publishes the test flows and keys into a fresh registry, loads
// the live set and builds a Server; edit adjusts its Config.
func newFixture(t testing.TB, edit func(*host.Config)) *fixture {
	t.Helper()
	fx := newUnloadedFixture(t, edit)
	fx.publish(testFlows(), testAccessYAML(), fixtureCommit)
	return fx
}

// newUnloadedFixture is a Server over an empty registry whose live set is
// not loaded yet.
func newUnloadedFixture(t testing.TB, edit func(*host.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	fx := &fixture{t: t, clock: clocktest.New(t0), metrics: host.NewMetrics(), syncer: &fakeSyncer{}}
	reg, err := registry.Open(ctx, filepath.Join(t.TempDir(), "state", "registry.db"), registry.Options{Now: fx.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	fx.reg = reg
	cfg := host.Config{
		Live: reg, Status: reg, Engine: engine.New(engine.Config{Dedup: reg.Dedup()}),
		Metrics: fx.metrics, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Sync: fx.syncer, Now: fx.clock.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	fx.server = host.New(cfg)
	fx.handler = fx.server.Handler()
	return fx
}

// publish compiles files and the keys, publishes them as commit and loads
// the live set.
func (fx *fixture) publish(files map[string]string, accessYAML, commit string) {
	fx.t.Helper()
	ctx := context.Background()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var flows []*flow.Flow
	for _, p := range paths {
		f, err := flow.Compile(p, []byte(files[p]))
		if err != nil {
			fx.t.Fatalf("compiling %s: %v", p, err)
		}
		flows = append(flows, f)
	}
	keys, err := access.Parse("access.yaml", []byte(accessYAML))
	if err != nil {
		fx.t.Fatalf("access.yaml: %v", err)
	}
	if _, err := fx.reg.Publish(ctx, registry.Publication{Flows: flows, Complete: true, Access: keys, Commit: commit}); err != nil {
		fx.t.Fatal(err)
	}
	if _, err := fx.reg.Load(ctx); err != nil {
		fx.t.Fatal(err)
	}
}

// recordingBody is a request body that counts how often it was read.
type recordingBody struct {
	r      io.Reader
	reads  atomic.Int64
	closed atomic.Bool
}

func (b *recordingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.r.Read(p)
}

func (b *recordingBody) Close() error { b.closed.Store(true); return nil }

// endless is an endless body of 'a's.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// hugeBody is a request body announcing size bytes of which none is meant
// to be read.
func hugeBody(r *http.Request, size int64) *recordingBody {
	b := &recordingBody{r: endless{}}
	r.Body = b
	r.ContentLength = size
	r.Header.Set("Content-Length", fmt.Sprint(size))
	return b
}

// newRequest builds a request; header holds name, value pairs.
func newRequest(method, path, body string, header ...string) *http.Request {
	r := httptest.NewRequest(method, "http://nexus.test"+path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// runRequest is a POST to /flows/{tenant}/{flow}/run with a JSON body and
// key as a Bearer token ("" sends no Authorization).
func runRequest(tenant, flowName, key, body string, header ...string) *http.Request {
	r := newRequest(http.MethodPost, "/flows/"+tenant+"/"+flowName+"/run", body, header...)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	if r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// serve runs r through the handler.
func (fx *fixture) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	fx.handler.ServeHTTP(w, r)
	return w
}

// wantRefusal checks a refusal {"ok":false,"error":msg} with status and an
// X-Correlation-Id.
func wantRefusal(t *testing.T, w *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("status = %d, want %d (body %s)", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %q is not JSON: %v", w.Body, err)
	}
	want := map[string]any{"ok": false, "error": msg}
	if len(got) != 2 || got["ok"] != false || got["error"] != msg {
		t.Errorf("body = %s, want %v", w.Body, want)
	}
	if w.Header().Get("X-Correlation-Id") == "" {
		t.Error("no X-Correlation-Id on the answer")
	}
}

// wantRefusalPrefix is wantRefusal for an error that starts with prefix.
func wantRefusalPrefix(t *testing.T, w *httptest.ResponseRecorder, status int, prefix string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("status = %d, want %d (body %s)", w.Code, status, w.Body)
	}
	var got struct {
		OK    *bool  `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.OK == nil || *got.OK || !strings.HasPrefix(got.Error, prefix) {
		t.Errorf("body = %s, want {\"ok\":false,\"error\":\"%s…\"}", w.Body, prefix)
	}
	if w.Header().Get("X-Correlation-Id") == "" {
		t.Error("no X-Correlation-Id on the answer")
	}
}

// wantJSON checks a 200 answer whose body is the JSON document want.
func wantJSON(t *testing.T, w *httptest.ResponseRecorder, want string) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200 (body %s)", w.Code, w.Body)
	}
	var g, e any
	if err := json.Unmarshal(w.Body.Bytes(), &g); err != nil {
		t.Fatalf("body %q is not JSON: %v", w.Body, err)
	}
	if err := json.Unmarshal([]byte(want), &e); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	eb, _ := json.Marshal(e)
	if !bytes.Equal(gb, eb) {
		t.Errorf("body = %s, want %s", w.Body, want)
	}
}

// uuidV4 is a lowercase version 4 UUID.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// quote is strconv.Quote: how the name rule quotes a name.
func quote(s string) string { return strconv.Quote(s) }

// hashHex is the hex SHA-256 of key, as access.yaml stores it.
func hashHex(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// absorbServer publishes, beside the test flows, acme/absorb: a flow with
// dedup_key and dedup_on_failure: absorb whose one step calls backend
// (front and step add to its front matter and step keys), and returns a
// server over fx's registry with the registry's dedup store, and a
// delivery of its message {"orderId":"A-1"} as id at attempt.
func absorbServer(t *testing.T, fx *fixture, backend, front, step string) (*host.Server, func(id uint64, attempt int) queue.Delivery) {
	t.Helper()
	files := testFlows()
	files["flows/acme/absorb.md"] = flowFile("acme", "absorb", "effects: [http_egress]\ndedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: absorb\n"+front,
		"## Step: forward\neffects: [http_egress]\nendpoint: "+backend+"/ingest\nmethod: POST\n"+step)
	fx.publish(files, testAccessYAML(), "c2")
	srv := host.New(host.Config{Live: fx.reg, Status: fx.reg, Engine: engine.New(engine.Config{Dedup: fx.reg.Dedup()}),
		Metrics: host.NewMetrics(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	return srv, func(id uint64, attempt int) queue.Delivery {
		return queue.Delivery{Message: queue.Message{ID: id, Source: engine.DoorEnqueue, CorrelationID: fmt.Sprint("m", id),
			Payload: []byte(`{"orderId":"A-1"}`)}, Tenant: "acme", Flow: "absorb", Attempt: attempt}
	}
}

// heldBackend is a downstream that counts its calls and answers each
// (200 {"accepted":true}) only once it is freed: a flow calling it stays
// in flight meanwhile.
type heldBackend struct {
	*httptest.Server
	calls   atomic.Int32
	release chan struct{}
	once    sync.Once
}

// newHeldBackend starts a heldBackend, freed and closed when the test ends.
func newHeldBackend(t *testing.T) *heldBackend {
	t.Helper()
	b := &heldBackend{release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		<-b.release
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"accepted":true}`))
	}))
	t.Cleanup(b.Close)
	t.Cleanup(b.free) // before Close: the calls held end
	return b
}

// free lets every call held, and every later one, answer.
func (b *heldBackend) free() { b.once.Do(func() { close(b.release) }) }

// sendWithCookie sends method path to srv with the session cookie (a form
// body, when form is set, as the UI's buttons send it; header in name,
// value pairs) and returns the answer, its body read. Redirects are not
// followed.
func sendWithCookie(t *testing.T, srv *httptest.Server, cookie *http.Cookie, method, path string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req.AddCookie(cookie)
	res, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

// noRedirects is a client that returns a redirect as it is answered.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
