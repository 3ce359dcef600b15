package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The operations endpoints and the correlation ID of every answer.

const adminKey = "admin-key-0123456789"

func TestHealthAndReadiness(t *testing.T) {
	fx := newUnloadedFixture(t, nil)
	get := func(path string) *httptest.ResponseRecorder { return fx.serve(newRequest(http.MethodGet, path, "")) }

	if w := get("/healthz"); w.Code != http.StatusOK || w.Header().Get("X-Correlation-Id") == "" {
		t.Errorf("/healthz before a live set: %d %s", w.Code, w.Body)
	}
	if w := get("/readyz"); w.Code != http.StatusServiceUnavailable || w.Header().Get("X-Correlation-Id") == "" {
		t.Errorf("/readyz before a live set: %d %s, want 503", w.Code, w.Body)
	}
	// a door before the live set is loaded: 503 with a Retry-After, as
	// every 503 of the doors has (it had none)
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{}`))
	wantRefusal(t, w, http.StatusServiceUnavailable, "the host is starting: no live set yet")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("/run before a live set: Retry-After %q, want 1", got)
	}

	fx.publish(testFlows(), testAccessYAML(), fixtureCommit)
	if w := get("/readyz"); w.Code != http.StatusOK {
		t.Errorf("/readyz after the live set is loaded: %d %s, want 200", w.Code, w.Body)
	}
	if w := get("/healthz"); w.Code != http.StatusOK {
		t.Errorf("/healthz: %d %s", w.Code, w.Body)
	}
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)), `{"a":1}`)
}

// TestReadyAwaitsTheFirstPublication: a host that follows a repo, on a
// registry that never had a publication (a new state directory, the
// repo's first sync not done), is not ready and its doors answer 503 with
// Retry-After: 1: it took traffic with nothing to serve, every key
// unknown (401) until the first sync. Once a publication is live it is.
func TestReadyAwaitsTheFirstPublication(t *testing.T) {
	fx := newUnloadedFixture(t, func(c *host.Config) { c.AwaitFirstPublication = true })
	if _, err := fx.reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	const why = "the host is starting: the repo's first sync has not published yet"
	wantRefusal(t, fx.serve(newRequest(http.MethodGet, "/readyz", "")), http.StatusServiceUnavailable, why)
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{}`)) // /enqueue's gate is the same
	wantRefusal(t, w, http.StatusServiceUnavailable, why)
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("/run before the first publication: Retry-After %q, want 1", got)
	}
	// a queued message waits rather than being dropped as withdrawn (its
	// flow may well be in the repo), and a publish is refused
	queues := queue.NewManager(queue.ManagerConfig{Root: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: queue.HandlerFunc(func(context.Context, queue.Delivery) queue.Verdict {
			return queue.Verdict{Kind: queue.VerdictRetryLater}
		})})
	t.Cleanup(queues.Stop)
	srv := host.New(host.Config{Live: fx.reg, Status: fx.reg, Engine: engine.New(engine.Config{}), AwaitFirstPublication: true,
		Queues: queues, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	delivery := queue.Delivery{Message: queue.Message{ID: 1, Source: engine.DoorEnqueue, CorrelationID: "m1", Payload: []byte(`{"a":1}`)},
		Tenant: "acme", Flow: "echo", Attempt: 1}
	if v := srv.Handle(context.Background(), delivery); v.Kind != queue.VerdictRetryLater || v.Error != why {
		t.Errorf("a delivery before the first publication: %+v, want a retry later (%s)", v, why)
	}
	if err := srv.Publish(context.Background(), "acme", "echo", []byte(`{}`), "c1"); err == nil || err.Error() != why {
		t.Errorf("a publish before the first publication: %v, want %s", err, why)
	}

	fx.publish(testFlows(), testAccessYAML(), fixtureCommit)
	if w := fx.serve(newRequest(http.MethodGet, "/readyz", "")); w.Code != http.StatusOK {
		t.Errorf("/readyz after the first publication: %d %s", w.Code, w.Body)
	}
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)), `{"a":1}`)
	if v := srv.Handle(context.Background(), delivery); v.Kind != queue.VerdictAck {
		t.Errorf("the delivery after the first publication: %+v, want it acknowledged", v)
	}
}

