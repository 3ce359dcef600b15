package queue

// An exhaustive crash-point test of the whole worker cycle: a scripted
// workload through the real Worker (fake clock), cut by a power cut at the
// k-th file operation for every k, then recovered and run to the end by a
// new worker that acks everything.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// errCycPowerCut is what every operation returns once the power is gone.
var errCycPowerCut = errors.New("power cut")

// cycCounted are the operation kinds a cut can fall before: every one that
// changes the FS (a read changes nothing: a cut before it is the cut before
// the next change).
var cycCounted = map[string]bool{
	opOpen: true, opWrite: true, opSync: true, opTruncate: true, opRename: true,
	opRemove: true, opMkdir: true, opSyncDir: true,
}

// The plan of the scripted workload: message i's correlation ID is
// corr-i; the handler of the first process decides by it.
const (
	cycAck        = iota // acked at attempt 1
	cycRetryTwice        // fails attempts 1 and 2, acked at 3
	cycDead              // dead-lettered at once (later discarded)
	cycExhaust           // fails attempts 1 and 2 of 2: dead-lettered (later replayed)
	cycDeadStays         // dead-lettered at once, left pending
	cycRetryOnce         // fails attempt 1, acked at 2
)

var cycPlan = map[int]int{
	1: cycAck, 2: cycRetryTwice, 3: cycDead, 4: cycExhaust, 5: cycAck,
	6: cycDeadStays, 7: cycRetryOnce, 8: cycDead, 9: cycDead, 10: cycAck, 11: cycAck,
}

const cycReplayCorr = "corr-replay"

type cycDelivery struct {
	ID       uint64
	Attempt  int
	Payload  string
	Corr     string
	Verdict  VerdictKind
	AfterCut bool
}

// cycRun is one run of the scenario with the power cut before the k-th
// counted operation (never when k is past the end).
type cycRun struct {
	t      *testing.T
	k      int
	verify bool // the baseline: check that the script does what it says
	m      *memFS
	root   string
	clk    *clocktest.Fake

	ops atomic.Int64
	cut atomic.Bool
	// other, once armed, is another server process's handle: it appends
	// m11 as the worker writes its idle checkpoint, before its Drain (which
	// is then refused while CompactDLQ runs)
	other atomic.Pointer[Queue]

	mu         sync.Mutex
	phase      string
	cutFS      *memFS
	cutAt      string
	deliveries []cycDelivery // the first process's
	acked      []Message     // appends (and the replay) returned before the cut
	discarded  map[uint64]bool
	replayed   map[uint64]uint64 // dead letter id -> the new message's id
	byI        map[int]Message
}

func (r *cycRun) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// cycCaller names the queue functions on the stack at the cut.
func cycCaller() string {
	pcs := make([]uintptr, 40)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var out []string
	for {
		f, more := frames.Next()
		fn := f.Function
		if i := strings.LastIndex(fn, "/"); i >= 0 {
			fn = fn[i+1:]
		}
		if strings.HasPrefix(fn, "queue.") && !strings.Contains(fn, "memFS") && !strings.Contains(fn, "memFile") &&
			!strings.Contains(fn, "cyc") && !strings.Contains(fn, "func") {
			out = append(out, strings.TrimPrefix(fn, "queue."))
			if len(out) == 4 {
				break
			}
		}
		if !more {
			break
		}
	}
	return strings.Join(out, " < ")
}

func newCycRun(t *testing.T, k int) *cycRun {
	m, root := memQueueRoot(t)
	r := &cycRun{t: t, k: k, m: m, root: root, clk: clocktest.New(epoch),
		discarded: map[uint64]bool{}, replayed: map[uint64]uint64{}, byI: map[int]Message{}}
	m.before = func(op, name string) {
		if !cycCounted[op] {
			return
		}
		n := r.ops.Add(1)
		if int(n) != r.k {
			if op == opWrite && filepath.Base(name) == ckptFile {
				if other := r.other.Swap(nil); other != nil {
					r.appendAs(other, 11)
				}
			}
			return
		}
		cp := powerCutCopy(m)
		r.mu.Lock()
		r.cutFS = cp
		r.cutAt = fmt.Sprintf("op #%d %s(%s) in phase %q, in %s", n, op, filepath.Base(name), r.phase, cycCaller())
		r.mu.Unlock()
		m.Fail("", "", 1, errCycPowerCut, true) // this operation and every later one: the process is gone
		r.cut.Store(true)
	}
	return r
}

