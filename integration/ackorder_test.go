package integration

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The ack ordering of the reliability test plan, read from the system calls
// of the built binary under strace -f: a 202 is written to the socket only
// after the message's frame is durable, and a renamed file's folder is synced.

const (
	ackOrderMessages = 1000
	ackOrderClients  = 16
	// every ackOrderFailEvery-th message fails its first attempt, so that the
	// worker changes the retry schedule (segment.log.retry), which it
	// compacts, renamed in place, once it is empty at an idle moment
	ackOrderFailEvery = 20
)

// ackOrderSyscalls are the calls traced: the log's frames (pwrite64) and
// their fdatasync, the answers on the sockets (write, writev, sendto,
// sendmsg), and the renames with the fsyncs of their folders.
const ackOrderSyscalls = "trace=pwrite64,write,writev,sendto,sendmsg,fdatasync,fsync,rename,renameat,renameat2"

// renamesWithoutFolderSync are the folders of the state directory whose
// renames are not followed by an fsync of the folder, left out of the
// rename check with the reason.
var renamesWithoutFolderSync = []struct{ dir, why string }{
	{"repo", "the bare clone of the config repo, a cache of the remote: go-git renames objects/pack/tmp_pack_* to pack-*.pack " +
		"without syncing, and a clone that a crash left unreadable is cloned anew (gitsync's TestDamagedCloneIsClonedAnew)"},
}

// TestAckOrder runs nexus serve under strace -f while 16 clients enqueue
// 1,000 messages to one queue flow, whose backend fails the first attempt of
// one message in 20 (the worker rewrites its retry schedule), beside a cron
// flow ticking every second (the scheduler rewrites its record of the last
// tick). Then it stops the process with SIGTERM and reads the trace. It
// proves, from the system calls rather than from the code, that:
//
//   - every 202 written to a client's socket follows a successful fdatasync
//     of the queue's segment.log that started after the pwrite64 holding the
//     message's frame returned, and returned before the 202's write started;
//   - no 202 went out for a message whose frame was not written: the frame
//     with the acknowledged id sits at the acknowledged offset of a pwrite64
//     to that queue's segment.log, and its CRC verifies;
//   - every rename into the state directory (the retry schedule, the cron
//     record, any other) is followed, before the process exits, by a
//     successful fsync of the renamed file's folder; at least one is checked.
//
// The trace's lines order the calls: strace prints a call's entry and its
// return while the thread is stopped there, so a call that returned before
// another one started, in the same thread or in one it woke, is printed
// before it. The -ttt stamps, shown in the failures, agree with that order
// but can tie. The clients' 202s (ids and offsets) must be exactly the 202s
// of the trace, so a 202 written by a call the test does not trace fails it.
//
// It needs strace and ptrace: without them it is skipped when CI is not set
// and fails when it is (.ci/run installs strace).
func TestAckOrder(t *testing.T) {
	t.Parallel()
	straceArgs := straceOrSkip(t)
	began := time.Now()

	be := newLoopback(t)
	be.setAnswer(failFirst)
	const flowName = "ack-order"
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":                    accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/" + flowName + ".md": retryFlowFor(flowName, be.URL, "ack", 100),
		"flows/acme/ack-heartbeat.md":    cronFlowFor("ack-heartbeat", "@every 1s", be.URL, ""),
	})
	state := filepath.Join(t.TempDir(), "state")
	traceFile := filepath.Join(t.TempDir(), "nexus.strace")
	h := startTracedHost(t, straceArgs, traceFile, repo.dir, filepath.Join(state, "registry.db"))
	h.waitCommit(repo.git("rev-parse", "HEAD"), 20*time.Second)
	waitGate(t, h.hostProc, "acme", flowName, acmeKey)

	loadStart := time.Now()
	clientAcks := enqueueConcurrently(t, h.hostProc, "acme", flowName, ackOrderMessages, ackOrderClients)
	loaded := time.Since(loadStart)

	// every message delivered (the failed first attempts retried), so that
	// the retry schedule was written and emptied again before the stop
	eventually(t, 40*time.Second, fmt.Sprintf("all %d messages delivered", ackOrderMessages), func() bool {
		done := map[string]bool{}
		for _, x := range be.on("/ack") {
			if failFirst(x) == http.StatusOK {
				done[x.body] = true
			}
		}
		return len(done) >= ackOrderMessages
	})
	// and the worker's idle moment after them, which compacts the retry
	// schedule (the rename checked below) and then drains the log: the
	// last delivery can come just before the stop on a slow machine
	segment := filepath.Join(state, "queues", "acme", flowName, "segment.log")
	eventually(t, 20*time.Second, "the queue's idle moment (its retry schedule compacted, then its log drained to 0 bytes)", func() bool {
		st, err := os.Stat(segment)
		return err == nil && st.Size() == 0
	})
	// and two cron ticks, so that the scheduler's record was rewritten
	be.waitOn(t, "/tick", 2, 10*time.Second)
	if code := h.terminate(20 * time.Second); code != 0 {
		t.Errorf("nexus serve under strace exited %d after SIGTERM, want 0", code)
	}

	f, err := os.Open(traceFile)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := parseStrace(f)
	f.Close()
	if err != nil {
		t.Fatalf("reading the trace %s: %v", traceFile, err)
	}
	if !tr.exitedCleanly() {
		t.Errorf("the trace does not end with the process exiting 0 (its exit lines: %q): the calls after the last line are unknown", tr.exits)
	}
	realState, err := filepath.EvalSymlinks(state)
	if err != nil {
		t.Fatal(err)
	}

	// 1 and 3: each 202 after the fdatasync that made its frame durable
	acks, err := checkAcks(tr, realState, "acme", flowName)
	if err != nil {
		t.Fatal(err)
	}
	reportViolations(t, "202s not preceded by a durable frame", len(acks.acks), acks.violations)
	var traced []ackGot
	for _, a := range acks.acks {
		traced = append(traced, ackGot{ID: a.id, Offset: a.offset})
	}
	if len(traced) != ackOrderMessages {
		t.Errorf("the trace shows %d 202s, want %d", len(traced), ackOrderMessages)
	}
	if len(clientAcks) != ackOrderMessages {
		t.Errorf("the clients got %d 202s, want %d", len(clientAcks), ackOrderMessages)
	}
	byIDOffset := func(s []ackGot) {
		sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID || s[i].ID == s[j].ID && s[i].Offset < s[j].Offset })
	}
	byIDOffset(traced)
	byIDOffset(clientAcks)
	if d := cmp.Diff(clientAcks, traced); d != "" {
		t.Errorf("the 202s the clients got and those written in the trace differ (-clients +trace):\n%s", d)
	}

	// 2: each rename into the state directory followed by an fsync of its folder
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	renames, err := checkRenames(tr, state, realState, cwd)
	if err != nil {
		t.Fatal(err)
	}
	reportViolations(t, "renames not followed by an fsync of their folder", len(renames.checked), renames.violations)
	// not vacuous: the renames this test provokes were seen and checked
	for _, name := range []string{"segment.log.retry", "ack-heartbeat.last"} {
		if !slices.ContainsFunc(renames.checked, func(p string) bool { return filepath.Base(p) == name }) {
			t.Errorf("no rename of %s in the state directory %s was checked (checked: %s): the test did not provoke it, or the trace missed it", name, realState, renames.summary())
		}
	}
	for _, e := range renames.exempt {
		t.Logf("left out of the rename check (%s): %s", e.why, tr.describe(e.call))
	}
	t.Logf("%d enqueues by %d clients in %v under strace; %d 202s checked against %d fdatasyncs of segment.log; %d renames checked (%s), %d left out; trace of %d lines; %v in all",
		len(clientAcks), ackOrderClients, loaded.Round(time.Millisecond), len(acks.acks), acks.syncs, len(renames.checked),
		renames.summary(), len(renames.exempt), len(tr.lines), time.Since(began).Round(time.Millisecond))
}