func TestReadyWithAnEmptyRegistry(t *testing.T) {
	// a loaded live set with no flows is ready on a host that follows no
	// repo: nothing is deployed yet (nexus deploy publishes)
	fx := newUnloadedFixture(t, nil)
	if _, err := fx.reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := fx.serve(newRequest(http.MethodGet, "/readyz", "")); w.Code != http.StatusOK {
		t.Errorf("/readyz: %d %s", w.Code, w.Body)
	}
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{}`))
	wantRefusal(t, w, http.StatusUnauthorized, unknownKey)
}

func TestStatus(t *testing.T) {
	status := func(fx *fixture, header ...string) *httptest.ResponseRecorder {
		return fx.serve(newRequest(http.MethodGet, "/status", "", header...))
	}

	t.Run("closed without an admin key", func(t *testing.T) {
		fx := newFixture(t, nil)
		for _, h := range [][]string{nil, {"Authorization", "Bearer "}, {"Authorization", "Bearer anything"}} {
			w := status(fx, h...)
			if w.Code != http.StatusNotFound || w.Header().Get("X-Correlation-Id") == "" {
				t.Errorf("%v: %d %s, want 404", h, w.Code, w.Body)
			}
		}
	})

	fx := newFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
	for _, tc := range []struct{ name, authorization string }{
		{"no key", ""},
		{"wrong key", "Bearer not-the-admin-key"},
		{"admin key with a byte more", "Bearer " + adminKey + "x"},
		{"admin key's prefix", "Bearer " + adminKey[:len(adminKey)-1]},
		{"an access key", "Bearer " + keyAcmeAll},
		{"Basic", "Basic " + adminKey},
	} {
		t.Run("401 for "+tc.name, func(t *testing.T) {
			var h []string
			if tc.authorization != "" {
				h = []string{"Authorization", tc.authorization}
			}
			w := status(fx, h...)
			if w.Code != http.StatusUnauthorized || w.Header().Get("X-Correlation-Id") == "" {
				t.Errorf("%d %s, want 401", w.Code, w.Body)
			}
			if strings.Contains(w.Body.String(), fixtureCommit) {
				t.Errorf("a refusal shows the commit: %s", w.Body)
			}
		})
	}

	type lastError struct {
		Commit string   `json:"commit"`
		Errors []string `json:"errors"`
	}
	decode := func(t *testing.T, w *httptest.ResponseRecorder) (map[string]json.RawMessage, *lastError) {
		t.Helper()
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", w.Body, err)
		}
		// server.md's four keys come first, in its order (generation once
		// stood between flows and last_error); what the host adds follows
		if !regexp.MustCompile(`^\{"commit":[^,]*,"synced_at":[^,]*,"flows":\d+,"last_error":`).Match(w.Body.Bytes()) {
			t.Errorf("the body does not begin as server.md's: %s", w.Body)
		}
		for _, k := range []string{"commit", "synced_at", "flows", "last_error"} {
			if _, ok := m[k]; !ok {
				t.Errorf("no %q in %s", k, w.Body)
			}
		}
		var le *lastError
		if err := json.Unmarshal(m["last_error"], &le); err != nil {
			t.Errorf("last_error %s: %v", m["last_error"], err)
		}
		return m, le
	}

	t.Run("200 with the admin key", func(t *testing.T) {
		w := status(fx, "Authorization", "Bearer "+adminKey)
		m, le := decode(t, w)
		if got := string(m["commit"]); got != `"`+fixtureCommit+`"` {
			t.Errorf("commit = %s", got)
		}
		if got := string(m["synced_at"]); got != `"2026-08-09T14:02:11Z"` {
			t.Errorf("synced_at = %s, want RFC 3339 UTC whole seconds of the sync", got)
		}
		if got := string(m["flows"]); got != "5" {
			t.Errorf("flows = %s, want 5", got)
		}
		if le != nil || string(m["last_error"]) != "null" {
			t.Errorf("last_error = %s, want null", m["last_error"])
		}
		if !strings.HasPrefix(w.Body.String(), `{"commit":"`+fixtureCommit+`","synced_at":"2026-08-09T14:02:11Z","flows":5,`) ||
			!strings.Contains(w.Body.String(), `"last_error":null`) {
			t.Errorf("body = %s", w.Body)
		}
	})

	t.Run("after a refused commit", func(t *testing.T) {
		const bad = "badbadbadbadbadbadbadbadbadbadbadbadbadb"
		errs := []string{`flows/x.md:7: unknown key "endpont" (did you mean "endpoint"?)`, "access.yaml:3: rate must be more than 0, not 0"}
		if err := fx.reg.RecordSyncFailure(context.Background(), bad, errs, registry.SyncSource{}); err != nil {
			t.Fatal(err)
		}
		m, le := decode(t, status(fx, "Authorization", "Bearer "+adminKey))
		if le == nil || le.Commit != bad || len(le.Errors) != 2 || le.Errors[0] != errs[0] || le.Errors[1] != errs[1] {
			t.Errorf("last_error = %s", m["last_error"])
		}
		if got := string(m["commit"]); got != `"`+fixtureCommit+`"` {
			t.Errorf("commit = %s, want the last good commit", got)
		}
		if got := string(m["flows"]); got != "5" {
			t.Errorf("flows = %s", got)
		}
		// the last good commit keeps serving
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)), `{"a":1}`)

		// a good commit clears it
		fx.clock.Advance(90 * time.Second)
		files := testFlows()
		delete(files, "flows/acme/small.md")
		fx.publish(files, testAccessYAML(), "2222222222222222222222222222222222222222")
		m, le = decode(t, status(fx, "Authorization", "Bearer "+adminKey))
		if le != nil || string(m["commit"]) != `"2222222222222222222222222222222222222222"` || string(m["flows"]) != "4" ||
			string(m["synced_at"]) != `"2026-08-09T14:03:41Z"` {
			t.Errorf("after a good commit: %s", status(fx, "Authorization", "Bearer "+adminKey).Body)
		}
	})

	t.Run("nothing synced yet", func(t *testing.T) {
		fx := newUnloadedFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
		if _, err := fx.reg.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		m, _ := decode(t, status(fx, "Authorization", "Bearer "+adminKey))
		if string(m["commit"]) != "null" || string(m["synced_at"]) != "null" || string(m["flows"]) != "0" {
			t.Errorf("status of an empty registry: commit %s synced_at %s flows %s", m["commit"], m["synced_at"], m["flows"])
		}
	})
}

func TestMetrics(t *testing.T) {
	fx := newFixture(t, nil)
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)), `{"a":1}`)
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":2}`)), `{"a":2}`)
	fx.serve(runRequest("acme", "echo", "", `{}`))
	fx.serve(runRequest("acme", "hello", keyAcmeAll, `{}`))

	w := fx.serve(newRequest(http.MethodGet, "/metrics", ""))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", w.Code)
	}
	text := w.Body.String()
	for _, want := range []string{
		`nexus_requests_total{door="run",status="200"} 2`,
		`nexus_requests_total{door="run",status="401"} 1`,
		`nexus_requests_total{door="run",status="400"} 1`,
		`# TYPE nexus_execution_duration_seconds histogram`,
		`nexus_execution_duration_seconds_bucket{door="run",le="+Inf"} 3`,
		`nexus_execution_duration_seconds_count{door="run"} 3`,
		`nexus_sync_failures_total`,
		`nexus_sync_last_success_timestamp_seconds`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}

	fx.metrics.SyncFailed()
	fx.metrics.SyncSucceeded(time.Unix(1786284131, 0))
	fx.metrics.QueueCommitted(3, 400*time.Microsecond)
	fx.metrics.QueueCommitted(40, 3*time.Millisecond)
	text = fx.serve(newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, want := range []string{
		"nexus_sync_failures_total 1", "nexus_sync_last_success_timestamp_seconds 1.786284131e+09",
		`nexus_queue_commit_messages_bucket{le="4"} 1`, `nexus_queue_commit_messages_bucket{le="64"} 2`,
		"nexus_queue_commit_messages_sum 43", "nexus_queue_commit_messages_count 2",
		`nexus_queue_fsync_duration_seconds_bucket{le="0.0005"} 1`, `nexus_queue_fsync_duration_seconds_bucket{le="0.0025"} 1`,
		`nexus_queue_fsync_duration_seconds_bucket{le="0.005"} 2`, "nexus_queue_fsync_duration_seconds_count 2",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// TestEveryAnswerHasACorrelationID sends an X-Correlation-ID with every kind
// of request and expects it back on every answer.
func TestEveryAnswerHasACorrelationID(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
	type req struct {
		name   string
		r      *http.Request
		status int
	}
	withFlow := func(tenant, flowName, key, body string, header ...string) *http.Request {
		return runRequest(tenant, flowName, key, body, header...)
	}
	limited := func() *http.Request {
		// the bucket of acme-limited holds one token: the first of these is
		// 200, the second 429
		return withFlow("acme", "echo", keyAcmeLimited, `{}`)
	}
	huge := withFlow("acme", "echo", keyAcmeAll, "")
	hugeBody(huge, 10<<30)
	reqs := []req{
		{"200 from the flow", withFlow("acme", "echo", keyAcmeAll, `{}`), 200},
		{"400 from a validate rule", withFlow("acme", "hello", keyAcmeAll, `{}`), 400},
		{"401 no key", withFlow("acme", "echo", "", `{}`), 401},
		{"400 name", withFlow("Acme", "echo", keyAcmeAll, `{}`), 400},
		{"403 tenant", withFlow("globex", "shipment", keyAcmeAll, `{}`), 403},
		{"403 allowlist", withFlow("acme", "echo", keyAcmeOrders, `{}`), 403},
		{"404 flow", withFlow("acme", "x", keyAcmeAll, `{}`), 404},
		{"200 limited", limited(), 200},
		{"429", limited(), 429},
		{"413", huge, 413},
		{"415", withFlow("acme", "echo", keyAcmeAll, "a,b", "Content-Type", "text/csv"), 415},
		{"400 JSON", withFlow("acme", "echo", keyAcmeAll, `{"a":1,"a":2}`), 400},
		{"router 404", newRequest(http.MethodGet, "/nope", ""), 404},
		{"router 405", newRequest(http.MethodGet, "/flows/acme/echo/run", ""), 405},
		{"/healthz", newRequest(http.MethodGet, "/healthz", ""), 200},
		{"/readyz", newRequest(http.MethodGet, "/readyz", ""), 200},
		{"/status 401", newRequest(http.MethodGet, "/status", ""), 401},
		{"/status 200", newRequest(http.MethodGet, "/status", "", "Authorization", "Bearer "+adminKey), 200},
		{"/hooks/git", newRequest(http.MethodPost, "/hooks/git", ""), 202},
		{"/metrics", newRequest(http.MethodGet, "/metrics", ""), 200},
	}
	for i, tc := range reqs {
		t.Run(tc.name, func(t *testing.T) {
			id := "corr-" + strings.ReplaceAll(tc.name, " ", "_")
			tc.r.Header.Set("X-Correlation-ID", id)
			w := fx.serve(tc.r)
			if w.Code != tc.status {
				t.Errorf("request %d: status %d, want %d (%s)", i, w.Code, tc.status, w.Body)
			}
			if got := w.Header().Get("X-Correlation-Id"); got != id {
				t.Errorf("X-Correlation-Id = %q, want %q", got, id)
			}
		})
	}
}

func TestCorrelationIDChoice(t *testing.T) {
	fx := newFixture(t, nil)
	v128 := strings.Repeat("x", 127) + "~"
	for _, tc := range []struct {
		name               string
		correlation, reqID *string
		want               string // "" means a generated UUID
	}{
		{"X-Correlation-ID", ptr("abc-123"), nil, "abc-123"},
		{"X-Correlation-ID over X-Request-ID", ptr("abc-123"), ptr("req-9"), "abc-123"},
		{"X-Request-ID", nil, ptr("req-9"), "req-9"},
		{"128 visible characters", ptr(v128), nil, v128},
		{"every visible character", ptr("!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~"), nil, "!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~"},
		{"129 characters", ptr(v128 + "x"), nil, ""},
		{"129 characters, X-Request-ID valid", ptr(v128 + "x"), ptr("req-9"), "req-9"},
		{"a space", ptr("abc 123"), nil, ""},
		{"a tab", ptr("abc\t123"), nil, ""},
		{"non-ASCII", ptr("abc-é"), nil, ""},
		{"invalid X-Correlation-ID, invalid X-Request-ID", ptr("a b"), ptr("c d"), ""},
		{"empty X-Correlation-ID, X-Request-ID", ptr(""), ptr("req-9"), "req-9"},
		{"none", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/flows/acme/hello/run", "/flows/acme/x/run"} {
				r := newRequest(http.MethodPost, path, `{"name":"Ada"}`, "Authorization", "Bearer "+keyAcmeAll)
				if tc.correlation != nil {
					r.Header["X-Correlation-Id"] = []string{*tc.correlation}
				}
				if tc.reqID != nil {
					r.Header["X-Request-Id"] = []string{*tc.reqID}
				}
				w := fx.serve(r)
				got := w.Header().Get("X-Correlation-Id")
				if tc.want == "" && !uuidV4.MatchString(got) {
					t.Errorf("%s: X-Correlation-Id = %q, want a generated lowercase UUID v4", path, got)
				}
				if tc.want != "" && got != tc.want {
					t.Errorf("%s: X-Correlation-Id = %q, want %q", path, got, tc.want)
				}
				if w.Code == http.StatusOK {
					var body struct{ CorrelationID string }
					json.Unmarshal(w.Body.Bytes(), &body)
					if body.CorrelationID != got {
						t.Errorf("the flow saw ctx.correlation_id %q, the answer carries %q", body.CorrelationID, got)
					}
				}
			}
		})
	}
	t.Run("generated IDs differ", func(t *testing.T) {
		seen := map[string]bool{}
		for i := 0; i < 100; i++ {
			id := fx.serve(runRequest("acme", "echo", "", `{}`)).Header().Get("X-Correlation-Id")
			if seen[id] {
				t.Fatalf("%q generated twice", id)
			}
			seen[id] = true
		}
	})
}

