package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDeployStatusAndRepublish(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "state", "registry.db")
	writeFiles(t, dir, map[string]string{
		"repo/access.yaml":           "keys: []\n",
		"repo/flows/acme/hello.md":   helloFlow,
		"repo/flows/acme/README.md":  "# not a flow\n",
		"repo/flows/globex/other.md": strings.Replace(helloFlow, "tenant: acme", "tenant: globex", 1),
	})

	// the keys line names access.yaml by its absolute path, as deploy
	// names every file (an empty key set on a new registry is unchanged)
	keys := "unchanged access keys of " + filepath.Join(dir, "repo", "access.yaml") + " (0 keys)\n"
	r := nexus(t, dir, "deploy", "--db", db, "repo")
	want := "published acme/hello v1\npublished globex/hello v1\n" + keys
	if r.code != 0 || r.stdout != want {
		t.Fatalf("first deploy: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	r = nexus(t, dir, "deploy", "--db", db, "repo")
	if r.stdout != "unchanged acme/hello v1\nunchanged globex/hello v1\n"+keys {
		t.Errorf("second deploy: %q", r.stdout)
	}
	// the same files named another way are the same files
	r = nexus(t, dir, "deploy", "--db", db, filepath.Join(dir, "repo"))
	if r.stdout != "unchanged acme/hello v1\nunchanged globex/hello v1\n"+keys {
		t.Errorf("the repo by its absolute path: %q", r.stdout)
	}
	r = nexus(t, filepath.Join(dir, "repo"), "deploy", "--db", db, "flows/acme/hello.md")
	if r.stdout != "unchanged acme/hello v1\n" {
		t.Errorf("one file of the repo, from the repo: %q", r.stdout)
	}

	// a change is a new version; the other flow is left alone
	writeFiles(t, dir, map[string]string{"repo/flows/acme/hello.md": strings.Replace(helloFlow, "hello, ", "hi, ", 1)})
	r = nexus(t, dir, "deploy", "--db", db, "repo/flows/acme/hello.md")
	if r.stdout != "published acme/hello v2\n" {
		t.Errorf("changed flow: %q", r.stdout)
	}

	// one bad file: nothing is published
	writeFiles(t, dir, map[string]string{
		"bad/a.md": strings.Replace(helloFlow, "hello, ", "hey, ", 1),
		"bad/b.md": strings.Replace(helloFlow, "flow: hello", "flow: Hello", 1),
	})
	r = nexus(t, dir, "deploy", "--db", db, "bad")
	if r.code != 1 || !strings.Contains(r.stdout, `bad/b.md:3: invalid name "Hello"`) || !strings.Contains(r.stderr, "nothing published") {
		t.Errorf("bad deploy: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}

	r = nexus(t, dir, "status", "--db", db)
	wantStatus := []string{
		"registry: " + db,
		"commit: none",
		"synced_at: never",
		"flows: 2",
		"generation: 2",
		"last_error: none",
		"flow: acme/hello v2",
		"flow: globex/hello v1",
	}
	if diff := cmp.Diff(strings.Join(wantStatus, "\n")+"\n", r.stdout); diff != "" || r.code != 0 {
		t.Errorf("status (exit %d) (-want +got):\n%s", r.code, diff)
	}
}

func TestDeployUsesNexusDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "env.db")
	writeFiles(t, dir, map[string]string{"hello.md": helloFlow})
	cmd := nexusCmd(dir, "deploy", "hello.md")
	cmd.Env = append(os.Environ(), "NEXUS_DB="+db)
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "published acme/hello v1\n" {
		t.Fatalf("deploy with NEXUS_DB: %v %q", err, out)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("NEXUS_DB was not used: %v", err)
	}
}

func TestKeyGenerate(t *testing.T) {
	t.Parallel()
	r := nexus(t, "", "key", "generate", "--tenant", "acme", "--flows", "hello,order-intake", "--rate", "5")
	m := regexp.MustCompile(`^key: (nxk_[0-9a-f]{64})\n\n(?s:.*)\n\n  - id: acme-[0-9a-f]{8}\n    tenant: acme\n    sha256: ([0-9a-f]{64})\n    flows: \[hello, order-intake\]\n    rate: 5\n    burst: 5\n$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("exit %d, stdout:\n%s", r.code, r.stdout)
	}
	sum := sha256.Sum256([]byte(m[1]))
	if hex.EncodeToString(sum[:]) != m[2] {
		t.Errorf("sha256 %s is not the key's hash", m[2])
	}
	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"key", "generate", "--flows", "x"}, 2, "--tenant is required"},
		{[]string{"key", "generate", "--tenant", "acme"}, 2, "--flows is required"},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x"}, 2, "--rate is required"},
		{[]string{"key", "generate", "--tenant", "a.b", "--flows", "x", "--rate", "0"}, 1, `invalid name "a.b" for tenant`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "../x", "--rate", "0"}, 1, `invalid name "../x" for flow (tenant "acme")`},
		// given empty (an unset variable): the name rule's, not a flag left out
		{[]string{"key", "generate", "--tenant", "", "--flows", "x", "--rate", "0"}, 1, `invalid name "" for tenant`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "", "--rate", "0"}, 1, `invalid name "" for flow (tenant "acme")`},
		{[]string{"key"}, 2, "the subcommand is generate"},
	} {
		r := nexus(t, "", tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.err) || r.stdout != "" {
			t.Errorf("nexus %v: exit %d, stdout %q, stderr %q", tt.args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestReadingCommandsWithoutARegistry: nexus journal and nexus status read
// a registry that does not exist as an empty one, and create nothing (a
// mistyped --db leaves no state directory behind).
func TestReadingCommandsWithoutARegistry(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	db := filepath.Join(state, "registry.db")
	r := nexus(t, "", "journal", "--db", db)
	if r.code != 0 || r.stdout != "the journal is empty\n" {
		t.Errorf("journal: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := nexus(t, "", "journal", "--db", db, "--limit", "0"); r.code != 2 {
		t.Errorf("--limit 0: exit %d", r.code)
	}
	r = nexus(t, "", "status", "--db", db)
	want := "registry: " + db + "\ncommit: none\nsynced_at: never\nflows: 0\ngeneration: 0\nlast_error: none\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("reading a registry that does not exist created %s (%v)", state, err)
	}
}

// TestJournalNewestFiftyByDefault: nexus journal, beside a running server,
// prints the newest 50 executions by default, newest first (server.md);
// --limit prints more.
func TestJournalNewestFiftyByDefault(t *testing.T) {
	t.Parallel()
	h, _ := queueHost(t, map[string]string{"flows/acme/hello.md": helloFlow}, hostOptions{}, "hello")
	const runs = 60
	for i := range runs {
		if r := h.do(http.MethodPost, "/flows/acme/hello/run", acmeKey, "application/json", `{"name":"Ada"}`, "X-Correlation-ID", fmt.Sprintf("journal-%02d", i)); r.status != http.StatusOK {
			t.Fatalf("run %d: %d %s", i, r.status, r.body)
		}
	}
	var lines []string
	eventually(t, 15*time.Second, fmt.Sprintf("%d journal entries", runs), func() bool {
		lines = strings.Split(strings.TrimSuffix(nexus(t, "", "journal", "--db", h.db, "--limit", "100").stdout, "\n"), "\n")
		return len(lines) == runs
	})
	r := nexus(t, "", "journal", "--db", h.db)
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(got) != 50 {
		t.Fatalf("nexus journal: exit %d, %d lines, want 50:\n%s%s", r.code, len(got), r.stdout, r.stderr)
	}
	for i, line := range got {
		if want := fmt.Sprintf("correlation_id=journal-%02d", runs-1-i); !strings.Contains(line, want) || !strings.Contains(line, " run ") {
			t.Errorf("line %d: %q, want the run with %s (newest first)", i+1, line, want)
		}
	}
}

// TestCLITimesAreRFC3339UTCWholeSeconds: "Times printed by the CLI are RFC
// 3339 UTC with whole seconds" (server.md, "Precise answers"), those a
// running server recorded included: nexus status's synced_at and the time
// of a refused commit, and the time of each nexus journal line. The
// registry keeps finer times than that.
func TestCLITimesAreRFC3339UTCWholeSeconds(t *testing.T) {
	t.Parallel()
	repo := helloRepo(t)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)
	if r := h.run("acme", "hello", acmeKey, `{"name":"Ada"}`); r.status != http.StatusOK {
		t.Fatalf("/run: %d %s", r.status, r.body)
	}
	repo.commit(map[string]string{"flows/acme/bad.md": strings.Replace(helloFlow, "flow: hello", "flow: Bad", 1)})
	waitEvents(t, h, "sync_failed", 1, nil, 10*time.Second)

	whole := regexp.MustCompile(`^` + rfc3339 + `$`)
	// every time printed, whatever its form: a date, a T and what follows up to a space
	anyTime := regexp.MustCompile(`\d{4}-\d\d-\d\dT\S+`)
	checkTimes := func(cmd, out string, want int) {
		t.Helper()
		got := anyTime.FindAllString(out, -1)
		if len(got) < want {
			t.Errorf("nexus %s printed %d times, want at least %d:\n%s", cmd, len(got), want, out)
		}
		for _, tm := range got {
			if !whole.MatchString(tm) {
				t.Errorf("nexus %s prints the time %s, want RFC 3339 UTC with whole seconds (2026-08-09T14:02:11Z):\n%s", cmd, tm, out)
			}
		}
	}

	r := nexus(t, "", "status", "--db", h.db)
	synced := regexp.MustCompile(`(?m)^synced_at: (\S+)$`).FindStringSubmatch(r.stdout)
	refused := regexp.MustCompile(`(?m)^last_error: commit [0-9a-f]{40} refused at (\S+)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || synced == nil || refused == nil {
		t.Fatalf("nexus status: exit %d\n%s%s\nwant a synced_at line and a last_error line naming the refused commit", r.code, r.stdout, r.stderr)
	}
	checkTimes("status", r.stdout, 2)

	var out string
	eventually(t, 10*time.Second, "the run in the journal", func() bool {
		out = nexus(t, "", "journal", "--db", h.db).stdout
		return strings.Contains(out, " run ")
	})
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if tm, _, _ := strings.Cut(line, " "); !whole.MatchString(tm) {
			t.Errorf("journal line %q begins with %q, want its time in RFC 3339 UTC with whole seconds", line, tm)
		}
	}
	checkTimes("journal", out, 1)
}