// straceOrSkip returns the strace command line (without the program) the
// test runs the binary under, after checking that strace is installed and
// may trace. Without either, the test is skipped when CI is not set and
// fails when it is.
func straceOrSkip(t *testing.T) []string {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		missingTool(t, "the ack-ordering test", why)
	}
	path, err := exec.LookPath("strace")
	if err != nil {
		skip("strace is not installed (not on PATH)")
	}
	if out, err := exec.Command(path, "-f", "-q", "-o", os.DevNull, "-e", "trace=fsync", "true").CombinedOutput(); err != nil {
		skip(fmt.Sprintf("strace cannot trace a process here (is ptrace permitted?): %v: %s", err, bytes.TrimSpace(out)))
	}
	args := []string{path, "-f", "-q", "-ttt", "-yy", "-x", "-s", "1048576", "-e", "signal=none", "-e", ackOrderSyscalls}
	// with seccomp-bpf only the traced calls stop the process, not the
	// runtime's futexes and epoll waits
	if exec.Command(path, "--seccomp-bpf", "-f", "-q", "-o", os.DevNull, "-e", "trace=fsync", "true").Run() == nil {
		args = append(args, "--seccomp-bpf")
	}
	return args
}

// tracedHost is nexus serve run as the child of strace -f.
type tracedHost struct {
	*hostProc
}

// startTracedHost starts nexus serve like startQuietHost (repo, db), under
// strace (straceArgs) writing its trace to traceFile.
func startTracedHost(t *testing.T, straceArgs []string, traceFile, repo, db string) *tracedHost {
	t.Helper()
	const admin = "admin-test-key"
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", admin, "--poll", "200ms", "--repo", repo}
	h := &tracedHost{&hostProc{t: t, db: db, adminKey: admin, exited: make(chan struct{})}}
	cmdArgs := append(append(append([]string(nil), straceArgs[1:]...), "-o", traceFile, "--", nexusBinary()), args...)
	h.cmd = exec.Command(straceArgs[0], cmdArgs...)
	h.cmd.Env = append(os.Environ(), "NEXUS_LOG_FORMAT=json")
	// strace and nexus in a process group of their own: killing strace (as
	// the harness does when the test ends) detaches nexus, which this
	// cleanup, registered first and so run last, kills with the group
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		if h.cmd.Process != nil {
			syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	h.watch(append([]string{"strace", "…", nexusBinary()}, args...), func(event string) bool { return !noisyEvents[event] }, nil)
	return h
}

// terminate sends SIGTERM to nexus (strace, which blocks fatal signals when
// it runs a program with -o, would not pass it on), waits until strace
// exits with it, and returns the exit code, which strace takes from nexus.
func (h *tracedHost) terminate(timeout time.Duration) int {
	h.t.Helper()
	pid, err := childOf(h.cmd.Process.Pid)
	if err != nil {
		h.t.Fatalf("finding nexus under strace: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		h.t.Fatalf("SIGTERM to nexus (pid %d): %v", pid, err)
	}
	select {
	case <-h.exited:
	case <-time.After(timeout):
		h.t.Fatalf("nexus serve did not exit within %v of SIGTERM", timeout)
	}
	return h.cmd.ProcessState.ExitCode()
}

// childOf returns the pid of the one child of process ppid, from /proc.
func childOf(ppid int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var children []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) >= 2 && fields[1] == strconv.Itoa(ppid) {
			children = append(children, pid)
		}
	}
	if len(children) != 1 {
		return 0, fmt.Errorf("process %d has the children %v, want one", ppid, children)
	}
	return children[0], nil
}

// ackGot is a 202: the message id of its header and the offset of its body.
type ackGot struct {
	ID     uint64
	Offset int64
}

