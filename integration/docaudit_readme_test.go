package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Examples of README.md and docs/management.md checked over the built
// binary, beside those other tests hold: the flags of every command as the
// README names them (and the serve table's variables and defaults) against
// what --help prints, the first request's answer, the signed request's
// shell lines run as printed, and the management API's dead-letter answers
// and admin_action lines.

// readmeText is README.md.
func readmeText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeSection is the text of README.md from the ### heading that starts
// with heading up to the next heading.
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, "\n### "+heading)
	if i < 0 {
		t.Fatalf("README.md has no ### %s", heading)
	}
	s := readme[i+1:]
	if j := regexp.MustCompile(`\n##`).FindStringIndex(s[4:]); j != nil {
		s = s[:4+j[0]]
	}
	return s
}

// helpFlag is one flag as nexus CMD --help prints it.
type helpFlag struct {
	env, def string // the (env NAME) of its usage, and its (default …), unquoted
}

var (
	helpFlagRE  = regexp.MustCompile(`(?m)^  -([a-z-]+)(?: [^\n]*)?\n\s+(.*)$`)
	helpEnvRE   = regexp.MustCompile(`\(env (NEXUS_[A-Z_]+)\)`)
	helpDefRE   = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	docFlagRE   = regexp.MustCompile(`(^|[^\w-])--([a-z][a-z-]*)`)
	tableCellRE = regexp.MustCompile("`([^`]*)`")
)

// helpFlags runs nexus args… --help and returns its flags by name.
func helpFlags(t *testing.T, args ...string) map[string]helpFlag {
	t.Helper()
	r := nexusEnv(t, nil, append(args, "--help")...)
	if r.code != 0 {
		t.Fatalf("nexus %v --help: exit %d %s", args, r.code, r.stderr)
	}
	out := r.stdout + r.stderr
	flags := map[string]helpFlag{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(out, -1) {
		var f helpFlag
		if e := helpEnvRE.FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
		}
		if d := helpDefRE.FindStringSubmatch(m[2]); d != nil {
			f.def = d[1]
		}
		flags[m[1]] = f
	}
	if len(flags) == 0 && !slices.Contains([]string{"validate", "version"}, args[0]) {
		t.Fatalf("nexus %v --help lists no flags:\n%s", args, out)
	}
	return flags
}

