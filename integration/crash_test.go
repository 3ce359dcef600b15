package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Restarts, several processes on one state directory, and kill -9 under
// load: the delivery promises of "Queues, retries and the DLQ" (at least
// once, retries at their absolute time, workers started by the first
// submission) over the built binary.

// retryFlow posts to BACKEND/PATH, failing the first attempt of a message
// whose body says so (the backend decides), with a fixed delay of DELAY ms.
const retryFlow = `---
flowmarkdown_version: "0.1"
flow: NAME
tenant: acme
effects: [http_egress]
queue_max_attempts: 3
queue_initial_delay_ms: DELAY
queue_backoff_factor: 1.0
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/PATH
method: POST
headers: {"X-Attempt": "{{ ctx.attempt }}"}
`

func retryFlowFor(name, backendURL, path string, delayMS int) string {
	return strings.NewReplacer("NAME", name, "BACKEND", backendURL, "PATH", path, "DELAY", strconv.Itoa(delayMS)).Replace(retryFlow)
}

// failFirst answers 503 to the first attempt of a message whose body holds
// "fail-once", 200 otherwise.
func failFirst(x hit) int {
	if strings.Contains(x.body, "fail-once") && x.header.Get("X-Attempt") == "1" {
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

func TestRestartRetriesKeepTheirTime(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(failFirst)
	// near-1's retry comes due nearDelay after its first attempt: the
	// process must be stopped before, and a loaded machine (this test runs
	// in parallel with the others, under -race) has been seen to take 4 s
	// from that attempt to the SIGTERM, hence the 8 s; far-1's retry is due
	// 7 s after the wake-up that follows the near retry's time, and 5 s
	// before one timed afresh at the restart would be
	const nearDelay, farDelay = 8 * time.Second, 20 * time.Second
	h, repo := queueHost(t, map[string]string{
		"flows/acme/retry-near.md": retryFlowFor("retry-near", be.URL, "near", int(nearDelay/time.Millisecond)),
		"flows/acme/retry-far.md":  retryFlowFor("retry-far", be.URL, "far", int(farDelay/time.Millisecond)),
	}, hostOptions{}, "retry-near", "retry-far")

	// far-1 fails first, 4 s before near-1: so that its retry, kept across
	// the restart, is due long before one timed afresh by the restarted
	// process would be
	mustEnqueue(t, h, "acme", "retry-far", acmeKey, `{"id":"far-1","mode":"fail-once"}`)
	far1 := be.waitOn(t, "/far", 1, 10*time.Second)[0]
	time.Sleep(time.Until(far1.at.Add(4 * time.Second)))
	mustEnqueue(t, h, "acme", "retry-near", acmeKey, `{"id":"near-1","mode":"fail-once"}`)
	near1 := be.waitOn(t, "/near", 1, 10*time.Second)[0]
	retries := waitEvents(t, h, "queue_retry_scheduled", 2, nil, 10*time.Second)
	for _, e := range retries {
		want := map[any]time.Duration{"retry-near": nearDelay, "retry-far": farDelay}[e["flow"]]
		if fmt.Sprint(e["delay_ms"]) != fmt.Sprint(want.Milliseconds()) || fmt.Sprint(e["next_attempt"]) != "2" {
			t.Errorf("queue_retry_scheduled: %v, want attempt 2 in %v", e, want)
		}
	}
	// each retry is due its delay after the failure of attempt 1, which
	// came after the backend received it
	nearDue, farDue := near1.at.Add(nearDelay), far1.at.Add(farDelay)

	// stopped one second after near-1's first attempt, started again at once
	time.Sleep(time.Until(near1.at.Add(time.Second)))
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	restarted := time.Now()
	if !restarted.Before(nearDue) {
		t.Fatalf("the first process stopped %v after near-1's first attempt, past its retry's time (%v after it): the machine was too slow for this test",
			restarted.Sub(near1.at).Round(time.Millisecond), nearDelay)
	}
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "retry-near", acmeKey)
	waitGate(t, h2, "acme", "retry-far", acmeKey)

	// nothing is delivered until a submission wakes the worker, although
	// the near retry comes due meanwhile
	time.Sleep(time.Until(nearDue.Add(time.Second)))
	if n, m := len(be.on("/near")), len(be.on("/far")); n != 1 || m != 1 {
		t.Fatalf("%d and %d calls before any submission after the restart, want only the first attempts", n, m)
	}
	if evs := h2.events("worker_started"); len(evs) != 0 {
		t.Errorf("workers started before any submission: %v", evs)
	}

	wake := time.Now()
	mustEnqueue(t, h2, "acme", "retry-near", acmeKey, `{"id":"near-wake"}`)
	mustEnqueue(t, h2, "acme", "retry-far", acmeKey, `{"id":"far-wake"}`)

	// the retry that came due during the downtime fires as soon as the
	// worker starts: before the waking message (a retry timed afresh at the
	// restart or the wake-up would come after it)
	near := be.waitOn(t, "/near", 3, 15*time.Second)
	if near[1].body != `{"id":"near-1","mode":"fail-once"}` || near[1].header.Get("X-Attempt") != "2" {
		t.Errorf("the first call after the wake-up: %s attempt %s, want near-1's overdue retry, first", near[1].body, near[1].header.Get("X-Attempt"))
	}
	if near[2].body != `{"id":"near-wake"}` {
		t.Errorf("then %s, want the waking message", near[2].body)
	}

	// the waking message of retry-far goes at once, before far-1's
	// retry, which is not due yet; far-1 keeps its absolute time
	far := be.waitOn(t, "/far", 2, 15*time.Second)
	if far[1].body != `{"id":"far-wake"}` {
		t.Errorf("first call of retry-far after the wake-up: %s, want far-wake, before far-1's retry", far[1].body)
	}
	far = be.waitOn(t, "/far", 3, farDelay+20*time.Second)
	if far[2].body != `{"id":"far-1","mode":"fail-once"}` || far[2].header.Get("X-Attempt") != "2" {
		t.Errorf("retry-far's retry: %s attempt %s", far[2].body, far[2].header.Get("X-Attempt"))
	}
	// not before it is due; and before the time a retry timed afresh by
	// the restarted process would be due, at the earliest farDelay after
	// the restart: that leaves about 5 s of slack for a loaded machine
	afresh := restarted.Add(farDelay)
	if d := far[2].at.Sub(farDue); d < -50*time.Millisecond || !far[2].at.Before(afresh) {
		t.Errorf("far-1's retry fired %v from its absolute time (%v after attempt 1), want it kept across the restart: not early, and before %v after it, when a retry timed afresh at the restart would be due",
			d.Round(time.Millisecond), farDelay, afresh.Sub(farDue).Round(time.Millisecond))
	} else {
		t.Logf("the overdue retry fired %v after the wake-up, the waking message of retry-far %v after it; the pending retry %v from its absolute time (%v before a retry timed afresh would be due)",
			near[1].at.Sub(wake).Round(time.Millisecond), far[1].at.Sub(wake).Round(time.Millisecond), d.Round(time.Millisecond), afresh.Sub(far[2].at).Round(time.Millisecond))
	}
	waitEvents(t, h2, "queue_processed", 4, nil, 10*time.Second)
	if evs := h2.events("dlq_moved"); len(evs) != 0 {
		t.Errorf("dead letters: %v", evs)
	}
}

func TestRestartBacklogDrainedFirst(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(200 * time.Millisecond))
	h, repo := queueHost(t, map[string]string{
		"flows/acme/backlog.md": retryFlowFor("backlog", be.URL, "backlog", 1000),
	}, hostOptions{}, "backlog")
	for i := 1; i <= 6; i++ {
		mustEnqueue(t, h, "acme", "backlog", acmeKey, fmt.Sprintf(`{"id":"b-%d"}`, i))
	}
	be.waitOn(t, "/backlog", 1, 5*time.Second)
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	delivered := len(be.on("/backlog"))
	if delivered >= 6 {
		t.Fatalf("all %d delivered before the stop; the backend is too fast for this test", delivered)
	}
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "backlog", acmeKey)
	time.Sleep(1500 * time.Millisecond)
	if n := len(be.on("/backlog")); n != delivered {
		t.Fatalf("%d deliveries after the restart before any submission", n-delivered)
	}
	restarted := time.Now()
	mustEnqueue(t, h2, "acme", "backlog", acmeKey, `{"id":"wake"}`)
	be.waitBody(t, "/backlog", `{"id":"wake"}`, 10*time.Second)
	var after []string
	for _, x := range be.on("/backlog") {
		if x.at.After(restarted) {
			var m struct{ ID string }
			json.Unmarshal([]byte(x.body), &m)
			after = append(after, m.ID)
		}
	}
	seen := map[string]bool{}
	for _, x := range be.on("/backlog") {
		var m struct{ ID string }
		json.Unmarshal([]byte(x.body), &m)
		seen[m.ID] = true
	}
	for i := 1; i <= 6; i++ {
		if !seen[fmt.Sprintf("b-%d", i)] {
			t.Errorf("b-%d never delivered", i)
		}
	}
	if len(after) == 0 || after[len(after)-1] != "wake" || !sort.SliceIsSorted(after[:len(after)-1], func(i, j int) bool { return after[i] < after[j] }) {
		t.Errorf("deliveries after the waking submission: %v, want the backlog first, in order, then the waking message", after)
	}
	t.Logf("%d delivered before the stop; after the waking submission: %v", delivered, after)
}

