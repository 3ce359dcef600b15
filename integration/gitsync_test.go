package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The git sync against remotes and commits that misbehave.

// TestUnreachableRepoErrorPageIsNotCopied: a remote (or a proxy in front
// of it) that answers the fetch with an error page, as a web server does
// for a mistyped repo URL, is an unreachable repo: server.md has it
// "retried with backoff" and it "never stops the host". The page is the
// remote's, not an error of ours: it must not be copied whole into every
// sync_unreachable line and into /status's sync_error (go-git reads the
// whole body of a 401, 403 or 404 into memory and puts it in its error;
// a page of 200 MB made the host hold 2 GB and answer /status with
// 210 MB). The error keeps naming the repo and what went wrong.
func TestUnreachableRepoErrorPageIsNotCopied(t *testing.T) {
	t.Parallel()
	const pageBytes = 512 << 10 // under the harness's 1 MiB log line
	page := "<html><body><h1>Not Found</h1>\n" + strings.Repeat("<p>lorem ipsum dolor sit amet</p>\n", pageBytes/34)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)

	h := startHost(t, hostOptions{repo: srv.URL + "/config.git"})
	ev := waitEvents(t, h, "sync_unreachable", 2, nil, 20*time.Second)
	const bound = 2 << 10 // the page cut to 512 bytes, and the rest of the error
	for _, e := range ev {
		msg, _ := e["error"].(string)
		if !strings.Contains(msg, srv.Listener.Addr().String()) {
			t.Errorf("the sync_unreachable error does not name the repo: %.300q", msg)
		}
		if len(msg) > bound {
			t.Errorf("the sync_unreachable error holds %d bytes (the remote's %d-byte page), want at most %d: %.200q…", len(msg), len(page), bound, msg)
		}
	}
	r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
	var st struct {
		SyncError *struct {
			Error string `json:"error"`
		} `json:"sync_error"`
	}
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.SyncError == nil {
		t.Fatalf("/status: %d %.300s", r.status, r.body)
	}
	if len(r.body) > bound {
		t.Errorf("/status answers %d bytes with an unreachable repo (the remote's page copied into sync_error), want at most %d", len(r.body), bound)
	}
}

// TestARefusedCommitReportsEveryError: server.md has a refused commit
// reported with "its errors", and nexus validate, which reads a folder "as
// git sync reads a commit, by the same code", prints every one. A commit
// holding a symbolic link under flows/ was reported with that one error
// only: its broken flow and its broken access.yaml were not said until
// the link was gone, a push later (nexus validate on the same files listed
// all three).
func TestARefusedCommitReportsEveryError(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)

	if err := os.Symlink("hello.md", filepath.Join(repo.dir, "flows", "acme", "link.md")); err != nil {
		t.Fatal(err)
	}
	repo.commit(map[string]string{
		"flows/acme/bad.md": "---\nflowmarkdown_version: \"0.1\"\nflow: bad\ntenant: acme\n---\n\n## Step: a\nbogus_key: 1\n",
		"access.yaml":       "keys: [\n",
	})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)
	r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
	var st struct {
		LastError *struct {
			Errors []string `json:"errors"`
		} `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.LastError == nil {
		t.Fatalf("/status: %d %s", r.status, r.body)
	}
	all := strings.Join(st.LastError.Errors, "\n")
	for _, want := range []string{"flows/acme/link.md", "flows/acme/bad.md:8", "access.yaml:1"} {
		if !strings.Contains(all, want) {
			t.Errorf("the refused commit's errors do not report %s:\n%s", want, all)
		}
	}
	// nexus validate on the same files says all three
	v := nexus(t, "", "validate", repo.dir)
	for _, want := range []string{"link.md", "bad.md:8", "access.yaml:1"} {
		if !strings.Contains(v.stdout, want) {
			t.Errorf("nexus validate does not report %s either:\n%s", want, v.stdout)
		}
	}
}

// TestStatusOfARefusedCommit: GET /status answers
// {"commit":…,"synced_at":…,"flows":N,"last_error":null} or, after a
// failed commit, "last_error":{"commit":…,"errors":["flows/x.md:7: …"]}
// (server.md, "Precise answers"), through the git sync of the binary: the
// last good commit keeps its place and its flows, last_error names the
// refused commit and each error as FILE:LINE from the repo's root, and
// the next good commit clears it.
func TestStatusOfARefusedCommit(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	good := repo.git("rev-parse", "HEAD")
	h.waitCommit(good, 10*time.Second)

	status := func() string {
		t.Helper()
		r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("/status: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		return r.body
	}
	// the four keys of server.md first, in its order; what the host adds
	// (docs/user/server.md) follows them
	shape := func(commit, flows, lastError string) *regexp.Regexp {
		return regexp.MustCompile(`^\{"commit":"` + commit + `","synced_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","flows":` + flows +
			`,"last_error":` + regexp.QuoteMeta(lastError) + `[,}]`)
	}
	if body := status(); !shape(good, "1", "null").MatchString(body) {
		t.Errorf("/status at the first commit: %s", body)
	}

	bad := repo.commit(map[string]string{"flows/x.md": `---
flowmarkdown_version: "0.1"
flow: x
tenant: acme
description: a flow with a key the compiler does not know
queue_max_attempts: 2
colour: blue
---

## Step: answer
` + fence + `ntd
{}
` + fence + `
`})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)
	want := `{"commit":"` + bad + `","errors":["flows/x.md:7: unknown front matter key \"colour\""]}`
	if body := status(); !shape(good, "1", want).MatchString(body) {
		t.Errorf("/status after the refused commit %s:\n%s\nwant it to begin with the last good commit %s, its one flow, and last_error %s", bad, body, good, want)
	}
	// the last good commit keeps serving
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != http.StatusOK {
		t.Errorf("hello after the refused commit: %d %s", r.status, r.body)
	}

	fixed := repo.commit(map[string]string{"flows/x.md": `---
flowmarkdown_version: "0.1"
flow: x
tenant: acme
---

## Step: answer
` + fence + `ntd
{}
` + fence + `
`})
	h.waitCommit(fixed, 10*time.Second)
	if body := status(); !shape(fixed, "2", "null").MatchString(body) {
		t.Errorf("/status after the good commit %s: %s", fixed, body)
	}
}
