package gitsync_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// smartHTTP serves the bare repositories under root over git's smart HTTP
// protocol (git http-backend through CGI) on 127.0.0.1. wrap, when set,
// wraps the handler.
func smartHTTP(t testing.TB, root string, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("no git command (the gitsync tests need git): %v", err)
	}
	var h http.Handler = &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// bareRemote creates the bare repository root/config.git that e's source
// repo pushes to, and returns a function pushing main to it.
func (e *env) bareRemote(root string) func() {
	e.t.Helper()
	bare := filepath.Join(root, "config.git")
	runGit(e.t, root, "init", "-q", "--bare", bare)
	return func() {
		e.t.Helper()
		e.src.git("push", "-q", "--force", bare, "main")
	}
}

// Sync works over smart HTTP.
func TestSyncOverSmartHTTP(t *testing.T) {
	root := t.TempDir()
	srv := smartHTTP(t, root, nil)
	e := newEnv(t, func(c *gitsync.Config) { c.Repo = srv.URL + "/config.git" })
	push := e.bareRemote(root)

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("one")
	push()
	e.mustApply(c1, "published acme/x v1")

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	c2 := e.src.commit("two")
	push()
	e.mustApply(c2, "published acme/x v2")
	if res := e.sync(); res.Skipped != "up to date" {
		t.Fatalf("Sync = %+v, want up to date", res)
	}

	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	e.src.commit("broken")
	push()
	e.mustRefuse(badFlowError)
}