// TestSecondSignalStopsAtOnce: a graceful shutdown waits for a delivery in
// flight (here a backend that answers after a minute); a second SIGINT
// stops the process at once, by that signal, and the message is delivered
// again at the next start.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(time.Minute))
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	be.waitOn(t, "/ingest", 1, 5*time.Second)
	if err := h.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, h, "stopping", 1, nil, 5*time.Second)
	select {
	case <-h.exited:
		t.Fatalf("nexus exited at the first SIGINT (%v) while a delivery was in flight", h.exitErr)
	case <-time.After(500 * time.Millisecond):
	}
	if err := h.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("nexus did not stop within 10 s of a second SIGINT")
	}
	if ws, ok := h.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("exit %v, want the process ended by SIGINT", h.cmd.ProcessState)
	}
	if evs := h.events("stopping"); len(evs) != 2 || evs[1]["signal"] != "interrupt" {
		t.Errorf("stopping events %v, want the second naming the signal", evs)
	}
	// the delivery cut short is made again
	be.delay.Store(0)
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"A-2"}`)
	waitEvents(t, h2, "queue_processed", 2, nil, 10*time.Second)
	if n := len(be.on("/ingest")); n != 3 {
		t.Errorf("%d requests reached the backend, want 3: A-1 twice (cut short, then again) and A-2", n)
	}
}

func TestRestartSIGTERMLetsTheDeliveryFinish(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(time.Second))
	h, repo := oneAttemptHost(t, be)
	mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`, "X-Correlation-ID", "trace-sigterm")
	be.waitOn(t, "/ingest", 1, 5*time.Second)
	// the backend answers 200 after a second; the operator stops the host meanwhile
	if code := h.stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	// The shutdown lets the delivery in flight finish: it is not aborted and counted as a
	// failed attempt, so a message on its last attempt is not dead-lettered by a restart.
	for _, e := range append(h.events("dlq_moved"), h.events("queue_retry_scheduled")...) {
		t.Errorf("the delivery in flight at SIGTERM was counted as failed: %v", e)
	}
	if r := dlqCLI(t, h.db, "list"); r.stdout != "DLQ is empty\n" {
		t.Errorf("after a graceful stop during a delivery the backend accepted, dlq list:\n%s", r.stdout)
	}
	// finished before the exit, or delivered again after the restart: either keeps the promise
	if len(h.events("queue_processed")) == 0 {
		be.delay.Store(0)
		h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
		waitGate(t, h2, "acme", "forward-order", acmeKey)
		mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"A-2"}`)
		waitEvents(t, h2, "queue_processed", 1, nil, 5*time.Second)
		time.Sleep(500 * time.Millisecond)
		if evs := h2.events("queue_processed"); len(evs) != 2 {
			t.Errorf("after the restart: queue_processed %v, want the interrupted message delivered again and the new one", evs)
		}
	}
}

func TestRestartDamagedFrameNotDelivered(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	release := be.holdFirst("m-1") // its first delivery
	defer release()
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{}, "forward-order")
	for i := 1; i <= 3; i++ {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"m-%d-payload"}`, i))
	}
	be.waitOn(t, "/ingest", 1, 5*time.Second) // m-1 held at the backend, m-2 and m-3 waiting in the log
	h.kill()

	segment := filepath.Join(queuesRoot(h.db), "acme", "forward-order", "segment.log")
	b, err := os.ReadFile(segment)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "m-2-payload")
	if i < 0 {
		t.Fatalf("m-2 is not in %s", segment)
	}
	b[i+4] ^= 0x20 // one bit of m-2's payload flipped
	if err := os.WriteFile(segment, b, 0o644); err != nil {
		t.Fatal(err)
	}

	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"m-4-payload"}`)
	eventually(t, 5*time.Second, "m-3 and m-4 delivered", func() bool {
		var n int
		for _, x := range be.on("/ingest") {
			if strings.Contains(x.body, "m-3") || strings.Contains(x.body, "m-4") {
				n++
			}
		}
		return n >= 2
	})
	time.Sleep(300 * time.Millisecond)
	for _, x := range be.on("/ingest") {
		if !strings.Contains(x.body, "m-1") && !strings.Contains(x.body, "m-3") && !strings.Contains(x.body, "m-4") {
			t.Errorf("delivered %s: a frame that does not verify must not be delivered", x.body)
		}
	}
	if evs := h2.events("queue_damage"); len(evs) == 0 {
		t.Errorf("no queue_damage event for the damaged frame")
	} else {
		t.Logf("queue_damage: %v", evs[0])
	}
}

func TestQueueTwoProcessesTakeOver(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(100 * time.Millisecond))
	h1, repo := queueHost(t, map[string]string{
		"flows/acme/shared.md": retryFlowFor("shared", be.URL, "shared", 200),
	}, hostOptions{}, "shared")
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h1.db})
	waitGate(t, h2, "acme", "shared", acmeKey)

	const n = 12
	for i := 1; i <= n; i++ {
		if id := mustEnqueue(t, h1, "acme", "shared", acmeKey, fmt.Sprintf(`{"id":"m-%d"}`, i)); id != uint64(i) {
			t.Errorf("message %d got id %d", i, id)
		}
	}
	// the survivor's worker starts with this submission and stands by
	if id := mustEnqueue(t, h2, "acme", "shared", acmeKey, `{"id":"m-standby"}`); id != n+1 {
		t.Errorf("the second process's submission got id %d, want %d: one id sequence per queue", id, n+1)
	}
	be.waitOn(t, "/shared", 4, 5*time.Second)
	if evs := h2.events("worker_started"); len(evs) != 0 {
		t.Fatalf("both processes run the worker: %v", evs)
	}
	if evs := h2.events("queue_processed"); len(evs) != 0 {
		t.Errorf("the standby delivered: %v", evs)
	}
	signalled := time.Now()
	h1.kill()
	killed := time.Now()
	ev := waitEvents(t, h2, "worker_started", 1, nil, 10*time.Second)[0]
	// the takeover, from the time the standby logged worker_started, bound
	// as in the election tests (election_test.go): its poll plus a
	// generous slack for a loaded machine
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"]))
	if err != nil {
		t.Fatalf("worker_started with a time that does not parse: %v", ev)
	}
	took := at.Sub(signalled)
	if took > workerPoll+failoverSlack {
		t.Errorf("the standby took over %v after the holder was killed, want within %v (poll %v + %v)", took, workerPoll+failoverSlack, workerPoll, failoverSlack)
	}
	if ev["flow"] != "shared" || ev["tenant"] != "acme" {
		t.Errorf("worker_started: %v", ev)
	}

	// the survivor delivers the rest, the standby's own message included
	want := map[string]bool{"m-standby": true}
	for i := 1; i <= n; i++ {
		want[fmt.Sprintf("m-%d", i)] = true
	}
	seen := map[string]int{}
	eventually(t, 10*time.Second, "every message delivered", func() bool {
		clear(seen)
		for _, x := range be.on("/shared") {
			var m struct{ ID string }
			json.Unmarshal([]byte(x.body), &m)
			seen[m.ID]++
		}
		for id := range want {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	// the first process's deliveries, finished or in flight, are what the
	// backend received on connections it accepted before the kill (a
	// request sent just before it may be read just after; and the killed
	// process's log may have lost its last lines: it is written every 2 ms)
	byFirst := 0
	for _, x := range be.on("/shared") {
		if x.connAt.Before(killed) {
			byFirst++
		}
	}
	if byFirst >= n+1 {
		t.Errorf("the first process delivered %d of %d before the kill", byFirst, n+1)
	}
	bySecond := len(waitEvents(t, h2, "queue_processed", max(1, n+1-byFirst), nil, 5*time.Second))
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	if dups > byFirst {
		t.Errorf("%d duplicates, more than the %d deliveries of the killed process", dups, byFirst)
	}
	// and takes new submissions
	mustEnqueue(t, h2, "acme", "shared", acmeKey, `{"id":"m-after"}`)
	be.waitBody(t, "/shared", `{"id":"m-after"}`, 5*time.Second)
	t.Logf("takeover after %v; %d delivered (or in flight) by the killed process, %d by the survivor, %d duplicates", took.Round(time.Millisecond), byFirst, bySecond, dups)
}

// crashSink counts the payload ids it receives, by the process generation
// that delivered them. A delivery's generation is that of its connection,
// taken when the connection was accepted: a request the killed process
// sent just before the kill may be handled after the next process started,
// and still belongs to the killed one.
type crashSink struct {
	*httptest.Server
	mu         sync.Mutex
	generation int
	connGen    map[string]int // remote address → the generation when it connected
	deliveries []crashDelivery
	count      map[string]int
}

type crashDelivery struct {
	id         string
	generation int
}

func newCrashSink(t *testing.T) *crashSink {
	s := &crashSink{count: map[string]int{}, connGen: map[string]int{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ ID string }
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &m)
		s.mu.Lock()
		gen, ok := s.connGen[r.RemoteAddr]
		if !ok {
			gen = s.generation
		}
		s.deliveries = append(s.deliveries, crashDelivery{m.ID, gen})
		s.count[m.ID]++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	s.Config.ConnState = func(c net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.mu.Lock()
			s.connGen[c.RemoteAddr().String()] = s.generation
			s.mu.Unlock()
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *crashSink) stats() (deliveries int, generation int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries), s.generation
}

// missing returns the ids of acked not yet delivered.
func (s *crashSink) missing(acked map[string]uint64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range acked {
		if s.count[id] == 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func TestCrashKillNineUnderLoad(t *testing.T) {
	cycles, clients := figure(50, 5, 1000), 64
	sink := newCrashSink(t)
	sinkFlow := `---