// enqueueConcurrently enqueues n messages to tenant/flowName from clients
// concurrent clients and returns the 202s they got; any other answer fails
// the test. One message in ackOrderFailEvery asks the backend to fail its
// first attempt (failFirst).
func enqueueConcurrently(t *testing.T, h *hostProc, tenant, flowName string, n, clients int) []ackGot {
	t.Helper()
	transport := &http.Transport{MaxIdleConnsPerHost: clients}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	url := h.url + "/flows/" + tenant + "/" + flowName + "/enqueue"
	var (
		next atomic.Int64
		mu   sync.Mutex
		got  []ackGot
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				body := fmt.Sprintf(`{"n":%d}`, i)
				if i%ackOrderFailEvery == 0 {
					body = fmt.Sprintf(`{"n":%d,"mode":"fail-once"}`, i)
				}
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+acmeKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("enqueue %s: %v", body, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("enqueue %s: %d %s", body, resp.StatusCode, b)
					return
				}
				var a struct{ Offset int64 }
				id, err := strconv.ParseUint(resp.Header.Get("X-Nexus-Message-Id"), 10, 64)
				if err != nil || json.Unmarshal(b, &a) != nil {
					t.Errorf("enqueue %s: 202 with X-Nexus-Message-Id %q and body %s", body, resp.Header.Get("X-Nexus-Message-Id"), b)
					return
				}
				mu.Lock()
				got = append(got, ackGot{ID: id, Offset: a.Offset})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

// reportViolations fails the test with the first violations, in detail, and
// how many there are of the checked.
func reportViolations(t *testing.T, what string, checked int, violations []string) {
	t.Helper()
	if len(violations) == 0 {
		return
	}
	const shown = 10
	t.Errorf("%d of %d %s; the first %d:\n%s", len(violations), checked, what, min(shown, len(violations)), strings.Join(violations[:min(shown, len(violations))], "\n\n"))
}

// An strace log: the parser of strace -f -ttt -yy output, and the checks.

// traceCall is one system call of the trace, put together from its entry
// and return lines when strace split it (<unfinished ...>, <... resumed>).
type traceCall struct {
	pid            int
	name           string
	args           []string // the top-level arguments as printed
	ret            string   // the return as printed: "0", "248", "-1 EIO (Input/output error)", "?"
	start, end     int      // the lines (1-based) of its entry and of its return
	startAt, endAt string   // the -ttt stamps of those lines
}

// n is the call's return value, when it is not an error.
func (c *traceCall) n() (int64, bool) {
	v, err := strconv.ParseInt(c.ret, 10, 64)
	return v, err == nil && v >= 0
}

// succeeded reports whether the call returned 0.
func (c *traceCall) succeeded() bool { return c.ret == "0" }

// straceLog is a parsed trace.
type straceLog struct {
	lines []string
	calls []*traceCall // in the order of their entry lines
	exits []string     // the "+++ … +++" lines
}

// strace -f -ttt lines: "PID SECONDS.MICROS TEXT".
var straceLineRE = regexp.MustCompile(`^(\d+) +(\d+\.\d+) (.*)$`)

// parseStrace reads an strace -f -ttt log.
func parseStrace(r io.Reader) (*straceLog, error) {
	type pending struct {
		line int
		at   string
		text string
	}
	tr := &straceLog{}
	open := map[int]pending{} // by pid: a call whose entry was printed, not its return
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		tr.lines = append(tr.lines, line)
		no := len(tr.lines)
		m := straceLineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d does not start with a pid and a -ttt stamp: %.200s", no, line)
		}
		pid, _ := strconv.Atoi(m[1])
		at, text := m[2], m[3]
		switch {
		case strings.HasPrefix(text, "+++ "):
			tr.exits = append(tr.exits, text)
			continue
		case strings.HasPrefix(text, "--- "):
			continue // a signal
		case strings.HasSuffix(text, " <unfinished ...>"):
			if p, ok := open[pid]; ok {
				return nil, fmt.Errorf("line %d: pid %d starts a call while the one of line %d is unfinished", no, pid, p.line)
			}
			open[pid] = pending{no, at, strings.TrimSuffix(text, " <unfinished ...>")}
			continue
		case strings.HasPrefix(text, "<... "):
			i := strings.Index(text, " resumed>")
			p, ok := open[pid]
			if i < 0 || !ok {
				return nil, fmt.Errorf("line %d resumes a call pid %d did not start: %.200s", no, pid, line)
			}
			delete(open, pid)
			c, err := parseCall(p.text + strings.TrimPrefix(text[i+len(" resumed>"):], " <unavailable>"))
			if err != nil {
				return nil, fmt.Errorf("lines %d–%d: %v", p.line, no, err)
			}
			c.pid, c.start, c.startAt, c.end, c.endAt = pid, p.line, p.at, no, at
			tr.calls = append(tr.calls, c)
			continue
		}
		c, err := parseCall(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", no, err)
		}
		c.pid, c.start, c.startAt, c.end, c.endAt = pid, no, at, no, at
		tr.calls = append(tr.calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// a call whose return never came (its thread died in it) is left out:
	// it did not succeed
	sort.SliceStable(tr.calls, func(i, j int) bool { return tr.calls[i].start < tr.calls[j].start })
	return tr, nil
}

// parseCall parses "name(args) = ret".
func parseCall(text string) (*traceCall, error) {
	open := strings.IndexByte(text, '(')
	closing := strings.LastIndex(text, ") = ")
	if open <= 0 || closing < open {
		return nil, fmt.Errorf("not a system call: %.200s", text)
	}
	args, err := splitArgs(text[open+1 : closing])
	if err != nil {
		return nil, fmt.Errorf("%v: %.200s", err, text)
	}
	return &traceCall{name: text[:open], args: args, ret: text[closing+len(") = "):]}, nil
}

// splitArgs splits strace's arguments at the commas outside strings,
// brackets and fd annotations (3</a/path>, 7<TCP:[1.2.3.4:5->6.7.8.9:10]>).
func splitArgs(s string) ([]string, error) {
	var out []string
	depth, from := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if i >= len(s) {
				return nil, errors.New("a string is not closed")
			}
		case '<': // an annotation: to its '>', which may follow a "->" inside brackets
			brackets := 0
			for i++; i < len(s) && (s[i] != '>' || brackets > 0); i++ {
				switch s[i] {
				case '[':
					brackets++
				case ']':
					brackets--
				}
			}
		case '[', '{', '(':
			depth++
		case ']', '}', ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[from:i]))
				from = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[from:]); rest != "" || len(out) > 0 {
		out = append(out, rest)
	}
	return out, nil
}

