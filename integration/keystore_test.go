package integration

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKeysNeverStored: keys made by `nexus key generate`, used on both
// doors (and refused on another tenant's flow), and a key nobody issued,
// appear nowhere in the state directory after the host has run and
// stopped (registry.db with its WAL, the queues, the cron records, the
// clone) nor in the host's log: only their SHA-256 is kept (which the
// search finds, so the search itself works).
func TestKeysNeverStored(t *testing.T) {
	t.Parallel()
	keyRE := regexp.MustCompile(`^key: (nxk_[0-9a-f]{64})\n\n(?s:.*)\n\n(  - id: [^\n]+\n    tenant: [^\n]+\n    sha256: ([0-9a-f]{64})\n(?s:.*))$`)
	var keys, hashes, entries []string
	for _, tenant := range []string{"acme", "globex"} {
		r := nexus(t, "", "key", "generate", "--tenant", tenant, "--flows", "*", "--rate", "0")
		m := keyRE.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("key generate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		keys, entries, hashes = append(keys, m[1]), append(entries, m[2]), append(hashes, m[3])
	}
	unknown := "nxk_" + strings.Repeat("5a", 32)
	be := newLoopback(t)
	state := filepath.Join(t.TempDir(), "state")
	h, _ := queueHost(t, map[string]string{
		"access.yaml":                "keys:\n" + strings.Join(entries, ""),
		"flows/acme/hello.md":        helloFlow,
		"flows/acme/order-intake.md": queueExample(t, "order-intake", be.URL),
	}, hostOptions{db: filepath.Join(state, "registry.db")})
	waitDeployed(t, h, "acme", "hello", keys[0])

	if r := h.run("acme", "hello", keys[0], `{"name":"Ada"}`); r.status != http.StatusOK {
		t.Errorf("run with the acme key: %d %s", r.status, r.body)
	}
	mustEnqueue(t, h, "acme", "order-intake", keys[0], `{"orderId":"K-1","total":5}`, "Idempotency-Key", "order-K-1")
	if r := h.run("acme", "hello", keys[1], `{"name":"Ada"}`); r.status != http.StatusForbidden {
		t.Errorf("run with the globex key on acme: %d %s", r.status, r.body)
	}
	if r := h.run("acme", "hello", unknown, `{"name":"Ada"}`); r.status != http.StatusUnauthorized {
		t.Errorf("run with an unknown key: %d %s", r.status, r.body)
	}
	waitEvents(t, h, "queue_processed", 1, nil, 10*time.Second)
	if code := h.stop(30 * time.Second); code != 0 {
		t.Fatalf("nexus serve exited %d on SIGTERM", code)
	}

	found := map[string][]string{} // a secret or hash → the files holding it
	err := filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range append(append([]string{unknown}, keys...), hashes...) {
			if bytes.Contains(b, []byte(s)) {
				found[s] = append(found[s], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{unknown}, keys...) {
		if len(found[k]) > 0 {
			t.Errorf("the key %s… is stored in %v", k[:12], found[k])
		}
		for _, line := range h.logLines() {
			if strings.Contains(line, k) {
				t.Errorf("the key %s… is in the log: %s", k[:12], line)
			}
		}
	}
	for _, sum := range hashes {
		if len(found[sum]) == 0 {
			t.Errorf("the hash %s… is nowhere in the state directory: the search does not find what the registry keeps", sum[:12])
		}
	}
}
