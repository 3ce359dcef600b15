//go:build unix

package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Hardening of nexus serve against abusive callers, over the built binary
// and real TCP: a slowloris attack is cut at the header timeout while real
// calls go on being served, a refused caller announcing 10 GiB cannot
// upload it, and the binary carries no dependency older than the release
// that fixed a known advisory.
//
// Covered elsewhere and not repeated here: TestGateEndToEnd (host_test.go)
// sends heads announcing 1 GB without their body and expects 401 (and the
// connection closed), 403, 429 and 413, and a 10 GiB head with Expect:
// 100-continue that gets 401 and no 100 Continue; TestSecretEndToEnd the
// same 401 with signatures on; TestHTTPFramingEndToEnd malformed framing.

// hardeningOtherKey is a key of the tenant globex, refused on acme's doors.
const hardeningOtherKey = "test-key-globex-hardening"

// startHardeningHost starts a host serving acme/hello to acmeKey, with a
// key of another tenant, and waits until the flow answers.
func startHardeningHost(t *testing.T) *hostProc {
	t.Helper()
	repo := newConfigRepo(t, map[string]string{
		"access.yaml": accessYAML(
			testKey{id: "acme-all", tenant: "acme", key: acmeKey},
			testKey{id: "globex-all", tenant: "globex", key: hardeningOtherKey},
		),
		"flows/acme/hello.md": helloFlow,
	})
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitDeployed(t, h, "acme", "hello", acmeKey)
	return h
}

// scrape reads the host's /metrics (open without a key) with client and
// returns the values of the unlabelled metrics names.
func scrape(client *http.Client, h *hostProc, names ...string) ([]float64, error) {
	resp, err := client.Get(h.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s %.200s", resp.Status, body)
	}
	values := make([]float64, len(names))
	for i, name := range names {
		v, ok := metricValue(string(body), name, nil)
		if !ok {
			return nil, fmt.Errorf("/metrics has no %s", name)
		}
		values[i] = v
	}
	return values, nil
}

// raiseOpenFiles makes sure this process may open need files, raising its
// soft limit to the hard one if it is lower (the Go runtime does so at
// start-up since Go 1.19, so this rarely has anything to do).
func raiseOpenFiles(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Fatalf("the test needs %d open files and its hard limit is %d: raise it (ulimit -Hn)", need, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising the soft limit of open files to %d: %v", lim.Max, err)
	}
}

// slowConn is what became of one slowloris connection.
type slowConn struct {
	err    error         // the test's side failed before the attack began
	closed time.Duration // after its first byte, when the server closed it; -1: still open at the limit
	how    string        // how the close was seen: "EOF" or the error
}

// slowloris connects to addr, sends a request line and then one header
// byte a second, never ending the head, until the server closes the
// connection or limit has passed since the first byte. dialed is called
// once the connection is made (or failed).
func slowloris(addr string, limit time.Duration, dialed func()) slowConn {
	// the time is taken before the dial: the server's header timeout
	// cannot start earlier, and a client goroutine that the load delays
	// after its dial does not make the server's close look early
	first := time.Now()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	dialed()
	if err != nil {
		return slowConn{err: err}
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\n"); err != nil {
		return slowConn{err: err}
	}
	const header = "Host: nexus\r\nX-Slowloris: " // then 'a' forever
	end := first.Add(limit)
	for i := 0; ; i++ {
		b := byte('a')
		if i < len(header) {
			b = header[i]
		}
		if _, err := c.Write([]byte{b}); err != nil {
			return slowConn{closed: time.Since(first), how: "write: " + err.Error()}
		}
		next := first.Add(time.Duration(i+1) * time.Second)
		if next.After(end) {
			next = end
		}
		c.SetReadDeadline(next)
		_, err := io.Copy(io.Discard, c) // nil at EOF
		var ne net.Error
		switch {
		case err == nil:
			return slowConn{closed: time.Since(first), how: "EOF"}
		case !errors.As(err, &ne) || !ne.Timeout():
			return slowConn{closed: time.Since(first), how: err.Error()}
		case !next.Before(end):
			return slowConn{closed: -1}
		}
	}
}