// unquote decodes a string argument as strace prints it ("…" with C and
// \xHH escapes, followed by ... when strace cut it at -s).
func unquote(arg string) (b []byte, cut bool, err error) {
	if cut = strings.HasSuffix(arg, `"...`); cut {
		arg = strings.TrimSuffix(arg, "...")
	}
	if len(arg) < 2 || arg[0] != '"' || arg[len(arg)-1] != '"' {
		return nil, false, fmt.Errorf("not a string: %.80s", arg)
	}
	s := arg[1 : len(arg)-1]
	b = make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		i++
		if i >= len(s) {
			return nil, false, errors.New("a string ends with a backslash")
		}
		switch c := s[i]; c {
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'v':
			b = append(b, '\v')
		case 'f':
			b = append(b, '\f')
		case '"', '\\':
			b = append(b, c)
		case 'x':
			if i+2 >= len(s) {
				return nil, false, errors.New("a \\x escape is cut")
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, false, fmt.Errorf("the escape \\x%s: %v", s[i+1:i+3], err)
			}
			b = append(b, byte(v))
			i += 2
		default: // octal, one to three digits
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			if j == i {
				return nil, false, fmt.Errorf("the escape \\%c", c)
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 8)
			b = append(b, byte(v))
			i = j - 1
		}
	}
	return b, cut, nil
}

// fdPath is the annotation of an fd argument: the file's path (or a
// socket's endpoints) of "3</a/path>", "AT_FDCWD</cwd>".
func fdPath(arg string) (string, bool) {
	i := strings.IndexByte(arg, '<')
	if i <= 0 || !strings.HasSuffix(arg, ">") {
		return "", false
	}
	return arg[i+1 : len(arg)-1], true
}

// describe is a call's place in the trace and its entry line, for a failure.
func (tr *straceLog) describe(c *traceCall) string {
	where := fmt.Sprintf("line %d (%s)", c.start, c.startAt)
	if c.end != c.start {
		where = fmt.Sprintf("lines %d–%d (%s–%s)", c.start, c.end, c.startAt, c.endAt)
	}
	line := tr.lines[c.start-1]
	if len(line) > 240 {
		line = line[:240] + "…"
	}
	return where + ": " + line
}

// exitedCleanly reports whether the trace ends with the process exiting 0.
func (tr *straceLog) exitedCleanly() bool {
	if len(tr.exits) == 0 {
		return false
	}
	for _, e := range tr.exits {
		if !strings.HasPrefix(e, "+++ exited with ") {
			return false
		}
	}
	return tr.exits[len(tr.exits)-1] == "+++ exited with 0 +++"
}

// iovBaseRE finds the buffers of writev and sendmsg.
var iovBaseRE = regexp.MustCompile(`iov_base=("(?:[^"\\]|\\.)*"(?:\.\.\.)?)`)

// written is what a write, writev, sendto or sendmsg call passed: its fd's
// annotation and bytes, cut to what the call returned it wrote.
func written(c *traceCall) (fd string, data []byte, err error) {
	if len(c.args) < 2 {
		return "", nil, nil
	}
	fd, _ = fdPath(c.args[0])
	n, ok := c.n()
	if !ok || n == 0 {
		return fd, nil, nil
	}
	var parts []string
	switch c.name {
	case "write", "sendto":
		parts = []string{c.args[1]}
	case "writev", "sendmsg":
		for _, m := range iovBaseRE.FindAllStringSubmatch(c.args[1], -1) {
			parts = append(parts, m[1])
		}
	default:
		return "", nil, nil
	}
	for _, p := range parts {
		b, cut, err := unquote(p)
		if err != nil {
			return fd, nil, err
		}
		data = append(data, b...)
		if cut {
			break
		}
	}
	if int64(len(data)) < n {
		return fd, nil, fmt.Errorf("strace printed %d of the %d bytes written (raise -s)", len(data), n)
	}
	return fd, data[:n], nil
}

// socketAck is a 202 written to a socket.
type socketAck struct {
	id           uint64
	offset       int64
	tenant, flow string
	write        *traceCall // the call that wrote its status line
}

