package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Items 11 and 12 of the reliability test plan, on the built binary: a disk
// that fills up (ENOSPC on the pwrite64 of a queue's log) and a disk that
// fails an fdatasync of it (EIO), made by strace's fault injection.
//
// strace attaches to the running nexus serve (strace -f -p) once a first
// message has created the queue's segment.log, and -P restricts both the
// trace and the injection to the system calls on that one file: the
// registry's SQLite writes, the id counter (segment.log.seq, also written
// with pwrite64), the checkpoint and the sockets are left alone, so no
// counting of the process's other calls is needed. Detaching strace (it
// exits on SIGTERM and lets the process run on) ends the fault, and the
// same process must then take messages again.
//
// The spec ("Precise answers" of server.md): a failed append or fsync on
// /enqueue answers 503 with Retry-After: 1 and a body naming the queue;
// after a failed fsync the queue answers the same until its log has been
// reopened and verified; nothing is ever acknowledged that was not written.
// The trace is the judge of what was written: every 202 must name a frame
// that a pwrite64 of the log wrote in full and that an fdatasync of the log
// returning 0 made durable before the next write.

const (
	// faultConcurrent is how many enqueues are sent at once while the
	// fault is injected, so that several share a group commit.
	faultConcurrent = 16
	// faultAfter is how many enqueues are taken once strace is detached.
	faultAfter = 4
	// faultHeldTags numbers the enqueues sent again after strace is
	// detached while the queue's reopening is held back.
	faultHeldTags = 100
	// faultSyscalls are the calls traced on segment.log: its frames
	// (pwrite64) and their fdatasync, and its reopening (openat) and
	// verification (pread64 from offset 0) after a failure.
	faultSyscalls = "trace=openat,pwrite64,fdatasync,pread64"
)

// faultCase is one kind of injected fault.
type faultCase struct {
	prefix string // of the payload ids (and correlation ids) of its messages
	flow   string // the queue flow it enqueues to
	// inject is strace's -e inject= value, for the calls on segment.log
	// only. strace counts when= per thread (each thread of the Go runtime
	// has its own counter), so when=1 fails the first such call of every
	// thread.
	inject string
	// errText is the error of the failed call as the host logs it in
	// queue_enqueue_failed.
	errText string
	// everyCall is set when every call of the kind fails while strace is
	// attached, so that no enqueue of that time may get a 202 at all.
	everyCall bool
	// poisonRule checks that after a failed batch the log is reopened and
	// read from its start before anything more is written to it (the spec
	// promises it after a failed fsync).
	poisonRule bool
}

// TestFaultInjectENOSPC is item 11: every pwrite64 of the queue's
// segment.log fails with ENOSPC while strace is attached. Every enqueue of
// that time must answer 503 with Retry-After: 1 and the body naming the
// queue, log queue_enqueue_failed with the error, and never be delivered
// (its frame was never written); once strace is detached the same process
// answers 202 again (the queue's reopenings are spaced out while it keeps
// failing: after at most a few seconds), and every 202 is delivered as sent.
func TestFaultInjectENOSPC(t *testing.T) {
	t.Parallel()
	runFaultCase(t, faultCase{
		prefix:    "enospc",
		flow:      "fault-enospc",
		inject:    "pwrite64:error=ENOSPC",
		errText:   "no space left on device",
		everyCall: true,
	})
}

// TestFaultInjectEIO is item 12: the first fdatasync of the queue's
// segment.log in each thread fails with EIO (when=1) while strace is
// attached, which always fails the first enqueue sent and, depending on
// which threads the Go runtime runs the commits on, some of the 16 sent at
// once after it. Every enqueue whose batch's fdatasync failed must answer
// 503 (none 202); after each failure nothing is written to the log before
// it has been opened again and read from its start (reopened and
// verified); a 202 is only ever given for a frame whose fdatasync returned
// 0. Once strace is detached the process answers 202 again (after the
// queue's reopening, held back 1 s, 2 s, 4 s … after each failure past
// the first), and every 202 is delivered as sent. A message that got a 503 after
// its frame was written (the fdatasync failed) may still be delivered: that
// is at-least-once, allowed; the test reports it.
func TestFaultInjectEIO(t *testing.T) {
	t.Parallel()
	runFaultCase(t, faultCase{
		prefix:     "eio",
		flow:       "fault-eio",
		inject:     "fdatasync:error=EIO:when=1",
		errText:    "input/output error",
		poisonRule: true,
	})
}

