package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Item 26 of the reliability plan (docs/reliability.md): three nexus serve
// processes on one state directory, the leader killed with SIGKILL again
// and again, a new process started on the state directory after each kill
// so that three run again. The leadership intervals, read from the
// processes' logs, must not overlap, and one of the two standbys left must
// take over within the poll interval plus a generous slack (these machines
// are shared: the bound is loose and the measured figures are logged). The
// new process is kept out of the race for the lock until a standby has
// won it, so that the failover measured is a standby's.
//
// A leadership interval opens at the event the process logs once it holds
// the lock (worker_started for a queue; for a cron flow, which logs nothing
// when it takes its lock, its first cron_tick) and closes when the test
// sends the process SIGKILL, or stays open if the process runs to the end.
// Both times come from one machine's clock: the log's "time" field is
// written by the process (RFC 3339 with nanoseconds) and the kill time is
// taken by the test just before the signal. A process dies after the
// signal, and its lock is released by the kernel only then, so a correct
// takeover is always logged after the recorded kill time; logClockSlack
// only absorbs a clock step between the two readings.

const (
	// workerPoll is how often a standby worker tries the queue's lock
	// (queue.WorkerConfig's default; nexus serve sets none). A standby also
	// tries at each submission it takes.
	workerPoll = 500 * time.Millisecond
	// cronPoll is how often a standby scheduler looks again
	// (scheduler.Config's default); an @every 1s flow makes it every second.
	cronPoll = time.Second
	// failoverSlack is added to the poll interval for the bound on a
	// failover: generous, for a loaded machine (the integration tests run
	// in parallel, this one under -race). On an idle machine a failover
	// takes tens of milliseconds; on two cores shared with other builds,
	// 3.7 s (queue) and 4.7 s (cron, whose ticks fall on whole seconds)
	// have been seen. The bound tells a standby that takes over within a
	// few polls from one that waits for a restart or never does; it stays
	// under the 10 s the tests wait for the next leader.
	failoverSlack = 6 * time.Second
	// logClockSlack is how far a leadership interval may overlap the next
	// one before it is an overlap: the two ends are readings of the same
	// clock by two processes, so only a step of the clock between them
	// could make a correct takeover look early.
	logClockSlack = 5 * time.Millisecond
	// inFlight is how many requests of a killed process the backend may
	// read after the kill: those the process had written before it, one
	// at most, for its worker delivers one message at a time. How late
	// the backend (this test process, under -race) reads it is not
	// bound: on a loaded machine that is any time; it is logged.
	inFlight = 1
)

// electedFlow forwards each message to a host name that does not resolve:
// the process's HTTP_PROXY, a loopback of its own, receives the request,
// which tells the backend which process delivered it (a flow cannot add
// anything per process: its templates see the message and ctx, the same
// in every process).
const electedFlow = `---
flowmarkdown_version: "0.1"
flow: elected
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: http://nexus-election.invalid/ingest
method: POST
`

// electionProc is one nexus serve process of an electionCluster.
type electionProc struct {
	n  int       // 1-based, in the order of starting
	h  *hostProc // its log keeps all but the per-message events
	lb *loopback // where its deliveries arrive, when the cluster routes them
	// killed is when the test was about to send SIGKILL, and sent when
	// kill(2) had returned; zero while it runs. Between the two, on a
	// loaded machine as long as the test goroutine waits for a core, the
	// process still runs and may deliver more. Guarded by
	// electionCluster.mu.
	killed, sent time.Time
	// held keeps the submissions of a steadyLoad away from the process
	// (and so its worker, which starts with the first one, out of the
	// election). Guarded by electionCluster.mu.
	held bool
}

// electionCluster is the nexus serve processes of one test, on one config
// repo and one state directory.
type electionCluster struct {
	t     *testing.T
	repo  *configRepo
	db    string
	proxy bool     // give each process a loopback of its own as HTTP_PROXY
	gates []string // flows each process must serve before it counts as started

	mu    sync.Mutex
	procs []*electionProc
}

