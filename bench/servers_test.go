package bench_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The servers under test: the nexus binary, built once per test binary run,
// serving a config repo made with the git CLI; and a bare net/http server
// in a process of its own (this test binary, run as TestHelperBareServer).

// TestMain removes the built binary at the end; it builds nothing itself,
// so `go test ./...` stays cheap.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	nexusBin  string
	buildErr  error
)

// buildNexus builds ./cmd/nexus like the release build (static, trimpath).
func buildNexus(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "nexus-bench-"); buildErr != nil {
			return
		}
		nexusBin = filepath.Join(buildDir, "nexus")
		build := exec.Command("go", "build", "-trimpath", "-o", nexusBin, "./cmd/nexus")
		build.Dir = filepath.Dir(wd)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building nexus: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return nexusBin
}

// The benchmark's key and flow.
const (
	benchTenant = "acme"
	benchFlow   = "hello"
	benchKey    = "nxk_bench_acme_0123456789abcdef0123"
	benchBody   = `{"name":"Ada Lovelace"}`
)

// helloFlow validates the name, then answers a greeting: a validate step
// and an ntd step.
const helloFlow = "---\nflowmarkdown_version: \"0.1\"\nflow: " + benchFlow + "\ntenant: " + benchTenant + "\n---\n\n" +
	"## Step: check\n```validate\n" +
	"$.name != null       | \"name is required\" | syntactic\n" +
	"len($.name) <= 64    | \"name must be at most 64 characters\"\n" +
	"```\n\n" +
	"## Step: greet\n```ntd\n" +
	`{"greeting":"hello, {{ $.name }}","n":{{ len($.name) }}}` + "\n" +
	"```\n"

// configRepo makes the config repo in dir with the git CLI: the flow and
// an access key without a rate limit.
func configRepo(tb testing.TB, dir string) {
	tb.Helper()
	sum := sha256.Sum256([]byte(benchKey))
	files := map[string]string{
		"access.yaml": fmt.Sprintf("keys:\n  - id: bench\n    tenant: %s\n    sha256: %s\n    flows: [\"*\"]\n",
			benchTenant, hex.EncodeToString(sum[:])),
		"flows/" + benchTenant + "/" + benchFlow + ".md": helloFlow,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "bench"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost",
			"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// nexusPIDs maps a nexus server's address to its process id (for perf).
var nexusPIDs sync.Map

func nexusPID(t target) int {
	if v, ok := nexusPIDs.Load(t.addr); ok {
		return v.(int)
	}
	return 0
}

// server is a server process under test.
type server struct {
	addr string
	cmd  *exec.Cmd
	log  string // its stderr, a file ("" for the bare server)
}

// startNexus starts nexus serve on a free loopback port over a new config
// repo and state directory under dir, and waits until the flow answers.
// Its log goes to a file, as a deployment's log goes to its collector.
func startNexus(tb testing.TB, dir string) *server {
	tb.Helper()
	bin := buildNexus(tb)
	repo := filepath.Join(dir, "config-repo")
	configRepo(tb, repo)
	s := &server{log: filepath.Join(dir, "nexus.log")}
	logFile, err := os.Create(s.log)
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close()
	s.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "state", "registry.db"),
		"--repo", repo, "--poll", "1h", "--admin-key", "bench-admin-key")
	s.cmd.Env = append(os.Environ(), "NEXUS_LOG_FORMAT=json")
	if kv := os.Getenv("NEXUS_BENCH_NEXUS_ENV"); kv != "" {
		s.cmd.Env = append(s.cmd.Env, kv) // one more variable for nexus alone, such as GOGC=100
	}
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, logFile
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { s.cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for s.addr == "" {
		select {
		case <-exited:
			tb.Fatalf("nexus serve exited:\n%s", tail(s.log))
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nexus serve did not listen within 30 s:\n%s", tail(s.log))
		}
		s.addr = listenAddr(s.log)
		time.Sleep(20 * time.Millisecond)
	}
	// the first sync publishes the flow a moment after the listener opens
	for {
		status, _, _, err := post(s.addr, "/flows/"+benchTenant+"/"+benchFlow+"/run")
		if err == nil && status == http.StatusOK {
			nexusPIDs.Store(s.addr, s.cmd.Process.Pid)
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the flow was not deployed within 30 s (last %d %v):\n%s", status, err, tail(s.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listenAddr finds the started event's address in a JSON log.
func listenAddr(log string) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev struct{ Event, Listen string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "started" {
			return ev.Listen
		}
	}
	return ""
}

func tail(log string) string {
	b, _ := os.ReadFile(log)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// benchHeader is what every request of the generator carries.
func benchHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + benchKey}, "Content-Type": {"application/json"}}
}

// post sends one request the way the generator does and returns the answer.
func post(addr, path string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(benchBody))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = benchHeader()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// The bare server's settings, passed in its environment.
const (
	envBare        = "NEXUS_BENCH_BARE_SERVER" // set: TestHelperBareServer serves
	envBareRun     = "NEXUS_BENCH_BARE_RUN"    // the 200 body
	envBareEnqueue = "NEXUS_BENCH_BARE_ENQUEUE"
)

// bareCorrelationID stands in for the X-Correlation-Id nexus sets (as long
// as a UUID), so both answers have the same size.
const bareCorrelationID = "00000000-0000-4000-8000-000000000000"

// bareGCPercent is the garbage collector's target of the bare server,
// serveGCPercent of cmd/nexus/serve.go: nexus serve sets it for itself
// unless GOGC is set, and so does the bare server, so that the two differ
// in what they do per request, not in how often they collect.
const bareGCPercent = 200

// TestHelperBareServer is the bare server's process, not a test: it returns
// at once unless NEXUS_BENCH_BARE_SERVER is set. It answers a POST ending
// in /enqueue with a fixed 202 and any other request with a fixed 200, each
// with the body and headers of nexus's answer (sizes alike), prints
// "listening ADDR" and serves until its standard input closes. Its
// http.Server has nexus's timeouts and header limit (cmd/nexus/serve.go)
// and its collector nexus's target.
func TestHelperBareServer(t *testing.T) {
	if os.Getenv(envBare) == "" {
		return
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(bareGCPercent)
	}
	runBody, enqueueBody := []byte(os.Getenv(envBareRun)), []byte(os.Getenv(envBareEnqueue))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["X-Correlation-Id"] = []string{bareCorrelationID}
		if strings.HasSuffix(r.URL.Path, "/enqueue") {
			h["X-Nexus-Message-Id"] = []string{"1000000"}
			w.WriteHeader(http.StatusAccepted)
			w.Write(enqueueBody)
			return
		}
		w.Write(runBody)
	})
	srv := &http.Server{
		Handler: handler,
		// as nexus serve's http.Server
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go srv.Serve(ln)
	fmt.Printf("listening %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	os.Exit(0)
}

// startBare starts the bare server's process with the bodies to answer.
func startBare(tb testing.TB, runBody, enqueueBody []byte) *server {
	tb.Helper()
	s := &server{}
	s.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperBareServer$", "-test.bench=^$")
	s.cmd.Env = append(os.Environ(), envBare+"=1", envBareRun+"="+string(runBody), envBareEnqueue+"="+string(enqueueBody))
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	s.cmd.Stderr = &stderr
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		tb.Fatalf("the bare server did not start: %q %v\n%s", line, err, stderr.String())
	}
	s.addr = addr
	return s
}
