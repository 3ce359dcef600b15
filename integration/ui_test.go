package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// The management UI (/ui/…) and API (/api/…) of nexus serve end to end:
// dead letters made by a backend answering 503, then listed, replayed and
// discarded through the API and through a real Chromium, with the backend's
// requests and nexus dlq list as the witnesses.

// forward-order and forward-copy, the flows of these tests: the worked
// example of forward-order with two attempts 100 ms apart (a dead letter in
// a fraction of a second); forward-copy posts to /copy instead of /ingest.
func uiFlows(t *testing.T, backendURL string) map[string]string {
	fast := []string{"queue_max_attempts: 5", "queue_max_attempts: 2", "queue_initial_delay_ms: 500", "queue_initial_delay_ms: 100"}
	return map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", backendURL, fast...),
		"flows/acme/forward-copy.md": queueExample(t, "forward-order", backendURL,
			append(fast, "flow: forward-order", "flow: forward-copy", "/ingest", "/copy")...),
	}
}

// uiBackend is a loopback backend that refuses every call to /copy and
// /slow (503) and answers calls to /ingest with the status of setStatus
// (503 at first).
func uiBackend(t *testing.T) *loopback {
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/copy") || strings.HasPrefix(x.path, "/slow") {
			return http.StatusServiceUnavailable
		}
		return int(be.status.Load())
	})
	return be
}

// deadLetter enqueues body to acme/flowName under correlation ID cid and
// waits until the host dead-letters it; it returns the message id.
func deadLetter(t *testing.T, h *hostProc, flowName, body, cid string) uint64 {
	t.Helper()
	id := mustEnqueue(t, h, "acme", flowName, acmeKey, body, "X-Correlation-ID", cid)
	waitEvents(t, h, "dlq_moved", 1, both(field("flow", flowName), field("msg_id", id)), 10*time.Second)
	return id
}

// apiQueue is one entry of GET /api/queues.
type apiQueue struct {
	Tenant      string `json:"tenant"`
	Flow        string `json:"flow"`
	Total       int64  `json:"total"`
	Processed   int64  `json:"processed"`
	Pending     int64  `json:"pending"`
	Retrying    int    `json:"retrying"`
	DeadLetters int    `json:"dead_letters"`
	InFlight    int    `json:"in_flight"`
	Worker      string `json:"worker"`
}

// apiDeadLetter is one entry of GET /api/queues/{tenant}/{flow}/dlq.
type apiDeadLetter struct {
	ID            uint64 `json:"id"`
	EnqueuedAt    string `json:"enqueued_at"`
	FailedAt      string `json:"failed_at"`
	Attempts      int    `json:"attempts"`
	LastError     string `json:"last_error"`
	Payload       string `json:"payload"`
	PayloadBase64 string `json:"payload_base64"`
}

// apiJSON sends an admin request and decodes its JSON answer into v,
// failing the test unless the status is want.
func apiJSON(t *testing.T, h *hostProc, method, path string, want int, v any) response {
	t.Helper()
	r := h.do(method, path, h.adminKey, "", "")
	if r.status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, r.body)
	}
	return r
}

// deadLetters is GET /api/queues/acme/{flow}/dlq's list.
func deadLetters(t *testing.T, h *hostProc, flowName string) []apiDeadLetter {
	t.Helper()
	var out struct {
		Tenant      string          `json:"tenant"`
		Flow        string          `json:"flow"`
		DeadLetters []apiDeadLetter `json:"dead_letters"`
	}
	apiJSON(t, h, http.MethodGet, "/api/queues/acme/"+flowName+"/dlq", http.StatusOK, &out)
	if out.Tenant != "acme" || out.Flow != flowName || out.DeadLetters == nil {
		t.Errorf("GET /api/queues/acme/%s/dlq: tenant %q flow %q dead_letters %v, want acme, %s and a list", flowName, out.Tenant, out.Flow, out.DeadLetters, flowName)
	}
	return out.DeadLetters
}