// newElectionCluster commits files (with acmeKey's access.yaml) to a new
// config repo; start starts the processes.
func newElectionCluster(t *testing.T, files map[string]string, proxy bool, gates ...string) *electionCluster {
	t.Helper()
	files["access.yaml"] = accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})
	return &electionCluster{
		t: t, repo: newConfigRepo(t, files), db: filepath.Join(t.TempDir(), "state", "registry.db"),
		proxy: proxy, gates: gates,
	}
}

// start starts one more process and waits until it serves the commit and
// the gated flows. A held process takes no submission until admitted.
func (c *electionCluster) start(held bool) *electionProc {
	t := c.t
	t.Helper()
	c.mu.Lock()
	p := &electionProc{n: len(c.procs) + 1, held: held}
	c.mu.Unlock()
	var env []string
	if c.proxy {
		p.lb = newLoopback(t)
		env = []string{"HTTP_PROXY=" + p.lb.URL, "http_proxy=" + p.lb.URL, "NO_PROXY=", "no_proxy="}
	}
	// the config repo changes no more: a slow poll spares the machine
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", c.db, "--admin-key", "admin-test-key", "--poll", "2s", "--repo", c.repo.dir}
	h := &hostProc{t: t, db: c.db, adminKey: "admin-test-key", exited: make(chan struct{})}
	h.cmd = exec.Command(nexusBinary(), args...)
	h.cmd.Env = append(append(os.Environ(), "NEXUS_LOG_FORMAT=json"), env...)
	h.watch(args, func(event string) bool { return !noisyEvents[event] }, nil)
	p.h = h
	h.waitCommit(c.repo.git("rev-parse", "HEAD"), 10*time.Second)
	for _, f := range c.gates {
		waitGate(t, h, "acme", f, acmeKey)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// kill sends p SIGKILL, waits for its death and returns when the signal
// was sent.
func (c *electionCluster) kill(p *electionProc) time.Time {
	c.mu.Lock()
	p.killed = time.Now()
	at := p.killed
	c.mu.Unlock()
	p.h.cmd.Process.Kill()
	sent := time.Now()
	p.h.kill() // waits for its death
	c.mu.Lock()
	p.sent = sent
	c.mu.Unlock()
	return at
}

// admit lets p take submissions.
func (c *electionCluster) admit(p *electionProc) {
	c.mu.Lock()
	p.held = false
	c.mu.Unlock()
}

// all returns every process started so far with its kill time.
func (c *electionCluster) all() []electionProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]electionProc, len(c.procs))
	for i, p := range c.procs {
		out[i] = *p
	}
	return out
}

// live returns the processes neither killed nor held.
func (c *electionCluster) live() []*electionProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*electionProc
	for _, p := range c.procs {
		if p.killed.IsZero() && !p.held {
			out = append(out, p)
		}
	}
	return out
}

// stamped is a log event of one process with the time it logged it.
type stamped struct {
	p  electionProc
	at time.Time
	ev map[string]any
}