func ptr(s string) *string { return &s }

// TestStatusIsNotCacheable: GET /status (admin key) holds a refused
// commit's errors; it is no-store and nosniff, its refusal too, as the
// management API is.
func TestStatusIsNotCacheable(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, w := range []*httptest.ResponseRecorder{
		fx.admin(http.MethodGet, "/status"),
		fx.serve(newRequest(http.MethodGet, "/status", "")),
	} {
		if got := w.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("GET /status (%d): Cache-Control = %q, want no-store", w.Code, got)
		}
		if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET /status (%d): X-Content-Type-Options = %q, want nosniff", w.Code, got)
		}
	}
}

// TestHeadAnswersAsGet: a HEAD request to a GET endpoint answers what a GET
// does, status and headers (net/http leaves the body out; RFC 9110 §9.1:
// every general-purpose server supports GET and HEAD). It was refused with
// 405, so a load balancer or an uptime probe checking /healthz with HEAD
// saw a healthy host as down.
func TestHeadAnswersAsGet(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/status", "/ui/", "/ui/login", "/api/flows"} {
		get := fx.serve(newRequest(http.MethodGet, path, "", bearerAdmin...))
		head := fx.serve(newRequest(http.MethodHead, path, "", bearerAdmin...))
		if get.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, get.Code, get.Body)
		}
		if head.Code != get.Code {
			t.Errorf("HEAD %s = %d (%s), want %d as GET answers", path, head.Code, strings.TrimSpace(head.Body.String()), get.Code)
			continue
		}
		if g, h := get.Header().Get("Content-Type"), head.Header().Get("Content-Type"); g != h {
			t.Errorf("HEAD %s: Content-Type %q, GET's is %q", path, h, g)
		}
	}
}