// faultAnswer is the host's answer to one enqueue of a payload id.
type faultAnswer struct {
	tag    string
	body   string // the JSON sent
	status int
	header http.Header
	resp   string
	err    error
	id     uint64 // of a 202: X-Nexus-Message-Id
	offset int64  // of a 202: the body's offset
}

// runFaultCase runs one fault: a host with one queue flow whose backend
// records what it gets, a first message that creates the queue's log,
// strace attached with the fault on that log, one enqueue then
// faultConcurrent at once, strace detached, faultAfter enqueues, and the
// checks of the answers, the log events, the trace and the deliveries.
func runFaultCase(t *testing.T, c faultCase) {
	straceBin := faultStrace(t)
	began := time.Now()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/" + c.flow + ".md": queueExample(t, "forward-order", be.URL, "flow: forward-order", "flow: "+c.flow),
	}, hostOptions{}, c.flow)

	// the first message creates segment.log, which strace's -P needs
	warm := faultEnqueue(h, c.flow, c.prefix+"-warm", 0)
	if warm.err != nil || warm.status != http.StatusAccepted {
		t.Fatalf("the first enqueue, before any fault: %d %s %v", warm.status, warm.resp, warm.err)
	}
	be.waitBody(t, "/ingest", warm.body, 10*time.Second)
	segment, err := filepath.EvalSymlinks(filepath.Join(queuesRoot(h.db), "acme", c.flow, "segment.log"))
	if err != nil {
		t.Fatal(err)
	}
	// the worker empties the processed log (truncate, then fdatasync of
	// segment.log): done before the attach, so that the first fdatasync of
	// the log strace sees is the first enqueue's
	waitDrained(t, segment)
	startedBefore := len(h.events("worker_started"))

	traceFile := filepath.Join(t.TempDir(), "segment.strace")
	attachStart := time.Now()
	tracer, err := startFaultTracer(straceBin, h.cmd.Process.Pid, traceFile, segment, c.inject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tracer.stop)
	attachTook := time.Since(attachStart)

	// one enqueue alone (the first call on the log since the attach: it
	// fails), then faultConcurrent at once
	var during []faultAnswer
	during = append(during, faultEnqueue(h, c.flow, faultTag(c.prefix, 0), 0))
	during = append(during, faultEnqueueAll(h, c.flow, c.prefix, 1, faultConcurrent)...)
	detachStart := time.Now()
	tracer.stop()
	detachTook := time.Since(detachStart)
	if msg := tracer.stderrText(); strings.Contains(msg, "Operation not permitted") {
		t.Fatalf("strace could not trace every thread of nexus serve:\n%s", msg)
	}

	// the fault is gone: the same process takes messages again without a
	// restart. A queue that failed again once reopened is reopened next
	// 1 s after that (then 2 s, 4 s …): until then its submissions get the
	// same 503, and the first is sent again as a client honouring
	// Retry-After would (these refusals are checked with those of the
	// fault). Once one is taken, every later one is at the first try.
	var after []faultAnswer
	for held := 0; ; held++ {
		a := faultEnqueue(h, c.flow, faultTag(c.prefix, faultHeldTags+held), 0)
		if a.err == nil && a.status == http.StatusAccepted {
			after = append(after, a)
			break
		}
		during = append(during, a)
		if time.Since(detachStart) > 15*time.Second || a.status != http.StatusServiceUnavailable {
			t.Fatalf("enqueue %s, %s after strace was detached (the same process, not restarted): %d %v %s, want 202 within 15 s",
				a.tag, time.Since(detachStart).Round(time.Millisecond), a.status, a.err, a.resp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 1; i < faultAfter; i++ {
		a := faultEnqueue(h, c.flow, faultTag(c.prefix, 1+faultConcurrent+i), 0)
		if a.err != nil || a.status != http.StatusAccepted {
			t.Fatalf("enqueue %s, number %d after strace was detached (the same process, not restarted): %d %v %s, want 202",
				a.tag, i+1, a.status, a.err, a.resp)
		}
		after = append(after, a)
	}
	select {
	case <-h.exited:
		t.Fatalf("nexus serve exited during the fault: %v", h.exitErr)
	default:
	}

	// the answers given while the fault was injected
	want503 := fmt.Sprintf(`{"ok":false,"error":"queue acme/%s could not take the message: its log could not be written: %s"}`, c.flow, c.errText)
	// (logged at most 20 at once and 10 a second after, each line saying
	// how many were not since the last: all told, one per 503)
	failedEvents := map[string][]map[string]any{}
	failuresTold := 0
	for _, e := range h.events("queue_enqueue_failed") {
		id, _ := e["correlation_id"].(string)
		failedEvents[id] = append(failedEvents[id], e)
		n, _ := e["suppressed"].(float64)
		failuresTold += 1 + int(n)
	}
	queuedEvents := map[string]bool{}
	for _, e := range h.events("queue_enqueued") {
		id, _ := e["correlation_id"].(string)
		queuedEvents[id] = true
	}
	var refused, accepted []faultAnswer
	for _, a := range during {
		switch {
		case a.err != nil:
			t.Errorf("enqueue %s while the fault was injected: %v", a.tag, a.err)
		case a.status == http.StatusServiceUnavailable:
			refused = append(refused, a)
			if got := a.header.Get("Retry-After"); got != "1" {
				t.Errorf("enqueue %s: 503 with Retry-After %q, want \"1\"", a.tag, got)
			}
			if a.resp != want503 {
				t.Errorf("enqueue %s: 503 body\n%s\nwant\n%s", a.tag, a.resp, want503)
			}
			switch evs := failedEvents[a.tag]; {
			case len(evs) > 1:
				t.Errorf("enqueue %s got a 503 and logged %d queue_enqueue_failed events, want at most 1", a.tag, len(evs))
			case len(evs) == 0:
				if len(refused) <= 20 {
					t.Errorf("enqueue %s, among the first 20 refused, logged no queue_enqueue_failed event", a.tag)
				}
			case evs[0]["tenant"] != "acme" || evs[0]["flow"] != c.flow || !strings.Contains(fmt.Sprint(evs[0]["error"]), c.errText):
				t.Errorf("enqueue %s: queue_enqueue_failed %v, want tenant acme, flow %s and an error holding %q", a.tag, evs[0], c.flow, c.errText)
			}
			if queuedEvents[a.tag] {
				t.Errorf("enqueue %s got a 503 but logged queue_enqueued", a.tag)
			}
		case a.status == http.StatusAccepted:
			accepted = append(accepted, a)
			if c.everyCall {
				t.Errorf("enqueue %s got 202 %s while every %s of the log failed: acknowledged without being written", a.tag, a.resp, strings.Split(c.inject, ":")[0])
			}
			if len(failedEvents[a.tag]) > 0 {
				t.Errorf("enqueue %s got a 202 but logged queue_enqueue_failed: %v", a.tag, failedEvents[a.tag])
			}
		default:
			t.Errorf("enqueue %s while the fault was injected: %d %s, want 202 or 503", a.tag, a.status, a.resp)
		}
	}
	if failuresTold > len(refused) {
		t.Errorf("the queue_enqueue_failed lines and their suppressed counts tell of %d failed submissions, but %d got a 503", failuresTold, len(refused))
	}
	if during[0].status != http.StatusServiceUnavailable {
		t.Errorf("enqueue %s, the first after strace attached with inject=%s: %d %s, want 503", during[0].tag, c.inject, during[0].status, during[0].resp)
	}
	for _, a := range after {
		if len(failedEvents[a.tag]) > 0 {
			t.Errorf("enqueue %s got a 202 but logged queue_enqueue_failed: %v", a.tag, failedEvents[a.tag])
		}
	}

	// the trace: what was written and synced, and what was acknowledged
	tr, err := readFaultTrace(traceFile)
	if err != nil {
		t.Fatalf("reading the trace %s: %v", traceFile, err)
	}
	batches, err := logBatches(tr, segment)
	if err != nil {
		t.Fatal(err)
	}
	injected := 0
	for _, call := range tr.calls {
		if strings.HasSuffix(call.ret, "(INJECTED)") {
			injected++
		}
	}
	if injected == 0 {
		t.Fatalf("the trace of segment.log shows no injected fault: strace did not inject %s (the trace has %d calls)", c.inject, len(tr.calls))
	}
	// the 202s given while strace was attached (those after it are not in
	// the trace; their deliveries are checked below)
	reportViolations(t, "202s without a durable frame", len(accepted), ackViolations(tr, segment, batches, accepted))
	var inFailed []string // the payload ids in a batch that failed
	for _, b := range batches {
		if b.durable() {
			continue
		}
		for _, a := range during {
			if b.holds(a.tag) {
				inFailed = append(inFailed, a.tag)
				if a.status != http.StatusServiceUnavailable {
					t.Errorf("enqueue %s was in a batch that failed (%s) but got %d %s, want 503", a.tag, b.failure(), a.status, a.resp)
				}
			}
		}
	}
	if len(inFailed) == 0 {
		t.Errorf("no enqueue was written in a failed batch of the trace (%d batches): the fault hit none", len(batches))
	}
	reopens := reopenViolations(tr, segment, batches, c.poisonRule)
	if c.poisonRule {
		reportViolations(t, "failed batches after which the log was written before it was reopened and verified", countFailed(batches), reopens)
	}
	if started := len(h.events("worker_started")) - startedBefore; c.poisonRule && started < 1 {
		t.Errorf("no worker_started after the failures: the poisoned queue was not reopened (its worker started again)")
	}

	// the deliveries: every 202 delivered as sent; a message never
	// written, never delivered
	acked := append(append([]faultAnswer(nil), accepted...), after...)
	for _, a := range acked {
		be.waitBody(t, "/ingest", a.body, 15*time.Second)
	}
	time.Sleep(300 * time.Millisecond) // anything the log still held would follow
	delivered := map[string]int{}
	for _, x := range be.on("/ingest") {
		var doc struct{ ID string }
		if json.Unmarshal([]byte(x.body), &doc) == nil {
			delivered[doc.ID]++
		}
	}
	var dupes, refusedDelivered []string
	for _, a := range acked {
		if delivered[a.tag] > 1 {
			dupes = append(dupes, fmt.Sprintf("%s×%d", a.tag, delivered[a.tag]))
		}
	}
	for _, a := range refused {
		if delivered[a.tag] == 0 {
			continue
		}
		refusedDelivered = append(refusedDelivered, a.tag)
		if !writtenIn(batches, a.tag) {
			t.Errorf("enqueue %s got a 503, its frame was never written to the log (no pwrite64 of it returned), yet it was delivered %d times", a.tag, delivered[a.tag])
		}
	}
	if len(dupes) > 0 {
		t.Logf("202s delivered more than once (at-least-once, allowed): %s", strings.Join(dupes, ", "))
	}

	var summary []string
	for _, b := range batches {
		summary = append(summary, b.describe(during))
	}
	t.Logf("%s: while injected, %d enqueues: %d answered 503, %d answered 202; %d injected calls in the trace; commits on segment.log:\n  %s",
		c.inject, len(during), len(refused), len(accepted), injected, strings.Join(summary, "\n  "))
	reopened := "opened again"
	if c.poisonRule {
		reopened += " and read from offset 0"
	}
	t.Logf("after each failed batch the log was %s before its next write: %d of %d failed batches not; worker_started %d times after the attach; after the detach %d of %d enqueues answered 202 at once",
		reopened, len(reopens), countFailed(batches), len(h.events("worker_started"))-startedBefore, len(after), faultAfter)
	t.Logf("deliveries: all %d 202s delivered as sent; 503s delivered anyway: %d of %d %v; strace attached in %v, detached in %v; %v in all",
		len(acked), len(refusedDelivered), len(refused), refusedDelivered, attachTook.Round(time.Millisecond), detachTook.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// waitDrained waits until the worker has emptied the queue's log (its size
// is 0) and then written the checkpoint 0, which a drain does after the
// fdatasync of the emptied log.
func waitDrained(t *testing.T, segment string) {
	t.Helper()
	eventually(t, 10*time.Second, "the worker empties "+segment, func() bool {
		st, err := os.Stat(segment)
		if err != nil || st.Size() != 0 {
			return false
		}
		b, err := os.ReadFile(segment + ".ckpt")
		return err == nil && len(b) == 16 && string(b[:4]) == "NXC1" && bytes.Equal(b[4:12], make([]byte, 8))
	})
}

// faultTag is the payload id (and correlation id) of message i of a case.
func faultTag(prefix string, i int) string { return fmt.Sprintf("%s-%02d", prefix, i) }

// faultClient sends the enqueues; its timeout allows for a process slowed
// down by ptrace.
var faultClient = &http.Client{Timeout: 20 * time.Second}

// faultEnqueue posts {"id":tag,"n":n} to acme/flowName's /enqueue with tag as
// its correlation id. It may run in any goroutine: errors are returned.
func faultEnqueue(h *hostProc, flowName, tag string, n int) faultAnswer {
	a := faultAnswer{tag: tag, body: fmt.Sprintf(`{"id":%q,"n":%d}`, tag, n)}
	req, err := http.NewRequest(http.MethodPost, h.url+"/flows/acme/"+flowName+"/enqueue", strings.NewReader(a.body))
	if err != nil {
		a.err = err
		return a
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Correlation-ID", tag)
	resp, err := faultClient.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a.status, a.header, a.resp, a.err = resp.StatusCode, resp.Header, string(b), err
	if a.status == http.StatusAccepted && a.err == nil {
		var body struct {
			Queued bool
			Offset *int64
		}
		id, err := strconv.ParseUint(resp.Header.Get("X-Nexus-Message-Id"), 10, 64)
		if err != nil || json.Unmarshal(b, &body) != nil || !body.Queued || body.Offset == nil {
			a.err = fmt.Errorf("a 202 with X-Nexus-Message-Id %q and the body %s", resp.Header.Get("X-Nexus-Message-Id"), b)
		} else {
			a.id, a.offset = id, *body.Offset
		}
	}
	return a
}

// faultEnqueueAll sends messages from to from+n-1 at once, one goroutine
// each, released together, and returns the answers in that order.
func faultEnqueueAll(h *hostProc, flowName, prefix string, from, n int) []faultAnswer {
	out := make([]faultAnswer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = faultEnqueue(h, flowName, faultTag(prefix, from+i), from+i)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// faultStrace returns the path of strace after checking that it can attach
// to a running process (strace -p, which ptrace may forbid even where
// tracing a child works) and inject a fault restricted to one path (-P).
// Without either the test is skipped when CI is not set and fails when it
// is (.ci/run installs strace).
func faultStrace(t *testing.T) string {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		missingTool(t, "the fault-injection test", why)
	}
	path, err := exec.LookPath("strace")
	if err != nil {
		skip("strace is not installed (not on PATH)")
	}
	sleeper := exec.Command("sleep", "30")
	if err := startChild(sleeper); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	tr, err := startFaultTracer(path, sleeper.Process.Pid, os.DevNull, filepath.Join(t.TempDir(), "segment.log"), "fdatasync:error=EIO:when=1")
	if err != nil {
		skip(fmt.Sprintf("strace cannot attach to a running process and inject a fault here (is ptrace permitted?): %v", err))
	}
	tr.stop()
	return path
}

// faultTracer is strace attached to a running process.
type faultTracer struct {
	cmd    *exec.Cmd
	exited chan struct{}

	mu     sync.Mutex
	stderr []string
}

// startFaultTracer attaches strace to pid and its threads (and the
// processes and threads they start), tracing faultSyscalls and injecting
// inject on the calls on path only, with the trace written to traceFile.
// It returns once strace says it attached, or an error if strace exits or
// does not attach within 10 s.
func startFaultTracer(straceBin string, pid int, traceFile, path, inject string) (*faultTracer, error) {
	args := []string{"-f", "-p", strconv.Itoa(pid), "-ttt", "-yy", "-x", "-s", "1048576", "-e", "signal=none",
		"-e", faultSyscalls, "-P", path, "-e", "inject=" + inject, "-o", traceFile}
	ft := &faultTracer{cmd: exec.Command(straceBin, args...), exited: make(chan struct{})}
	stderr, err := ft.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := startChild(ft.cmd); err != nil {
		return nil, err
	}
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			ft.mu.Lock()
			ft.stderr = append(ft.stderr, line)
			ft.mu.Unlock()
			// "/usr/bin/strace: Process 123 attached with 8 threads",
			// printed once every thread is attached
			if strings.Contains(line, fmt.Sprintf(": Process %d attached", pid)) {
				once.Do(func() { close(attached) })
			}
		}
		ft.cmd.Wait()
		close(ft.exited)
	}()
	select {
	case <-attached:
		return ft, nil
	case <-ft.exited:
		return nil, fmt.Errorf("strace %s exited: %s", strings.Join(args, " "), ft.stderrText())
	case <-time.After(10 * time.Second):
		ft.stop()
		return nil, fmt.Errorf("strace %s did not attach within 10 s: %s", strings.Join(args, " "), ft.stderrText())
	}
}

// stop detaches strace: on SIGTERM it detaches from every thread, which
// runs on without the fault, and exits. It is killed if it does not exit
// within 10 s. Stopping again does nothing.
func (ft *faultTracer) stop() {
	select {
	case <-ft.exited:
		return
	default:
	}
	ft.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ft.exited:
	case <-time.After(10 * time.Second):
		ft.cmd.Process.Kill()
		<-ft.exited
	}
}

// stderrText is what strace printed on its stderr.
func (ft *faultTracer) stderrText() string {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return strings.Join(ft.stderr, "\n")
}

// readFaultTrace parses the trace file, leaving out the calls strace was
// in when it detached ("<detached ...>"): they have no return.
func readFaultTrace(name string) (*straceLog, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line != "" && !strings.Contains(line, "<detached ...>") {
			kept = append(kept, line)
		}
	}
	return parseStrace(strings.NewReader(strings.Join(kept, "\n")))
}

// logBatch is one group commit of the trace: a pwrite64 of frames to
// segment.log and the fdatasync of the log that followed it, before the
// next pwrite64 of the log (the append lock is held from the one to the
// other, so no other write or sync of the log comes between).
type logBatch struct {
	write *traceCall
	data  []byte     // the bytes the call was given
	at    int64      // the offset it wrote at
	sync  *traceCall // nil when no fdatasync followed
}

// written reports whether the pwrite64 wrote all its bytes.
func (b *logBatch) written() bool {
	n, ok := b.write.n()
	return ok && n == int64(len(b.data))
}

// durable reports whether the batch was written and its fdatasync
// returned 0.
func (b *logBatch) durable() bool { return b.written() && b.sync != nil && b.sync.succeeded() }

// holds reports whether the batch's bytes hold the payload id tag.
func (b *logBatch) holds(tag string) bool { return bytes.Contains(b.data, []byte(`"`+tag+`"`)) }

// failure describes why the batch is not durable, with the trace line of
// the call that failed.
func (b *logBatch) failure() string {
	switch {
	case !b.written():
		return fmt.Sprintf("pwrite64 = %s (trace line %d)", b.write.ret, b.write.start)
	case b.sync == nil:
		return fmt.Sprintf("no fdatasync after the pwrite64 of trace line %d", b.write.start)
	default:
		return fmt.Sprintf("fdatasync = %s (trace line %d)", b.sync.ret, b.sync.start)
	}
}

// describe is one line of the summary: the payload ids of answers in the
// batch and what became of it.
func (b *logBatch) describe(answers []faultAnswer) string {
	var tags []string
	for _, a := range answers {
		if b.holds(a.tag) {
			tags = append(tags, a.tag)
		}
	}
	if len(tags) == 0 {
		tags = []string{"(none sent while injected)"}
	}
	state := "durable"
	if !b.durable() {
		state = "FAILED: " + b.failure()
	}
	return fmt.Sprintf("%d bytes at %d, %s: %s", len(b.data), b.at, strings.Join(tags, " "), state)
}

// logBatches reads the group commits on the segment.log at path from the
// trace.
func logBatches(tr *straceLog, path string) ([]*logBatch, error) {
	var out []*logBatch
	for _, c := range tr.callsOn(path) {
		switch c.name {
		case "pwrite64":
			if len(c.args) != 4 {
				return nil, fmt.Errorf("a pwrite64 without 4 arguments: %s", tr.describe(c))
			}
			data, cut, err := unquote(c.args[1])
			if err == nil && cut {
				err = errors.New("strace cut its bytes (raise -s)")
			}
			if err != nil {
				return nil, fmt.Errorf("the bytes of %s: %v", tr.describe(c), err)
			}
			at, err := strconv.ParseInt(c.args[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("the offset of %s: %v", tr.describe(c), err)
			}
			out = append(out, &logBatch{write: c, data: data, at: at})
		case "fdatasync":
			if len(out) > 0 && out[len(out)-1].sync == nil && out[len(out)-1].written() {
				out[len(out)-1].sync = c
			}
		}
	}
	return out, nil
}

// writtenIn reports whether a pwrite64 of the log wrote tag's frame.
func writtenIn(batches []*logBatch, tag string) bool {
	for _, b := range batches {
		if b.written() && b.holds(tag) {
			return true
		}
	}
	return false
}

// countFailed counts the batches that are not durable.
func countFailed(batches []*logBatch) int {
	n := 0
	for _, b := range batches {
		if !b.durable() {
			n++
		}
	}
	return n
}

// ackViolations checks each 202 against the trace: the frame of its message
// id, at its offset, holding its payload id, must be in a batch whose
// pwrite64 wrote it and whose fdatasync returned 0.
func ackViolations(tr *straceLog, path string, batches []*logBatch, acked []faultAnswer) []string {
	frames, _, err := segmentFrames(tr, path)
	if err != nil {
		return []string{err.Error()}
	}
	byCall := map[*traceCall]*logBatch{}
	for _, b := range batches {
		byCall[b.write] = b
	}
	var out []string
	for _, a := range acked {
		var seen []string
		found := false
		for _, f := range frames[a.id] {
			b := byCall[f.c]
			if f.offset != a.offset || b == nil {
				continue
			}
			frame := b.data[f.offset-b.at : f.offset-b.at+f.size]
			if !bytes.Contains(frame, []byte(`"`+a.tag+`"`)) {
				seen = append(seen, "a frame of another message at "+tr.describe(f.c))
				continue
			}
			if b.durable() {
				found = true
				break
			}
			seen = append(seen, b.failure())
		}
		switch {
		case found:
		case len(seen) == 0:
			out = append(out, fmt.Sprintf("%s got 202 (id %d, offset %d) but no pwrite64 of the log in the trace wrote a frame of that id at that offset", a.tag, a.id, a.offset))
		default:
			out = append(out, fmt.Sprintf("%s got 202 (id %d, offset %d) but its frame was not durably written: %s", a.tag, a.id, a.offset, strings.Join(seen, "; ")))
		}
	}
	return out
}

// reopenViolations checks that after each failed batch the next pwrite64 of
// the log comes after an openat of the log (the poisoned handle is never
// written again) and, when verified is set, a pread64 from offset 0 of the
// fd that openat returned (the log is verified before new frames go in).
// A failed batch is cut from the log, so one that was the whole log leaves
// it empty: the next write at offset 0 needs no read before it.
func reopenViolations(tr *straceLog, path string, batches []*logBatch, verified bool) []string {
	quoted := strconv.Quote(path)
	var out []string
	for i, b := range batches {
		if b.durable() || i+1 == len(batches) {
			continue
		}
		failedAt := b.write.end
		if b.sync != nil {
			failedAt = b.sync.end
		}
		next := batches[i+1].write
		ok := false
		for _, o := range tr.calls {
			if o.name != "openat" || o.start <= failedAt || o.end >= next.start || len(o.args) < 2 || o.args[1] != quoted {
				continue
			}
			fd, _, _ := strings.Cut(o.ret, "<")
			// a failed batch is cut from the log: one that was the whole
			// log leaves it empty, and a reopen reads nothing from it
			if !verified || len(next.args) == 4 && next.args[3] == "0" {
				ok = true
			}
			for _, r := range tr.calls {
				if r.name == "pread64" && r.start > o.end && r.end < next.start && len(r.args) == 4 &&
					strings.HasPrefix(r.args[0], fd+"<") && r.args[3] == "0" {
					ok = true
				}
			}
		}
		if !ok {
			what := "an openat of it"
			if verified {
				what += " and a pread64 from offset 0"
			}
			out = append(out, fmt.Sprintf("after %s, the log was written again by %s without %s in between",
				b.failure(), tr.describe(next), what))
		}
	}
	return out
}
