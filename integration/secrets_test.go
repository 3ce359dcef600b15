package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestARefusedEndpointKeepsItsCredentials: an endpoint's user information
// and query string are where a downstream's password and API key live
// (a failed call's error leaves both out, engine.transportError). A commit
// whose endpoint is refused reported the endpoint whole: the password and
// the key reached the log (sync_failed), GET /status, nexus status and
// nexus validate, which CI prints.
func TestARefusedEndpointKeepsItsCredentials(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)

	const password, apiKey = "pw-S3CRET-8841", "key-S3CRET-1293"
	bad := "---\nflowmarkdown_version: \"0.1\"\nflow: bad\ntenant: acme\neffects: [http_egress]\n---\n\n" +
		"## Step: call\neffects: [http_egress]\n" +
		"endpoint: https://deploy:" + password + "@api.example.com/orders?api_key=" + apiKey + "&note=a b\n"
	repo.commit(map[string]string{"flows/acme/bad.md": bad})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)

	shown := map[string]string{
		"the log": strings.Join(h.logLines(), "\n"),
		"/status": h.do(http.MethodGet, "/status", h.adminKey, "", "").body,
	}
	st := nexus(t, "", "status", "--db", h.db)
	shown["nexus status"] = st.stdout + st.stderr
	v := nexus(t, "", "validate", filepath.Join(repo.dir, "flows", "acme", "bad.md"))
	shown["nexus validate"] = v.stdout + v.stderr
	for where, text := range shown {
		if !strings.Contains(text, "bad.md:10") || !strings.Contains(text, "contains a space") {
			t.Errorf("%s does not report the refused endpoint:\n%s", where, text)
		}
		for _, secret := range []string{password, apiKey} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s:\n%s", where, secret, text)
			}
		}
	}
	// nor does the registry's file, where the refusal is kept (a refused
	// commit's sources are not stored)
	var stored []byte
	for _, name := range []string{h.db, h.db + "-wal"} {
		b, err := os.ReadFile(name)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		stored = append(stored, b...)
	}
	for _, secret := range []string{password, apiKey} {
		if strings.Contains(string(stored), secret) {
			t.Errorf("registry.db holds %s", secret)
		}
	}
}

// TestTheCloneIsTheOwnersAlone: the host's clone of the config repo holds
// every flow's source (a downstream's credentials among them) and
// access.yaml. go-git made it 0755, its files 0644, so in a state
// directory left open to other users (warned of, state_directory_open)
// they could read what registry.db (0600) keeps from them. A clone an
// earlier version made is closed at the next start.
func TestTheCloneIsTheOwnersAlone(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	repo := helloRepo(t)
	clone := filepath.Join(state, "repo")
	mode := func() os.FileMode {
		info, err := os.Stat(clone)
		if err != nil {
			t.Fatal(err)
		}
		return info.Mode().Perm()
	}
	h := startHost(t, hostOptions{repo: repo.dir, db: filepath.Join(state, "registry.db")})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	if got := mode(); got&0o077 != 0 {
		t.Errorf("the clone %s: mode %v, want the owner's alone", clone, got)
	}
	if code := h.stop(10 * time.Second); code != 0 {
		t.Fatalf("nexus serve exited %d", code)
	}
	if err := os.Chmod(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, hostOptions{repo: repo.dir, db: filepath.Join(state, "registry.db")})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	if got := mode(); got != 0o700 {
		t.Errorf("the clone an earlier version left open: mode %v at the next start, want %v", got, os.FileMode(0o700))
	}
}
