package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A nexus serve process paused (SIGSTOP, a debugger, a frozen container)
// rather than dead keeps its flock(2)s: the queue's worker stays with it
// and waits for it, which is at-least-once working as meant. What must not
// happen is that the other processes of the state directory hang with it:
// paused while it held the queue's append lock (it appends, or its worker
// reads what another process appended), the other server's /enqueue and
// an operator's nexus dlq replay used to wait for the lock for as long as
// the pause lasted — connections piling up, the caller answered nothing.
// They answer within a bound instead: 503 with Retry-After naming the
// lock, and the CLI a one-line error, exit 1, having written nothing. On
// SIGCONT the paused process goes on as holder and everything answered
// 202 is delivered.

// appendLockWaitBound is the most the test lets /enqueue and the CLI take
// while the append lock is held by a paused process: the queue's wait
// (queue.DefaultLockWait, 5 s) plus a generous slack for a loaded machine.
const appendLockWaitBound = 15 * time.Second

// stopped reports whether pid is stopped (state T in /proc/PID/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'T' || s[i+2] == 't')
}

// heldBySomeone reports whether the flock(2) on path is held by another
// open file (the test takes it and lets it go at once when it is free).
func heldBySomeone(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// pauseHoldingAppendLock sends h SIGSTOP at moments when it is busy
// appending (busy, called again and again from several goroutines until
// its context is done), until it is stopped holding lockPath; it returns
// how many pauses it took. The caller sends SIGCONT.
func pauseHoldingAppendLock(t *testing.T, h *hostProc, lockPath string, busy func(context.Context)) int {
	t.Helper()
	pid := h.cmd.Process.Pid
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				busy(ctx)
			}
		}()
	}
	// the requests to the paused process are abandoned
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for n := 1; time.Now().Before(deadline); n++ {
		h.cmd.Process.Signal(syscall.SIGSTOP)
		for !stopped(pid) {
			if !time.Now().Before(deadline) {
				// the process ended, or never stopped
				select {
				case <-h.exited:
					t.Fatalf("the first process exited while the test paused it: %v", h.exitErr)
				default:
				}
				t.Fatal("the first process did not stop on SIGSTOP within 20 s")
			}
			time.Sleep(100 * time.Microsecond)
		}
		if heldBySomeone(t, lockPath) {
			return n
		}
		h.cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(time.Duration(n%7) * time.Millisecond)
	}
	t.Fatalf("within 20 s, %s never stopped while holding %s", "the first process", lockPath)
	return 0
}