flowmarkdown_version: "0.1"
flow: crash-sink
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: ` + sink.URL + `/sink
method: POST
`
	repo := newConfigRepo(t, map[string]string{
		"access.yaml":              accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey}),
		"flows/acme/crash-sink.md": sinkFlow,
	})
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	h := startQuietHost(t, repo.dir, db)
	h.waitCommit(repo.git("rev-parse", "HEAD"), 10*time.Second)
	waitGate(t, h, "acme", "crash-sink", acmeKey)
	seed := uint64(time.Now().UnixNano())
	rnd := rand.New(rand.NewPCG(seed, 0x6e65787573))
	t.Logf("seed %d", seed)

	var (
		acked      = map[string]uint64{} // payload id → X-Nexus-Message-Id
		ackedIDs   = map[uint64]string{} // message id → payload id
		maxFlight  int
		duplicates int
		maxDups    int // in one cycle
		began      = time.Now()
	)
	transport := &http.Transport{MaxIdleConnsPerHost: clients}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	defer transport.CloseIdleConnections()

	record := func(id string, r *http.Response) {
		msgID, err := strconv.ParseUint(r.Header.Get("X-Nexus-Message-Id"), 10, 64)
		if err != nil {
			t.Errorf("202 for %s without a message id: %q", id, r.Header.Get("X-Nexus-Message-Id"))
			return
		}
		if prev, ok := ackedIDs[msgID]; ok {
			t.Errorf("message id %d acknowledged twice: for %s and for %s", msgID, prev, id)
		}
		acked[id], ackedIDs[msgID] = msgID, id
	}
	post := func(url, id string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"`+id+`"}`))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	for c := 0; c < cycles; c++ {
		// the queue is idle: every delivery so far is behind the checkpoint
		eventually(t, 10*time.Second, "the queue idle before the load", func() bool {
			m := h.do(http.MethodGet, "/metrics", "", "", "")
			v, ok := metricValue(m.body, "nexus_queue_depth", map[string]string{"tenant": "acme", "flow": "crash-sink"})
			return !ok || v == 0
		})
		atLoad, _ := sink.stats()

		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			stop = make(chan struct{})
			url  = h.url + "/flows/acme/crash-sink/enqueue"
		)
		for k := 0; k < clients; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("c%d-k%d-n%d", c, k, n)
					resp, err := post(url, id)
					if err != nil {
						return // the server is gone
					}
					if resp.StatusCode == http.StatusAccepted {
						mu.Lock()
						record(id, resp)
						mu.Unlock()
					} else if resp.StatusCode != http.StatusServiceUnavailable {
						t.Errorf("enqueue %s: %d", id, resp.StatusCode)
						return
					}
				}
			}(k)
		}
		time.Sleep(time.Duration(50+rnd.IntN(451)) * time.Millisecond)
		h.kill()
		close(stop)
		wg.Wait()

		sink.mu.Lock()
		sink.generation++
		sink.mu.Unlock()
		h = startQuietHost(t, repo.dir, db)
		waitGate(t, h, "acme", "crash-sink", acmeKey)
		wakeID := fmt.Sprintf("c%d-wake", c)
		resp, err := post(h.url+"/flows/acme/crash-sink/enqueue", wakeID)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cycle %d: the wake-up submission: %v %v", c, resp, err)
		}
		record(wakeID, resp)

		deadline := time.Now().Add(20 * time.Second)
		for {
			miss := sink.missing(acked)
			if len(miss) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cycle %d: %d acknowledged messages not delivered within 20 s of the restart, e.g. %v", c, len(miss), miss[:min(5, len(miss))])
			}
			time.Sleep(10 * time.Millisecond)
		}

		// duplicates of this cycle: delivered by the killed process and again by this one
		sink.mu.Lock()
		gen := sink.generation
		before, after := map[string]int{}, map[string]int{}
		for _, d := range sink.deliveries {
			switch d.generation {
			case gen - 1:
				before[d.id]++
			case gen:
				after[d.id]++
			}
		}
		// what the killed process delivered since the queue was last idle is
		// not known to be checkpointed; counted now, not at the kill, since
		// a request it sent just before dying can be read after
		inFlight := 0
		for _, d := range sink.deliveries[atLoad:] {
			if d.generation == gen-1 {
				inFlight++
			}
		}
		sink.mu.Unlock()
		maxFlight = max(maxFlight, inFlight)
		cycleDups := 0
		for id, n := range after {
			if n > 1 {
				t.Errorf("cycle %d: %s delivered %d times by one process", c, id, n)
			}
			if before[id] > 0 {
				cycleDups++
			}
		}
		for id, n := range before {
			if n > 1 {
				t.Errorf("cycle %d: %s delivered %d times by one process", c, id, n)
			}
		}
		if cycleDups > inFlight {
			t.Errorf("cycle %d: %d duplicates, more than the %d messages delivered since the queue was last idle", c, cycleDups, inFlight)
		}
		duplicates += cycleDups
		maxDups = max(maxDups, cycleDups)
		if t.Failed() {
			break
		}
	}

	delivered, _ := sink.stats()
	lost := len(sink.missing(acked))
	if lost != 0 {
		t.Errorf("%d acknowledged messages lost", lost)
	}
	if h.stop(10*time.Second) != 0 {
		t.Error("the last server did not exit 0 on SIGTERM")
	}
	t.Logf("%d cycles of kill -9 under %d clients in %v: %d acknowledged, %d deliveries, %d lost, %d duplicates (at most %d after one kill), at most %d delivered and not known checkpointed at a kill",
		cycles, clients, time.Since(began).Round(time.Millisecond), len(acked), delivered, lost, duplicates, maxDups, maxFlight)
}