// docFlags are the --flags a README text names, but nexus --version.
func docFlags(text string) []string {
	var names []string
	for _, m := range docFlagRE.FindAllStringSubmatchIndex(text, -1) {
		if strings.HasSuffix(text[:m[4]-2], "nexus ") {
			continue // nexus --version: no flag of the command
		}
		if name := text[m[4]:m[5]]; !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestDocAuditReadmeFlags: every flag a command's --help prints is named
// in that command's section of the README and no other; the serve table
// gives each flag the variable and the default --help gives it.
func TestDocAuditReadmeFlags(t *testing.T) {
	t.Parallel()
	readme := readmeText(t)
	for _, c := range []struct{ heading string }{
		{"`nexus serve`"}, {"`nexus deploy"}, {"`nexus status"}, {"`nexus key generate"},
		{"`nexus dlq"}, {"`nexus journal"}, {"`nexus validate"}, {"`nexus version`"},
	} {
		cmdArgs := strings.Fields(strings.Trim(strings.Fields(c.heading)[1], "`"))
		if cmdArgs[0] == "key" {
			cmdArgs = []string{"key", "generate"}
		}
		help := helpFlags(t, cmdArgs...)
		var want []string
		for name := range help {
			want = append(want, name)
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, docFlags(readmeSection(t, readme, strings.TrimSuffix(c.heading, "`")))); diff != "" {
			t.Errorf("nexus %s: the flags of --help (-) and of the README's section (+):\n%s", cmdArgs[0], diff)
		}
	}

	// the serve table: | `--flag` | `NEXUS_X` | default … |
	help := helpFlags(t, "serve")
	section := readmeSection(t, readme, "`nexus serve`")
	seen := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		env := strings.Trim(strings.TrimSpace(cells[2]), "`")
		for _, m := range tableCellRE.FindAllStringSubmatch(cells[1], -1) {
			name := strings.TrimPrefix(m[1], "--")
			seen[name] = true
			f, ok := help[name]
			if !ok {
				t.Errorf("the serve table names --%s, which --help does not", name)
				continue
			}
			if f.env != env {
				t.Errorf("--%s: the table gives the variable %q, --help %q", name, env, f.env)
			}
			if f.def == "" {
				if f.env != "" && !strings.HasPrefix(strings.TrimSpace(cells[3]), "none") {
					t.Errorf("--%s: --help gives no default, the table %q", name, strings.TrimSpace(cells[3]))
				}
				continue
			}
			if !defaultIn(f.def, cells[3]) {
				t.Errorf("--%s: --help's default %q is not the table's: %q", name, f.def, strings.TrimSpace(cells[3]))
			}
		}
	}
	for name := range help {
		if !seen[name] {
			t.Errorf("--help of nexus serve prints --%s, which the serve table leaves out", name)
		}
	}

	// the defaults the sections state in words
	if f := helpFlags(t, "journal")["limit"]; f.def != "50" || !strings.Contains(readme, "(`--limit` 50 by default)") {
		t.Errorf("nexus journal --limit: --help's default %q, the README says 50", f.def)
	}
	for _, cmd := range []string{"deploy", "status", "dlq", "journal", "serve"} {
		if f := helpFlags(t, cmd)["db"]; f.def != "~/.nexus/registry.db" || f.env != "NEXUS_DB" {
			t.Errorf("nexus %s --db: --help's default %q (env %q), the README's ~/.nexus/registry.db (NEXUS_DB)", cmd, f.def, f.env)
		}
	}
}

// defaultIn reports whether cell names def in backquotes, a duration
// written either way (168h, 168h0m0s).
func defaultIn(def, cell string) bool {
	for _, m := range tableCellRE.FindAllStringSubmatch(cell, -1) {
		if m[1] == def {
			return true
		}
		a, errA := time.ParseDuration(m[1])
		b, errB := time.ParseDuration(def)
		if errA == nil && errB == nil && a == b {
			return true
		}
	}
	return false
}

// exampleHelloRepo is a config repo of flows-example's acme/hello and
// access.yaml (the README's example key).
func exampleHelloRepo(t *testing.T) *configRepo {
	t.Helper()
	files := map[string]string{}
	for _, name := range []string{"access.yaml", "flows/acme/hello.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "flows-example", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	return newConfigRepo(t, files)
}

// TestDocAuditReadmeFirstRequest: the README's first request answers its
// greeting with the request's correlation ID, and the signed request's
// shell lines, run as printed with $NEXUS_SECRET and $KEY set, get the same
// answer from a host started with --secret.
func TestDocAuditReadmeFirstRequest(t *testing.T) {
	t.Parallel()
	readme := readmeText(t)
	const exampleKey = "nxk_example_acme_5f2c9d0e7b1a4c3d8e6f"
	answer := regexp.MustCompile(`\n(\{"greeting":"hello, Ada","correlationId":"[0-9a-f-]{36}"\})\n`).FindStringSubmatch(readme)
	if answer == nil {
		t.Fatal("README.md prints no answer of the first request")
	}
	repo := exampleHelloRepo(t)
	commit := repo.git("rev-parse", "HEAD")

	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(commit, 10*time.Second)
	r := h.run("acme", "hello", exampleKey, `{"name":"Ada"}`)
	cid := r.header.Get("X-Correlation-Id")
	printedCID := regexp.MustCompile(`[0-9a-f-]{36}`).FindString(answer[1])
	if want := strings.Replace(answer[1], printedCID, cid, 1); r.status != http.StatusOK || r.body != want || cid == "" {
		t.Errorf("the README's request: %d %s, want 200 %s", r.status, r.body, want)
	}

	for _, tool := range []string{"sh", "openssl", "curl", "cut", "date"} {
		if _, err := exec.LookPath(tool); err != nil {
			missingTool(t, "TestDocAuditReadmeFirstRequest", tool+" is not installed")
		}
	}
	block := regexp.MustCompile("(?s)With `--secret`.*?```sh\n(.*?)```").FindStringSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no signed request")
	}
	const secret = "a-signing-secret"
	signed := startHost(t, hostOptions{repo: repo.dir, env: []string{"NEXUS_SECRET=" + secret}})
	signed.waitCommit(commit, 10*time.Second)
	script := strings.ReplaceAll(block[1], "http://localhost:9090", signed.url)
	sh := exec.Command("sh", "-c", "set -e\n"+script)
	sh.Env = append(os.Environ(), "NEXUS_SECRET="+secret, "KEY="+exampleKey)
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's signed request: %v\n%s", err, stderr.String())
	}
	var got struct{ Greeting, CorrelationID string }
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Greeting != "hello, Ada" || len(got.CorrelationID) != 36 {
		t.Errorf("the README's signed request answered %q, want the greeting", stdout.String())
	}
	// and unsigned, the same host refuses it: the signature was checked
	if r := signed.run("acme", "hello", exampleKey, `{"name":"Ada"}`); r.status != http.StatusUnauthorized {
		t.Errorf("unsigned request to a host with --secret: %d %s", r.status, r.body)
	}
}