func TestQueuePausedHolderOfTheAppendLock(t *testing.T) {
	t.Parallel()
	testStart := time.Now()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "dead") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/shared.md": strings.Replace(retryFlowFor("shared", be.URL, "shared", 100), "queue_max_attempts: 3", "queue_max_attempts: 1", 1),
	}, hostOptions{}, "shared")
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	waitGate(t, h2, "acme", "shared", acmeKey)
	qdir := filepath.Join(queuesRoot(h1.db), "acme", "shared")

	// the first process holds the worker; a dead letter to replay later
	mustEnqueue(t, h1, "acme", "shared", acmeKey, `{"id":"dead"}`)
	waitEvents(t, h1, "dlq_moved", 1, nil, 10*time.Second)
	mustEnqueue(t, h2, "acme", "shared", acmeKey, `{"id":"from-2"}`)
	be.waitBody(t, "/shared", `{"id":"from-2"}`, 10*time.Second)
	if evs := h2.events("worker_started"); len(evs) != 0 {
		t.Fatalf("the second process runs the worker: %v", evs)
	}

	client := &http.Client{Timeout: appendLockWaitBound + 5*time.Second}
	var accepted sync.Map // bodies answered 202
	var seq atomic.Int64
	load := func(ctx context.Context) {
		body := fmt.Sprintf(`{"id":"load-%d"}`, seq.Add(1))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h1.url+"/flows/acme/shared/enqueue", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			accepted.Store(body, true)
		}
	}
	cont := func() { h1.cmd.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(cont)
	pauses := pauseHoldingAppendLock(t, h1, filepath.Join(qdir, "append.lock"), load)
	t.Logf("the first process stopped holding append.lock after %d pauses, %v into the test", pauses, time.Since(testStart).Round(time.Millisecond))

	// /enqueue on the other process: an answer within the bound, not a hang
	before := snapshot(t, qdir)
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, h2.url+"/flows/acme/shared/enqueue", strings.NewReader(`{"id":"refused"}`))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("/enqueue on the second process while the first is paused holding the append lock: no answer after %v: %v", took.Round(time.Millisecond), err)
	}
	var answer struct {
		OK    *bool
		Error string
	}
	json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(answer.Error, "append lock") || !strings.Contains(answer.Error, "acme/shared") {
		t.Errorf("/enqueue while the append lock is held by a paused process: %d Retry-After %q %+v, want 503, Retry-After 1, an error naming the queue and its append lock",
			resp.StatusCode, resp.Header.Get("Retry-After"), answer)
	}
	if took > appendLockWaitBound {
		t.Errorf("/enqueue answered after %v, want within %v", took, appendLockWaitBound)
	}
	if evs := waitEvents(t, h2, "queue_enqueue_failed", 1, nil, 5*time.Second); !strings.Contains(fmt.Sprint(evs[0]["error"]), "append lock") {
		t.Errorf("queue_enqueue_failed does not name the append lock: %v", evs[0])
	}

	// nexus dlq replay: a one-line error and exit 1 within the bound
	ctx, cancel := context.WithTimeout(context.Background(), appendLockWaitBound+5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nexusBinary(), "dlq", "replay", "--tenant", "acme", "--flow", "shared", "--id", "1", "--db", h1.db)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start = time.Now()
	runErr := cmd.Run()
	took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("nexus dlq replay while the append lock is held by a paused process: still running after %v", took.Round(time.Millisecond))
	}
	var exit *exec.ExitError
	if !errors.As(runErr, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "append lock") ||
		strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 || strings.Contains(stderr.String(), "goroutine ") {
		t.Errorf("nexus dlq replay: %v after %v\nstdout: %s\nstderr: %s\nwant exit 1 and one line naming the append lock", runErr, took.Round(time.Millisecond), stdout.String(), stderr.String())
	}
	if took > appendLockWaitBound {
		t.Errorf("nexus dlq replay answered after %v, want within %v", took, appendLockWaitBound)
	}
	// the management API's replay on the other process: 503, Retry-After,
	// and a log line that says the lock is held, not that a write failed
	start = time.Now()
	if r := h2.do(http.MethodPost, "/api/queues/acme/shared/dlq/1/replay", h2.adminKey, "", ""); r.status != http.StatusServiceUnavailable ||
		r.header.Get("Retry-After") != "1" || !strings.Contains(r.body, "append lock") {
		t.Errorf("the API's replay while the append lock is held by a paused process: %d Retry-After %q %s, want 503, Retry-After 1, naming the append lock",
			r.status, r.header.Get("Retry-After"), r.body)
	}
	if took := time.Since(start); took > appendLockWaitBound {
		t.Errorf("the API's replay answered after %v, want within %v", took, appendLockWaitBound)
	}
	isAPI := func(ev map[string]any) bool { return ev["action"] == "dlq_replay" }
	if evs := waitEvents(t, h2, "queue_enqueue_failed", 1, isAPI, 5*time.Second); !strings.Contains(fmt.Sprint(evs[0]["msg"]), "another process holds the queue's append lock") {
		t.Errorf("the API's failed replay is logged as %v, want it to say another process holds the append lock", evs[0])
	}
	if d := diffSnapshots(before, snapshot(t, qdir)); len(d) != 0 {
		t.Errorf("files changed while the first process was paused holding the append lock: %v", d)
	}

	// SIGCONT: the first process goes on as the holder; the other process
	// takes submissions again, the replay works, and every message
	// answered 202 is delivered
	cont()
	t.Logf("SIGCONT after %v", time.Since(testStart).Round(time.Millisecond))
	mustEnqueue(t, h2, "acme", "shared", acmeKey, `{"id":"after"}`)
	be.waitBody(t, "/shared", `{"id":"after"}`, 10*time.Second)
	r := dlqCLI(t, h1.db, "replay", "--tenant", "acme", "--flow", "shared", "--id", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "replayed  id=1 tenant=acme flow=shared") {
		t.Errorf("nexus dlq replay after SIGCONT: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitEvents(t, h1, "dlq_moved", 2, nil, 10*time.Second)
	accepted.Range(func(k, _ any) bool {
		be.waitBody(t, "/shared", k.(string), 10*time.Second)
		return !t.Failed()
	})
	for _, x := range be.on("/shared") {
		if x.body == `{"id":"refused"}` {
			t.Errorf("the message answered 503 was delivered")
		}
	}
	t.Logf("all delivered %v into the test", time.Since(testStart).Round(time.Millisecond))
	if evs := h2.events("worker_started"); len(evs) != 0 {
		t.Errorf("the second process took the worker from a paused, not dead, holder: %v", evs)
	}
}

// A retry scheduled by a holder killed with SIGKILL is the standby's once
// it takes the queue over: delivered (not lost), at its absolute time (not
// early, not timed afresh from the takeover).
func TestQueueTakeoverKeepsTheDeadHoldersRetry(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(failFirst)
	const delay = 6 * time.Second
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/taken.md": retryFlowFor("taken", be.URL, "taken", int(delay/time.Millisecond)),
	}, hostOptions{}, "taken")
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	waitGate(t, h2, "acme", "taken", acmeKey)

	mustEnqueue(t, h1, "acme", "taken", acmeKey, `{"id":"r-1","mode":"fail-once"}`)
	first := be.waitOn(t, "/taken", 1, 10*time.Second)[0]
	waitEvents(t, h1, "queue_retry_scheduled", 1, nil, 10*time.Second)
	// the standby's worker starts with a submission of its own and waits
	mustEnqueue(t, h2, "acme", "taken", acmeKey, `{"id":"standby"}`)
	be.waitBody(t, "/taken", `{"id":"standby"}`, 10*time.Second)
	if evs := h2.events("worker_started"); len(evs) != 0 {
		t.Fatalf("both processes run the worker: %v", evs)
	}
	// killed 3 s into the 6 s delay: a retry timed afresh by the survivor
	// would be due 3 s after this one
	time.Sleep(time.Until(first.at.Add(3 * time.Second)))
	h1.kill()
	killed := time.Now()
	waitEvents(t, h2, "worker_started", 1, nil, workerPoll+failoverSlack+5*time.Second)

	// on the wall clock, as the schedule keeps its due times: a clock a
	// virtual machine steps meanwhile moves them with it
	due := first.at.Round(0).Add(delay)
	eventually(t, delay+15*time.Second, "r-1's retry delivered by the survivor", func() bool {
		return len(be.on("/taken")) >= 3
	})
	hits := be.on("/taken")
	retry := hits[2]
	if retry.body != `{"id":"r-1","mode":"fail-once"}` || retry.header.Get("X-Attempt") != "2" {
		t.Fatalf("the third call: %s attempt %s, want r-1's retry", retry.body, retry.header.Get("X-Attempt"))
	}
	if retry.at.Round(0).Before(due.Add(-50 * time.Millisecond)) {
		t.Errorf("r-1's retry fired %v before it was due", due.Sub(retry.at.Round(0)).Round(time.Millisecond))
	}
	if afresh := killed.Add(delay); !retry.at.Before(afresh) {
		t.Errorf("r-1's retry fired %v after it was due, as if timed afresh from the takeover", retry.at.Sub(due).Round(time.Millisecond))
	}
	waitEvents(t, h2, "queue_processed", 1, field("msg_id", float64(1)), 5*time.Second)
	if evs := h2.events("dlq_moved"); len(evs) != 0 {
		t.Errorf("dead letters: %v", evs)
	}
	t.Logf("the retry fired %v after its due time; the holder was killed %v after the first attempt", retry.at.Sub(due).Round(time.Millisecond), killed.Sub(first.at).Round(time.Millisecond))
}