// appendAs appends message i through q, recording it when it is
// acknowledged before the cut.
func (r *cycRun) appendAs(q *Queue, i int) {
	msg, err := q.Append(newMessage(i, 24))
	if err == nil && !r.cut.Load() {
		r.mu.Lock()
		r.acked = append(r.acked, msg)
		r.byI[i] = msg
		r.mu.Unlock()
	} else if !r.cut.Load() {
		r.t.Errorf("k=%d: append %d: %v", r.k, i, err)
	}
}

func (r *cycRun) handler1() Handler {
	return HandlerFunc(func(_ context.Context, d Delivery) Verdict {
		var i int
		plan := cycAck
		if _, err := fmt.Sscanf(d.CorrelationID, "corr-%d", &i); err == nil {
			plan = cycPlan[i]
		}
		pol := RetryPolicy{MaxAttempts: 4, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
		v := Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		switch plan {
		case cycRetryTwice:
			if d.Attempt < 3 {
				v = Verdict{Kind: VerdictRetry, Policy: pol, Error: "HTTP 503"}
			}
		case cycRetryOnce:
			if d.Attempt < 2 {
				v = Verdict{Kind: VerdictRetry, Policy: pol, Error: "HTTP 503"}
			}
		case cycExhaust:
			pol.MaxAttempts = 2
			v = Verdict{Kind: VerdictRetry, Policy: pol, Error: "HTTP 503"}
		case cycDead, cycDeadStays:
			v = Verdict{Kind: VerdictDeadLetter, Error: "corrupt artifact"}
		}
		r.mu.Lock()
		r.deliveries = append(r.deliveries, cycDelivery{ID: d.ID, Attempt: d.Attempt, Payload: string(d.Payload),
			Corr: d.CorrelationID, Verdict: v.Kind, AfterCut: r.cut.Load()})
		r.mu.Unlock()
		return v
	})
}

// delivered reports whether the first process's handler saw corr at
// attempt.
func (r *cycRun) delivered(corr string, attempt int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.deliveries, func(d cycDelivery) bool { return d.Corr == corr && d.Attempt == attempt })
}