// TestDocAuditManagementDLQ: the dead-letter requests of docs/management.md
// answer as its tables say: a page's next_after, prev_after and last_after,
// a replay, a discard, the 404 of an id no longer pending and of an
// unknown action, a replay of all with none pending, a discard of all
// naming the ids, and one admin_action line for each action (one for a run
// of all, with count, first_msg_id and last_msg_id; none for a run that
// handled none).
func TestDocAuditManagementDLQ(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := oneAttemptHost(t, be)
	for i := 1; i <= 3; i++ {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"A-%d","total":42}`, i))
	}
	waitEvents(t, h, "dlq_moved", 3, field("flow", "forward-order"), 15*time.Second)
	be.setStatus(http.StatusOK)

	const q = "/api/queues/acme/forward-order/dlq"
	pages := []struct {
		query string
		want  string
	}{
		{"?limit=1", `{"total":3,"next_after":1,"prev_after":null,"last_after":2}`},
		{"?after=1&limit=1", `{"total":3,"next_after":2,"prev_after":0,"last_after":2}`},
		{"?after=2&limit=1", `{"total":3,"next_after":null,"prev_after":1,"last_after":null}`},
	}
	for _, p := range pages {
		r := h.do(http.MethodGet, q+p.query, h.adminKey, "", "")
		var got map[string]any
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", q+p.query, r.status, r.body)
		}
		var want map[string]any
		json.Unmarshal([]byte(p.want), &want)
		for k := range got {
			if _, ok := want[k]; !ok {
				delete(got, k)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", q+p.query, diff)
		}
	}

	steps := []struct {
		path   string
		status int
		body   string
	}{
		// first, so that the lines of the others, after it in the log, show it logged none
		{"/api/queues/acme/other/dlq/all/replay", 200, `{"tenant":"acme","flow":"other","replayed":[]}`},
		{q + "/1/replay", 200, `{"tenant":"acme","flow":"forward-order","id":1,"replayed":true,"message_id":4}`},
		{q + "/1/replay", 404, `{"ok":false,"error":"no pending dead letter id=1 tenant=acme flow=forward-order"}`},
		{q + "/2/discard", 200, `{"tenant":"acme","flow":"forward-order","id":2,"discarded":true}`},
		{q + "/3/frob", 404, `{"ok":false,"error":"no such action \"frob\": replay or discard"}`},
		{q + "/all/discard", 200, `{"tenant":"acme","flow":"forward-order","discarded":[3]}`},
	}
	for _, s := range steps {
		r := h.do(http.MethodPost, s.path, h.adminKey, "", "")
		if r.status != s.status || strings.TrimSpace(r.body) != s.body {
			t.Errorf("POST %s: %d %s, want %d %s", s.path, r.status, r.body, s.status, s.body)
		}
	}
	if r := h.do(http.MethodGet, "/api/journal?correlation_id=", h.adminKey, "", ""); r.status != http.StatusBadRequest ||
		strings.TrimSpace(r.body) != `{"ok":false,"error":"correlation_id is empty: give one, or leave it out"}` {
		t.Errorf("an empty correlation_id: %d %s", r.status, r.body)
	}

	var got []map[string]any
	for _, ev := range waitEvents(t, h, "admin_action", 3, nil, 5*time.Second) {
		line := map[string]any{}
		for _, k := range []string{"action", "msg_id", "replay_msg_id", "count", "first_msg_id", "last_msg_id", "auth"} {
			if v, ok := ev[k]; ok {
				line[k] = v
			}
		}
		got = append(got, line)
	}
	want := []map[string]any{
		{"action": "dlq_replay", "msg_id": 1.0, "replay_msg_id": 4.0, "auth": "bearer"},
		{"action": "dlq_discard", "msg_id": 2.0, "replay_msg_id": 0.0, "auth": "bearer"},
		{"action": "dlq_discard_all", "count": 1.0, "first_msg_id": 3.0, "last_msg_id": 3.0, "auth": "bearer"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admin_action lines (-want +got):\n%s", diff)
	}
}

// TestDocAuditReplayLoggedWhileItsRetriesWait covers the README's "nexus
// dlq" paragraph: a running server logs a replay (dlq_replayed, naming the
// new message as replay_msg_id) when its worker applies it to dlq.log, at
// the queue's next idle moment, whether or not a retry waits; so a replay
// into a downstream that still refuses is logged while its retry waits,
// before its second attempt, not after its own retries.
func TestDocAuditReplayLoggedWhileItsRetriesWait(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setStatus(http.StatusServiceUnavailable)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL,
			"queue_max_attempts: 5", "queue_max_attempts: 2",
			"queue_initial_delay_ms: 500", "queue_initial_delay_ms: 3000"),
	}, hostOptions{}, "forward-order")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	waitEvents(t, h, "dlq_moved", 1, field("msg_id", 1), 15*time.Second)

	if r := dlqCLI(t, h.db, "replay", "--tenant", "acme", "--flow", "forward-order", "--id", "1"); r.code != 0 || r.stdout != "replayed  id=1 tenant=acme flow=forward-order\n" {
		t.Fatalf("dlq replay: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	ev := waitEvents(t, h, "dlq_replayed", 1, nil, 10*time.Second)[0]
	if fmt.Sprint(ev["msg_id"]) != "1" || fmt.Sprint(ev["replay_msg_id"]) != "2" {
		t.Errorf("dlq_replayed: %v, want dead letter 1 replayed as message 2", ev)
	}
	// logged while the replay's retry waited: its second attempt, 3 s
	// after its first, had not run
	if n := len(h.events("dlq_moved")); n != 1 {
		t.Errorf("dlq_replayed logged after the replay was dead-lettered again (%d dlq_moved lines)", n)
	}
	waitEvents(t, h, "dlq_moved", 1, field("msg_id", 2), 15*time.Second)
	if n := len(h.events("dlq_replayed")); n != 1 {
		t.Errorf("%d dlq_replayed lines, want 1", n)
	}
}