// segmentSize is the size of acme/flowName's segment.log, -1 when it
// cannot be read.
func segmentSize(db, flowName string) int64 {
	st, err := os.Stat(filepath.Join(queuesRoot(db), "acme", flowName, "segment.log"))
	if err != nil {
		return -1
	}
	return st.Size()
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// wantError checks a refusal: status, and the body {"ok":false,"error":msg}.
func wantError(t *testing.T, what string, r response, status int, msg string) {
	t.Helper()
	var body struct {
		OK    *bool  `json:"ok"`
		Error string `json:"error"`
	}
	if r.status != status || json.Unmarshal([]byte(r.body), &body) != nil || body.OK == nil || *body.OK || body.Error != msg {
		t.Errorf("%s: %d %s\nwant %d {\"ok\":false,\"error\":%q}", what, r.status, r.body, status, msg)
	}
}

func TestAPIDeadLetters(t *testing.T) {
	t.Parallel()
	be := uiBackend(t)
	files := uiFlows(t, be.URL)
	// forward-slow waits a minute before its second attempt
	files["flows/acme/forward-slow.md"] = queueExample(t, "forward-order", be.URL,
		"queue_initial_delay_ms: 500", "queue_initial_delay_ms: 60000", "flow: forward-order", "flow: forward-slow", "/ingest", "/slow")
	h, _ := queueHost(t, files, hostOptions{}, "forward-order", "forward-copy", "forward-slow")
	db := h.db

	start := time.Now()
	mustEnqueue(t, h, "acme", "forward-slow", acmeKey, `{"orderId":"API-0"}`)
	waitEvents(t, h, "queue_retry_scheduled", 1, field("flow", "forward-slow"), 10*time.Second)
	orderBody, copyBody := `{"orderId":"API-1","total":42}`, `{"orderId":"API-2","note":"café ☕"}`
	if id := deadLetter(t, h, "forward-order", orderBody, "trace-api-order"); id != 1 {
		t.Errorf("forward-order's first message has id %d, want 1", id)
	}
	if id := deadLetter(t, h, "forward-copy", copyBody, "trace-api-copy"); id != 1 {
		t.Errorf("forward-copy's first message has id %d, want 1", id)
	}
	if n, m := len(be.on("/ingest")), len(be.on("/copy")); n != 2 || m != 2 {
		t.Errorf("the backend got %d calls on /ingest and %d on /copy, want the 2 attempts of each", n, m)
	}

	t.Run("queues", func(t *testing.T) {
		// everything in the logs is processed: the worker's next idle
		// moment drains them, and their counts drop to zero, forward-slow's
		// too, whose message waits for its retry in the retry schedule,
		// which carries a copy of it
		eventually(t, 5*time.Second, "every segment.log drained", func() bool {
			return segmentSize(db, "forward-order") == 0 && segmentSize(db, "forward-copy") == 0 && segmentSize(db, "forward-slow") == 0
		})
		want := []apiQueue{
			{Tenant: "acme", Flow: "forward-copy", DeadLetters: 1, Worker: "leading"},
			{Tenant: "acme", Flow: "forward-order", DeadLetters: 1, Worker: "leading"},
			{Tenant: "acme", Flow: "forward-slow", Retrying: 1, Worker: "leading"},
		}
		var d string
		deadline := time.Now().Add(5 * time.Second)
		for {
			var got struct {
				Queues []apiQueue `json:"queues"`
			}
			apiJSON(t, h, http.MethodGet, "/api/queues", http.StatusOK, &got)
			if d = cmp.Diff(want, got.Queues); d == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if d != "" {
			t.Errorf("GET /api/queues after the dead letters and the drain (-want +got):\n%s", d)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		for _, c := range []struct{ flow, body string }{{"forward-order", orderBody}, {"forward-copy", copyBody}} {
			dl := deadLetters(t, h, c.flow)
			if len(dl) != 1 {
				t.Fatalf("GET /api/queues/acme/%s/dlq: %+v, want one entry", c.flow, dl)
			}
			d := dl[0]
			if d.ID != 1 || d.Attempts != 2 || d.LastError != forwardError || d.Payload != c.body || d.PayloadBase64 != "" {
				t.Errorf("%s's dead letter: %+v\nwant id 1, 2 attempts, last_error %q and the payload %s as submitted", c.flow, d, forwardError, c.body)
			}
			enq, err1 := time.Parse(time.RFC3339, d.EnqueuedAt)
			failed, err2 := time.Parse(time.RFC3339, d.FailedAt)
			if err1 != nil || err2 != nil || !strings.HasSuffix(d.EnqueuedAt, "Z") ||
				enq.Before(start.Truncate(time.Second)) || failed.Before(enq) || failed.After(time.Now()) {
				t.Errorf("%s's dead letter: enqueued_at %q failed_at %q, want RFC 3339 UTC times since %s", c.flow, d.EnqueuedAt, d.FailedAt, start.UTC().Format(time.RFC3339))
			}
		}
		// the CLI reads the same files
		r := dlqCLI(t, db, "list")
		want := `^DLQ: 2 pending message\(s\)\n` + dlqEntryRE(1, "forward-copy", 2, forwardError) + dlqEntryRE(1, "forward-order", 2, forwardError) + `$`
		if r.code != 0 || !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("nexus dlq list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("replay", func(t *testing.T) {
		be.setStatus(http.StatusOK) // the cause fixed first
		before := len(be.on("/ingest"))
		r := h.do(http.MethodPost, "/api/queues/acme/forward-order/dlq/1/replay", h.adminKey, "", "")
		replayed := time.Now()
		if want := `{"tenant":"acme","flow":"forward-order","id":1,"replayed":true,"message_id":2}` + "\n"; r.status != http.StatusOK || r.body != want {
			t.Fatalf("replay: %d %q, want 200 %q", r.status, r.body, want)
		}
		// the worker is woken at once: how soon is logged, not bound (a
		// timeout generous for a loaded machine is the bound)
		got := be.waitOn(t, "/ingest", before+1, 10*time.Second)[before]
		t.Logf("the replay reached the backend %v after the answer", got.at.Sub(replayed).Round(time.Millisecond))
		cid := got.header.Get("X-Correlation-Id")
		if got.body != orderBody || cid == "trace-api-order" || !uuidRE.MatchString(cid) {
			t.Errorf("replayed delivery %s with X-Correlation-Id %q: want %s under a fresh correlation ID (a UUID)", got.body, cid, orderBody)
		}
		ev := waitEvents(t, h, "admin_action", 1, field("action", "dlq_replay"), 5*time.Second)[0]
		if ev["tenant"] != "acme" || ev["flow"] != "forward-order" || fmt.Sprint(ev["msg_id"]) != "1" || fmt.Sprint(ev["replay_msg_id"]) != "2" {
			t.Errorf("admin_action of the replay: %v", ev)
		}
		if dl := deadLetters(t, h, "forward-order"); len(dl) != 0 {
			t.Errorf("GET /api/queues/acme/forward-order/dlq after the replay: %+v, want none", dl)
		}
		if r := dlqCLI(t, db, "list", "--tenant", "acme", "--flow", "forward-order"); r.code != 0 || r.stdout != "DLQ is empty\n" {
			t.Errorf("nexus dlq list --flow forward-order after the replay: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		// once only
		time.Sleep(300 * time.Millisecond)
		if n := len(be.on("/ingest")); n != before+1 {
			t.Errorf("%d deliveries of the replay, want 1", n-before)
		}
		r = h.do(http.MethodPost, "/api/queues/acme/forward-order/dlq/1/replay", h.adminKey, "", "")
		wantError(t, "replaying it again", r, http.StatusNotFound, "no pending dead letter id=1 tenant=acme flow=forward-order")
		if n := len(be.on("/ingest")); n != before+1 {
			t.Errorf("a refused replay delivered the message again: %d deliveries", n-before)
		}
	})

	t.Run("discard", func(t *testing.T) {
		r := h.do(http.MethodPost, "/api/queues/acme/forward-copy/dlq/1/discard", h.adminKey, "", "")
		if want := `{"tenant":"acme","flow":"forward-copy","id":1,"discarded":true}` + "\n"; r.status != http.StatusOK || r.body != want {
			t.Fatalf("discard: %d %q, want 200 %q", r.status, r.body, want)
		}
		if r := dlqCLI(t, db, "list"); r.code != 0 || r.stdout != "DLQ is empty\n" {
			t.Errorf("nexus dlq list after the discard: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if dl := deadLetters(t, h, "forward-copy"); len(dl) != 0 {
			t.Errorf("GET /api/queues/acme/forward-copy/dlq after the discard: %+v, want none", dl)
		}
		r = h.do(http.MethodPost, "/api/queues/acme/forward-copy/dlq/1/discard", h.adminKey, "", "")
		wantError(t, "discarding it again", r, http.StatusNotFound, "no pending dead letter id=1 tenant=acme flow=forward-copy")
		if n := len(be.on("/copy")); n != 2 {
			t.Errorf("%d calls on /copy, want the 2 attempts only: a discard delivers nothing", n)
		}
	})

	t.Run("the CLI and the API agree", func(t *testing.T) {
		id := deadLetter(t, h, "forward-copy", `{"orderId":"API-3"}`, "trace-api-3")
		if id != 2 {
			t.Errorf("forward-copy's second message has id %d, want 2", id)
		}
		if dl := deadLetters(t, h, "forward-copy"); len(dl) != 1 || dl[0].ID != 2 || dl[0].Payload != `{"orderId":"API-3"}` {
			t.Fatalf("GET /api/queues/acme/forward-copy/dlq: %+v, want dead letter 2", dl)
		}
		// refused requests act on nothing
		for _, key := range []string{"", "wrong-admin-key", acmeKey} {
			r := h.do(http.MethodPost, "/api/queues/acme/forward-copy/dlq/2/discard", key, "", "")
			wantError(t, fmt.Sprintf("discard with key %q", key), r, http.StatusUnauthorized, "missing or unknown admin key")
			if r.header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("discard with key %q: WWW-Authenticate %q, want Bearer", key, r.header.Get("WWW-Authenticate"))
			}
		}
		r := dlqCLI(t, db, "discard", "--tenant", "acme", "--flow", "forward-copy", "--id", "2")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "discarded id=2 tenant=acme flow=forward-copy\n") {
			t.Fatalf("nexus dlq discard (after the refused requests): exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if dl := deadLetters(t, h, "forward-copy"); len(dl) != 0 {
			t.Errorf("GET /api/queues/acme/forward-copy/dlq after nexus dlq discard: %+v, want none", dl)
		}
		var got struct {
			Queues []apiQueue `json:"queues"`
		}
		apiJSON(t, h, http.MethodGet, "/api/queues", http.StatusOK, &got)
		for _, q := range got.Queues {
			if q.DeadLetters != 0 {
				t.Errorf("GET /api/queues after every dead letter was handled: %+v", q)
			}
		}
		r2 := h.do(http.MethodPost, "/api/queues/acme/forward-copy/dlq/2/replay", h.adminKey, "", "")
		wantError(t, "replaying what the CLI discarded", r2, http.StatusNotFound, "no pending dead letter id=2 tenant=acme flow=forward-copy")
	})

	t.Run("names that break the rule", func(t *testing.T) {
		const (
			upper = `invalid name "A" for tenant (flow "forward-order"): character 'A' at position 1 is not allowed`
			dot   = `invalid name "a.b" for tenant (flow "forward-order"): character '.' at position 2 is not allowed`
			flowD = `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`
		)
		for _, c := range []struct{ method, path, want string }{
			{http.MethodGet, "/api/queues/A/forward-order/dlq", upper},
			{http.MethodPost, "/api/queues/A/forward-order/dlq/1/replay", upper},
			{http.MethodPost, "/api/queues/A/forward-order/dlq/1/discard", upper},
			{http.MethodGet, "/api/queues/a.b/forward-order/dlq", dot},
			{http.MethodPost, "/api/queues/a.b/forward-order/dlq/1/replay", dot},
			{http.MethodPost, "/api/queues/a.b/forward-order/dlq/1/discard", dot},
			{http.MethodGet, "/api/queues/acme/a.b/dlq", flowD},
			{http.MethodPost, "/api/queues/acme/a.b/dlq/1/replay", flowD},
		} {
			wantError(t, c.method+" "+c.path, h.do(c.method, c.path, h.adminKey, "", ""), http.StatusBadRequest, c.want)
		}
		// an id or an action that is not one
		for _, c := range []struct {
			path   string
			status int
		}{
			{"/api/queues/acme/forward-order/dlq/abc/replay", http.StatusBadRequest},
			{"/api/queues/acme/forward-order/dlq/0/discard", http.StatusBadRequest},
			{"/api/queues/acme/forward-order/dlq/1/purge", http.StatusNotFound},
		} {
			if r := h.do(http.MethodPost, c.path, h.adminKey, "", ""); r.status != c.status || !strings.HasPrefix(r.body, `{"ok":false,"error":`) {
				t.Errorf("POST %s: %d %s, want %d", c.path, r.status, r.body, c.status)
			}
		}
		// the UI's pages and buttons apply the same rule
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, "/ui/queues/A/forward-order"},
			{http.MethodGet, "/ui/queues/a.b/forward-order"},
			{http.MethodPost, "/ui/queues/A/forward-order/dlq/1/replay"},
			{http.MethodPost, "/ui/queues/a.b/forward-order/dlq/1/discard"},
		} {
			if r := h.do(c.method, c.path, h.adminKey, "", ""); r.status != http.StatusBadRequest || !strings.Contains(r.body, "is not allowed") {
				t.Errorf("%s %s: %d, want 400 naming the fault\n%s", c.method, c.path, r.status, r.body)
			}
		}
		if got := dirNames(t, queuesRoot(db)); !sameNames(got, "acme") {
			t.Errorf("queues/ holds %v, want only acme", got)
		}
		if got := dirNames(t, filepath.Join(queuesRoot(db), "acme")); !sameNames(got, "forward-copy", "forward-order", "forward-slow") {
			t.Errorf("queues/acme holds %v, want only forward-copy, forward-order and forward-slow", got)
		}
	})

	t.Run("the admin key", func(t *testing.T) {
		for _, path := range []string{"/api/queues", "/api/flows", "/api/journal", "/api/queues/acme/forward-order/dlq"} {
			for _, key := range []string{"", "wrong-admin-key", acmeKey} {
				r := h.do(http.MethodGet, path, key, "", "")
				wantError(t, fmt.Sprintf("GET %s with key %q", path, key), r, http.StatusUnauthorized, "missing or unknown admin key")
			}
		}
		for _, path := range []string{"/ui/", "/ui/queues/acme/forward-order", "/ui/journal"} {
			r := h.do(http.MethodGet, path, "wrong-admin-key", "", "")
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
				!strings.Contains(r.body, "/ui/login?next=") || strings.Contains(r.body, "forward-order</") {
				t.Errorf("GET %s with a wrong key: %d %s\n%s\nwant 401 and a page sending the browser to /ui/login", path, r.status, r.header.Get("Content-Type"), r.body)
			}
		}
		// a wrong key in the login form sets no cookie
		r := h.do(http.MethodPost, "/ui/login", "", "application/x-www-form-urlencoded", "key=wrong-admin-key")
		if r.status != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" || !strings.Contains(r.body, "That is not the admin key.") {
			t.Errorf("POST /ui/login with a wrong key: %d Set-Cookie %q\n%s", r.status, r.header.Get("Set-Cookie"), r.body)
		}
	})

	t.Run("the session cookie", func(t *testing.T) {
		r := noRedirect(t, h, http.MethodPost, "/ui/login?next=%2Fui%2Fqueues%2Facme%2Fforward-order", "", "key="+h.adminKey)
		cookie := r.header.Get("Set-Cookie")
		if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/queues/acme/forward-order" ||
			!strings.HasPrefix(cookie, "nexus_session=") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
			t.Fatalf("POST /ui/login with the admin key: %d Location %q Set-Cookie %q, want 303 to the next page and an HttpOnly, SameSite=Strict session cookie",
				r.status, r.header.Get("Location"), cookie)
		}
		session, _, _ := strings.Cut(cookie, ";")
		if r := noRedirect(t, h, http.MethodGet, "/api/queues", session, ""); r.status != http.StatusOK {
			t.Errorf("GET /api/queues with the session cookie: %d %s", r.status, r.body)
		}
		if r := noRedirect(t, h, http.MethodGet, "/ui/queues/acme/forward-order", session, ""); r.status != http.StatusOK || !strings.Contains(r.body, `name="csrf"`) {
			t.Errorf("GET /ui/queues/acme/forward-order with the session cookie: %d, want 200 and the forms' token\n%s", r.status, r.body)
		}
		// a POST made with the cookie alone (another site's form) acts on nothing
		r = noRedirect(t, h, http.MethodPost, "/api/queues/acme/forward-order/dlq/1/discard", session, "")
		wantError(t, "discard with the session cookie and no form token", r, http.StatusForbidden, "a request made with the UI's session needs the UI's form token")
		if r := noRedirect(t, h, http.MethodPost, "/ui/queues/acme/forward-order/dlq/1/replay", session, "csrf=forged"); r.status != http.StatusForbidden {
			t.Errorf("the Replay button's POST with a forged token: %d, want 403\n%s", r.status, r.body)
		}
		if r := noRedirect(t, h, http.MethodPost, "/ui/logout", session, ""); r.status != http.StatusForbidden {
			t.Errorf("POST /ui/logout without the form token: %d, want 403", r.status)
		}
		// a cookie that was tampered with is no session
		tampered := session[:len(session)-2] + "xx"
		if r := noRedirect(t, h, http.MethodGet, "/api/queues", tampered, ""); r.status != http.StatusUnauthorized {
			t.Errorf("GET /api/queues with a tampered session cookie: %d, want 401", r.status)
		}
		// after logging in, the browser goes to a page of the UI, never elsewhere
		for _, next := range []string{"https://evil.example/", "//evil.example/ui/", "/ui/../../elsewhere\\x", "/status"} {
			r := noRedirect(t, h, http.MethodPost, "/ui/login?next="+url.QueryEscape(next), "", "key="+h.adminKey)
			if loc := r.header.Get("Location"); r.status != http.StatusSeeOther || loc != "/ui/" {
				t.Errorf("POST /ui/login?next=%s: %d Location %q, want 303 to /ui/", next, r.status, loc)
			}
		}
	})

	t.Run("no admin key", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "state", "registry.db")
		h2, _ := launch(t, t.TempDir(), []string{"serve", "--listen", "127.0.0.1:0", "--db", db}, nil, "")
		for _, path := range []string{"/ui/", "/ui/login", "/ui/queues", "/ui/queues/acme/forward-order", "/ui/journal", "/api/queues", "/api/flows", "/api/journal", "/api/queues/acme/forward-order/dlq", "/status"} {
			for _, key := range []string{"", "admin-test-key"} {
				if r := h2.do(http.MethodGet, path, key, "", ""); r.status != http.StatusNotFound {
					t.Errorf("GET %s (key %q) without --admin-key: %d %s, want 404", path, key, r.status, r.body)
				}
			}
		}
		for _, path := range []string{"/ui/login", "/api/queues/acme/forward-order/dlq/1/replay"} {
			if r := h2.do(http.MethodPost, path, "admin-test-key", "application/x-www-form-urlencoded", "key=admin-test-key"); r.status != http.StatusNotFound || r.header.Get("Set-Cookie") != "" {
				t.Errorf("POST %s without --admin-key: %d %s, want 404", path, r.status, r.body)
			}
		}
	})
}