// script is the first process: a server handle with its worker, and the
// CLI's handles. It stops at the cut.
func (r *cycRun) script() {
	t, clk := r.t, r.clk
	r.setPhase("open")
	q, _, err := Open(r.root, testTenant, testFlow, Options{FS: r.m, Now: clk.Now, GatherWait: -1})
	if err != nil {
		if !r.cut.Load() {
			t.Fatalf("k=%d: Open: %v", r.k, err)
		}
		return
	}
	defer q.Close()
	app := func(i int) {
		r.setPhase(fmt.Sprintf("append m%d", i))
		r.appendAs(q, i)
	}
	cli := func(what string, i int) {
		r.setPhase(fmt.Sprintf("cli %s m%d", what, i))
		target, ok := r.byI[i]
		if !ok {
			return
		}
		h, _, err := Open(r.root, testTenant, testFlow, Options{FS: r.m, Now: clk.Now, GatherWait: -1})
		if err != nil {
			if !r.cut.Load() {
				t.Fatalf("k=%d: the CLI's Open: %v", r.k, err)
			}
			return
		}
		defer h.Close()
		switch what {
		case "discard":
			err = h.Mark(target.ID, MarkDiscarded)
			if err == nil && !r.cut.Load() {
				r.mu.Lock()
				r.discarded[target.ID] = true
				r.mu.Unlock()
			}
		case "replay":
			var nm Message
			nm, err = h.Replay(target.ID, "replay", cycReplayCorr)
			if err == nil && !r.cut.Load() {
				r.mu.Lock()
				r.replayed[target.ID] = nm.ID
				r.acked = append(r.acked, nm)
				r.mu.Unlock()
			}
		}
		if err != nil && !r.cut.Load() {
			t.Fatalf("k=%d: %s %d: %v", r.k, what, target.ID, err)
		}
	}
	// step the clock until cond, or the cut
	stepUntil := func(phase string, cond func() bool) {
		r.setPhase(phase)
		for i := 0; !cond(); i++ {
			if r.cut.Load() {
				return
			}
			if i == 30 {
				t.Fatalf("k=%d: phase %s does not end; deliveries %v", r.k, phase, r.deliveries)
			}
			clk.Step(t)
		}
	}

	for i := 1; i <= 4; i++ {
		app(i)
	}
	if r.cut.Load() {
		return
	}
	r.setPhase("worker: backlog m1..m4")
	w := NewWorker(q, WorkerConfig{Handler: r.handler1(), Clock: clk, Logger: quietLog, Poll: 500 * time.Millisecond,
		// every 2 messages and not by time: the clock steps by polls, and
		// the cycle's other process appends at the idle write it expects
		CheckpointEvery: 2, CheckpointAfter: time.Hour, StopGrace: 50 * time.Millisecond})
	w.Start()
	defer w.Stop()
	clk.WaitCalls(t, 1)
	if r.cut.Load() {
		return
	}
	app(5)
	stepUntil("worker: poll picks m5", func() bool { return r.cut.Load() || r.delivered("corr-5", 1) })
	stepUntil("worker: retries m2/a2, m4/a2 (dead-lettered)", func() bool { return r.cut.Load() || r.delivered("corr-4", 2) })
	if r.cut.Load() {
		return
	}
	cli("discard", 3)
	cli("replay", 4)
	if r.cut.Load() {
		return
	}
	stepUntil("worker: replay delivered, m2/a3, drain, compaction", func() bool {
		return r.cut.Load() || r.delivered("corr-2", 3) && r.delivered(cycReplayCorr, 1)
	})
	if r.cut.Load() {
		return
	}
	app(6)
	app(7)
	app(8)
	if r.cut.Load() {
		return
	}
	r.setPhase("worker: woken for m6..m8")
	n := clk.Calls()
	w.Wake()
	clk.WaitCalls(t, n+1)
	if r.cut.Load() {
		return
	}
	cli("discard", 8)
	stepUntil("worker: m7/a2, drain, compaction", func() bool { return r.cut.Load() || r.delivered("corr-7", 2) })
	if r.cut.Load() {
		return
	}
	// another server process; the operator discards a fresh dead letter;
	// that process appends between the worker's idle checkpoint and its
	// Drain, which is refused, and CompactDLQ applies the mark
	r.setPhase("another process opens")
	other, _, err := Open(r.root, testTenant, testFlow, Options{FS: r.m, Now: clk.Now, GatherWait: -1})
	if err != nil {
		if !r.cut.Load() {
			t.Fatalf("k=%d: the other process's Open: %v", r.k, err)
		}
		return
	}
	defer other.Close()
	app(9)
	if r.cut.Load() {
		return
	}
	r.setPhase("worker: woken for m9")
	n = clk.Calls()
	w.Wake()
	clk.WaitCalls(t, n+1)
	if r.cut.Load() {
		return
	}
	cli("discard", 9)
	app(10)
	if r.cut.Load() {
		return
	}
	r.other.Store(other)
	stepUntil("worker: m10, m11 appended by another process, drain refused, compaction", func() bool { return r.cut.Load() || r.delivered("corr-10", 1) })
	if r.cut.Load() {
		return // before the idle checkpoint write at which the other process appends
	}
	if r.other.Load() != nil {
		t.Fatalf("k=%d: the other process did not append", r.k)
	}
	if r.verify {
		// the drain was refused (m11 is there) and the compaction ran
		if size, _ := q.Size(); size == 0 {
			t.Fatal("setup: the drain was not refused")
		}
		if b := fileBytes(t, r.m, r.root, ackedFile); len(b) != 0 {
			t.Fatalf("setup: the compaction did not run: dlq.log.acked holds %d bytes", len(b))
		}
	}
	stepUntil("worker: m11, drain", func() bool { return r.cut.Load() || r.delivered("corr-11", 1) })
	if r.cut.Load() {
		return
	}
	r.setPhase("worker stop")
	w.Stop()
	r.setPhase("close")
}

