package integration

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestALaterServerOfAnotherBranchTakesOver: a server started on the state
// directory of a running one, following another branch (a rolling change
// of --branch), takes over: the first says so once (sync_superseded), shows
// it as its sync_error in /status, and stops publishing, so that the live
// set does not flap between the two branches at every poll. Once the later
// server is gone (killed), the first publishes again.
func TestALaterServerOfAnotherBranchTakesOver(t *testing.T) {
	repo := helloRepo(t)
	mainCommit := repo.git("rev-parse", "HEAD")
	repo.git("checkout", "-q", "-b", "other")
	otherCommit := repo.commit(map[string]string{"flows/acme/hello.md": strings.Replace(helloFlow, "hello,", "hi,", 1)})
	repo.git("checkout", "-q", "main")
	db := filepath.Join(t.TempDir(), "state", "registry.db")

	old := startHost(t, hostOptions{repo: repo.dir, db: db})
	old.waitCommit(mainCommit, 20*time.Second)
	rolled := startHost(t, hostOptions{repo: repo.dir, db: db, args: []string{"--branch", "other"}})
	rolled.waitCommit(otherCommit, 20*time.Second)
	waitEvents(t, old, "sync_superseded", 1, nil, 20*time.Second)
	time.Sleep(time.Second) // five polls of each

	for _, h := range []struct {
		name string
		p    *hostProc
	}{{"the first server", old}, {"the later server", rolled}} {
		r := h.p.do(http.MethodGet, "/status", h.p.adminKey, "", "")
		var st struct {
			Commit    string `json:"commit"`
			SyncError *struct {
				Error string `json:"error"`
			} `json:"sync_error"`
		}
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.Commit != otherCommit {
			t.Errorf("%s: /status %d %s; want commit %s", h.name, r.status, r.body, otherCommit)
		}
		superseded := st.SyncError != nil && strings.HasPrefix(st.SyncError.Error, "another server, started later (")
		if superseded != (h.p == old) {
			t.Errorf("%s: /status sync_error %+v", h.name, st.SyncError)
		}
		if r := h.p.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != 200 || r.body != `{"greeting":"hi, Ada"}` {
			t.Errorf("%s: /run %d %s; want the other branch's answer", h.name, r.status, r.body)
		}
		if n := len(h.p.events("sync_applied")); n != 1 {
			t.Errorf("%s: %d sync_applied lines, want 1", h.name, n)
		}
	}
	if n := len(old.events("sync_superseded")); n != 1 {
		t.Errorf("%d sync_superseded lines, want 1", n)
	}

	// Killed, the later server lets its lock go: the first one publishes
	// its branch again within a poll or two, and its sync_error clears.
	rolled.kill()
	old.waitCommit(mainCommit, 20*time.Second)
	if r := old.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != 200 || r.body != `{"greeting":"hello, Ada"}` {
		t.Errorf("after the later server was killed: /run %d %s; want the main branch's answer", r.status, r.body)
	}
	if r := old.do(http.MethodGet, "/status", old.adminKey, "", ""); !strings.Contains(r.body, `"sync_error":null`) {
		t.Errorf("after the later server was killed: /status %s; want no sync_error", r.body)
	}
}