// noisyEvents are the log events of every message, left out of the logs
// kept by startQuietHost.
var noisyEvents = map[string]bool{"queue_enqueued": true, "queue_processed": true, "run_completed": true}

// startQuietHost starts nexus serve like startHost (repo, db) but keeps
// only the log lines that are not one per message, so that a failure of a
// test making tens of thousands of messages prints a readable log.
func startQuietHost(t *testing.T, repo, db string) *hostProc {
	t.Helper()
	const admin = "admin-test-key"
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", admin, "--poll", "200ms", "--repo", repo}
	h := &hostProc{t: t, db: db, adminKey: admin, exited: make(chan struct{})}
	h.cmd = exec.Command(nexusBinary(), args...)
	h.cmd.Env = append(os.Environ(), "NEXUS_LOG_FORMAT=json")
	// the log kept for a failure leaves the per-message lines out
	h.watch(args, func(event string) bool { return !noisyEvents[event] }, nil)
	return h
}

// TestSIGTERMStartsNoNewDelivery: at SIGTERM the workers finish the
// delivery in flight and start no other while the HTTP server answers the
// requests in flight (a /run held 3 s by its backend); the backlog waits
// in the log for the next start. The workers went on delivering the
// backlog until every request was answered, which made a shutdown long
// enough to be killed in the middle of a delivery.
func TestSIGTERMStartsNoNewDelivery(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		switch {
		case strings.HasPrefix(x.path, "/slow"):
			time.Sleep(3 * time.Second)
		case strings.HasPrefix(x.path, "/ingest"):
			time.Sleep(300 * time.Millisecond)
		}
		return http.StatusOK
	})
	slow := strings.ReplaceAll(strings.ReplaceAll(ceilingFlow, "timeout_ms: 100", "timeout_ms: 20000"), "flow: ceiling", "flow: slowrun")
	h, repo := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
		"flows/acme/slowrun.md":       strings.ReplaceAll(slow, "BACKEND", be.URL),
	}, hostOptions{}, "forward-order", "slowrun")
	for i := range 10 {
		mustEnqueue(t, h, "acme", "forward-order", acmeKey, fmt.Sprintf(`{"orderId":"B-%d"}`, i))
	}
	be.waitOn(t, "/ingest", 1, 5*time.Second)
	ran := make(chan response, 1)
	go func() { ran <- h.run("acme", "slowrun", acmeKey, `{}`) }()
	be.waitOn(t, "/slow", 1, 5*time.Second)
	stopped := time.Now()
	if code := h.stop(20 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if r := <-ran; r.status != http.StatusOK {
		t.Errorf("the /run in flight at SIGTERM: %d %s, want it answered", r.status, r.body)
	}
	// at most the one delivery in flight at the signal began after it
	// (a poll's moment of slack); the old shutdown began about ten in the
	// three seconds the /run took
	var after []string
	for _, x := range be.on("/ingest") {
		if x.at.After(stopped.Add(100 * time.Millisecond)) {
			after = append(after, x.body)
		}
	}
	if len(after) > 1 {
		t.Errorf("%d deliveries began after SIGTERM: %v", len(after), after)
	}
	// and the backlog is delivered by the next start
	h2 := startHost(t, hostOptions{repo: repo.dir, db: h.db})
	waitGate(t, h2, "acme", "forward-order", acmeKey)
	mustEnqueue(t, h2, "acme", "forward-order", acmeKey, `{"orderId":"wake"}`)
	eventually(t, 20*time.Second, "the backlog delivered after the restart", func() bool {
		seen := map[string]bool{}
		for _, x := range be.on("/ingest") {
			seen[x.body] = true
		}
		for i := range 10 {
			if !seen[fmt.Sprintf(`{"orderId":"B-%d"}`, i)] {
				return false
			}
		}
		return true
	})
}