// noRedirect sends a request to the host without following redirects;
// cookie ("name=value") is sent when not "", a body as a form.
func noRedirect(t *testing.T, h *hostProc, method, path, cookie, form string) response {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// sameNames reports whether got is exactly want.
func sameNames(got []string, want ...string) bool {
	return strings.Join(got, "\x00") == strings.Join(want, "\x00")
}

// chromiumPath finds Chromium: /usr/bin/chromium, else chromium on PATH.
func chromiumPath() (string, bool) {
	if st, err := os.Stat("/usr/bin/chromium"); err == nil && !st.IsDir() {
		return "/usr/bin/chromium", true
	}
	p, err := exec.LookPath("chromium")
	return p, err == nil
}

// noChromium is why the browser test cannot run (see missingTool).
const noChromium = "Chromium is not installed (no /usr/bin/chromium, no chromium on PATH; apt-get install chromium)"

// browser drives one Chromium tab for a test.
type browser struct {
	t    *testing.T
	ctx  context.Context // the tab; its deadline ends the whole browser part
	base string          // the host's URL

	mu  sync.Mutex
	out bytes.Buffer // Chromium's stdout and stderr
}

func (b *browser) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.Write(p)
}

// stepTimeout bounds each browser step, within the test's overall deadline.
const stepTimeout = 15 * time.Second