// SIGTERM to the holder while a delivery is in flight and a retry is
// pending: the delivery finishes and is acknowledged (the standby that
// takes over does not deliver it again), and the retry is the standby's,
// at its absolute time.
func TestQueueGracefulStopOfTheHolderHandsOver(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.Contains(x.body, "slow") {
			time.Sleep(2 * time.Second)
		}
		return failFirst(x)
	})
	const delay = 6 * time.Second
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/handed.md": retryFlowFor("handed", be.URL, "handed", int(delay/time.Millisecond)),
	}, hostOptions{}, "handed")
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	waitGate(t, h2, "acme", "handed", acmeKey)

	mustEnqueue(t, h1, "acme", "handed", acmeKey, `{"id":"r-1","mode":"fail-once"}`)
	first := be.waitOn(t, "/handed", 1, 10*time.Second)[0]
	waitEvents(t, h1, "queue_retry_scheduled", 1, nil, 10*time.Second)
	mustEnqueue(t, h2, "acme", "handed", acmeKey, `{"id":"standby"}`)
	be.waitBody(t, "/handed", `{"id":"standby"}`, 10*time.Second)
	mustEnqueue(t, h1, "acme", "handed", acmeKey, `{"id":"slow"}`)
	be.waitBody(t, "/handed", `{"id":"slow"}`, 10*time.Second) // in flight now
	if code := h1.stop(15 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if evs := h1.events("queue_processed"); len(evs) != 2 {
		t.Errorf("the stopped holder processed %d messages, want 2 (standby, slow): its delivery in flight finishes", len(evs))
	}
	waitEvents(t, h2, "worker_started", 1, nil, workerPoll+failoverSlack+5*time.Second)
	eventually(t, delay+15*time.Second, "r-1's retry delivered by the survivor", func() bool {
		for _, x := range be.on("/handed") {
			if x.header.Get("X-Attempt") == "2" {
				return true
			}
		}
		return false
	})
	// on the wall clock, as the schedule keeps its due times: a clock a
	// virtual machine steps meanwhile moves them with it
	due := first.at.Round(0).Add(delay)
	count := map[string]int{}
	for _, x := range be.on("/handed") {
		count[x.body]++
		if x.header.Get("X-Attempt") == "2" && x.at.Round(0).Before(due.Add(-50*time.Millisecond)) {
			t.Errorf("r-1's retry fired %v before it was due", due.Sub(x.at.Round(0)).Round(time.Millisecond))
		}
	}
	mustEnqueue(t, h2, "acme", "handed", acmeKey, `{"id":"after"}`)
	be.waitBody(t, "/handed", `{"id":"after"}`, 10*time.Second)
	for _, body := range []string{`{"id":"standby"}`, `{"id":"slow"}`} {
		if count[body] != 1 {
			t.Errorf("%s delivered %d times, want once: the graceful stop acknowledged it", body, count[body])
		}
	}
}