// TestShutdownGraceEndsARunWithAnAnswer: a /run still running when the
// shutdown's grace (--shutdown-grace) ends is stopped: its caller gets a
// 503 to retry elsewhere, not a connection cut by the exit, and the
// execution is logged and journaled as failed. The process exits 0.
func TestShutdownGraceEndsARunWithAnAnswer(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.delay.Store(int64(time.Minute))
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md": queueExample(t, "forward-order", be.URL),
	}, hostOptions{args: []string{"--shutdown-grace", "1s"}}, "forward-order")
	answered := make(chan response, 1)
	go func() {
		answered <- h.do(http.MethodPost, "/flows/acme/forward-order/run", acmeKey, "application/json", `{"orderId":"A-1"}`,
			"X-Correlation-ID", "trace-grace")
	}()
	be.waitOn(t, "/ingest", 1, 5*time.Second)
	if code := h.stop(20 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	var r response
	select {
	case r = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the /run got no answer")
	}
	want := response{status: http.StatusServiceUnavailable, body: `{"ok":false,"error":"the server stopped this execution: it is shutting down"}`}
	if r.status != want.status || r.body != want.body || r.header.Get("Retry-After") != "1" || r.header.Get("X-Correlation-ID") != "trace-grace" {
		t.Errorf("the /run in flight at the end of the grace got %d %v %s; want %d with Retry-After: 1, its correlation ID and %s",
			r.status, r.header, r.body, want.status, want.body)
	}
	evs := h.events("run_completed")
	if len(evs) != 1 || evs[0]["status"] != float64(503) || evs[0]["outcome"] != "failed" || evs[0]["correlation_id"] != "trace-grace" ||
		!strings.Contains(fmt.Sprint(evs[0]["error"]), "shutdown's grace") {
		t.Errorf("run_completed lines %v, want one: failed, 503, trace-grace, stopped at the end of the grace", evs)
	}
	out := nexus(t, "", "journal", "--db", h.db, "--flow", "forward-order").stdout
	if !strings.Contains(out, "trace-grace") || !strings.Contains(out, "503") {
		t.Errorf("nexus journal after the stop:\n%s\nwant the stopped execution (trace-grace, 503)", out)
	}
}