// cycLog records the error lines of the recovering worker.
type cycLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *cycLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *cycLog) Handle(_ context.Context, rec slog.Record) error {
	s := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	l.errs = append(l.errs, s)
	l.mu.Unlock()
	return nil
}
func (l *cycLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *cycLog) WithGroup(string) slog.Handler      { return l }

// check cuts the power (when the scenario ran through), recovers, runs a
// worker that acks everything to the end, and checks the properties. It
// returns the violations found.
func (r *cycRun) check() []string {
	t := r.t
	var bad []string
	fail := func(p, f string, a ...any) { bad = append(bad, p+": "+fmt.Sprintf(f, a...)) }
	r.mu.Lock()
	c := r.cutFS
	r.mu.Unlock()
	if c == nil {
		c = powerCutCopy(r.m) // ran through: the power goes at the end
	}

	// what the power cut left, before recovery touches it
	peek, err := Peek(r.root, testTenant, testFlow, c)
	if err != nil {
		t.Fatal(err)
	}
	durableRetries, err := peek.Retries()
	if err != nil {
		fail("P5", "the retry schedule left by the cut does not read: %v", err)
	}
	durableMarks, _, err := peek.marks()
	if err != nil {
		fail("P5", "the marks left by the cut do not read: %v", err)
	}

	clk2 := clocktest.New(r.clk.Now())
	q, damage, err := Open(r.root, testTenant, testFlow, Options{FS: c, Now: clk2.Now, GatherWait: -1})
	if err != nil {
		fail("P5", "recovery failed: %v", err)
		return bad
	}
	defer q.Close()
	for _, d := range damage {
		if !d.Torn {
			fail("P5", "recovery found damage (not a torn tail): %+v", d)
		}
	}
	pendingAfterOpen, err := q.PendingIDs()
	if err != nil {
		fail("P5", "dead letters after recovery: %v", err)
	}
	logAfterOpen := readAll(t, q)

	var mu sync.Mutex
	var run2 []cycDelivery
	lg := &cycLog{}
	w := NewWorker(q, WorkerConfig{Clock: clk2, Logger: slog.New(lg), Poll: 500 * time.Millisecond,
		StopGrace: 50 * time.Millisecond, CheckpointEvery: 2,
		Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict {
			mu.Lock()
			run2 = append(run2, cycDelivery{ID: d.ID, Attempt: d.Attempt, Payload: string(d.Payload), Corr: d.CorrelationID, Verdict: VerdictAck})
			mu.Unlock()
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})})
	w.Start()
	clk2.WaitCalls(t, 1)
	drained := false
	for i := 0; i < 40; i++ {
		rs, err1 := q.Retries()
		size, err2 := q.Size()
		acked := fileBytes(t, c, r.root, ackedFile)
		if err1 == nil && err2 == nil && len(rs) == 0 && size == 0 && len(acked) == 0 {
			drained = true
			break
		}
		clk2.Step(t)
	}
	w.Stop()
	if !drained {
		rs, _ := q.Retries()
		size, _ := q.Size()
		ck, _ := q.Checkpoint()
		fail("P5", "the log does not drain: size %d, checkpoint %d, retries %v, acked %d bytes",
			size, ck, rs, len(fileBytes(t, c, r.root, ackedFile)))
	}
	for _, e := range lg.errs {
		if strings.HasPrefix(e, "ERROR") {
			fail("P5", "the recovering worker logged: %s", e)
		}
	}
	pendingEnd, err := q.PendingIDs()
	if err != nil {
		fail("P5", "dead letters at the end: %v", err)
	}

	// P1: every acknowledged message delivered, dead-lettered, or handled
	ackedBefore := map[uint64]bool{}
	payloads := map[uint64]map[string]bool{}
	addPayload := func(id uint64, p string) {
		if payloads[id] == nil {
			payloads[id] = map[string]bool{}
		}
		payloads[id][p] = true
	}
	for _, d := range r.deliveries {
		addPayload(d.ID, d.Payload)
		if !d.AfterCut && d.Verdict == VerdictAck {
			ackedBefore[d.ID] = true
		}
	}
	delivered2 := map[uint64][]int{}
	for _, d := range run2 {
		addPayload(d.ID, d.Payload)
		delivered2[d.ID] = append(delivered2[d.ID], d.Attempt)
	}
	for _, m := range logAfterOpen {
		addPayload(m.ID, string(m.Payload))
	}
	dl, _, _ := q.DeadLetters()
	for _, d := range dl {
		addPayload(d.ID, string(d.Payload))
	}
	for _, a := range r.acked {
		addPayload(a.ID, string(a.Payload))
		_, replayed := r.replayed[a.ID]
		switch {
		case ackedBefore[a.ID], len(delivered2[a.ID]) > 0, slices.Contains(pendingEnd, a.ID), r.discarded[a.ID], replayed:
		default:
			fail("P1", "acknowledged message %d (%s) lost: never delivered, not a pending dead letter, not discarded or replayed", a.ID, a.CorrelationID)
		}
	}

	// P2: an id is never issued twice
	for id, ps := range payloads {
		if len(ps) > 1 {
			fail("P2", "id %d carries %d different payloads: %v", id, len(ps), ps)
		}
	}
	probe, err := q.Append(newMessage(99, 24))
	if err != nil {
		fail("P5", "an append after the recovery: %v", err)
	} else if _, seen := payloads[probe.ID]; seen {
		fail("P2", "the id %d is issued again after the recovery", probe.ID)
	}

	// P3: a discard or replay that returned stays done
	for id := range r.discarded {
		if slices.Contains(pendingAfterOpen, id) || slices.Contains(pendingEnd, id) {
			fail("P3", "dead letter %d, discarded before the cut, is pending again", id)
		}
		if len(delivered2[id]) > 0 && !cycHas(durableMarks, id) {
			fail("P3", "dead letter %d, discarded before the cut, has no mark left and its message is delivered again (attempts %v): a failure would dead-letter it again, pending", id, delivered2[id])
		}
	}
	for id, newID := range r.replayed {
		if slices.Contains(pendingAfterOpen, id) || slices.Contains(pendingEnd, id) {
			fail("P3", "dead letter %d, replayed before the cut as %d, is pending again (replayable twice)", id, newID)
		}
		if len(delivered2[id]) > 0 && !cycHas(durableMarks, id) {
			fail("P3", "dead letter %d, replayed before the cut, has no mark left and its message is delivered again (attempts %v): a failure would dead-letter it again, replayable twice", id, delivered2[id])
		}
		ids := map[uint64]bool{}
		for _, d := range r.deliveries {
			if d.Corr == cycReplayCorr {
				ids[d.ID] = true
			}
		}
		for _, d := range run2 {
			if d.Corr == cycReplayCorr {
				ids[d.ID] = true
			}
		}
		for _, m := range logAfterOpen {
			if m.CorrelationID == cycReplayCorr {
				ids[m.ID] = true
			}
		}
		if len(ids) != 1 || !ids[newID] {
			fail("P3", "dead letter %d, replayed before the cut as %d: the replays found are %v", id, newID, ids)
		}
	}

	// P4: a durably scheduled retry keeps its attempt
	for _, rt := range durableRetries {
		got := delivered2[rt.ID]
		if len(got) == 0 {
			fail("P4", "message %d, durably scheduled for attempt %d, is not delivered after the cut", rt.ID, rt.Attempt)
		} else if got[0] < rt.Attempt {
			fail("P4", "message %d, durably scheduled for attempt %d, is delivered after the cut at attempt %d", rt.ID, rt.Attempt, got[0])
		}
	}
	// W4, the wider reading of property 4: a message the first process
	// delivered at attempt a >= 2 (its retry for a was durably scheduled at
	// some point) is not delivered again at a lower attempt. It was, when
	// its retries were over (acknowledged or dead-lettered) and the
	// schedule dropped it before the checkpoint past it was durable: a
	// dead letter's budget was spent again, and it was dead-lettered twice
	maxPre := map[uint64]int{}
	for _, d := range r.deliveries {
		if !d.AfterCut {
			maxPre[d.ID] = max(maxPre[d.ID], d.Attempt)
		}
	}
	for id, atts := range delivered2 {
		if maxPre[id] >= 2 && atts[0] < maxPre[id] {
			fail("W4", "message %d, delivered at attempt %d before the cut, is delivered again at attempt %d after it", id, maxPre[id], atts[0])
		}
	}
	return bad
}