// socketAcks reads the answers the process wrote on its sockets: the bytes
// of each connection (told apart by -yy's endpoints) are put back together
// in order, and a connection whose bytes start with "HTTP/" is read as its
// responses. It returns the 202s, and the problems met (a response that does
// not parse, a 202 without an id or an offset).
func socketAcks(tr *straceLog) ([]socketAck, []string) {
	type chunk struct {
		from int
		c    *traceCall
	}
	type conn struct {
		data   []byte
		chunks []chunk
	}
	conns := map[string]*conn{}
	var order []string
	var problems []string
	for _, c := range tr.calls {
		switch c.name {
		case "write", "writev", "sendto", "sendmsg":
		default:
			continue
		}
		fd, data, err := written(c)
		if err != nil {
			problems = append(problems, fmt.Sprintf("the bytes of %s: %v", tr.describe(c), err))
			continue
		}
		if len(data) == 0 || !(strings.HasPrefix(fd, "TCP") || strings.HasPrefix(fd, "socket:")) {
			continue
		}
		k := conns[fd]
		if k == nil {
			k = &conn{}
			conns[fd] = k
			order = append(order, fd)
		}
		k.chunks = append(k.chunks, chunk{len(k.data), c})
		k.data = append(k.data, data...)
	}
	var acks []socketAck
	for _, fd := range order {
		k := conns[fd]
		if !bytes.HasPrefix(k.data, []byte("HTTP/")) {
			continue // a request to the backend, not an answer
		}
		rd := bytes.NewReader(k.data)
		br := bufio.NewReader(rd)
		for {
			from := len(k.data) - rd.Len() - br.Buffered()
			if from == len(k.data) {
				break
			}
			i := sort.Search(len(k.chunks), func(i int) bool { return k.chunks[i].from > from }) - 1
			w := k.chunks[i].c
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				problems = append(problems, fmt.Sprintf("connection %s: the bytes from %d on, written at %s, are not an HTTP response: %v", fd, from, tr.describe(w), err))
				break
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				problems = append(problems, fmt.Sprintf("connection %s: the body of the response written at %s: %v", fd, tr.describe(w), err))
				break
			}
			if resp.StatusCode != http.StatusAccepted {
				continue
			}
			a := socketAck{write: w}
			var b struct {
				Queued       bool
				Offset       *int64
				Tenant, Flow string
			}
			id, err := strconv.ParseUint(resp.Header.Get("X-Nexus-Message-Id"), 10, 64)
			if err != nil || json.Unmarshal(body, &b) != nil || b.Offset == nil || !b.Queued {
				problems = append(problems, fmt.Sprintf("the 202 written at %s has X-Nexus-Message-Id %q and the body %s: want an id, queued and an offset", tr.describe(w), resp.Header.Get("X-Nexus-Message-Id"), body))
				continue
			}
			a.id, a.offset, a.tenant, a.flow = id, *b.Offset, b.Tenant, b.Flow
			acks = append(acks, a)
		}
	}
	return acks, problems
}

// frameWrite is a message frame found in a pwrite64 to segment.log.
type frameWrite struct {
	c      *traceCall
	offset int64 // the frame's offset in the log
	size   int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// callsOn is the calls of the trace whose first argument is a descriptor
// of the file at path, in trace order.
func (tr *straceLog) callsOn(path string) []*traceCall {
	var out []*traceCall
	for _, c := range tr.calls {
		if len(c.args) > 0 {
			if fd, _ := fdPath(c.args[0]); fd == path {
				out = append(out, c)
			}
		}
	}
	return out
}

// segmentFrames reads the pwrite64 calls to the segment.log at path: the
// message frames they wrote, by message id, in trace order (only frames
// whose CRC verifies, in the bytes the call returned it wrote); and the
// successful fdatasyncs of that file.
func segmentFrames(tr *straceLog, path string) (map[uint64][]frameWrite, []*traceCall, error) {
	frames := map[uint64][]frameWrite{}
	var syncs []*traceCall
	for _, c := range tr.callsOn(path) {
		switch c.name {
		case "fdatasync":
			if c.succeeded() {
				syncs = append(syncs, c)
			}
		case "pwrite64":
			n, ok := c.n()
			if !ok || len(c.args) != 4 {
				continue
			}
			data, _, err := unquote(c.args[1])
			if err != nil {
				return nil, nil, fmt.Errorf("the bytes of %s: %v", tr.describe(c), err)
			}
			at, err := strconv.ParseInt(c.args[3], 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("the offset of %s: %v", tr.describe(c), err)
			}
			data = data[:min(int64(len(data)), n)]
			for i := 0; i+12 <= len(data) && string(data[i:i+4]) == "NXQ1"; {
				size := 12 + int(binary.BigEndian.Uint32(data[i+4:i+8]))
				if i+size > len(data) {
					break
				}
				rec := data[i+12 : i+size]
				crc := crc32.Update(crc32.Update(0, castagnoli, data[i+4:i+8]), castagnoli, rec)
				if crc != binary.BigEndian.Uint32(data[i+8:i+12]) {
					break
				}
				if len(rec) >= 9 && rec[0] == 1 {
					id := binary.BigEndian.Uint64(rec[1:9])
					frames[id] = append(frames[id], frameWrite{c, at + int64(i), int64(size)})
				}
				i += size
			}
		}
	}
	return frames, syncs, nil
}

// ackCheck is what checkAcks found.
type ackCheck struct {
	acks       []socketAck
	syncs      int // the successful fdatasyncs of the log
	violations []string
}

// checkAcks checks every 202 the process wrote on a socket: for a message
// of tenant/flowName, after the frame written to its segment.log in
// realState, and after an fdatasync of that file that followed the frame's
// write. Answers that do not parse are violations too.
func checkAcks(tr *straceLog, realState, tenant, flowName string) (ackCheck, error) {
	var r ackCheck
	acks, problems := socketAcks(tr)
	r.acks, r.violations = acks, problems
	segment := filepath.Join(realState, "queues", tenant, flowName, "segment.log")
	frames, syncs, err := segmentFrames(tr, segment)
	if err != nil {
		return r, err
	}
	r.syncs = len(syncs)
	seen := map[uint64]*traceCall{}
	for _, a := range acks {
		if prev, ok := seen[a.id]; ok {
			r.violations = append(r.violations, fmt.Sprintf("message %d was acknowledged twice: at %s and at %s", a.id, tr.describe(prev), tr.describe(a.write)))
		}
		seen[a.id] = a.write
		if a.tenant != tenant || a.flow != flowName {
			r.violations = append(r.violations, fmt.Sprintf("the 202 of message %d (%s) is for %s/%s, want %s/%s", a.id, tr.describe(a.write), a.tenant, a.flow, tenant, flowName))
			continue
		}
		if v := checkAck(tr, a, frames[a.id], syncs, segment); v != "" {
			r.violations = append(r.violations, v)
		}
	}
	return r, nil
}

// checkAck checks one 202 against the frames written to the log and the
// log's fdatasyncs; it returns the violation, or "".
func checkAck(tr *straceLog, a socketAck, writes []frameWrite, syncs []*traceCall, segment string) string {
	ack := tr.describe(a.write)
	var fw *frameWrite
	for i := range writes {
		if writes[i].c.start < a.write.start {
			fw = &writes[i] // the frame's last write before the 202
		}
	}
	if fw == nil {
		return fmt.Sprintf("message %d (offset %d): a 202 was written at %s\n  but no pwrite64 to %s before it holds a frame of message %d that verifies", a.id, a.offset, ack, segment, a.id)
	}
	frame := tr.describe(fw.c)
	if fw.offset != a.offset {
		return fmt.Sprintf("message %d: its 202 (%s)\n  says offset %d, but its frame was written at offset %d by %s", a.id, ack, a.offset, fw.offset, frame)
	}
	if fw.c.end >= a.write.start {
		return fmt.Sprintf("message %d (offset %d): its 202 was written at %s\n  before the pwrite64 of its frame returned: %s", a.id, a.offset, ack, frame)
	}
	var last *traceCall // the last successful fdatasync that started before the 202
	for _, s := range syncs {
		if s.start > fw.c.end && s.end < a.write.start {
			return ""
		}
		if s.start < a.write.start {
			last = s
		}
	}
	nearest := "there is no successful fdatasync of segment.log before the 202 at all"
	if last != nil {
		nearest = "the last successful fdatasync of segment.log that started before the 202: " + tr.describe(last)
	}
	return fmt.Sprintf("message %d (offset %d): its 202 was written at %s\n  with no successful fdatasync of %s between the pwrite64 of its frame returning (%s)\n  and that write; %s", a.id, a.offset, ack, segment, frame, nearest)
}

// renameCheck is what checkRenames found.
type renameCheck struct {
	checked    []string // the targets, relative to the state directory
	violations []string
	exempt     []exemptRename
}

type exemptRename struct {
	call *traceCall
	why  string
}

// summary counts the checked renames by file name.
func (r renameCheck) summary() string {
	counts := map[string]int{}
	for _, p := range r.checked {
		counts[filepath.Base(p)]++
	}
	var names []string
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", n, counts[n]))
	}
	return strings.Join(parts, ", ")
}