// TestHangupIsIgnored: SIGHUP (a terminal closed, a logrotate hook) is
// logged and ignored: the host goes on serving, and SIGTERM then stops it
// gracefully. Its default action ended the process on the spot, cutting
// the requests in flight, with no stopping line.
func TestHangupIsIgnored(t *testing.T) {
	t.Parallel()
	h := startHost(t, hostOptions{})
	// (the started line names the build, as nexus version prints it)
	if started := h.events("started"); len(started) != 1 || !strings.Contains(fmt.Sprint(started[0]["version"]), ", go1.") {
		t.Errorf("started lines %v: want one, with the build's version", started)
	}
	for range 2 {
		if err := h.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(h.events("signal_ignored")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no signal_ignored line within 10 s of SIGHUP")
		}
		select {
		case <-h.exited:
			t.Fatalf("nexus serve exited on SIGHUP: %v", h.exitErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r := h.do(http.MethodGet, "/healthz", "", "", ""); r.status != http.StatusOK {
		t.Errorf("after SIGHUP /healthz answers %d %s", r.status, r.body)
	}
	if code := h.stop(30 * time.Second); code != 0 {
		t.Errorf("SIGTERM after SIGHUP: exit %d, want 0", code)
	}
	if len(h.events("stopped")) != 1 {
		t.Errorf("no stopped line after SIGTERM")
	}
}