func cycHas(m map[uint64]mark, id uint64) bool { _, ok := m[id]; return ok }

// TestWorkerCycleCutAtEveryOperation runs the scripted workload (appends,
// acks, retries with backoff, dead letters, the CLI's discard and replay
// through handles of their own, idle drains and dlq.log compactions, the
// worker's stop) with a power cut before its k-th file-changing operation,
// for every k, then recovers and lets a new worker ack everything.
func TestWorkerCycleCutAtEveryOperation(t *testing.T) { workerCycleCutAtEveryOperation(t) }

// TestWorkerCycleCutAtEveryOperationCompacting is the same with the retry
// schedule's log compacted at every chance (no slack): the cut falls in
// its compactions too, not only in its appends.
func TestWorkerCycleCutAtEveryOperationCompacting(t *testing.T) {
	defer func(s int64) { retryCompactSlack = s }(retryCompactSlack)
	retryCompactSlack = 0
	workerCycleCutAtEveryOperation(t)
}

func workerCycleCutAtEveryOperation(t *testing.T) {
	start := time.Now()
	// the baseline: no cut; the script does what it says
	base := newCycRun(t, -1)
	base.verify = true
	base.script()
	want := []string{
		"corr-1/a1", "corr-2/a1", "corr-3/a1", "corr-4/a1", "corr-5/a1", "corr-2/a2", "corr-4/a2",
		cycReplayCorr + "/a1", "corr-2/a3", "corr-6/a1", "corr-7/a1", "corr-8/a1", "corr-7/a2",
		"corr-9/a1", "corr-10/a1", "corr-11/a1",
	}
	var got []string
	for _, d := range base.deliveries {
		got = append(got, fmt.Sprintf("%s/a%d", d.Corr, d.Attempt))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the script's deliveries:\n got  %v\n want %v", got, want)
	}
	if len(base.discarded) != 3 || len(base.replayed) != 1 {
		t.Fatalf("setup: discarded %v replayed %v", base.discarded, base.replayed)
	}
	if v := base.check(); len(v) > 0 {
		t.Fatalf("no cut: %v", v)
	}
	again := newCycRun(t, -1)
	again.script()
	total := int(again.ops.Load())
	third := newCycRun(t, -1)
	third.script()
	if n := int(third.ops.Load()); n != total {
		t.Fatalf("the script is not deterministic: %d operations, then %d", total, n)
	}
	t.Logf("the script runs %d file-changing operations", total)

	byProp := map[string][]int{}
	for k := 1; k <= total; k++ {
		r := newCycRun(t, k)
		r.script()
		if !r.cut.Load() {
			t.Fatalf("k=%d: the cut did not happen", k)
		}
		for _, v := range r.check() {
			p := v[:2]
			byProp[p] = append(byProp[p], k)
			t.Errorf("k=%d, cut before %s:\n  %s", k, r.cutAt, v)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(byProp)) {
		t.Logf("%s at k = %v", p, slices.Compact(byProp[p]))
	}
	t.Logf("%d crash points in %v", total, time.Since(start))
}