// checkRenames checks that each successful rename whose target is in the
// state directory (given as state, resolved as realState; relative paths
// are from the fd of renameat, or cwd) is followed by a successful fsync of
// an fd open on the target's folder.
func checkRenames(tr *straceLog, state, realState, cwd string) (renameCheck, error) {
	var r renameCheck
	for _, c := range tr.calls {
		var target, base string
		switch {
		case !c.succeeded():
			continue
		case c.name == "rename" && len(c.args) == 2:
			target, base = c.args[1], cwd
		case (c.name == "renameat" || c.name == "renameat2") && len(c.args) >= 4:
			target = c.args[3]
			base, _ = fdPath(c.args[2])
		default:
			continue
		}
		b, _, err := unquote(target)
		if err != nil {
			return r, fmt.Errorf("the target of %s: %v", tr.describe(c), err)
		}
		path := string(b)
		if !filepath.IsAbs(path) {
			path = filepath.Join(base, path)
		}
		path = filepath.Clean(path)
		if rel, err := filepath.Rel(state, path); err == nil && !strings.HasPrefix(rel, "..") {
			path = filepath.Join(realState, rel) // fds are annotated with resolved paths
		}
		rel, err := filepath.Rel(realState, path)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			continue // not in the state directory
		}
		if why := renameExempt(rel); why != "" {
			r.exempt = append(r.exempt, exemptRename{c, why})
			continue
		}
		r.checked = append(r.checked, rel)
		dir := filepath.Dir(path)
		synced := false
		for _, s := range tr.calls {
			if s.start <= c.end || (s.name != "fsync" && s.name != "fdatasync") || !s.succeeded() || len(s.args) != 1 {
				continue
			}
			if p, _ := fdPath(s.args[0]); p == dir {
				synced = true
				break
			}
		}
		if !synced {
			r.violations = append(r.violations, fmt.Sprintf("%s was renamed at %s\n  and no successful fsync of its folder %s follows it in the trace", rel, tr.describe(c), dir))
		}
	}
	return r, nil
}

// renameExempt is why renames to rel (relative to the state directory) are
// left out of the check, or "".
func renameExempt(rel string) string {
	for _, e := range renamesWithoutFolderSync {
		if strings.HasPrefix(rel, e.dir+string(filepath.Separator)) {
			return e.why
		}
	}
	return ""
}