// Credentials in the URL's user information are sent as basic auth and
// never stored in the clone.
func TestSyncOverSmartHTTPWithBasicAuth(t *testing.T) {
	const user, password = "deploy", "pw-9f8e@7d6c:5b/4a%"
	root := t.TempDir()
	var authorized, refused atomic.Int64
	srv := smartHTTP(t, root, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				refused.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="config"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			authorized.Add(1)
			h.ServeHTTP(w, r)
		})
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	plain := "http://" + host + "/config.git"
	withCreds := (&url.URL{Scheme: "http", User: url.UserPassword(user, password), Host: host, Path: "/config.git"}).String()
	e := newEnv(t, func(c *gitsync.Config) { c.Repo = withCreds })
	push := e.bareRemote(root)

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("one")
	push()
	e.mustApply(c1, "published acme/x v1")
	if authorized.Load() == 0 {
		t.Fatal("no request carried the credentials")
	}

	config, err := os.ReadFile(filepath.Join(e.cfg.Dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(config), "url = "+plain) {
		t.Errorf("the clone's origin is not %s:\n%s", plain, config)
	}
	if strings.Contains(string(config), "pw-9f8e") || strings.Contains(string(config), user+":") {
		t.Errorf("the clone's config holds the credentials:\n%s", config)
	}
	if logs := e.logs.String(); strings.Contains(logs, "pw-9f8e") {
		t.Errorf("the log holds the password:\n%s", logs)
	}

	// A second round reuses the clone (its origin has no credentials) and
	// still authenticates.
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	c2 := e.src.commit("two")
	push()
	e.mustApply(c2, "published acme/x v2")

	// Wrong or missing credentials: an error naming the repo, without the
	// password given.
	for _, repo := range []string{"http://" + user + ":wrong-pw-1234@" + host + "/config.git", plain} {
		s, err := gitsync.New(gitsync.Config{Repo: repo, Dir: e.cfg.Dir, Registry: e.reg, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		before := refused.Load()
		_, err = s.Sync(context.Background())
		if err == nil {
			t.Fatalf("Sync with %s succeeded", repo)
		}
		if !strings.Contains(err.Error(), plain) || strings.Contains(err.Error(), "wrong-pw-1234") {
			t.Errorf("Sync with %s: %v, want an error naming %s without the password", repo, err, plain)
		}
		if refused.Load() == before {
			t.Errorf("Sync with %s: the server refused nothing", repo)
		}
	}
	if st := e.status(); st.Commit != c2 || st.LastError != nil {
		t.Errorf("Status = %+v after failed fetches", st)
	}
}

// closedURL returns an http URL on 127.0.0.1 where nothing listens.
func closedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// An unreachable repo is an error of Sync naming the repo; nothing is
// recorded in the registry.
func TestSyncUnreachable(t *testing.T) {
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	missing := filepath.Join(t.TempDir(), "no-such-repo")
	for _, repo := range []string{closedURL(t) + "/config.git", missing, "file://" + missing} {
		s, err := gitsync.New(gitsync.Config{Repo: repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Sync(context.Background())
		if err == nil {
			t.Fatalf("Sync of %s: no error, result %+v", repo, res)
		}
		name := strings.TrimPrefix(repo, "file://")
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Sync of %s: %v, want an error naming the repo", repo, err)
		}
		if res.Applied() || res.Errors != nil {
			t.Errorf("Sync of %s: result %+v", repo, res)
		}
	}
	st, err := reg.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Commit != "" || st.LastError != nil || st.Generation != 0 {
		t.Errorf("Status = %+v after unreachable repos", st)
	}
}

// Start on an unreachable repo logs sync_unreachable with growing attempts
// and keeps retrying; Stop ends the loop.
func TestStartLogsUnreachable(t *testing.T) {
	base := closedURL(t)
	repo := strings.Replace(base, "http://", "http://deploy:pw-0a1b2c3d@", 1) + "/config.git"
	logs := &jsonlogtest.Buffer{}
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	s, err := gitsync.New(gitsync.Config{
		Repo: repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg, Logger: logs.Logger(slog.LevelDebug),
		Poll: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	waitFor(t, 10*time.Second, "three sync_unreachable events", func() bool {
		return len(logs.Events(t, "sync_unreachable")) >= 3
	})
	s.Stop()
	n := len(logs.Events(t, "sync_unreachable"))
	time.Sleep(100 * time.Millisecond)
	events := logs.Events(t, "sync_unreachable")
	if len(events) != n {
		t.Errorf("%d sync_unreachable events after Stop returned", len(events)-n)
	}
	for i, ev := range events[:3] {
		if ev["level"] != "WARN" || ev["repo"] != base+"/config.git" || ev["attempt"] != float64(i+1) {
			t.Errorf("event %d: %v", i, ev)
		}
		retry, err := time.ParseDuration(ev["retry_in"].(string))
		if err != nil || retry <= 0 || retry > 30*time.Millisecond {
			t.Errorf("event %d: retry_in %v (%v)", i, ev["retry_in"], err)
		}
		if msg, _ := ev["error"].(string); !strings.Contains(msg, base+"/config.git") {
			t.Errorf("event %d: error %q does not name the repo", i, msg)
		}
	}
	if strings.Contains(logs.String(), "pw-0a1b2c3d") {
		t.Errorf("the log holds the password:\n%s", logs)
	}
	s.Stop()
}

// Backoff grows twofold from base, is capped at max, and is scaled by a
// jitter factor in [0.5, 1.5).
func TestBackoff(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		base, max time.Duration
		n         int
		r         float64
		want      time.Duration
	}{
		{s, 10 * s, 1, 0.5, s},
		{s, 10 * s, 2, 0.5, 2 * s},
		{s, 10 * s, 3, 0.5, 4 * s},
		{s, 10 * s, 4, 0.5, 8 * s},
		{s, 10 * s, 5, 0.5, 10 * s},
		{s, 10 * s, 6, 0.5, 10 * s},
		{s, 10 * s, 1000, 0.5, 10 * s},
		{s, 10 * s, 1 << 30, 0.5, 10 * s},
		{s, 10 * s, 1, 0, s / 2},
		{s, 10 * s, 3, 0, 2 * s},
		{s, 10 * s, 9, 0, 5 * s},
		{s, 10 * s, 1, 0.75, 1250 * time.Millisecond},
		{s, 10 * s, 4, 0.25, 6 * s},
		{s, 10 * s, 9, 0.9, 14 * s},
		{10 * time.Second, 5 * time.Minute, 6, 0.5, 5 * time.Minute},
		{10 * time.Second, 5 * time.Minute, 5, 0.5, 160 * time.Second},
		{20 * s, 10 * s, 1, 0.5, 10 * s}, // base over max: max
	} {
		if got := gitsync.Backoff(tc.base, tc.max, tc.n, tc.r); got != tc.want {
			t.Errorf("Backoff(%v, %v, %d, %v) = %v, want %v", tc.base, tc.max, tc.n, tc.r, got, tc.want)
		}
	}
	// Bounds and growth for every attempt and jitter.
	base, max := 10*time.Millisecond, 5*time.Minute
	for _, r := range []float64{0, 0.1, 0.5, 0.9, 0.999999} {
		prev := time.Duration(0)
		for n := 1; n <= 100; n++ {
			d := base << min(n-1, 20)
			d = min(d, max)
			got := gitsync.Backoff(base, max, n, r)
			if float64(got) < 0.5*float64(d) || float64(got) >= 1.5*float64(d) {
				t.Fatalf("Backoff(%v, %v, %d, %v) = %v, outside [%v, %v)", base, max, n, r, got, d/2, d*3/2)
			}
			if got < prev {
				t.Fatalf("Backoff(…, %d, %v) = %v < %v for n-1", n, r, got, prev)
			}
			prev = got
		}
	}
}

// A round that fails here, not at the remote (the registry closed, as a
// disk gone read-only or full would make it fail), logs sync_error, not
// sync_unreachable: an alert on the latter means the repo. Both were
// sync_unreachable.
func TestStartLogsALocalFailureAsSyncError(t *testing.T) {
	src := newSrcRepo(t)
	src.write("flows/README.md", []byte("# Flows\n"))
	src.commit("first")
	logs := &jsonlogtest.Buffer{}
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	reg.Close()
	s, err := gitsync.New(gitsync.Config{
		Repo: src.dir, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg, Logger: logs.Logger(slog.LevelDebug),
		Poll: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	waitFor(t, 10*time.Second, "a sync_error event", func() bool { return len(logs.Events(t, "sync_error")) > 0 })
	s.Stop()
	if ev := logs.Events(t, "sync_unreachable"); len(ev) != 0 {
		t.Errorf("a reachable repo logged as unreachable: %v", ev)
	}
	if ev := logs.Events(t, "sync_error")[0]; ev["level"] != "WARN" || ev["attempt"] != 1.0 {
		t.Errorf("sync_error: %v", ev)
	}
}
