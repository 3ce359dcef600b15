package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The shared harness of the end-to-end tests: a config repo committed with
// git, a loopback backend recording requests, and nexus serve processes
// started, stopped and killed, with their logs printed when a test fails.

// configRepo is a git repository made for one test.
type configRepo struct {
	t   *testing.T
	dir string
}

// helloRepo is a config repo of one flow, acme/hello (helloFlow), and a key
// for every acme flow (acmeKey).
func helloRepo(t *testing.T) *configRepo {
	t.Helper()
	return newConfigRepo(t, map[string]string{
		"access.yaml":         accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/hello.md": helloFlow,
	})
}

// newConfigRepo makes a git repository on branch main holding files and
// commits them.
func newConfigRepo(t *testing.T, files map[string]string) *configRepo {
	t.Helper()
	r := &configRepo{t: t, dir: filepath.Join(t.TempDir(), "config-repo")}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.git("init", "-q", "-b", "main")
	// no automatic gc: after a few thousand loose objects (a hundred
	// commits of a deploy test) git starts one in the background, which
	// removes object folders under the next git add ("unable to create
	// temporary file")
	r.git("config", "gc.auto", "0")
	r.git("config", "maintenance.auto", "false")
	r.commit(files)
	return r
}

func (r *configRepo) git(args ...string) string {
	r.t.Helper()
	return r.gitStdin(nil, args...)
}

// gitStdin runs git with args in the repository, stdin (when not nil) on
// its standard input, and returns what it printed.
func (r *configRepo) gitStdin(stdin io.Reader, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Stdin = stdin
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (path → content; "" deletes the file), commits, and
// returns the commit's hash.
func (r *configRepo) commit(files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.dir, name)
		if content == "" {
			os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", "change")
	return r.git("rev-parse", "HEAD")
}

// testKey is an access key of a test's access.yaml.
type testKey struct {
	id, tenant, key string
	flows           []string // nil means ["*"]
	rate, burst     int
}

// accessYAML writes access.yaml for keys.
func accessYAML(keys ...testKey) string {
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, k := range keys {
		sum := sha256.Sum256([]byte(k.key))
		flows := `"*"`
		if k.flows != nil {
			flows = strings.Join(k.flows, ", ")
		}
		fmt.Fprintf(&b, "  - id: %s\n    tenant: %s\n    sha256: %s\n    flows: [%s]\n", k.id, k.tenant, hex.EncodeToString(sum[:]), flows)
		if k.rate > 0 {
			fmt.Fprintf(&b, "    rate: %d\n    burst: %d\n", k.rate, k.burst)
		}
	}
	return b.String()
}

// recorded is one request a backend received.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         string
}

// backend is a loopback HTTP server that records what it receives and
// answers with its handler (200 {} by default).
type backend struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
	handler  http.HandlerFunc
}