// TestAckOrderTraceParsing checks the trace parser TestAckOrder relies on
// on lines as strace -f -ttt -yy -x prints them: calls split by another
// thread's, escapes, cut strings, errors.
func TestAckOrderTraceParsing(t *testing.T) {
	t.Parallel()
	type call struct {
		Pid        int
		Name       string
		Args       []string
		Ret        string
		Start, End int
	}
	tests := []struct {
		name  string
		trace string
		want  []call
		exits []string
	}{
		{
			name:  "one line",
			trace: `10 1796014451.175979 pwrite64(14</s/q/segment.log>, "\x4e\x58\x51\x31", 4, 82) = 4`,
			want:  []call{{10, "pwrite64", []string{`14</s/q/segment.log>`, `"\x4e\x58\x51\x31"`, "4", "82"}, "4", 1, 1}},
		},
		{
			name: "split by another thread",
			trace: `10 1.000001 fdatasync(14</s/q/segment.log> <unfinished ...>
11 1.000002 write(12<TCP:[127.0.0.1:9090->127.0.0.1:35696]>, "HTTP/1.1 202 Accepted\r\n\r\n{\"a\":1}", 32) = 32
10 1.000003 <... fdatasync resumed>) = 0
10 1.000004 +++ exited with 0 +++`,
			want: []call{
				{10, "fdatasync", []string{`14</s/q/segment.log>`}, "0", 1, 3},
				{11, "write", []string{`12<TCP:[127.0.0.1:9090->127.0.0.1:35696]>`, `"HTTP/1.1 202 Accepted\r\n\r\n{\"a\":1}"`, "32"}, "32", 2, 2},
			},
			exits: []string{"+++ exited with 0 +++"},
		},
		{
			name:  "an error and a rename",
			trace: "7 2.5 fsync(9</s/a, b>) = -1 EIO (Input/output error)\n7 2.6 renameat(AT_FDCWD</w>, \"/s/r.tmp\", AT_FDCWD</w>, \"/s/r\") = 0",
			want: []call{
				{7, "fsync", []string{`9</s/a, b>`}, "-1 EIO (Input/output error)", 1, 1},
				{7, "renameat", []string{`AT_FDCWD</w>`, `"/s/r.tmp"`, `AT_FDCWD</w>`, `"/s/r"`}, "0", 2, 2},
			},
		},
		{
			name:  "writev",
			trace: `3 4.0 writev(5<TCP:[1.2.3.4:1->5.6.7.8:2]>, [{iov_base="ab", iov_len=2}, {iov_base="c\0", iov_len=2}], 2) = 4`,
			want:  []call{{3, "writev", []string{`5<TCP:[1.2.3.4:1->5.6.7.8:2]>`, `[{iov_base="ab", iov_len=2}, {iov_base="c\0", iov_len=2}]`, "2"}, "4", 1, 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := parseStrace(strings.NewReader(tt.trace))
			if err != nil {
				t.Fatal(err)
			}
			var got []call
			for _, c := range tr.calls {
				got = append(got, call{c.pid, c.name, c.args, c.ret, c.start, c.end})
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.exits, tr.exits); d != "" {
				t.Errorf("exits (-want +got):\n%s", d)
			}
		})
	}

	unquotes := []struct {
		in   string
		want string
		cut  bool
	}{
		{`"HTTP/1.1 202\r\n{\"offset\":82}"`, "HTTP/1.1 202\r\n{\"offset\":82}", false},
		{`"\x4e\x58\x51\x31\x00\xff"`, "NXQ1\x00\xff", false},
		{`"a\0b\12c\177"`, "a\x00b\nc\x7f", false},
		{`"abc"...`, "abc", true},
	}
	for _, u := range unquotes {
		got, cut, err := unquote(u.in)
		if err != nil || string(got) != u.want || cut != u.cut {
			t.Errorf("unquote(%s) = %q, cut %v, %v; want %q, cut %v", u.in, got, cut, err, u.want, u.cut)
		}
	}
	tr, err := parseStrace(strings.NewReader(`3 4.0 writev(5<TCP:[1.2.3.4:1->5.6.7.8:2]>, [{iov_base="ab", iov_len=2}, {iov_base="c\0", iov_len=2}], 2) = 3`))
	if err != nil {
		t.Fatal(err)
	}
	if fd, data, err := written(tr.calls[0]); fd != "TCP:[1.2.3.4:1->5.6.7.8:2]" || string(data) != "abc" || err != nil {
		t.Errorf("written(writev returning 3) = %q, %q, %v; want the socket and %q", fd, data, err, "abc")
	}
}

// TestAckOrderChecks shows that the checks of TestAckOrder fail when they
// must, on traces made up for each violation.
func TestAckOrderChecks(t *testing.T) {
	t.Parallel()
	const (
		state   = "/s"
		segment = state + "/queues/acme/f/segment.log"
	)
	frame, size := stracedFrame(7, `{"a":1}`, false)
	badFrame, _ := stracedFrame(7, `{"a":1}`, true)
	pwrite := func(quoted string, at int) string {
		return fmt.Sprintf("pwrite64(3<%s>, %s, %d, %d) = %d", segment, quoted, size, at, size)
	}
	sync := fmt.Sprintf("fdatasync(3<%s>) = 0", segment)
	ack := func(id, offset int) string {
		body := fmt.Sprintf(`{"queued":true,"offset":%d,"tenant":"acme","flow":"f"}`, offset)
		resp := fmt.Sprintf("HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nX-Nexus-Message-Id: %d\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
		return fmt.Sprintf("write(5<TCP:[127.0.0.1:9090->127.0.0.1:4000]>, %s, %d) = %d", straceQuote([]byte(resp)), len(resp), len(resp))
	}
	acks := []struct {
		name  string
		trace []string // "PID TEXT"
		want  string   // in the violation; "" for none
	}{
		{"synced, then the 202", []string{"1 " + pwrite(frame, 0), "1 " + sync, "2 " + ack(7, 0)}, ""},
		{"the 202 while the fdatasync runs", []string{
			"1 " + pwrite(frame, 0), "1 " + strings.TrimSuffix(sync, ") = 0") + " <unfinished ...>", "2 " + ack(7, 0), "1 <... fdatasync resumed>) = 0",
		}, "no successful fdatasync of " + segment + " between"},
		{"the fdatasync failed", []string{"1 " + pwrite(frame, 0), "1 " + strings.TrimSuffix(sync, "0") + "-1 EIO (Input/output error)", "2 " + ack(7, 0)}, "there is no successful fdatasync of segment.log before the 202 at all"},
		{"the fdatasync before the frame's write", []string{"1 " + sync, "1 " + pwrite(frame, 0), "2 " + ack(7, 0)}, "the last successful fdatasync of segment.log that started before the 202: line 1"},
		{"an fdatasync of another file", []string{"1 " + pwrite(frame, 0), "1 fdatasync(4</s/queues/acme/f/segment.log.retry.tmp>) = 0", "2 " + ack(7, 0)}, "no successful fdatasync"},
		{"the frame never written", []string{"1 " + sync, "2 " + ack(7, 0)}, "no pwrite64 to " + segment + " before it holds a frame of message 7"},
		{"the frame written after the 202", []string{"2 " + ack(7, 0), "1 " + pwrite(frame, 0), "1 " + sync}, "no pwrite64"},
		{"the frame does not verify", []string{"1 " + pwrite(badFrame, 0), "1 " + sync, "2 " + ack(7, 0)}, "no pwrite64"},
		{"the 202's offset is not the frame's", []string{"1 " + pwrite(frame, 0), "1 " + sync, "2 " + ack(7, 82)}, "says offset 82, but its frame was written at offset 0"},
		{"acknowledged twice", []string{"1 " + pwrite(frame, 0), "1 " + sync, "2 " + ack(7, 0) + "\n2 " + ack(7, 0)}, "message 7 was acknowledged twice"},
	}
	for _, tt := range acks {
		t.Run(tt.name, func(t *testing.T) {
			tr := madeUpTrace(t, tt.trace)
			got, err := checkAcks(tr, state, "acme", "f")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.acks) == 0 {
				t.Fatal("no 202 found in the trace")
			}
			checkViolations(t, got.violations, tt.want)
		})
	}

	renames := []struct {
		name    string
		trace   []string
		want    string // in the violation; "" for none
		checked int
		exempt  int
	}{
		{"then the folder synced", []string{`1 renameat(AT_FDCWD</w>, "/s/q/r.tmp", AT_FDCWD</w>, "/s/q/r") = 0`, "1 fsync(9</s/q>) = 0"}, "", 1, 0},
		{"a relative path", []string{`1 renameat(AT_FDCWD</s/q>, "r.tmp", AT_FDCWD</s/q>, "r") = 0`, "2 fsync(9</s/q>) = 0"}, "", 1, 0},
		{"rename(2), from the working folder", []string{`1 rename("q/r.tmp", "q/r") = 0`, "1 fsync(9</s/q>) = 0"}, "", 1, 0},
		{"the folder not synced", []string{`1 renameat(AT_FDCWD</w>, "/s/q/r.tmp", AT_FDCWD</w>, "/s/q/r") = 0`, "1 fsync(9</s>) = 0"}, "q/r was renamed at line 1", 1, 0},
		{"the folder synced before only", []string{"1 fsync(9</s/q>) = 0", `1 renameat2(AT_FDCWD</w>, "/s/q/r.tmp", AT_FDCWD</w>, "/s/q/r", 0) = 0`}, "no successful fsync of its folder /s/q follows it", 1, 0},
		{"the sync of the folder failed", []string{`1 renameat(AT_FDCWD</w>, "/s/q/r.tmp", AT_FDCWD</w>, "/s/q/r") = 0`, "1 fsync(9</s/q>) = -1 EIO (Input/output error)"}, "no successful fsync", 1, 0},
		{"a failed rename", []string{`1 renameat(AT_FDCWD</w>, "/s/q/r.tmp", AT_FDCWD</w>, "/s/q/r") = -1 ENOENT (No such file or directory)`}, "", 0, 0},
		{"outside the state directory", []string{`1 renameat(AT_FDCWD</w>, "/t/r.tmp", AT_FDCWD</w>, "/t/r") = 0`}, "", 0, 0},
		{"in the clone", []string{`1 renameat(AT_FDCWD</w>, "/s/repo/objects/pack/tmp_pack_1", AT_FDCWD</w>, "/s/repo/objects/pack/pack-1.pack") = 0`}, "", 0, 1},
	}
	for _, tt := range renames {
		t.Run(tt.name, func(t *testing.T) {
			got, err := checkRenames(madeUpTrace(t, tt.trace), state, state, state)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.checked) != tt.checked || len(got.exempt) != tt.exempt {
				t.Errorf("%d renames checked and %d left out, want %d and %d", len(got.checked), len(got.exempt), tt.checked, tt.exempt)
			}
			checkViolations(t, got.violations, tt.want)
		})
	}
}