// fail ends the test with what failed, where the browser is and its page.
func (b *browser) fail(format string, args ...any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	b.t.Fatalf("%s\nthe browser is at %s; its page:\n%s", fmt.Sprintf(format, args...), loc, page)
}

// do runs steps, failing the test on an error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail("%s: %v", what, err)
	}
}

// navigate loads url and returns the HTTP status of its page (before any
// refresh the page asks for).
func (b *browser) navigate(url string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		b.fail("opening %s: %v", url, err)
	}
	return resp.Status
}

// load runs steps that make the browser load a page (a click on a form's
// button) and returns the page's HTTP status.
func (b *browser) load(what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.fail("%s: %v", what, err)
	}
	if resp == nil {
		b.fail("%s: no page was loaded", what)
	}
	return resp.Status
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail("evaluating %s: %v", expr, err)
	}
	return v
}

// count is the number of elements matching a CSS selector.
func (b *browser) count(selector string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf("document.querySelectorAll(%q).length", selector))
}

// text is the text of the first element matching a CSS selector, "" when
// there is none.
func (b *browser) text(selector string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf("(document.querySelector(%q) || {}).innerText || ''", selector))
}

// waitLocation polls until the browser's location is the host's URL plus
// path (or starts with it, when prefix), through redirects and refreshes,
// and until the page has loaded.
func (b *browser) waitLocation(path string, prefix bool) string {
	b.t.Helper()
	want := b.base + path
	deadline := time.Now().Add(stepTimeout)
	var loc string
	for {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		l, err1 := chromedp.Run(ctx, chromedp.Location())
		state, err2 := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState`))
		cancel()
		if err1 == nil {
			loc = l
		}
		if err1 == nil && err2 == nil && state == "complete" && (loc == want || prefix && strings.HasPrefix(loc, want)) {
			return loc
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			b.fail("the browser is not at %s within %v (last location %q)", want, stepTimeout, loc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newBrowser starts a headless Chromium for the test, or skips the test
// when Chromium is not installed and CI is not set (fails when it is).
// The browser ends when the returned cancel runs or the deadline passes.
func newBrowser(t *testing.T, base string, deadline time.Duration) (*browser, context.CancelFunc) {
	t.Helper()
	path, ok := chromiumPath()
	if !ok {
		missingTool(t, "the browser test", noChromium)
	}
	b := &browser{t: t, base: base}
	// Chromium puts its singleton socket in a folder of its own under
	// TMPDIR, and leaves it there: a short folder of the test's, so that
	// the socket's path stays within the 108 bytes a socket name can have.
	tmp, err := os.MkdirTemp("", "nexus-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.CombinedOutput(b),
	)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), deadline)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	b.ctx = tabCtx
	cancel := func() {
		cancelTab()
		cancelAlloc() // waits until Chromium has exited, before t.TempDir is removed
		cancelTimeout()
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			lines := strings.Split(strings.TrimRight(b.out.String(), "\n"), "\n")
			b.mu.Unlock()
			t.Logf("Chromium's output (its last 40 lines):\n%s", strings.Join(lines[max(len(lines)-40, 0):], "\n"))
		}
	})
	if err := chromedp.Do(tabCtx); err != nil { // starts the browser
		cancel()
		t.Fatalf("starting Chromium (%s): %v\n%s", path, err, b.out.String())
	}
	return b, cancel
}

func TestUIBrowser(t *testing.T) {
	t.Parallel()
	if _, ok := chromiumPath(); !ok {
		missingTool(t, "the browser test", noChromium)
	}
	be := uiBackend(t)
	h, _ := queueHost(t, uiFlows(t, be.URL), hostOptions{}, "forward-order", "forward-copy")
	const orderBody, copyBody, copyBody2 = `{"orderId":"UI-1","total":42}`, `{"orderId":"UI-2","total":7}`, `{"orderId":"UI-3","total":8}`
	deadLetter(t, h, "forward-order", orderBody, "trace-ui-order")
	deadLetter(t, h, "forward-copy", copyBody, "trace-ui-copy")
	deadLetter(t, h, "forward-copy", copyBody2, "trace-ui-copy-2")

	started := time.Now()
	b, cancel := newBrowser(t, h.url, 60*time.Second)
	defer cancel()

	// without a session, the Queue page sends the browser to the login form
	if st := b.navigate(h.url + "/ui/queues/acme/forward-order"); st != http.StatusUnauthorized {
		t.Errorf("the Queue page without a session: status %d, want 401", st)
	}
	loc := b.waitLocation("/ui/login?next=", true)
	if want := h.url + "/ui/login?next=" + "%2Fui%2Fqueues%2Facme%2Fforward-order"; loc != want {
		t.Errorf("the login page is at %s, want %s", loc, want)
	}
	if n, m := b.count(`input[name="key"]`), b.count(`form input`); n != 1 || m != 1 {
		b.fail("the login form has %d fields, %d of them named key: want one field, named key", m, n)
	}

	// a wrong key: the form again, with the error
	key := chromedp.CSS(`input[name="key"]`)
	submit := chromedp.CSS(`form button[type="submit"]`)
	if st := b.load("logging in with a wrong key", chromedp.SendKeys(key, "not-the-admin-key"), chromedp.Click(submit)); st != http.StatusUnauthorized {
		t.Errorf("a wrong key: status %d, want 401", st)
	}
	if txt := b.text(".error"); !strings.Contains(txt, "That is not the admin key.") {
		b.fail("a wrong key: the page says %q", txt)
	}

	// the admin key: back on the Queue page
	b.do("waiting for the login form", chromedp.WaitVisible(key))
	if st := b.load("logging in", chromedp.Clear(key), chromedp.SendKeys(key, h.adminKey), chromedp.Click(submit)); st != http.StatusOK {
		t.Errorf("after logging in: status %d, want 200", st)
	}
	b.waitLocation("/ui/queues/acme/forward-order", false)
	row := `tr[data-id="1"]`
	if txt := b.text(row); !strings.Contains(txt, orderBody) || !strings.Contains(txt, forwardError) {
		b.fail("the dead letter's row: %q, want its payload and last error", txt)
	}

	// on a phone's 320 px, the page is no wider than the screen: the header
	// wraps, Log out shows, and the table scrolls in its own box
	b.do("narrowing the window to 320 px", chromedp.EmulateViewport(320, 640), chromedp.Reload())
	b.waitLocation("/ui/queues/acme/forward-order", false)
	if w := eval[float64](b, `document.documentElement.scrollWidth`); w > 320 {
		b.fail("at 320 px the Queue page is %v px wide", w)
	}
	if right := eval[float64](b, `document.querySelector('header form button').getBoundingClientRect().right`); right > 320 {
		b.fail("at 320 px Log out ends at %v px, off the screen", right)
	}
	b.do("widening the window again", chromedp.EmulateViewport(1280, 800), chromedp.Reload())
	b.waitLocation("/ui/queues/acme/forward-order", false)

	// Replay
	be.setStatus(http.StatusOK)
	before := len(be.on("/ingest"))
	b.load("clicking Replay", chromedp.Click(chromedp.CSS(row+` button[name="replay"]`)))
	b.waitLocation("/ui/queues/acme/forward-order?replayed=1&as=2", false)
	if txt := b.text(".notice"); !strings.Contains(txt, "replayed as message 2") {
		b.fail("after Replay the notice says %q, want it replayed as message 2", txt)
	}
	if n := b.count(row); n != 0 {
		b.fail("after Replay the dead letter's row is still there")
	}
	if txt := b.text("#dead-letters tbody"); !strings.Contains(txt, "DLQ is empty") {
		b.fail("after Replay the dead letters' table says %q", txt)
	}
	got := be.waitOn(t, "/ingest", before+1, 5*time.Second)[before]
	cid := got.header.Get("X-Correlation-Id")
	if got.body != orderBody || !uuidRE.MatchString(cid) {
		t.Errorf("the replay reached the backend as %s with X-Correlation-Id %q, want %s under a fresh UUID", got.body, cid, orderBody)
	}
	if r := dlqCLI(t, h.db, "list", "--tenant", "acme", "--flow", "forward-order"); r.stdout != "DLQ is empty\n" {
		t.Errorf("nexus dlq list --flow forward-order after Replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	// Discard, on a page that went stale: dead letter 1 of forward-copy is
	// discarded with the CLI while the page still shows it
	if st := b.navigate(h.url + "/ui/queues/acme/forward-copy"); st != http.StatusOK {
		t.Errorf("forward-copy's Queue page: status %d, want 200", st)
	}
	row2 := `tr[data-id="2"]`
	if txt, txt2 := b.text(row), b.text(row2); !strings.Contains(txt, copyBody) || !strings.Contains(txt2, copyBody2) {
		b.fail("forward-copy's dead letters: %q and %q, want %s and %s", txt, txt2, copyBody, copyBody2)
	}
	copies := len(be.on("/copy"))
	if r := dlqCLI(t, h.db, "discard", "--tenant", "acme", "--flow", "forward-copy", "--id", "1"); r.code != 0 {
		t.Fatalf("nexus dlq discard: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if st := b.load("clicking Discard of the dead letter the CLI discarded", chromedp.Click(chromedp.CSS(row+` button[name="discard"]`))); st != http.StatusNotFound {
		t.Errorf("Discard of a dead letter that is no longer pending: status %d, want 404", st)
	}
	if txt, want := b.text(".error"), "no pending dead letter id=1 tenant=acme flow=forward-copy"; txt != want {
		t.Errorf("Discard of a dead letter that is no longer pending: the page says %q, want %q (as nexus dlq says)", txt, want)
	}
	if n, n2 := b.count(row), b.count(row2); n != 0 || n2 != 1 {
		b.fail("the page shown after the refused Discard has %d rows of dead letter 1 and %d of dead letter 2, want 0 and 1", n, n2)
	}
	b.load("clicking Discard", chromedp.Click(chromedp.CSS(row2+` button[name="discard"]`)))
	b.waitLocation("/ui/queues/acme/forward-copy?discarded=2", false)
	if txt := b.text(".notice"); !strings.Contains(txt, "Dead letter 2 was discarded") {
		b.fail("after Discard the notice says %q", txt)
	}
	if n := b.count(row2); n != 0 {
		b.fail("after Discard the dead letter's row is still there")
	}
	if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
		t.Errorf("nexus dlq list after Discard: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if n := len(be.on("/copy")); n != copies {
		t.Errorf("Discard delivered the message: %d calls on /copy, want %d", n, copies)
	}

	// the Flows page
	b.do("opening the Flows page", chromedp.Navigate(h.url+"/ui/"))
	for _, f := range []string{"acme/forward-order", "acme/forward-copy"} {
		if txt := b.text(fmt.Sprintf(`tr[data-flow=%q]`, f)); !strings.Contains(txt, strings.TrimPrefix(f, "acme/")) {
			b.fail("the Flows page's row of %s: %q", f, txt)
		}
	}

	// the Journal page: the journal is written in batches, so reload until
	// the replay's delivery shows
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.do("opening the Journal page", chromedp.Navigate(h.url+"/ui/journal"))
		if strings.Contains(b.text("#journal tbody"), cid) {
			break
		}
		if time.Now().After(deadline) {
			b.fail("the Journal page does not show the replay (correlation ID %s) within 10 s", cid)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := b.count(`#journal tbody tr`) - b.count(`#journal tbody td.muted`); n < 7 {
		b.fail("the Journal page shows %d executions, want at least 7 (2 attempts of each dead letter, the replay)", n)
	}

	// Log out: the UI asks for the key again
	b.load("clicking Log out", chromedp.Click(chromedp.CSS(`header form button`)))
	b.waitLocation("/ui/login", false)
	b.do("opening the Flows page after logging out", chromedp.Navigate(h.url+"/ui/"))
	b.waitLocation("/ui/login?next=%2Fui%2F", false)
	if n := b.count(`tr[data-flow]`); n != 0 {
		b.fail("the login page shows %d flows", n)
	}
	// logging in again from a page whose address has a query goes back to it
	const journal = "/ui/journal?flow=forward-copy&limit=5"
	if st := b.navigate(h.url + journal); st != http.StatusUnauthorized {
		t.Errorf("the Journal page after logging out: status %d, want 401", st)
	}
	b.waitLocation("/ui/login?next="+url.QueryEscape(journal), false)
	b.load("logging in again", chromedp.SendKeys(key, h.adminKey), chromedp.Click(submit))
	b.waitLocation(journal, false)
	if txt := b.text("#journal tbody"); !strings.Contains(txt, "acme/forward-copy") || strings.Contains(txt, "acme/forward-order") {
		b.fail("the Journal page of forward-copy shows %q", txt)
	}
	if n := b.count(`#journal tbody tr`); n != 4 {
		b.fail("the Journal page of forward-copy shows %d rows, want its 4 attempts", n)
	}
	t.Logf("the browser part took %v", time.Since(started).Round(time.Millisecond))
}