func newBackend(t *testing.T, handler http.HandlerFunc) *backend {
	b := &backend{handler: handler}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.requests = append(b.requests, recorded{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body)})
		h := b.handler
		b.mu.Unlock()
		if h == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{}`))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
	}))
	b.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connAcceptedKey{}, time.Now())
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

// connAcceptedKey holds, in a backend request's context, when the backend
// accepted the request's connection.
type connAcceptedKey struct{}

// connAccepted is when the backend accepted r's connection.
func connAccepted(r *http.Request) time.Time {
	at, _ := r.Context().Value(connAcceptedKey{}).(time.Time)
	return at
}

// received returns the requests so far.
func (b *backend) received() []recorded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]recorded(nil), b.requests...)
}

// hostProc is a running nexus serve.
type hostProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	url      string
	db       string
	adminKey string
	exited   chan struct{}
	exitErr  error

	mu   sync.Mutex
	logs []string
}

// hostOptions start a host; zero fields take test defaults.
type hostOptions struct {
	repo  string   // --repo
	db    string   // --db; default a new temporary state directory
	args  []string // more flags
	env   []string // more environment
	admin string   // --admin-key; default "admin-test-key"
}

// startHost starts nexus serve on a free loopback port and waits until it
// listens. The process is killed when the test ends; its log is printed if
// the test failed.
func startHost(t *testing.T, o hostOptions) *hostProc {
	t.Helper()
	if o.db == "" {
		o.db = filepath.Join(t.TempDir(), "state", "registry.db")
	}
	if o.admin == "" {
		o.admin = "admin-test-key"
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", o.db, "--admin-key", o.admin, "--poll", "200ms"}
	if o.repo != "" {
		args = append(args, "--repo", o.repo)
	}
	args = append(args, o.args...)
	h := &hostProc{t: t, db: o.db, adminKey: o.admin, exited: make(chan struct{})}
	h.cmd = exec.Command(nexusBinary(), args...)
	h.cmd.Env = append(append(os.Environ(), "NEXUS_LOG_FORMAT=json"), o.env...)
	h.watch(args, nil, nil)
	return h
}

// watch starts h.cmd (made with args), keeps the log lines whose event keep
// accepts (nil keeps all), and waits until the process listens. The
// process is killed when the test ends (and by the kernel if the test
// binary exits first: startChild); if the test failed, its kept log is
// printed, followed by more() when more is set.
func (h *hostProc) watch(args []string, keep func(event string) bool, more func() string) {
	t := h.t
	t.Helper()
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := startChild(h.cmd); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	scanned := make(chan struct{}) // closed when the log has been read to its end
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var ev struct{ Event, Listen string }
			json.Unmarshal([]byte(line), &ev)
			// (kept before the started line is announced: a test that
			// reads the log once the host listens finds that line in it)
			if keep == nil || keep(ev.Event) {
				h.mu.Lock()
				h.logs = append(h.logs, line)
				h.mu.Unlock()
			}
			if ev.Event == "started" {
				select {
				case listening <- ev.Listen:
				default:
				}
			}
		}
	}()
	go func() {
		// Wait closes the pipe: only once every line is read, so that a
		// test reading the log after the exit sees all of it
		<-scanned
		h.exitErr = h.cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		h.kill()
		if t.Failed() {
			extra := ""
			if more != nil {
				extra = more()
			}
			t.Logf("nexus %v log:\n%s%s", args, strings.Join(h.logLines(), "\n"), extra)
		}
	})
	select {
	case addr := <-listening:
		h.url = "http://" + addr
	case <-h.exited:
		t.Fatalf("nexus exited before listening: %v\n%s", h.exitErr, strings.Join(h.logLines(), "\n"))
	case <-time.After(20 * time.Second):
		t.Fatalf("nexus did not listen within 20 s\n%s", strings.Join(h.logLines(), "\n"))
	}
}

func (h *hostProc) logLines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.logs...)
}

// events returns the log lines whose event field is event, decoded.
func (h *hostProc) events(event string) []map[string]any {
	var out []map[string]any
	for _, line := range h.logLines() {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["event"] == event {
			out = append(out, m)
		}
	}
	return out
}

// stop sends SIGTERM and waits for the exit; it returns the exit code.
func (h *hostProc) stop(timeout time.Duration) int {
	h.t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(timeout):
		h.t.Errorf("nexus serve did not exit within %s of SIGTERM", timeout)
		h.kill()
		<-h.exited
	}
	return h.cmd.ProcessState.ExitCode()
}

// kill ends the process at once (SIGKILL), if it still runs.
func (h *hostProc) kill() {
	select {
	case <-h.exited:
	default:
		h.cmd.Process.Kill()
		<-h.exited
	}
}

// response is an answer of the host.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request to the host. key is sent as a Bearer token unless "".
func (h *hostProc) do(method, path, key, contentType, body string, header ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// run posts a JSON body to /flows/{tenant}/{flow}/run.
func (h *hostProc) run(tenant, flow, key, body string) response {
	h.t.Helper()
	return h.do(http.MethodPost, "/flows/"+tenant+"/"+flow+"/run", key, "application/json", body)
}

// waitCommit waits until GET /status reports commit as deployed.
func (h *hostProc) waitCommit(commit string, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		r := h.do(http.MethodGet, "/status", h.adminKey, "", "")
		var st struct {
			Commit *string `json:"commit"`
		}
		if r.status == http.StatusOK && json.Unmarshal([]byte(r.body), &st) == nil && st.Commit != nil && *st.Commit == commit {
			return
		}
		last = r.body
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("commit %s not live within %s; /status: %s", commit, timeout, last)
}

// missingTool ends a test that cannot run on this machine (a tool it needs
// is missing or not allowed): skipped, saying why, when CI is not set;
// failed when it is, for CI must run every test (.ci/run installs what the
// tests need). test names the test for the message.
func missingTool(t *testing.T, test, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s, and CI is set: %s must run in CI (install what it needs, as .ci/run does)", why, test)
	}
	t.Skipf("%s: skipping %s; with CI set it fails instead", why, test)
}

// figure is a test's count: ci in the suite, short with -short, and soak
// when NEXUS_SOAK is set (`just soak`: the reliability plan's nightly tier,
// docs/reliability.md).
func figure(ci, short, soak int) int {
	switch {
	case os.Getenv("NEXUS_SOAK") != "":
		return soak
	case testing.Short():
		return short
	}
	return ci
}
