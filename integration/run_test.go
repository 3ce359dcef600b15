package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

const acmeKey = "test-key-acme"

func TestRunThroughGitSync(t *testing.T) {
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":         accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/hello.md": helloFlow,
	})
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
