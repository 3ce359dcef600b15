package integration

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStoredAccessKeysThatNoLongerParse: access keys an earlier build stored
// in registry.db that this build refuses (a YAML tag it took) used to stop
// nexus serve at start ("the stored access keys do not parse"). The server
// now starts and serves with no key accepted (401, as keys: []), says why
// (access_unreadable in the log, access_error in GET /status and in nexus
// status --db), and the first sync of a repo whose access.yaml parses makes
// its keys live again.
func TestStoredAccessKeysThatNoLongerParse(t *testing.T) {
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 30*time.Second)
	if r := h.run("acme", "hello", acmeKey, `{}`); r.status != http.StatusOK {
		t.Fatalf("run before: %d %s", r.status, r.body)
	}
	h.stop(10 * time.Second)
	tagged := accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}) + "    rate: 5\n    burst: ! 5\n"
	db, err := sql.Open("sqlite", h.db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE state SET value = ? WHERE key = 'access'`, []byte(tagged)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	const why = "the stored access keys do not parse: access.yaml:7: "
	h = startHost(t, hostOptions{db: h.db}) // nexus deploy's mode: no sync
	if r := h.run("acme", "hello", acmeKey, `{}`); r.status != http.StatusUnauthorized {
		t.Errorf("run with keys that do not parse: %d %s, want 401", r.status, r.body)
	}
	var st struct {
		AccessError *string `json:"access_error"`
	}
	if r := h.do(http.MethodGet, "/status", h.adminKey, "", ""); json.Unmarshal([]byte(r.body), &st) != nil || st.AccessError == nil || !strings.HasPrefix(*st.AccessError, why) {
		t.Errorf("GET /status: %s; want access_error beginning %q", r.body, why)
	}
	if r := h.do(http.MethodGet, "/api/flows", h.adminKey, "", ""); !strings.Contains(r.body, `"keys":[],"keys_error":"`+why) {
		t.Errorf("GET /api/flows: %s; want no key and keys_error beginning %q", r.body, why)
	}
	if evs := h.events("access_unreadable"); len(evs) != 1 {
		t.Errorf("%d access_unreadable lines, want 1", len(evs))
	}
	h.stop(10 * time.Second)
	if r := nexus(t, "", "status", "--db", h.db); r.code != 0 || !strings.Contains(r.stdout, "\naccess_error: "+why) {
		t.Errorf("nexus status --db: exit %d\n%s%s\nwant an access_error line beginning %q", r.code, r.stdout, r.stderr, why)
	}

	h = startHost(t, hostOptions{db: h.db, repo: repo.dir})
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := h.run("acme", "hello", acmeKey, `{}`)
		if r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the repo's keys not live within 30 s: run answers %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.AccessError = nil
	if r := h.do(http.MethodGet, "/status", h.adminKey, "", ""); json.Unmarshal([]byte(r.body), &st) != nil || st.AccessError != nil {
		t.Errorf("GET /status after the sync: %s; want access_error null", r.body)
	}
}