// TestAllowListsTheMethodsAnswered: a 405's Allow names only the methods the
// path answers (RFC 9110 §10.2.1). It listed OPTIONS, which the host refuses
// with 405 like any method it does not route.
func TestAllowListsTheMethodsAnswered(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/healthz"},
		{http.MethodDelete, "/metrics"},
		{http.MethodPost, "/status"},
		{http.MethodPost, "/ui/queues"},
		{http.MethodDelete, "/api/flows"},
		{http.MethodGet, "/api/queues/acme/echo/dlq/1/replay"},
		{http.MethodGet, "/flows/acme/echo/run"},
	} {
		w := fx.serve(newRequest(tc.method, tc.path, "", bearerAdmin...))
		if w.Code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s = %d, want 405", tc.method, tc.path, w.Code)
		}
		allow := w.Header().Get("Allow")
		if allow == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
			continue
		}
		for _, m := range strings.Split(allow, ", ") {
			if m == tc.method {
				continue
			}
			probe := fx.serve(newRequest(m, tc.path, "", bearerAdmin...))
			if probe.Code == http.StatusMethodNotAllowed {
				t.Errorf("%s %s: 405 with Allow %q, but %s %s answers 405 too", tc.method, tc.path, allow, m, tc.path)
			}
		}
	}
}