// TestSlowlorisClosedAtReadHeaderTimeout proves that nexus serve cuts the
// connections that never finish their request head at its header timeout
// (ReadHeaderTimeout, 10 s): 500 connections that each send a request line
// and then one header byte a second are all closed by the server between
// 9 and 30 s after they began (so by the header timeout, not the 60 s read
// timeout or the 120 s idle one), /run calls made throughout the
// attack all succeed, and afterwards the server's goroutines go back to
// about their number before the attack.
func TestSlowlorisClosedAtReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	const (
		conns    = 500
		earliest = 9 * time.Second
		// generous: 500 connections accepted on a loaded machine start
		// their timeouts late; the read timeout (60 s) is what it rules out
		latest = 30 * time.Second
		slack  = 20 // goroutines over the baseline after the attack
	)
	raiseOpenFiles(t, conns+200)
	h := startHardeningHost(t)

	// no keep-alive: an idle pooled connection would hold a goroutine of
	// the server and blur its count
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	call := func() error {
		req, err := http.NewRequest(http.MethodPost, h.url+"/flows/acme/hello/run", strings.NewReader(`{"name":"Ada"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || string(body) != `{"greeting":"hello, Ada"}` {
			return fmt.Errorf("%s %s", resp.Status, body)
		}
		return nil
	}
	if err := call(); err != nil {
		t.Fatalf("before the attack: %v", err)
	}
	m, err := scrape(client, h, "go_goroutines", "process_max_fds")
	if err != nil {
		t.Fatal(err)
	}
	before, maxFDs := m[0], m[1]
	if maxFDs < conns+200 {
		t.Fatalf("nexus serve may open %v files (process_max_fds), too few for %d connections: raise the limit (ulimit -n)", maxFDs, conns)
	}

	addr := strings.TrimPrefix(h.url, "http://")
	results := make([]slowConn, conns)
	var dialed, done sync.WaitGroup
	dialed.Add(conns)
	done.Add(conns)
	for i := range results {
		go func() {
			defer done.Done()
			results[i] = slowloris(addr, latest, dialed.Done)
		}()
	}
	dialed.Wait()
	attackOver := make(chan struct{})
	go func() {
		done.Wait()
		close(attackOver)
	}()

	// real calls, paced, until the last slow connection has ended
	var (
		calls    int
		failures []string
		peak     float64
	)
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
attack:
	for {
		select {
		case <-attackOver:
			break attack
		case <-pace.C:
		}
		if err := call(); err != nil {
			failures = append(failures, err.Error())
		}
		calls++
		if calls%10 == 1 {
			if m, err := scrape(client, h, "go_goroutines"); err == nil {
				peak = max(peak, m[0])
			}
		}
	}
	ended := time.Now()

	var (
		early, open, failed []string
		first, last         time.Duration
	)
	for i, r := range results {
		switch {
		case r.err != nil:
			failed = append(failed, fmt.Sprintf("#%d: %v", i, r.err))
		case r.closed < 0:
			open = append(open, fmt.Sprint(i))
		case r.closed < earliest:
			early = append(early, fmt.Sprintf("#%d after %v (%s)", i, r.closed.Round(time.Millisecond), r.how))
		}
		if r.closed > 0 {
			if first == 0 || r.closed < first {
				first = r.closed
			}
			last = max(last, r.closed)
		}
	}
	t.Logf("%d slow connections closed by the server, between %v and %v after their first byte; %d /run calls during the attack; server goroutines %v before, %v at the peak",
		conns-len(open)-len(failed), first.Round(time.Millisecond), last.Round(time.Millisecond), calls, before, peak)
	if len(failed) > 0 {
		t.Errorf("%d slow connections could not be made: %s", len(failed), strings.Join(failed[:min(5, len(failed))], "; "))
	}
	if len(open) > 0 {
		t.Errorf("%d of %d slow connections were still open %v after their first byte: the header timeout (10 s) did not close them", len(open), conns, latest)
	}
	if len(early) > 0 {
		t.Errorf("%d slow connections were closed before %v, earlier than the header timeout (10 s): %s", len(early), earliest, strings.Join(early[:min(5, len(early))], "; "))
	}
	if peak < before+conns/2 {
		t.Errorf("the server ran %v goroutines at most during the attack, %v before: the slow connections did not reach it", peak, before)
	}
	if calls < 10 || len(failures) > 0 {
		t.Errorf("%d of %d /run calls during the attack failed (at least 10 wanted): %s", len(failures), calls, strings.Join(failures[:min(5, len(failures))], "; "))
	}

	var now float64
	for {
		m, err := scrape(client, h, "go_goroutines")
		if err != nil {
			t.Fatal(err)
		}
		if now = m[0]; now <= before+slack {
			break
		}
		if time.Since(ended) > 10*time.Second {
			t.Fatalf("10 s after the attack the server still runs %v goroutines, %v before it", now, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("server goroutines %v, %v after the attack", now, time.Since(ended).Round(time.Millisecond))
}

// uploadPatience is how long hugeUpload's caller waits for an answer. A
// server that waited for the body before answering would give none.
const uploadPatience = 10 * time.Second

// upload is what a caller pushing a huge body saw.
type upload struct {
	Status    int
	Body      string
	Quick     bool // the answer came within half the caller's patience (5 s) of the head
	Closed    bool // the server closed the connection after answering
	Cut       bool // a write of the body failed (not timed out): the server stopped the upload
	Under8MiB bool // fewer than 8 MiB of the body were written before that
}

// hugeUpload sends a POST to path announcing a body of 10 GiB, with key
// unless "", and writes the body as fast as it can while it reads the
// answer; it gives up after uploadPatience or 64 MiB. It returns what it
// saw and a line of the figures.
func hugeUpload(t *testing.T, baseURL, path, key string) (upload, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(uploadPatience))
	head := "POST " + path + " HTTP/1.1\r\nHost: nexus\r\nContent-Type: application/json\r\nContent-Length: 10737418240\r\n"
	if key != "" {
		head += "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	type answer struct {
		status int
		body   string
		after  time.Duration
		closed bool
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			a.err = err
			answered <- a
			return
		}
		a.after = time.Since(start)
		b, _ := io.ReadAll(resp.Body)
		a.status, a.body = resp.StatusCode, string(b)
		_, err = io.Copy(io.Discard, br) // nil at EOF
		var ne net.Error
		a.closed = !errors.As(err, &ne) || !ne.Timeout()
		answered <- a
	}()

	chunk := []byte(strings.Repeat(" ", 64<<10))
	var (
		pushed int64
		werr   error
	)
	for pushed < 64<<20 {
		n, err := conn.Write(chunk)
		pushed += int64(n)
		if err != nil {
			werr = err
			break
		}
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("no answer: %v (%d bytes of the body written, the write ended with %v)", a.err, pushed, werr)
	}
	var ne net.Error
	got := upload{
		Status:    a.status,
		Body:      a.body,
		Quick:     a.after < uploadPatience/2,
		Closed:    a.closed,
		Cut:       werr != nil && !(errors.As(werr, &ne) && ne.Timeout()),
		Under8MiB: pushed < 8<<20,
	}
	return got, fmt.Sprintf("%d after %v; %d bytes (%.1f MiB) of the body written in %v, the write ended with %v",
		a.status, a.after.Round(time.Millisecond), pushed, float64(pushed)/(1<<20), time.Since(start).Round(time.Millisecond), werr)
}

// TestUnauthenticatedHugeUploadCutOff proves that a caller the gate refuses
// cannot make nexus serve take in a huge body: a POST announcing
// Content-Length 10 GiB to the run and the enqueue door, with no key
// (401) or another tenant's key (403), whose caller writes the body as
// fast as it can, is answered well before the caller gives up (within 5 s,
// half its patience: generous for a loaded machine; the time is logged),
// and the server then closes the connection, so that the caller gets fewer
// than 8 MiB of it onto the wire before its writes fail.
func TestUnauthenticatedHugeUploadCutOff(t *testing.T) {
	t.Parallel()
	h := startHardeningHost(t)
	refused := func(status int, msg string) upload {
		return upload{Status: status, Body: `{"ok":false,"error":"` + msg + `"}`, Quick: true, Closed: true, Cut: true, Under8MiB: true}
	}
	tests := []struct {
		name, path, key string
		want            upload
	}{
		{"run, no key", "/flows/acme/hello/run", "", refused(401, "missing or unknown API key")},
		{"run, another tenant's key", "/flows/acme/hello/run", hardeningOtherKey, refused(403, "key globex-all may not call acme/hello")},
		{"enqueue, no key", "/flows/acme/hello/enqueue", "", refused(401, "missing or unknown API key")},
		{"enqueue, another tenant's key", "/flows/acme/hello/enqueue", hardeningOtherKey, refused(403, "key globex-all may not call acme/hello")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, figures := hugeUpload(t, h.url, tc.path, tc.key)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("POST %s announcing 10 GiB (-want +got):\n%s%s", tc.path, diff, figures)
			} else {
				t.Log(figures)
			}
		})
	}
}

// minimumVersions are the lowest versions of dependencies the binary may
// carry: each is the release that fixed advisories concerning nexus.
var minimumVersions = []struct{ module, version, why string }{
	{"github.com/go-git/go-git/v5", "v5.19.2", "the release fixing go-git's path-traversal advisories (gitsync clones and fetches the config repo with it)"},
}

// binaryModules reads the output of go version -m: module path → version
// of each dependency, a replacement's version in place of the original's.
func binaryModules(out string) map[string]string {
	mods := map[string]string{}
	var last string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "dep":
			last = f[1]
			mods[last] = f[2]
		case len(f) >= 3 && f[0] == "=>" && last != "":
			mods[last] = f[2]
		default:
			last = ""
		}
	}
	return mods
}

// versionAtLeast reports whether the module version have is at least min
// in semantic-version order; min must be a release (vX.Y.Z). A
// pre-release or pseudo-version counts below its own release and above
// any lower one (v5.19.3-0.2025… is after v5.19.2); anything that is not
// a semantic version, such as (devel), is not at least anything.
func versionAtLeast(have, min string) bool {
	h, pre, ok := splitVersion(have)
	m, _, mok := splitVersion(min)
	if !ok || !mok {
		return false
	}
	if c := slices.Compare(h[:], m[:]); c != 0 {
		return c > 0
	}
	return pre == ""
}

// splitVersion splits vMAJOR.MINOR.PATCH[-PRE][+BUILD] into its numbers
// and its pre-release.
func splitVersion(v string) (nums [3]int, pre string, ok bool) {
	v, ok = strings.CutPrefix(v, "v")
	if !ok {
		return nums, "", false
	}
	v, _, _ = strings.Cut(v, "+")
	v, pre, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return nums, "", false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p != strconv.Itoa(n) {
			return nums, "", false
		}
		nums[i] = n
	}
	return nums, pre, true
}

// TestDependencyVersionsInTheBinary proves that the built nexus carries no
// dependency older than minimumVersions allows. It reads the versions the
// binary itself records (go version -m), so a downgrade through go.mod, a
// replace directive or a vendored copy is caught alike.
func TestDependencyVersionsInTheBinary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "version", "-m", nexusBinary()).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	mods := binaryModules(string(out))
	for _, m := range minimumVersions {
		have, ok := mods[m.module]
		switch {
		case !ok:
			t.Errorf("%s is not in the binary: a minimum of %s is kept for it; drop the entry if the dependency is gone\n%s", m.module, m.version, out)
		case !versionAtLeast(have, m.version):
			t.Errorf("the binary carries %s %s, below %s: %s", m.module, have, m.version, m.why)
		default:
			t.Logf("%s %s (at least %s)", m.module, have, m.version)
		}
	}
}

// TestDependencyVersionsReading proves the two helpers of
// TestDependencyVersionsInTheBinary: the go version -m lines are read with
// their replacements, and versions are compared by number, not by text.
func TestDependencyVersionsReading(t *testing.T) {
	t.Parallel()
	out := "/tmp/nexus: go1.26.8\n" +
		"\tpath\tgithub.com/nexushq/nexus/cmd/nexus\n" +
		"\tmod\tgithub.com/nexushq/nexus\t(devel)\t\n" +
		"\tdep\tgithub.com/go-git/go-git/v5\tv5.19.3\th1:abc=\n" +
		"\tdep\tgolang.org/x/net\tv0.59.0\th1:def=\n" +
		"\t=>\tgolang.org/x/net\tv0.10.0\th1:ghi=\n" +
		"\tbuild\t-trimpath=true\n"
	want := map[string]string{"github.com/go-git/go-git/v5": "v5.19.3", "golang.org/x/net": "v0.10.0"}
	if diff := cmp.Diff(want, binaryModules(out)); diff != "" {
		t.Errorf("binaryModules (-want +got):\n%s", diff)
	}

	tests := []struct {
		have string
		want bool
	}{
		{"v5.19.2", true},
		{"v5.19.3", true},
		{"v5.19.10", true}, // by number: 10 > 2
		{"v5.20.0", true},
		{"v6.0.0+incompatible", true},
		{"v5.19.3-0.20250101000000-0123456789ab", true}, // a commit after v5.19.2
		{"v5.19.1", false},
		{"v5.9.99", false},
		{"v4.99.0", false},
		{"v5.19.2-rc.1", false}, // before v5.19.2
		{"(devel)", false},
		{"", false},
		{"v5.19", false},
	}
	got := map[string]bool{}
	wantAtLeast := map[string]bool{}
	for _, tc := range tests {
		got[tc.have] = versionAtLeast(tc.have, "v5.19.2")
		wantAtLeast[tc.have] = tc.want
	}
	if diff := cmp.Diff(wantAtLeast, got); diff != "" {
		t.Errorf("versionAtLeast(have, v5.19.2) (-want +got):\n%s", diff)
	}
}

// TestStateFolderThatIsALinkIsRefused: RELIABILITY.md E21 and
// docs/decisions.md ("No symbolic links in the state directory"): a
// queues/ or cron/ planted in the state directory as a link (every queue of
// every tenant would write its payloads wherever it points), or a repo/
// when a repo is followed, stops nexus serve at start, in one line, before
// anything is made: nothing is written through it, and no registry.db
// (a refused repo/ left a whole new registry behind).
func TestStateFolderThatIsALinkIsRefused(t *testing.T) {
	t.Parallel()
	repo := newConfigRepo(t, map[string]string{"access.yaml": accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})})
	for _, name := range []string{"queues", "cron", "repo"} {
		state := filepath.Join(t.TempDir(), "state")
		outside := t.TempDir()
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(state, name)
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		args := []string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(state, "registry.db")}
		if name == "repo" {
			args = append(args, "--repo", repo.dir)
		}
		r := nexus(t, "", args...)
		want := "nexus serve: " + link + " is a symbolic link"
		// the one line for the operator, after the log's warnings
		if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 1 || !strings.HasPrefix(lines[len(lines)-1], want) {
			t.Errorf("%s a link: exit %d, stderr %q; want exit 1 and %q…", name, r.code, r.stderr, want)
		}
		if entries, _ := os.ReadDir(outside); len(entries) > 0 {
			t.Errorf("written through the link %s: %v", name, entries)
		}
		if _, err := os.Stat(filepath.Join(state, "registry.db")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s a link: registry.db was made (%v), want nothing made before the refusal", name, err)
		}
	}
}

// TestWorkerBudgetFitsTheOpenFileLimit: under an open-file limit of 256,
// nexus serve lowers its worker budget of 256 queues to the 21 that half
// the limit holds (6 files a queue) and says so at start; a flood of
// enqueues to 80 flows is answered 202 for 21 of them and with the
// budget's 503 for the rest. Every message it acknowledged is delivered,
// and the host still answers. Its queues used to take every descriptor it
// could open: it stopped accepting connections, and workers that could not
// open their files again left acknowledged messages undelivered.
func TestWorkerBudgetFitsTheOpenFileLimit(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	const flows = 80
	files := map[string]string{"access.yaml": accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})}
	for i := range flows {
		files[fmt.Sprintf("flows/acme/q%02d.md", i)] = queueExample(t, "forward-order", be.URL, "flow: forward-order", fmt.Sprintf("flow: q%02d", i))
	}
	repo := newConfigRepo(t, files)
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	const admin = "admin-test-key"
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", admin, "--poll", "200ms", "--repo", repo.dir}
	h := &hostProc{t: t, db: db, adminKey: admin, exited: make(chan struct{})}
	// the shell sets the limit (soft and hard) and becomes nexus
	h.cmd = exec.Command("sh", append([]string{"-c", `ulimit -n 256 && exec "$0" "$@"`, nexusBinary()}, args...)...)
	h.cmd.Env = append(os.Environ(), "NEXUS_LOG_FORMAT=json")
	h.watch(args, nil, nil)
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	if evs := h.events("worker_budget_lowered"); len(evs) != 1 || evs[0]["budget"] != 21.0 || evs[0]["max_workers"] != 256.0 || evs[0]["open_file_limit"] != 256.0 {
		t.Errorf("worker_budget_lowered lines %v, want one lowering 256 to 21 for a limit of 256", evs)
	}

	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make([]answer, flows)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range flows {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/flows/acme/q%02d/enqueue", h.url, i), strings.NewReader(fmt.Sprintf(`{"orderId":"q%02d"}`, i)))
			req.Header.Set("Authorization", "Bearer "+acmeKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers[i] = answer{status: resp.StatusCode, body: string(b)}
		})
	}
	wg.Wait()
	accepted := map[string]bool{}
	for i, a := range answers {
		switch {
		case a.err == nil && a.status == http.StatusAccepted:
			accepted[fmt.Sprintf(`{"orderId":"q%02d"}`, i)] = true
		case a.err == nil && a.status == http.StatusServiceUnavailable && strings.Contains(a.body, "residency budget"):
		default:
			t.Errorf("enqueue to q%02d: %d %s %v; want 202, or the budget's 503", i, a.status, a.body, a.err)
		}
	}
	if len(accepted) != 21 {
		t.Errorf("%d enqueues accepted, want 21 (the budget)", len(accepted))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		delivered := map[string]bool{}
		for _, x := range be.on("/") {
			delivered[x.body] = true
		}
		var missing []string
		for body := range accepted {
			if !delivered[body] {
				missing = append(missing, body)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Fatalf("%d messages acknowledged with a 202 were not delivered: %v", len(missing), missing)
		}
	}
	resp, err := client.Get(h.url + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz after the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz after the flood: %d", resp.StatusCode)
	}
	for _, line := range h.logLines() {
		if strings.Contains(line, "too many open files") {
			t.Errorf("the host ran out of descriptors: %s", line)
			break
		}
	}
}