// events returns the events named event about acme/flowName that every
// process logged so far, in the order of their times.
func (c *electionCluster) events(event, flowName string) []stamped {
	t := c.t
	t.Helper()
	var out []stamped
	for _, p := range c.all() {
		for _, e := range p.h.events(event) {
			if e["tenant"] != "acme" || e["flow"] != flowName {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["time"]))
			if err != nil {
				t.Fatalf("process %d logged %s with a time that does not parse: %v", p.n, event, e)
			}
			out = append(out, stamped{p: p, at: at, ev: e})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// next waits until a process other than prev logged event about flowName
// at a time after after, and returns the first such event.
func (c *electionCluster) next(event, flowName string, prev *electionProc, after time.Time, timeout time.Duration) stamped {
	c.t.Helper()
	var got stamped
	eventually(c.t, timeout, fmt.Sprintf("%s of acme/%s logged by another process than %s", event, flowName, procName(prev)), func() bool {
		for _, s := range c.events(event, flowName) {
			if (prev == nil || s.p.n != prev.n) && s.at.After(after) {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

// procOf returns the cluster's process numbered n.
func (c *electionCluster) procOf(n int) *electionProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[n-1]
}

func procName(p *electionProc) string {
	if p == nil {
		return "none"
	}
	return "process " + strconv.Itoa(p.n)
}

// interval is a process's leadership: from the event that opens it to the
// kill, or open (end zero) while the process runs.
type interval struct {
	n          int
	start, end time.Time
}

// intervals opens one interval per process at its first event in opens
// (which are in the order of their times).
func intervals(opens []stamped) []interval {
	var out []interval
	seen := map[int]bool{}
	for _, s := range opens {
		if !seen[s.p.n] {
			seen[s.p.n] = true
			out = append(out, interval{n: s.p.n, start: s.at, end: s.p.killed})
		}
	}
	return out
}

// checkNoOverlap fails t for each pair of intervals of different
// processes that overlap by more than logClockSlack (an open interval
// runs to now). It returns the smallest gap between the end of an interval
// and the start of the next one, the margin by which they did not overlap.
func checkNoOverlap(t *testing.T, what string, ivs []interval, now time.Time) time.Duration {
	t.Helper()
	end := func(iv interval) time.Time {
		if iv.end.IsZero() {
			return now
		}
		return iv.end
	}
	var overlaps []string
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			a, b := ivs[i], ivs[j]
			if d := minTime(end(a), end(b)).Sub(maxTime(a.start, b.start)); d > logClockSlack {
				overlaps = append(overlaps, fmt.Sprintf("process %d [%s, %s] and process %d [%s, %s] overlap by %v",
					a.n, stamp(a.start), stampEnd(a.end), b.n, stamp(b.start), stampEnd(b.end), d.Round(time.Microsecond)))
			}
		}
	}
	if len(overlaps) > 0 {
		t.Errorf("%s: %d overlapping pairs of leadership intervals, want 0:\n%s", what, len(overlaps), strings.Join(overlaps[:min(len(overlaps), 10)], "\n"))
	}
	margin := time.Duration(-1)
	sorted := slices.Clone(ivs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start.Before(sorted[j].start) })
	for i := 1; i < len(sorted); i++ {
		if prev := sorted[i-1]; !prev.end.IsZero() {
			if gap := sorted[i].start.Sub(prev.end); margin < 0 || gap < margin {
				margin = gap
			}
		}
	}
	return margin
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func stamp(at time.Time) string { return at.UTC().Format("15:04:05.000000") }

func stampEnd(at time.Time) string {
	if at.IsZero() {
		return "running"
	}
	return stamp(at)
}

// percentile returns the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// durations summarises measured figures: each, then the largest.
func durations(ds []time.Duration) string {
	var parts []string
	most := ds[0]
	for _, d := range ds {
		parts = append(parts, d.Round(time.Millisecond).String())
		most = max(most, d)
	}
	return fmt.Sprintf("[%s] (max %v)", strings.Join(parts, " "), most.Round(time.Millisecond))
}

// steadyLoad submits a message with a unique id to one live process after
// another, round robin, until stopped.
type steadyLoad struct {
	stopped chan struct{}
	done    chan struct{}

	mu    sync.Mutex
	acked map[string]ack // by payload id
	other int            // answers other than 202, and requests cut by a kill
}

// ack is a 202 to a submission.
type ack struct {
	msgID uint64    // X-Nexus-Message-Id
	n     int       // the process that answered
	at    time.Time // when the answer came
}

// enqueueSteadily starts a steadyLoad on acme/flowName, one submission
// every interval.
func (c *electionCluster) enqueueSteadily(flowName string, every time.Duration) *steadyLoad {
	l := &steadyLoad{stopped: make(chan struct{}), done: make(chan struct{}), acked: map[string]ack{}}
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(l.done)
		defer client.CloseIdleConnections()
		for n := 1; ; n++ {
			select {
			case <-l.stopped:
				return
			case <-time.After(every):
			}
			live := c.live()
			if len(live) == 0 {
				continue
			}
			id, p := fmt.Sprintf("e-%d", n), live[n%len(live)]
			msgID, ok := post(client, p.h.url, flowName, id)
			l.mu.Lock()
			if ok {
				l.acked[id] = ack{msgID: msgID, n: p.n, at: time.Now()}
			} else {
				l.other++
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// post submits {"id": id} to acme/flowName at url and returns the message
// id of a 202.
func post(client *http.Client, url, flowName, id string) (uint64, bool) {
	req, _ := http.NewRequest(http.MethodPost, url+"/flows/acme/"+flowName+"/enqueue", strings.NewReader(`{"id":"`+id+`"}`))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, false // the process was killed
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	msgID, err := strconv.ParseUint(resp.Header.Get("X-Nexus-Message-Id"), 10, 64)
	return msgID, resp.StatusCode == http.StatusAccepted && err == nil
}

// stop stops the submissions and waits for the one in progress.
func (l *steadyLoad) stop() {
	close(l.stopped)
	<-l.done
}

// TestElectionQueueKillLeader runs three processes on one state directory
// with one queue flow, a client submitting a message every 20 ms to each
// live process in turn, and kills the queue's leader with SIGKILL 100 times
// (10 with -short), each a random 100–500 ms after its first delivery. A
// new process starts at each kill and takes submissions once a standby
// has logged worker_started (a worker starts with its process's first
// submission, so until then it cannot contend). A cycle takes under half a
// second on an idle machine (about 35 s in all), up to about 1.5 s on a
// loaded one. Each delivery goes through the HTTP_PROXY of the process that made
// it, a loopback of its own, so the backend knows who delivered what.
//
// The standbys try the lock at every Poll and at each submission they
// take, which here comes every 40 ms or so: the failovers measured are
// tens of milliseconds, the bound is the poll interval plus failoverSlack.
//
// It checks: the processes' leadership intervals (worker_started to the
// kill) do not overlap; the next worker_started and the next delivery come
// within the poll interval plus failoverSlack of each kill; every message
// acknowledged with a 202 is delivered at least once; a process delivers
// only after its worker_started and not after its kill (but for the one
// request it had written, which the backend may read after the kill); and
// the spans in which two processes delivered do not overlap.
func TestElectionQueueKillLeader(t *testing.T) {
	t.Parallel()
	cycles := figure(100, 10, 1000)
	began := time.Now()
	c := newElectionCluster(t, map[string]string{"flows/acme/elected.md": electedFlow}, true, "elected")
	for range 3 {
		c.start(false)
	}
	load := c.enqueueSteadily("elected", 20*time.Millisecond)
	stopped := false
	defer func() {
		if !stopped {
			load.stop()
		}
	}()

	const flowName = "elected"
	first := c.next("worker_started", flowName, nil, time.Time{}, 10*time.Second)
	lead, leadStart := c.procOf(first.p.n), first.at
	var failovers, toDelivery []time.Duration
	var path []string
	for cycle := 1; cycle <= cycles; cycle++ {
		// the leader is delivering; it is killed at a random point of that
		eventually(t, 10*time.Second, procName(lead)+" delivering", func() bool { return len(lead.lb.on("/ingest")) > 0 })
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		killed := c.kill(lead)
		// the replacement starts now but takes no submission before the
		// takeover, so that the failover measured is a standby's
		replacement := c.start(true)

		ws := c.next("worker_started", flowName, lead, leadStart, 10*time.Second)
		var delivered time.Time
		eventually(t, 10*time.Second, "a delivery after the kill of "+procName(lead), func() bool {
			for _, p := range c.all() {
				if p.n == lead.n {
					continue
				}
				for _, x := range p.lb.on("/ingest") {
					if x.at.After(killed) && (delivered.IsZero() || x.at.Before(delivered)) {
						delivered = x.at
					}
				}
			}
			return !delivered.IsZero()
		})
		failover, toFirst := ws.at.Sub(killed), delivered.Sub(killed)
		failovers, toDelivery = append(failovers, failover), append(toDelivery, toFirst)
		path = append(path, fmt.Sprintf("%d→%d", lead.n, ws.p.n))
		if failover > workerPoll+failoverSlack {
			t.Errorf("cycle %d: process %d logged worker_started %v after process %d was killed, want within %v (poll %v + %v)",
				cycle, ws.p.n, failover.Round(time.Millisecond), lead.n, workerPoll+failoverSlack, workerPoll, failoverSlack)
		}
		if toFirst > workerPoll+failoverSlack {
			t.Errorf("cycle %d: the first delivery came %v after process %d was killed, want within %v",
				cycle, toFirst.Round(time.Millisecond), lead.n, workerPoll+failoverSlack)
		}
		lead, leadStart = c.procOf(ws.p.n), ws.at
		c.admit(replacement)
	}
	load.stop()
	stopped = true

	// every acknowledged message reaches the backend; a last submission
	// wakes the leader should it wait for one. (A leader killed inside a
	// drain once left a checkpoint past the end of the emptied log, and a
	// standby taking over skipped what others appended since: queue's
	// TestTakeoverAfterHousekeepingCutShort tries every such cut.)
	wake := "wake"
	msgID, ok := post(http.DefaultClient, lead.h.url, flowName, wake)
	if !ok {
		t.Fatalf("the last submission, to process %d, was not acknowledged", lead.n)
	}
	load.mu.Lock()
	load.acked[wake] = ack{msgID: msgID, n: lead.n, at: time.Now()}
	load.mu.Unlock()
	deliveries := func() map[string]int {
		seen := map[string]int{}
		for _, p := range c.all() {
			for _, x := range p.lb.on("/ingest") {
				var m struct{ ID string }
				json.Unmarshal([]byte(x.body), &m)
				seen[m.ID]++
			}
		}
		return seen
	}
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		seen := deliveries()
		missing = missing[:0]
		for id := range load.acked {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		// each lost message with the kill just before its 202
		var kills []electionProc
		for _, p := range c.all() {
			if !p.killed.IsZero() {
				kills = append(kills, p)
			}
		}
		sort.Slice(kills, func(i, j int) bool { return kills[i].killed.Before(kills[j].killed) })
		sort.Slice(missing, func(i, j int) bool { return load.acked[missing[i]].msgID < load.acked[missing[j]].msgID })
		var lines []string
		for _, id := range missing[:min(len(missing), 10)] {
			a := load.acked[id]
			line := fmt.Sprintf("%s: message %d acknowledged by process %d at %s", id, a.msgID, a.n, stamp(a.at))
			for i := len(kills) - 1; i >= 0; i-- {
				if k := kills[i]; k.killed.Before(a.at) {
					line += fmt.Sprintf(", %v after the kill of process %d", a.at.Sub(k.killed).Round(time.Microsecond), k.n)
					break
				}
			}
			lines = append(lines, line)
		}
		t.Errorf("%d of %d acknowledged messages not delivered within 20 s, want 0:\n%s", len(missing), len(load.acked), strings.Join(lines, "\n"))
	}
	end := time.Now()

	// the leadership intervals, from the logs
	starts := c.events("worker_started", flowName)
	margin := checkNoOverlap(t, "acme/"+flowName, intervals(starts), end)
	for _, e := range c.events("worker_failed", flowName) {
		t.Errorf("process %d: %v", e.p.n, e.ev)
	}

	// the deliveries, by process: only while it led, and one process at a time
	startOf := map[int]time.Time{}
	for _, s := range starts {
		if _, ok := startOf[s.p.n]; !ok {
			startOf[s.p.n] = s.at
		}
	}
	type span struct {
		n           int
		first, last time.Time
	}
	var spans []span
	var late time.Duration // the latest a killed process's request was read after its kill
	for _, p := range c.all() {
		hits := p.lb.on("/ingest")
		if len(hits) == 0 {
			continue
		}
		ws, led := startOf[p.n]
		if !led {
			t.Errorf("process %d delivered %d messages without logging worker_started", p.n, len(hits))
		}
		// the span runs over the deliveries read before the kill: one
		// read after it was in flight at the kill (counted apart)
		var sp span
		early, after := 0, 0
		for _, x := range hits {
			if led && x.at.Before(ws.Add(-logClockSlack)) {
				early++
			}
			if !p.killed.IsZero() && x.at.After(p.killed) {
				late = max(late, x.at.Sub(p.killed))
				if x.at.After(p.sent) {
					// read once the signal was sent: only a request
					// written before it (one, in flight) can be; those
					// read between the two the process may have sent
					// while the test waited to signal it
					after++
				}
				continue
			}
			if sp.first.IsZero() {
				sp = span{n: p.n, first: x.at, last: x.at}
			}
			sp.first, sp.last = minTime(sp.first, x.at), maxTime(sp.last, x.at)
		}
		if early > 0 {
			t.Errorf("process %d delivered %d messages before its worker_started at %s (first at %s)", p.n, early, stamp(ws), stamp(hits[0].at))
		}
		if after > inFlight {
			t.Errorf("%d deliveries of process %d arrived after its kill at %s, want %d at most: the request it had sent", after, p.n, stamp(p.sent), inFlight)
		}
		if !sp.first.IsZero() {
			spans = append(spans, sp)
		}
	}
	// a process's deliveries read before its kill end before the next
	// leader's begin: the next one takes the lock after the kill, and the
	// backend reads its requests after it sent them
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			a, b := spans[i], spans[j]
			if d := minTime(a.last, b.last).Sub(maxTime(a.first, b.first)); d > 0 {
				t.Errorf("processes %d and %d both delivered for %v: %d from %s to %s, %d from %s to %s",
					a.n, b.n, d.Round(time.Millisecond), a.n, stamp(a.first), stamp(a.last), b.n, stamp(b.first), stamp(b.last))
			}
		}
	}

	seen := deliveries()
	total, dups := 0, 0
	for _, n := range seen {
		total += n
		dups += n - 1
	}
	t.Logf("%d kills of the leader in %v (leaders %s); %d submissions acknowledged, %d refused or cut by a kill; %d deliveries, %d duplicates",
		cycles, end.Sub(began).Round(time.Millisecond), strings.Join(path, " "), len(load.acked), load.other, total, dups)
	t.Logf("from the kill to the next worker_started: %s; to the next delivery: %s", durations(failovers), durations(toDelivery))
	// the plan's time-bound figure (RELIABILITY F.26: failover p99 under
	// the poll interval + 500 ms) is asserted in the nightly tier only,
	// where the run is long enough for a p99 and the machine is not shared
	// with the rest of the suite
	if p99 := percentile(failovers, 99); os.Getenv("NEXUS_SOAK") != "" && p99 > workerPoll+500*time.Millisecond {
		t.Errorf("failover p99 %v over %d kills, want under %v (poll %v + 500 ms)", p99.Round(time.Millisecond), len(failovers), workerPoll+500*time.Millisecond, workerPoll)
	}
	t.Logf("smallest gap between a kill and the next worker_started: %v; a killed process's request read at most %v after its kill",
		margin.Round(time.Microsecond), late.Round(time.Microsecond))
}

// TestElectionCronKillTicker runs three processes on one state directory
// with an @every 1s cron flow and kills the process that ticks it with
// SIGKILL 5 times (2 with -short), each after two ticks of its own and a
// random part of a second, starting a new process once a standby has
// ticked (a new process would contend for the lock at once): about 2 s a
// kill, 11 s in all. The times of an @every schedule are whole seconds,
// the same in every process, so scheduled_for names a tick exactly.
//
// It checks: no second is ticked twice (no two cron_tick events with one
// scheduled_for); the ticking intervals (a process's first cron_tick to
// its kill) do not overlap, nor do the leadership intervals of the flow's
// own queue; the ticks resume within the poll interval plus failoverSlack
// of each kill; every tick logged reaches the backend.
func TestElectionCronKillTicker(t *testing.T) {
	t.Parallel()
	kills := figure(5, 2, 50)
	began := time.Now()
	be := newLoopback(t)
	const flowName = "heartbeat"
	c := newElectionCluster(t, map[string]string{"flows/acme/heartbeat.md": cronFlowFor(flowName, "@every 1s", be.URL, "")}, false)
	for range 3 {
		c.start(false)
	}

	first := c.next("cron_tick", flowName, nil, time.Time{}, 10*time.Second)
	ticker := c.procOf(first.p.n)
	var resumes []time.Duration
	var path []string
	for k := 1; k <= kills; k++ {
		eventually(t, 10*time.Second, procName(ticker)+"'s second tick", func() bool {
			n := 0
			for _, s := range c.events("cron_tick", flowName) {
				if s.p.n == ticker.n {
					n++
				}
			}
			return n >= 2
		})
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
		killed := c.kill(ticker)
		// a replacement would contend for the lock: it starts once a
		// standby has taken over, so that the resumption measured is a
		// standby's
		next := c.next("cron_tick", flowName, ticker, killed, 10*time.Second)
		c.start(false)
		resume := next.at.Sub(killed)
		resumes = append(resumes, resume)
		path = append(path, fmt.Sprintf("%d→%d", ticker.n, next.p.n))
		if resume > cronPoll+failoverSlack {
			t.Errorf("kill %d: process %d ticked %v after process %d was killed, want within %v (poll %v + %v)",
				k, next.p.n, resume.Round(time.Millisecond), ticker.n, cronPoll+failoverSlack, cronPoll, failoverSlack)
		}
		ticker = c.procOf(next.p.n)
	}
	end := time.Now()

	ticks := c.events("cron_tick", flowName)
	bySecond := map[string][]int{}
	var seconds []time.Time
	for _, s := range ticks {
		if s.ev["error"] != nil {
			t.Errorf("process %d: a tick that was not queued: %v", s.p.n, s.ev)
			continue
		}
		sf := fmt.Sprint(s.ev["scheduled_for"])
		at, err := time.Parse(time.RFC3339, sf)
		if err != nil {
			t.Fatalf("process %d: cron_tick scheduled_for %q: %v", s.p.n, sf, err)
		}
		if len(bySecond[sf]) == 0 {
			seconds = append(seconds, at)
		}
		bySecond[sf] = append(bySecond[sf], s.p.n)
	}
	var doubles []string
	for sf, ns := range bySecond {
		if len(ns) > 1 {
			doubles = append(doubles, fmt.Sprintf("%s by processes %v", sf, ns))
		}
	}
	if len(doubles) > 0 {
		sort.Strings(doubles)
		t.Errorf("%d seconds ticked more than once, want 0: %v", len(doubles), doubles)
	}
	margin := checkNoOverlap(t, "the ticks of acme/"+flowName, intervals(ticks), end)
	queueMargin := checkNoOverlap(t, "the queue acme/"+flowName, intervals(c.events("worker_started", flowName)), end)

	// the seconds no process ticked, between the first tick and the last
	sort.Slice(seconds, func(i, j int) bool { return seconds[i].Before(seconds[j]) })
	missed := 0
	for i := 1; i < len(seconds); i++ {
		missed += int(seconds[i].Sub(seconds[i-1])/time.Second) - 1
	}

	// every tick logged is delivered (the flow's queue, its worker elected too)
	want := map[string]bool{}
	for _, s := range ticks {
		want[fmt.Sprint(s.ev["correlation_id"])] = true
	}
	var lost []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := map[string]bool{}
		for _, x := range be.on("/tick") {
			got[x.header.Get("X-Correlation-Id")] = true
		}
		lost = lost[:0]
		for cid := range want {
			if !got[cid] {
				lost = append(lost, cid)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d ticks logged never reached the backend: %v", len(lost), len(want), lost)
	}
	t.Logf("%d kills of the ticking process in %v (tickers %s); %d ticks over %d seconds, %d seconds not ticked, %d ticked twice",
		kills, end.Sub(began).Round(time.Millisecond), strings.Join(path, " "), len(ticks), len(seconds)+missed, missed, len(doubles))
	t.Logf("from the kill to the next tick: %s; smallest gap between a kill and the next ticker's first tick %v, and its queue's next worker_started %v",
		durations(resumes), margin.Round(time.Millisecond), queueMargin.Round(time.Millisecond))
	// nightly only, as TestElectionQueueKillLeader's p99 (RELIABILITY F.26)
	if p99 := percentile(resumes, 99); os.Getenv("NEXUS_SOAK") != "" && p99 > cronPoll+500*time.Millisecond {
		t.Errorf("tick resumption p99 %v over %d kills, want under %v (poll %v + 500 ms)", p99.Round(time.Millisecond), len(resumes), cronPoll+500*time.Millisecond, cronPoll)
	}
}