// TestScheduleNextTickIsTheSchedulers: /status and /api/flows show a schedule's next
// tick as Config.NextTick says (the scheduler's, which counts an @every
// schedule from its last tick), not the schedule's next time from the
// request, which for @every moved at every request and was never ticked.
func TestScheduleNextTickIsTheSchedulers(t *testing.T) {
	next := time.Date(2026, 9, 1, 7, 0, 0, 0, time.UTC) // not a time of the schedule
	fx := newFixture(t, func(c *host.Config) {
		c.AdminKey = adminKey
		c.NextTick = func(tenant, flowName string, sc *flow.Schedule, now time.Time) time.Time {
			if tenant != "globex" || flowName != "nightly" || sc.Spec() != "0 3 * * *" || !now.Equal(t0) {
				t.Errorf("NextTick(%s, %s, %q, %v)", tenant, flowName, sc.Spec(), now)
			}
			return next
		}
	})
	fx.publish(adminFlows(), testAccessYAML(), "c2")
	w := fx.serve(newRequest(http.MethodGet, "/status", "", "Authorization", "Bearer "+adminKey))
	var st struct {
		Schedules []struct {
			Next      string `json:"next"`
			NextLocal string `json:"next_local"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || len(st.Schedules) != 1 {
		t.Fatalf("/status: %d %s (%v)", w.Code, w.Body, err)
	}
	if got := st.Schedules[0]; got.Next != "2026-09-01T07:00:00Z" || got.NextLocal != "2026-09-01T09:00:00+02:00" {
		t.Errorf("/status schedule next %q, next_local %q; want NextTick's time, 2026-09-01T07:00:00Z and 09:00:00+02:00 in Europe/Paris", got.Next, got.NextLocal)
	}
	// the UI's Flows page and /api/flows show it too
	w = fx.serve(newRequest(http.MethodGet, "/api/flows", "", "Authorization", "Bearer "+adminKey))
	if !strings.Contains(w.Body.String(), `"schedule":{"spec":"0 3 * * *","zone":"Europe/Paris","next":"2026-09-01T07:00:00Z"}`) {
		t.Errorf("/api/flows: %d %s\nwant the nightly flow's next tick at 2026-09-01T07:00:00Z", w.Code, w.Body)
	}
}

// TestSyncErrorShown: a run of sync rounds that could not run (the repo
// unreachable) shows in /status, /api/flows and the UI's Flows page as
// sync_error, with when it began, how many rounds failed and the last
// error; the next round that runs clears it, not one another process ran
// (it did, and the page said the sync was healthy). A host that had stopped
// following git looked healthy there: a refused commit was all they
// showed.
func TestSyncErrorShown(t *testing.T) {
	health := &host.SyncHealth{}
	fx := newFixture(t, func(c *host.Config) {
		c.AdminKey = adminKey
		c.SyncHealth = health
	})
	get := func(path string) string {
		w := fx.serve(newRequest(http.MethodGet, path, "", "Authorization", "Bearer "+adminKey))
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.String()
	}
	for _, path := range []string{"/status", "/api/flows"} {
		if body := get(path); !strings.Contains(body, `"sync_error":null`) {
			t.Errorf("GET %s before any failure: %s, want sync_error null", path, body)
		}
	}
	unreachable := errors.New("fetching main from https://git.example.com/config.git: dial tcp: connection refused")
	health.Observe(true, unreachable, time.Date(2026, 8, 9, 14, 0, 0, 0, time.UTC))
	health.Observe(true, unreachable, time.Date(2026, 8, 9, 14, 0, 5, 0, time.UTC))
	// a round another process ran (this one skipped) changes nothing
	health.Observe(false, nil, time.Date(2026, 8, 9, 14, 0, 7, 0, time.UTC))
	want := `"sync_error":{"since":"2026-08-09T14:00:00Z","failures":2,"error":"fetching main from https://git.example.com/config.git: dial tcp: connection refused"}`
	for _, path := range []string{"/status", "/api/flows"} {
		if body := get(path); !strings.Contains(body, want) {
			t.Errorf("GET %s after two failed rounds: %s\nwant %s", path, body, want)
		}
	}
	if body := get("/ui/"); !strings.Contains(body, `id="sync-error"`) || !strings.Contains(body, "has failed 2 times in a row since 2026-08-09T14:00:00Z") {
		t.Errorf("the Flows page after two failed rounds:\n%s", body)
	}
	health.Observe(true, nil, time.Date(2026, 8, 9, 14, 0, 10, 0, time.UTC))
	if body := get("/status"); !strings.Contains(body, `"sync_error":null`) {
		t.Errorf("GET /status after a round that ran: %s, want sync_error null", body)
	}
}

// TestStatusRefusalAnswersBeforeTheBody: GET /status without the admin
// key, from a caller that announced a body and has not sent it, is
// answered 401 at once with Connection: close over a real connection, as
// the API's refusals are (refuseUnread): net/http read up to 256 KiB of
// the body before the answer, so the caller waited for the read timeout.
func TestStatusRefusalAnswersBeforeTheBody(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
	resp := answerBeforeTheBody(t, fx.handler, "GET /status HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer wrong-key\r\nContent-Length: 100000\r\n\r\n{")
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close || resp.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("%s, Connection: close %v, WWW-Authenticate %q; want 401, the connection closed, Bearer", resp.Status, resp.Close, resp.Header.Get("WWW-Authenticate"))
	}
}

// answerBeforeTheBody sends head (a request announcing a body it does not
// send) to handler over a real connection and returns the answer, failing
// the test when none comes within 2 s.
func answerBeforeTheBody(t *testing.T, handler http.Handler, head string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprint(c, head)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body is not sent: %v", err)
	}
	resp.Body.Close()
	return resp
}

// TestProbesAnswerBeforeTheBody: GET /healthz, /readyz, /metrics and
// /status (with the admin key), and /healthz of the drain, from a caller
// that announced a body and has not sent it, are answered at once with
// Connection: close over a real connection, as the refusals made before
// the body are (refuseUnread): net/http read up to 256 KiB of the body
// none of them uses before the answer, so the caller waited for it.
func TestProbesAnswerBeforeTheBody(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
	unloaded := newUnloadedFixture(t, nil)
	for _, tt := range []struct {
		name    string
		handler http.Handler
		request string
		status  string
	}{
		{"healthz", fx.handler, "GET /healthz", "200 OK"},
		{"healthz HEAD", fx.handler, "HEAD /healthz", "200 OK"},
		{"readyz", fx.handler, "GET /readyz", "200 OK"},
		{"readyz before a live set", unloaded.handler, "GET /readyz", "503 Service Unavailable"},
		{"metrics", fx.handler, "GET /metrics", "200 OK"},
		{"status", fx.handler, "GET /status", "200 OK"},
		{"healthz while draining", fx.server.DrainHandler(), "GET /healthz", "200 OK"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, framing := range []string{"Content-Length: 100000", "Transfer-Encoding: chunked"} {
				resp := answerBeforeTheBody(t, tt.handler, tt.request+" HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer "+adminKey+"\r\n"+framing+"\r\n\r\n")
				if resp.Status != tt.status || !resp.Close || resp.Header.Get("X-Correlation-Id") == "" {
					t.Errorf("%s: %s, Connection: close %v, X-Correlation-Id %q; want %s, the connection closed", framing, resp.Status, resp.Close, resp.Header.Get("X-Correlation-Id"), tt.status)
				}
			}
		})
	}
}