// madeUpTrace parses lines "PID TEXT", given -ttt stamps in order.
func madeUpTrace(t *testing.T, lines []string) *straceLog {
	t.Helper()
	var b strings.Builder
	for i, l := range strings.Split(strings.Join(lines, "\n"), "\n") {
		pid, text, _ := strings.Cut(l, " ")
		fmt.Fprintf(&b, "%s 1.%06d %s\n", pid, i+1, text)
	}
	tr, err := parseStrace(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// checkViolations wants exactly one violation holding want, or none when
// want is "".
func checkViolations(t *testing.T, violations []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(violations) > 0:
		t.Errorf("violations %q, want none", violations)
	case want != "" && (len(violations) != 1 || !strings.Contains(violations[0], want)):
		t.Errorf("violations %q, want one holding %q", violations, want)
	}
}

// stracedFrame is a segment.log frame of message id as strace -x prints
// the bytes of its pwrite64, and its size; with corrupt, its CRC is wrong.
func stracedFrame(id uint64, payload string, corrupt bool) (string, int) {
	rec := binary.BigEndian.AppendUint64([]byte{1}, id)
	rec = binary.BigEndian.AppendUint64(rec, 0) // enqueued at
	rec = append(append(rec, byte(len("enqueue"))), "enqueue"...)
	rec = append(binary.BigEndian.AppendUint16(rec, 0), payload...) // no correlation ID
	length := binary.BigEndian.AppendUint32(nil, uint32(len(rec)))
	crc := crc32.Update(crc32.Update(0, castagnoli, length), castagnoli, rec)
	if corrupt {
		crc++
	}
	frame := append(append(append([]byte("NXQ1"), length...), binary.BigEndian.AppendUint32(nil, crc)...), rec...)
	return straceQuote(frame), len(frame)
}

// straceQuote prints b as strace -xx does.
func straceQuote(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		fmt.Fprintf(&s, `\x%02x`, c)
	}
	s.WriteByte('"')
	return s.String()
}
