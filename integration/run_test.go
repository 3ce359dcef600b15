package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

const acmeKey = "test-key-acme"

func TestRunThroughGitSync(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)

	r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`)
	if r.status != http.StatusOK || r.body != `{"greeting":"hello, Ada"}` || r.header.Get("X-Correlation-Id") == "" {
		t.Fatalf("run: %d %q %v", r.status, r.body, r.header)
	}

	// a new commit changes the answer within one poll
	commit := repo.commit(map[string]string{"flows/acme/hello.md": strings.Replace(helloFlow, "hello, ", "hi, ", 1)})
	h.waitCommit(commit, 10*time.Second)
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.body != `{"greeting":"hi, Ada"}` {
		t.Errorf("after the commit: %d %q", r.status, r.body)
	}
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if len(h.events("run_completed")) != 2 {
		t.Errorf("run_completed lines: %v", h.events("run_completed"))
	}
}

// TestMaxRunsOnTheBinary: --max-runs 1 with one /run of a flow that waits
// for its backend: another is refused at once with 503 and Retry-After: 1,
// logged as request_refused; once the first answers, the next is taken.
func TestMaxRunsOnTheBinary(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"accepted":true}`))
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	forward := "---\nflowmarkdown_version: \"0.1\"\nflow: forward\ntenant: acme\neffects: [http_egress]\n---\n\n" +
		"## Step: forward\neffects: [http_egress]\nendpoint: " + be.URL + "/ingest\nmethod: POST\n"
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":           accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/hello.md":   helloFlow,
		"flows/acme/forward.md": forward,
	})
	h := startHost(t, hostOptions{repo: repo.dir, args: []string{"--max-runs", "1"}})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)

	first := make(chan response, 1)
	go func() { first <- h.run("acme", "forward", acmeKey, `{"orderId":"A-1"}`) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not reach the backend")
	}
	r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" ||
		r.body != `{"ok":false,"error":"too many runs in progress (at most 1): try again"}` {
		t.Errorf("a second run: %d %v %s", r.status, r.header, r.body)
	}
	close(release)
	if r := <-first; r.status != http.StatusOK {
		t.Errorf("the first run: %d %s", r.status, r.body)
	}
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != http.StatusOK {
		t.Errorf("a run after the first ended: %d %s", r.status, r.body)
	}
	waitEvents(t, h, "request_refused", 1, func(e map[string]any) bool { return e["status"] == float64(503) }, 5*time.Second)
}