// TestUIJournalFormInTheBrowser: the Journal page is "filtered by tenant,
// flow and correlation ID" (docs/management.md) through its own form. A
// browser submits every field of a GET form, the empty ones too, so a
// filter by flow alone is sent as ?tenant=&flow=hello&correlation_id=&limit=100.
// The page must show that flow's executions, not 400 "Correlation_id is
// empty: give one, or leave it out."
func TestUIJournalFormInTheBrowser(t *testing.T) {
	t.Parallel()
	if _, ok := chromiumPath(); !ok {
		missingTool(t, "the browser test", noChromium)
	}
	h := startHost(t, hostOptions{repo: helloRepo(t).dir})
	waitGate(t, h, "acme", "hello", acmeKey)
	for i := 0; i < 4; i++ {
		if r := h.run("acme", "hello", acmeKey, `{"name":"form"}`); r.status != http.StatusOK {
			t.Fatalf("run: %d %s", r.status, r.body)
		}
	}
	// the journal is written in batches
	eventually(t, 10*time.Second, "the runs in the journal", func() bool {
		r := h.do(http.MethodGet, "/api/journal?flow=hello", h.adminKey, "", "")
		return r.status == http.StatusOK && strings.Count(r.body, `"flow":"hello"`) >= 4
	})

	b, cancel := newBrowser(t, h.url, 60*time.Second)
	defer cancel()
	b.navigate(h.url + "/ui/login?next=%2Fui%2Fjournal")
	key := chromedp.CSS(`input[name="key"]`)
	b.load("logging in", chromedp.SendKeys(key, h.adminKey), chromedp.Click(chromedp.CSS(`form button[type="submit"]`)))
	b.waitLocation("/ui/journal", false)

	// filter by flow with the page's form: type the flow, press Show
	st := b.load("filtering the journal by flow with the form",
		chromedp.SendKeys(chromedp.CSS(`input[name="flow"]`), "hello"),
		chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	loc := b.waitLocation("/ui/journal?", true)
	rows := b.count(`#journal tbody tr`) - b.count(`#journal tbody td.muted`)
	if st != http.StatusOK || rows < 4 {
		t.Errorf("the Journal form filtered by flow hello (%s): status %d, %d rows, alert %q; want 200 and the 4 runs of acme/hello",
			strings.TrimPrefix(loc, h.url), st, rows, b.text(`.error`))
	}
}

// TestUILinkFromAnotherSiteKeepsTheSession: an operator logged in follows
// a link to a Queue page from another site (a chat message, an alert's
// page). The session cookie is SameSite=Strict, so the browser leaves it
// off that first request, which answers the 401 page; its refresh to the
// login form is the UI's own navigation and carries the cookie. The
// operator must land on the page linked, not be asked for the key again.
func TestUILinkFromAnotherSiteKeepsTheSession(t *testing.T) {
	t.Parallel()
	if _, ok := chromiumPath(); !ok {
		missingTool(t, "the browser test", noChromium)
	}
	be := uiBackend(t)
	h, _ := queueHost(t, uiFlows(t, be.URL), hostOptions{}, "forward-order")
	deadLetter(t, h, "forward-order", `{"orderId":"LINK-1"}`, "trace-ui-link")
	// another site: localhost, where the host is 127.0.0.1
	if !strings.HasPrefix(h.url, "http://127.0.0.1:") {
		t.Fatalf("the host listens at %s, not on 127.0.0.1", h.url)
	}
	queuePage := h.url + "/ui/queues/acme/forward-order"
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><body><a id="go" href="%s">the dead letters</a></body></html>`, queuePage)
	}))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)

	b, cancel := newBrowser(t, h.url, 60*time.Second)
	defer cancel()
	b.navigate(h.url + "/ui/login")
	key := chromedp.CSS(`input[name="key"]`)
	b.load("logging in", chromedp.SendKeys(key, h.adminKey), chromedp.Click(chromedp.CSS(`form button[type="submit"]`)))
	b.waitLocation("/ui/", false)

	if st := b.navigate(otherURL); st != http.StatusOK {
		t.Fatalf("the other site's page: status %d", st)
	}
	b.do("following the link to the Queue page", chromedp.Click(chromedp.CSS(`#go`)))
	// the 401 page is at the Queue page's address too, until its refresh:
	// wait for the dead letter's row, or the login form
	deadline := time.Now().Add(stepTimeout)
	for {
		// errors are those of a page being replaced: asked again
		ctx, cancelStep := context.WithTimeout(b.ctx, time.Second)
		loc, err1 := chromedp.Run(ctx, chromedp.Location())
		state, err2 := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState + " " + document.querySelectorAll('input[name="key"]').length + " " + document.querySelectorAll('tr[data-id="1"]').length`))
		cancelStep()
		switch {
		case err1 != nil || err2 != nil:
		case strings.HasPrefix(loc, h.url+"/ui/login") && state == "complete 1 0":
			b.fail("the link from another site ended on the login form, with a session that is valid")
		case loc == queuePage && state == "complete 0 1":
			return
		}
		if time.Now().After(deadline) {
			b.fail("the link from another site did not reach the Queue page within %v", stepTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
