package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"

	"github.com/nexushq/nexus/clock"
	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/lifecycle"
)

// RetryPolicy is a flow's retry configuration (the four queue_* keys).
type RetryPolicy struct {
	MaxAttempts   int
	InitialDelay  time.Duration
	BackoffFactor float64
	MaxDelay      time.Duration
}

// MaxAttempts is the most attempts a message gets, whatever its policy
// says: the attempt number is a uint32 in a retry's record and in a dead
// letter's (see the package doc). The compiler bounds queue_max_attempts
// at it; a policy past it dead-letters the message at this attempt.
const MaxAttempts = math.MaxUint32

// DefaultRetryPolicy is the policy of a flow that sets none.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}

// Delay is the one retry formula: the wait after failed attempt n (n ≥ 1)
// is min(initial × factor^(n−1), max). There is no jitter: the schedule is
// exact.
func Delay(p RetryPolicy, n int) time.Duration {
	if p.InitialDelay <= 0 {
		return 0 // whatever the power: 0 × +Inf would be NaN
	}
	// rounded to the nanosecond: a factor with no exact binary form (1.7)
	// otherwise left the formula's whole milliseconds a fraction of a
	// nanosecond short, truncated to one millisecond less in delay_ms
	d := math.Round(float64(p.InitialDelay) * math.Pow(p.BackoffFactor, float64(n-1)))
	if d > float64(p.MaxDelay) || math.IsInf(d, 1) || math.IsNaN(d) {
		return p.MaxDelay
	}
	return time.Duration(d)
}

// RetryLaterDelay is the fixed wait of a retry-later verdict.
const RetryLaterDelay = time.Second

// VerdictKind is what a handler decided for one delivery.
type VerdictKind int

// The verdicts of a delivery.
const (
	// VerdictAck: the message is done, with an outcome (succeeded,
	// filtered, fault_handled).
	VerdictAck VerdictKind = iota + 1
	// VerdictRetry: the attempt failed; the queue reschedules it with the
	// policy, or dead-letters it when it was the last attempt.
	VerdictRetry
	// VerdictRetryLater: the attempt could not run (registry or dedup store
	// unavailable); it comes back after RetryLaterDelay without using up
	// an attempt.
	VerdictRetryLater
	// VerdictDeadLetter: the message goes to the dead-letter queue at once.
	VerdictDeadLetter
	// VerdictDrop: the message can never succeed (no such flow); it is
	// dropped and logged.
	VerdictDrop
	// VerdictInterrupted: the delivery's context ended (the stop's grace
	// ran out) before the delivery did, and nothing of it stands: it is
	// neither the message's failure nor an attempt, and the next start
	// delivers it again. Only the handler can say so: a failure it
	// recorded as it ended (a dedup key's answer) is a VerdictRetry even
	// when the context ended a moment later.
	VerdictInterrupted
)

// Verdict is a handler's decision for one delivery.
type Verdict struct {
	Kind    VerdictKind
	Outcome string      // VerdictAck
	Policy  RetryPolicy // VerdictRetry
	Error   string      // the text kept as last_error, or logged
	// Attrs are added to the worker's log line of the delivery: what the
	// handler knows of it (the flow's version, status, duration…), so
	// that a delivery is one line.
	Attrs []slog.Attr
}

// Delivery is one attempt at a message of the queue Tenant/Flow.
type Delivery struct {
	Message
	Tenant, Flow string
	Attempt      int // 1-based
}

// Handler runs a delivery and returns its verdict.
type Handler interface {
	Handle(ctx context.Context, d Delivery) Verdict
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d Delivery) Verdict

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d Delivery) Verdict { return f(ctx, d) }

// WorkerConfig configures a worker. Zero fields take the defaults.
type WorkerConfig struct {
	Handler Handler
	// Clock is the worker's time; nil is the real clock (tests give a fake
	// one, so that retry schedules are tested without sleeping).
	Clock  clock.Clock
	Logger *slog.Logger // nil: slog.Default()
	// Poll is how often an idle worker looks for messages appended by other
	// processes (and how often a standby tries to take over); default 500 ms.
	Poll time.Duration
	// CheckpointEvery is how many processed messages may pass before the
	// checkpoint is written (it is also written when the queue goes idle);
	// default 64.
	CheckpointEvery int
	// CheckpointAfter is how old the last checkpoint write may be when a
	// message finishes before the checkpoint is written again, while the
	// queue stays busy; default 50 ms. A slow flow (a backend taking
	// seconds) then has the checkpoint written after nearly every message
	// rather than every CheckpointEvery: a process killed meanwhile
	// delivers again the message in flight and those finished since the
	// last write, which finished within CheckpointAfter of one another,
	// not minutes of work.
	CheckpointAfter time.Duration
	// StopGrace is how long Stop lets the delivery in progress run before
	// cancelling it; default 30 s. A delivery cancelled so is not an
	// attempt: the message is delivered again at the next start.
	StopGrace time.Duration
	// Counts counts the finished deliveries; nil: the worker's own. The
	// workers of one queue in turn (a queue reopened after a failed write
	// gets a new one) share one, so that the counts never go back.
	Counts *DeliveryCounts
	// Policy returns the retry policy of the flow tenant/flow, false when
	// it is not known; nil knows none. The worker asks it only when the
	// handler panics, which returns no verdict and so no policy: the
	// attempt is retried with the flow's policy, or DefaultRetryPolicy
	// when Policy does not know it (or panics too).
	Policy func(tenant, flow string) (RetryPolicy, bool)
}

// DeliveryCounts counts a queue's finished deliveries by outcome (plus
// "dead_lettered" and "dropped"). Safe for concurrent use.
type DeliveryCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *DeliveryCounts) add(what string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[what]++
	c.mu.Unlock()
}

// Snapshot returns a copy of the counts.
func (c *DeliveryCounts) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Worker delivers one queue's messages: backlog first, in order; retries
// when due; housekeeping when idle. Among processes sharing a state
// directory, a lock file elects the one that runs; the others stand by and
// take over when it dies.
type Worker struct {
	q      *Queue
	cfg    WorkerConfig
	logger *slog.Logger // cfg.Logger with the queue's tenant and flow
	wake   chan struct{}
	lock   *flock.Flock
	// held is the identity of the file lock holds, read when it was
	// locked (elect, checkLock) and checked against worker.lock's path
	// at each idle moment (checkLock)
	held fs.FileInfo

	life lifecycle.Loop

	stateMu sync.Mutex
	state   WorkerState

	// retire is closed by Retire: the worker ends at its next safe moment
	retire     chan struct{}
	retireOnce sync.Once
	// exited is closed when run returns
	exited   chan struct{}
	exitOnce sync.Once
	// sched is the running loop's retry schedule, for a test's look at
	// what it holds while the worker waits (export_test.go)
	sched atomic.Pointer[retrySchedule]
}

// Retire ends the worker at its next safe moment, after the delivery in
// flight and the writes of the queue's state it needs, however long those
// wait (a full disk), then lets its lock go; it returns once the worker
// has ended. Stop, by contrast, gives the delivery StopGrace, and a write
// still failing then is left undone: the next worker makes the delivery
// again from the state on disk. When abort closes first, Retire stops the
// worker as Stop does (the host is shutting down). The Manager retires
// the worker of a queue it reopens after a failed append: stopped, a
// worker waiting on a full disk left its last attempt to be made again,
// once per failed submission.
func (w *Worker) Retire(abort <-chan struct{}) {
	w.retireOnce.Do(func() { close(w.retire) })
	select {
	case <-w.exited:
	case <-abort:
	}
	w.Stop()
}

// retired reports whether Retire was called.
func (w *Worker) retired() bool {
	select {
	case <-w.retire:
		return true
	default:
		return false
	}
}

// WorkerState is what a worker is doing, for status pages and metrics.
type WorkerState struct {
	Leading        bool
	InFlight       int
	RetriesPending int
	Delivered      map[string]int64 // by outcome, plus "dead_lettered", "dropped"
}

// NewWorker returns a worker for q; Start runs it.
func NewWorker(q *Queue, cfg WorkerConfig) *Worker {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 64
	}
	if cfg.CheckpointAfter <= 0 {
		cfg.CheckpointAfter = 50 * time.Millisecond
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 30 * time.Second
	}
	if cfg.Counts == nil {
		cfg.Counts = &DeliveryCounts{}
	}
	return &Worker{
		q: q, cfg: cfg, wake: make(chan struct{}, 1),
		logger: cfg.Logger.With("tenant", q.Tenant, "flow", q.Flow),
		lock:   NewFileLock(filepath.Join(q.dir, workerLockFile)),
		retire: make(chan struct{}), exited: make(chan struct{}),
	}
}

// Wake tells the worker a message was appended in this process. It never
// blocks.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// State returns a copy of the worker's state.
func (w *Worker) State() WorkerState {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	s := w.state
	s.Delivered = w.cfg.Counts.Snapshot()
	return s
}

func (w *Worker) update(f func(*WorkerState)) {
	w.stateMu.Lock()
	f(&w.state)
	w.stateMu.Unlock()
}

// Start runs the worker in the background and returns at once.
func (w *Worker) Start() { w.life.Start(w.run) }

// Stop stops the worker after the delivery in progress (up to StopGrace)
// and waits for it; it writes the checkpoint and gives up the election.
// Safe twice and without Start.
func (w *Worker) Stop() { w.life.Stop() }

func (w *Worker) run(ctx context.Context) {
	defer w.exitOnce.Do(func() { close(w.exited) })
	for w.elect(ctx) && w.lead(ctx) {
	}
}

// elect stands by until this process holds the queue's worker lock; false
// when the worker is stopped or retired first.
func (w *Worker) elect(ctx context.Context) bool {
	for {
		ok, err := w.lock.TryLock()
		if err != nil {
			w.logger.Error("the worker lock could not be taken", "event", "worker_failed", "error", err.Error())
		}
		if ok {
			if w.held, err = w.lock.Stat(); err == nil {
				return true
			}
			w.logger.Error("the worker lock could not be checked", "event", "worker_failed", "error", err.Error())
			w.lock.Unlock()
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.retire:
			return false
		case <-w.cfg.Clock.After(untilNextPoll(w.cfg.Clock.Now(), w.cfg.Poll)):
		case <-w.wake:
		}
	}
}

// lead delivers the queue, holding its worker lock, until the worker is
// stopped or retired (false), or finds the lock lost (true: it stands by
// again).
func (w *Worker) lead(ctx context.Context) (again bool) {
	defer func() { w.lock.Unlock() }() // the lock held at the end: checkLock may replace it
	w.update(func(s *WorkerState) { s.Leading = true })
	defer w.update(func(s *WorkerState) { s.Leading = false })
	w.logger.Info("worker started", "event", "worker_started")
	// An error (an I/O error reading the log) ends a round of deliveries,
	// not the worker: the queue keeps taking messages, so the worker starts
	// again from what is on disk (the checkpoint, the retry schedule)
	// after a pause that doubles while the errors go on, keeping the lock.
	// (A write a delivery needs waits for itself instead: persist.)
	failures := 0
	for {
		began := w.cfg.Clock.Now()
		err := w.deliver(ctx)
		if err == nil || ctx.Err() != nil || w.retired() {
			return false
		}
		if errors.Is(err, errWorkerLockLost) {
			w.logger.Error("the worker lost its lock; it stands by", "event", "worker_failed", "error", err.Error())
			return true
		}
		if w.cfg.Clock.Now().Sub(began) >= maxRestartPause {
			failures = 0 // it ran a good while: this error is a new one
		}
		pause := w.pause(failures)
		failures++
		w.logger.Error("the worker stopped on an error; it starts again after a pause", "event", "worker_failed",
			"error", err.Error(), "pause_ms", pause.Milliseconds())
		select {
		case <-ctx.Done():
			return false
		case <-w.retire:
			return false
		case <-w.cfg.Clock.After(pause):
		}
	}
}

// errWorkerLockLost is wrapped by checkLock's error when another process
// may be delivering the queue.
var errWorkerLockLost = errors.New("the worker lock was lost")

// checkLock makes sure the worker lock this worker holds is worker.lock,
// the file at its path. A lock file deleted by hand (taken for a stale
// one) or replaced excludes no one: another process would find a new file
// free and deliver the queue alongside this worker, both writing its
// checkpoint, retry schedule and dead letters. When the file was deleted
// or replaced, the worker locks the file at the path and goes on (logged),
// or, when another process's worker holds it already, returns an error
// wrapping errWorkerLockLost and stands by.
func (w *Worker) checkLock() error {
	path := w.lock.Path()
	atPath, err := os.Lstat(path)
	if err == nil && os.SameFile(w.held, atPath) {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking the worker lock %s: %w", path, err)
	}
	lock := NewFileLock(path)
	ok, err := lock.TryLock()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s was deleted or replaced, and the file at its path cannot be locked: %w", errWorkerLockLost, path, err)
	case !ok:
		return fmt.Errorf("%w: %s was deleted or replaced, and another process's worker holds the file at its path", errWorkerLockLost, path)
	}
	held, err := lock.Stat()
	if err != nil {
		lock.Unlock()
		return fmt.Errorf("checking the worker lock %s: %w", path, err)
	}
	w.lock.Unlock()
	w.lock, w.held = lock, held
	w.logger.Warn("the worker lock was deleted or replaced; the file at its path is locked again", "event", "worker_lock_replaced", "file", path)
	return nil
}

// maxRestartPause bounds the pause before a worker that stopped on an
// error starts again, and between two tries of a write persist waits for.
const maxRestartPause = 30 * time.Second

// pause is how long the worker waits after the failures-th failure in a
// row (from 0): Poll, doubled at each, up to maxRestartPause.
func (w *Worker) pause(failures int) time.Duration {
	return min(w.cfg.Poll<<min(failures, 16), maxRestartPause)
}

// persist runs write, a write of the queue's state that a delivery made
// necessary (the checkpoint past it, its retry in the schedule, its dead
// letter), until it succeeds or ctx ends, pausing between tries as the
// worker does between its starts (Poll, doubling up to maxRestartPause),
// or trying sooner when a submission goes through (awaitRetry).
// Such an error (a full disk) used to end the round of deliveries, and the
// worker started again from the state on disk: it delivered again every
// message since the checkpoint it could not write, and ran again the last
// attempt of a message whose dead letter it could not write, at every
// start, for as long as the disk stayed full, past queue_max_attempts.
// Now the deliveries wait for the write, and nothing is delivered again
// for it, unless the worker is stopped and ctx (the deliveries' context,
// which outlives the stop by StopGrace) ends first: its next start goes
// on from the state on disk (at least once). A worker retired (Retire)
// waits for it whatever the time.
func (w *Worker) persist(ctx context.Context, write func() error) error {
	tries := 1
	// A wake-up awaitRetry took may be for a message the worker has yet
	// to read: it is given back once persist returns, so the worker looks
	// at the log before it next waits. Not sooner: given back after each
	// pause, a wake-up answered by a failed try would be taken again by
	// the next pause, and the write would be tried every Poll for as long
	// as it fails instead of backing off.
	woken := false
	defer func() {
		if woken {
			w.Wake()
		}
	}()
	for failures := 0; ; failures++ {
		err := write()
		if err != nil && ctx.Err() == nil {
			pause := w.pause(failures)
			w.logger.Error("the queue's state could not be written; deliveries wait for it, and it is tried again after a pause", "event", "worker_failed",
				"error", err.Error(), "pause_ms", pause.Milliseconds())
			if w.awaitRetry(ctx, pause, write, &tries, &woken) {
				err = nil
			} else if ctx.Err() == nil {
				tries++
				continue
			}
		}
		if err == nil && tries > 1 {
			w.logger.Info("the queue's state was written; deliveries go on", "event", "worker_recovered", "tries", tries)
		}
		return err
	}
}

// awaitRetry waits out persist's pause before its next try. A wake-up (a
// submission to the queue went through, so the disk may have room again)
// has the write tried at once, or once Poll has passed since the last try,
// without logging a failure; such tries count in tries. The pause grew to
// 30 s over a long outage, and the deliveries waited for it after the disk
// had room again. It reports whether such a try went through; it returns
// at the pause's end (persist's own try answers a wake-up then), or early
// when ctx ends. It sets *took when it takes a wake-up (persist gives it
// back).
func (w *Worker) awaitRetry(ctx context.Context, pause time.Duration, write func() error, tries *int, took *bool) (written bool) {
	now := w.cfg.Clock.Now()
	until, tried := now.Add(pause), now
	woken := false // a wake-up not yet answered with a try
	for {
		now := w.cfg.Clock.Now()
		if !now.Before(until) {
			return false
		}
		if woken && now.Sub(tried) >= w.cfg.Poll {
			woken, tried = false, now
			*tries++
			if write() == nil {
				return true
			}
		}
		wait := until.Sub(now)
		if woken {
			wait = min(wait, tried.Add(w.cfg.Poll).Sub(now))
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.cfg.Clock.After(wait):
		case <-w.wake:
			woken, *took = true, true
		}
	}
}

// deliver is the worker's loop once elected: a retry that is due first,
// else the message at the cursor, else, idle, the checkpoint, the
// housekeeping and a wait for the next submission, poll or retry.
func (w *Worker) deliver(ctx context.Context) error {
	q := w.q
	if err := q.useSegmentAtPath(); err != nil {
		return err
	}
	cursor, ckptDamage, err := q.ownCheckpoint()
	for _, d := range ckptDamage {
		// read as 0: the messages of the log are delivered again
		w.logger.Error("the checkpoint did not verify; it was read as 0", append([]any{"event", "queue_damage"}, d.logAttrs()...)...) // tenant and flow: the logger's
	}
	if err != nil {
		return err
	}
	sched, damage, err := q.openRetrySchedule()
	if err != nil {
		return err
	}
	for _, d := range damage {
		if d.Torn {
			// a change a crash cut short, which nothing acted upon
			w.logger.Warn("the retry schedule ended in a torn write, cut", append([]any{"event", "queue_damage"}, d.logAttrs()...)...) // tenant and flow: the logger's
			continue
		}
		// bit rot: the change is lost (the file was rewritten without it)
		w.logger.Error("a change of the retry schedule did not verify; it was left out", append([]any{"event", "queue_damage"}, d.logAttrs()...)...) // tenant and flow: the logger's
	}
	for _, x := range sched.takeLost() {
		// set by the damaged change alone: its attempt and offset are not
		// known, and its id is as the damaged frame holds it, which its
		// CRC did not vouch for (queue_damage names the frame either way)
		w.logger.Error("a scheduled retry's change is damaged: dropped (its id as the damaged frame holds it)", "event", "queue_dropped", "msg_id", x.Retry.ID, "file", retryFile, "frame_offset", x.Damage.Offset)
		w.cfg.Counts.add("dropped")
	}
	w.sched.Store(sched)
	retries := sched.list()
	// Every message before the furthest one in the retry schedule was
	// done with before that one was scheduled, and the schedule is
	// durable before the checkpoint passes what it holds: a checkpoint
	// before it (written less often, or lost with the process) would have
	// the reader deliver again, as a first attempt, a message whose retry
	// runs first and takes it out of the schedule.
	// A retry that carries its message may have an offset in a log
	// emptied since (the message is not there: another id, or none): the
	// furthest one whose message is in the log counts.
	slices.SortFunc(retries, func(a, b Retry) int { return cmp.Compare(b.Offset, a.Offset) })
	for _, r := range retries {
		if r.Offset < cursor {
			break
		}
		m, after, err := q.Read(r.Offset)
		if err != nil || m.ID != r.ID {
			continue
		}
		if after > cursor {
			// written at once: the retry may run and leave the
			// schedule before the cursor next moves
			if err := q.SaveCheckpoint(after); err != nil {
				return err
			}
			cursor = after
		}
		break
	}
	// A delivery runs to its end even when the worker is stopped: Stop
	// waits for it (the flow has its own duration ceiling) up to StopGrace,
	// so a shutdown does not turn a delivery the backend accepted into a
	// failed attempt. Deliveries, and the writes of state that follow them
	// (persist), run under hctx, cancelled StopGrace after ctx: a worker
	// stopped while it waits for such a write (a queue reopened, the host
	// stopping) still makes it if the disk has room within the grace.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(w.cfg.StopGrace, cancel) })()
	// The checkpoint is rewritten in place as the cursor moves (every
	// CheckpointEvery messages, once CheckpointAfter has passed since the
	// last write, after a message dead-lettered at its first attempt, and
	// whenever the queue goes idle), without
	// fsync: a process that dies leaves it in the page cache. It is synced
	// when the worker stops and by a drain; a power cut in between only
	// means deliveries again.
	l, err := w.newDeliveryLoop(hctx, cursor, sched)
	if err != nil {
		return err
	}
	defer func() { l.ckpt.Close() }() // ckptAtPath may have replaced it (closing the one it replaced)
	defer l.stopped()
	w.update(func(s *WorkerState) { s.RetriesPending = len(retries) })

	lockChecked := w.cfg.Clock.Now()
	for ctx.Err() == nil && !w.retired() {
		// the worker lock checked once per Poll while busy, and at each
		// idle moment before housekeeping
		if now := w.cfg.Clock.Now(); now.Sub(lockChecked) >= w.cfg.Poll {
			if err := w.checkLock(); err != nil {
				return err
			}
			lockChecked = now
		}
		busy, err := l.retryDue()
		if err == nil && !busy {
			busy, err = l.deliverNext()
		}
		switch {
		case errors.Is(err, errInterrupted):
			return nil
		case err != nil:
			return err
		case busy:
			continue
		}
		// idle: checkpoint, housekeeping, then wait
		if err := l.ckptAtPath(); err != nil {
			return err
		}
		if err := l.saveCheckpoint(false); err != nil {
			return err
		}
		if err := w.checkLock(); err != nil {
			return err
		}
		lockChecked = w.cfg.Clock.Now()
		if err := l.housekeep(w.cfg.Clock.Now()); err != nil {
			return err
		}
		now := w.cfg.Clock.Now()
		wait := untilNextPoll(now, w.cfg.Poll)
		if r, ok := l.retries.first(); ok {
			if d := r.Due.Sub(now); d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-ctx.Done():
		case <-w.retire:
		case <-w.wake:
		case <-w.cfg.Clock.After(wait):
		}
	}
	return nil
}

// newDeliveryLoop opens the checkpoint the loop rewrites in place and
// returns the loop delivering from cursor, with the retry schedule sched
// and hctx for deliveries and the writes of state after them. The
// checkpoint file holds cursor (written back, synced, by ownCheckpoint
// when it differed), or was made just now, cursor being 0 (a file that is
// not there reads as 0). A file made just now is written at once, before
// any delivery, so that it holds its bytes and its rewrites in place never
// need space a full disk may not have; unsynced, which loses nothing.
func (w *Worker) newDeliveryLoop(hctx context.Context, cursor int64, sched *retrySchedule) (*deliveryLoop, error) {
	q := w.q
	ckpt, err := q.openCheckpoint()
	if err != nil {
		return nil, err
	}
	info, err := ckpt.Stat()
	if err != nil {
		ckpt.Close()
		return nil, fmt.Errorf("checking %s: %w", ckptFile, err)
	}
	if info.Size() == 0 {
		if err := writeCheckpoint(ckpt, cursor, false); err != nil {
			ckpt.Close()
			return nil, err
		}
	}
	return &deliveryLoop{w: w, q: q, hctx: hctx, ckpt: ckpt, ckptInfo: info, ckptPath: q.path(ckptFile), reader: newLogReader(q), retries: sched,
		cursor: cursor, saved: cursor, synced: true, savedAt: w.cfg.Clock.Now()}, nil
}

// deliveryLoop is the state of an elected worker's loop (deliver).
type deliveryLoop struct {
	w    *Worker
	q    *Queue
	hctx context.Context // deliveries and the writes of state after them
	ckpt File            // the checkpoint, rewritten in place
	// ckptInfo is ckpt's identity, read when it was opened, checked
	// against ckptPath, joined once, at each idle moment (ckptAtPath)
	ckptInfo fs.FileInfo
	ckptPath string
	reader   *logReader
	// retries is the retry schedule as the worker last wrote it
	retries *retrySchedule
	// cursor is where the next message to deliver begins; saved is what
	// the checkpoint file holds (-1: not known), synced whether it is
	// durable; sinceSave counts the messages delivered since it was
	// written, at savedAt
	cursor, saved int64
	synced        bool
	sinceSave     int
	savedAt       time.Time
	// Housekeeping (emptying the log, rewriting dlq.log) costs a few
	// fsyncs: it runs at an idle moment at most once per Poll, so that a
	// steady trickle of messages does not pay for it each time. A round
	// that fails (a full disk) is tried again after a pause that doubles
	// from Poll up to maxRestartPause, and logged at the 1st, 2nd, 4th,
	// 8th… failure in a row: every idle queue of the process tried it and
	// logged it at every Poll for as long as the disk stayed full.
	housekept, housekeepAfter time.Time
	housekeepFailures         int
}

// saveCheckpoint writes the cursor, durably if asked, waiting for a write
// that fails (persist): the messages it passes were delivered.
func (l *deliveryLoop) saveCheckpoint(durable bool) error {
	if l.cursor == l.saved && (l.synced || !durable) {
		return nil
	}
	return l.w.persist(l.hctx, func() error {
		// rewritten before a sync that failed is tried again: a failed
		// fsync may have dropped the page it was to write
		if err := writeCheckpoint(l.ckpt, l.cursor, durable); err != nil {
			return err
		}
		l.saved, l.synced, l.sinceSave, l.savedAt = l.cursor, durable, 0, l.w.cfg.Clock.Now()
		return nil
	})
}

// stopped makes the checkpoint durable as the worker stops: one try.
func (l *deliveryLoop) stopped() {
	if l.ckptAtPath() != nil {
		return // the file at the path cannot be opened: the next worker reads what it holds
	}
	if l.cursor != l.saved {
		writeCheckpoint(l.ckpt, l.cursor, true)
	} else if !l.synced {
		l.ckpt.Sync()
	}
}

// ckptAtPath makes sure the checkpoint the loop rewrites in place is
// segment.log.ckpt, the file at its path: one deleted or replaced by hand
// while the worker runs is opened (or created) again and the cursor
// written to it at the next save. Rewriting the file it had open, the
// worker kept its progress where no process reads it: the log was never
// emptied, and the next worker delivered every message in it again.
func (l *deliveryLoop) ckptAtPath() error {
	atPath, err := l.q.fs.Stat(l.ckptPath)
	if err == nil && sameFile(l.ckptInfo, atPath) {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", ckptFile, err)
	}
	f, err := l.q.openCheckpoint()
	if err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("checking %s: %w", ckptFile, err)
	}
	l.ckpt.Close()
	l.ckpt, l.ckptInfo = f, info
	l.saved, l.synced = -1, false
	return nil
}

// setRetry schedules r (replacing its message's entry), and clearRetry
// takes message id's entry out of the schedule: one record appended to
// the schedule's log each, waiting for a write that fails.
func (l *deliveryLoop) setRetry(r Retry) error {
	return l.changeRetries(func() error { return l.retries.set(r) })
}

func (l *deliveryLoop) clearRetry(id uint64) error {
	return l.changeRetries(func() error { return l.retries.clear(id) })
}

func (l *deliveryLoop) changeRetries(write func() error) error {
	err := l.w.persist(l.hctx, write)
	l.dropLost()
	if err != nil {
		return err
	}
	l.w.update(func(s *WorkerState) { s.RetriesPending = l.retries.Len() })
	return nil
}

// dropLost reports the retries a compaction of the schedule's log left
// out, their carried message damaged in the file.
func (l *deliveryLoop) dropLost() {
	lost := l.retries.takeLost()
	for _, x := range lost {
		l.dropDamaged(x.Retry, x.Damage)
	}
	if len(lost) > 0 {
		l.w.update(func(s *WorkerState) { s.RetriesPending = l.retries.Len() })
	}
}

// dropDamaged reports a retry whose carried message did not verify when
// read back from segment.log.retry (d): damage, as a reader reports it,
// and the retry dropped, as one whose message is gone from the log is.
// The caller takes it out of the schedule.
func (l *deliveryLoop) dropDamaged(r Retry, d Damage) {
	l.w.logger.Error("a scheduled retry's message did not verify in the retry schedule", append([]any{"event", "queue_damage"}, d.logAttrs()...)...) // tenant and flow: the logger's
	l.w.logger.Error("a scheduled retry's message is damaged: dropped", "event", "queue_dropped", "msg_id", r.ID, "attempt", r.Attempt, "offset", r.Offset)
	l.w.cfg.Counts.add("dropped")
}

// retryDue makes the attempt of the retry that is due first, if any, and
// reports whether there was one. It was scheduled before the messages now
// at the cursor were reached… but it lost its place, so the due one with
// the earliest time is taken. The clock is read only when a retry is
// scheduled: a busy queue's first attempts do not pay for it.
func (l *deliveryLoop) retryDue() (bool, error) {
	r, ok := l.retries.first()
	if !ok || r.Due.After(l.w.cfg.Clock.Now()) {
		return false, nil
	}
	// carried: read back from segment.log.retry (segment.log may have
	// been emptied since); else read in segment.log at its offset
	m, carried, damage, err := l.retries.message(r)
	if err != nil {
		return true, err // the schedule could not be read: the retry stays scheduled
	}
	if damage != nil {
		// the file rewritten without the damaged frame: Retries reads it
		// again at once
		l.dropDamaged(r, *damage)
		return true, l.changeRetries(func() error { return l.retries.drop(r.ID) })
	}
	if !carried {
		m, _, err = l.q.Read(r.Offset)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return true, err // the log could not be read: the retry stays scheduled
	}
	if err != nil || m.ID != r.ID {
		l.w.logger.Error("a scheduled retry's message is not in the log: dropped", "event", "queue_dropped", "msg_id", r.ID, "attempt", r.Attempt, "offset", r.Offset)
		if err := l.clearRetry(r.ID); err != nil {
			return true, err
		}
		l.w.cfg.Counts.add("dropped")
		return true, nil
	}
	next, _, err := l.w.attempt(l.hctx, m, r.Attempt)
	if err != nil {
		return true, err
	}
	if next != nil {
		return true, l.setRetry(*next) // its message's entry replaced
	}
	if err := l.saveCheckpoint(true); err != nil {
		// its retries over (acknowledged, or dead-lettered), the
		// message leaves the schedule: the checkpoint past it must be
		// durable first, or a power cut would take it back before the
		// message, which, in no schedule any more, would be delivered
		// again as a first attempt (a dead letter's budget spent again)
		return true, err
	}
	return true, l.clearRetry(r.ID)
}

// deliverNext makes the first attempt of the message at the cursor and
// moves the cursor past it; false when the log holds no message there.
func (l *deliveryLoop) deliverNext() (bool, error) {
	m, after, err := l.reader.Read(l.cursor)
	if errors.Is(err, io.EOF) {
		l.cursor = max(l.cursor, after) // past frames that did not verify at the tail
		return false, nil
	} else if err != nil {
		return true, err
	}
	// a message delivered before and waiting in the retry schedule: the
	// same offset and the same id (an offset can hold another message
	// after recovery cut a torn tail the schedule pointed into)
	if l.retries.has(m.ID, m.Offset) {
		l.cursor = after
		return true, nil
	}
	next, deadLettered, err := l.w.attempt(l.hctx, m, 1)
	if err != nil {
		return true, err
	}
	if next != nil {
		// the schedule is durable before the checkpoint passes the message
		if err := l.setRetry(*next); err != nil {
			return true, err
		}
	}
	l.cursor = after
	if deadLettered {
		// written past it at once (its dead letter is durable already):
		// a process killed before the next write ran it again at its
		// next start, an attempt past its budget, and dead-lettered it
		// twice; a dead letter costs an fdatasync, this write none
		return true, l.saveCheckpoint(false)
	}
	if l.sinceSave++; l.sinceSave >= l.w.cfg.CheckpointEvery || l.w.cfg.Clock.Now().Sub(l.savedAt) >= l.w.cfg.CheckpointAfter {
		return true, l.saveCheckpoint(false)
	}
	return true, nil
}

// housekeep compacts the retry schedule's log and rewrites dlq.log without
// the marked dead letters at an idle moment, and empties the log when
// every retry scheduled carries its message (none reads it from the log),
// at most once per Poll and not before a pause after failures is over.
// The whole of it waited for an empty schedule: a queue that kept failing
// (a retry always pending) kept its discarded dead letters' bodies in
// dlq.log, and every message in segment.log, for as long as the failures
// went on.
func (l *deliveryLoop) housekeep(now time.Time) error {
	w, q := l.w, l.q
	if now.Before(l.housekeepAfter) || !l.housekept.IsZero() && pollSlot(now, w.cfg.Poll) == pollSlot(l.housekept, w.cfg.Poll) {
		return nil
	}
	l.housekept = now
	var failed []string // what this round could not do, and why
	// the schedule's log emptied of the changes past its live entries
	if err := l.retries.tidy(); err != nil {
		failed = append(failed, "the retry schedule could not be compacted: "+err.Error())
	}
	l.dropLost()
	drain := error(ErrNotDrained)
	if l.retries.carried() {
		// every pending retry carries its message (none reads the log);
		// the schedule, its one writer, is this worker's
		drain = q.drain(l.retries.carried)
	}
	switch err := drain; {
	case err == nil:
		// emptied (or empty): whatever another process appends from
		// now on starts at offset 0; the drain synced the checkpoint
		l.cursor, l.saved, l.synced = 0, 0, true
		l.reader.reset()
	case errors.Is(err, ErrNotDrained):
	default:
		failed = append(failed, "the queue could not be emptied: "+err.Error())
		// not started (the append lock busy: ErrLockBusy), or stopped
		// somewhere between marking the drain and writing the
		// checkpoint back to 0: the checkpoint file tells where the
		// messages appended since begin (at 0 when the log was emptied,
		// past others' appends or not), which the size alone cannot; it
		// is written again at the next idle moment
		c, err := q.Checkpoint()
		if err != nil {
			return err
		}
		l.cursor, l.saved = c, -1
		l.reader.reset()
	}
	applied, damage, err := q.CompactDLQ()
	if err != nil {
		failed = append(failed, "dlq.log could not be rewritten: "+err.Error())
	}
	switch {
	case len(failed) > 0:
		l.housekeepFailures++
		pause := w.pause(l.housekeepFailures - 1)
		l.housekeepAfter = now.Add(pause)
		if sparse(l.housekeepFailures) {
			w.logger.Error("the queue's housekeeping failed; it is tried again after a pause", "event", "housekeeping_failed",
				"error", strings.Join(failed, "; "), "failures", l.housekeepFailures, "pause_ms", pause.Milliseconds())
		}
	case l.housekeepFailures > 0:
		w.logger.Info("the queue's housekeeping went through again", "event", "housekeeping_resumed", "failures", l.housekeepFailures)
		l.housekeepFailures, l.housekeepAfter = 0, time.Time{}
	}
	for _, d := range damage {
		w.logger.Error("a dead-letter file held damage, left out when it was rewritten", append([]any{"event", "queue_damage"}, d.logAttrs()...)...) // tenant and flow: the logger's
	}
	for _, m := range applied {
		w.logMarked(m)
	}
	return nil
}

// untilNextPoll is how long an idle worker waits before it looks again:
// until the next whole multiple of poll on the clock, at most poll. Every
// idle worker of the process (one per queue, for the process's life) then
// wakes at the same moments, the process twice a second at the default
// poll rather than at each worker's own phase: with 100 idle queues, the
// wake-ups alone (threads parked and woken 200 times a second) cost 5% of
// a core. A submission wakes its worker at once whatever the wait.
func untilNextPoll(now time.Time, poll time.Duration) time.Duration {
	if poll <= 0 {
		return poll
	}
	return poll - time.Duration(now.UnixNano()%int64(poll))
}

// sparse reports whether the n-th failure in a row (from 1) is logged:
// the 1st, 2nd, 4th, 8th…
func sparse(n int) bool { return n&(n-1) == 0 }

// pollSlot numbers the stretch of time between two of the moments
// untilNextPoll waits for that holds t.
func pollSlot(t time.Time, poll time.Duration) int64 {
	if poll <= 0 {
		return t.UnixNano()
	}
	return t.UnixNano() / int64(poll)
}

// logMarked logs an operator's action on a dead letter (nexus dlq replay
// or discard, from any process) once the worker has applied it to dlq.log.
func (w *Worker) logMarked(m Marked) {
	at := slog.String("marked_at", m.At.Format(time.RFC3339Nano))
	switch m.Action {
	case MarkReplayed:
		attrs := []any{"event", "dlq_replayed", "msg_id", m.ID, at}
		if m.ReplayID != 0 {
			attrs = append(attrs, "replay_msg_id", m.ReplayID)
		}
		w.logger.Info("a dead letter was replayed as a new message", attrs...)
	case MarkDiscarded:
		w.logger.Info("a dead letter was discarded", "event", "dlq_discarded", "msg_id", m.ID, at)
	}
}

// attempt delivers m and acts on the verdict. It returns the retry to
// schedule, if any, and whether m was moved to the dead-letter queue
// (deadLettered). ctx is the deliveries' context (see deliver).
// errInterrupted is attempt's answer for a delivery the stop cut short.
var errInterrupted = errors.New("the delivery was cut short by the stop")

func (w *Worker) attempt(ctx context.Context, m Message, attempt int) (next *Retry, deadLettered bool, err error) {
	w.update(func(s *WorkerState) { s.InFlight++ })
	v := w.handle(ctx, Delivery{Message: m, Tenant: w.q.Tenant, Flow: w.q.Flow, Attempt: attempt})
	w.update(func(s *WorkerState) { s.InFlight-- })
	if v.Kind == VerdictInterrupted && ctx.Err() == nil {
		// a context of the handler's own ended, not the worker's: the
		// worker goes on, and the message comes back in a second
		v.Kind = VerdictRetryLater
	}
	if v.Kind == VerdictInterrupted {
		// the stop's grace ran out and cut the delivery short: that is
		// not the message's failure, and not an attempt; the checkpoint
		// stays before it (or its retry as it was), so the next start
		// delivers it again, as after a kill
		w.logger.Warn("the shutdown cut the delivery short; it is made again at the next start", "event", "queue_interrupted",
			"msg_id", m.ID, "correlation_id", m.CorrelationID, "attempt", attempt, "error", v.Error)
		return nil, false, errInterrupted
	}
	log := func(level slog.Level, msg, event string, attrs ...slog.Attr) {
		var buf [12]slog.Attr // on the stack: a line's attributes fit, as a rule
		all := append(buf[:0], slog.Uint64("msg_id", m.ID), slog.String("correlation_id", m.CorrelationID),
			slog.Int("attempt", attempt), slog.String("event", event))
		jsonlog.LogAttrs(context.Background(), w.logger, level, msg, append(append(all, attrs...), v.Attrs...)...)
	}
	count := w.cfg.Counts.add
	if v.Kind == VerdictAck {
		level := slog.LevelInfo
		if v.Outcome == "fault_handled" {
			// a failure its fault handler answered: a warning, as /run's
			// run_completed line of the same outcome is
			level = slog.LevelWarn
		}
		if v.Outcome == "filtered" {
			log(level, "message filtered", "queue_filtered")
		} else {
			log(level, "message processed", "queue_processed", slog.String("outcome", v.Outcome))
		}
		count(v.Outcome)
		return nil, false, nil
	}
	now := w.cfg.Clock.Now() // after the attempt: a retry's delay counts from its end
	switch v.Kind {
	case VerdictRetryLater:
		log(slog.LevelWarn, "the message could not run now; retrying in 1 s without using an attempt", "queue_retry_scheduled",
			slog.Int64("delay_ms", RetryLaterDelay.Milliseconds()), slog.String("error", v.Error))
		return &Retry{ID: m.ID, Offset: m.Offset, Attempt: attempt, Due: now.Add(RetryLaterDelay), Message: carry(m)}, false, nil
	case VerdictRetry:
		if int64(attempt) < min(int64(v.Policy.MaxAttempts), MaxAttempts) { // the next attempt's number fits its record (int64: MaxAttempts overflows a 32-bit int)
			d := Delay(v.Policy, attempt)
			log(slog.LevelWarn, "attempt failed; retry scheduled", "queue_retry_scheduled",
				slog.Int64("delay_ms", d.Milliseconds()), slog.Int("next_attempt", attempt+1), slog.String("error", v.Error))
			return &Retry{ID: m.ID, Offset: m.Offset, Attempt: attempt + 1, Due: now.Add(d), Message: carry(m)}, false, nil
		}
		fallthrough
	case VerdictDeadLetter:
		d := DeadLetter{ID: m.ID, EnqueuedAt: m.EnqueuedAt, FailedAt: now, Attempts: attempt, LastError: v.Error, Payload: m.Payload}
		err := w.q.tooLargeForDLQ(d) // no write can succeed, now or later
		if err == nil {
			err = w.persist(ctx, func() error { return w.q.MoveToDLQ(d) })
		}
		if errors.Is(err, ErrTooLarge) {
			// it can never be written as a dead letter: said loudly, not
			// retried for ever in front of the queue
			log(slog.LevelError, "message dropped: too large to keep as a dead letter", "queue_dropped",
				slog.String("error", v.Error), slog.String("reason", err.Error()))
			count("dropped")
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("moving message %d to the dead-letter queue: %w", m.ID, err)
		}
		log(slog.LevelError, "message moved to the dead-letter queue", "dlq_moved", slog.Int("attempts", attempt), slog.String("last_error", v.Error))
		count("dead_lettered")
		return nil, true, nil
	case VerdictDrop:
		log(slog.LevelError, "message dropped: it can never succeed", "queue_dropped", slog.String("error", v.Error))
		count("dropped")
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("handler returned verdict kind %d", v.Kind)
}

// carry is the copy of m a retry carries (see Retry.Message): made only
// for a retry, so that a delivery acknowledged allocates nothing for it.
func carry(m Message) *Message {
	if !carryRetries {
		return nil
	}
	return &m
}

// carryRetries has the worker's retries carry their message; a variable
// so that tests can have them read it in segment.log, as older versions'
// did, which keeps the log from being emptied while one is pending.
var carryRetries = true

// handle calls the handler; a panic is a failed attempt with its file and
// line in the error, never a dead worker.
func (w *Worker) handle(ctx context.Context, d Delivery) (v Verdict) {
	defer func() {
		if p := recover(); p != nil {
			where := "unknown"
			pcs := make([]uintptr, 32)
			frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
			for {
				f, more := frames.Next()
				// the first frame outside Go's runtime is where it panicked
				if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "internal/") {
					where = fmt.Sprintf("%s:%d", f.File, f.Line)
					break
				}
				if !more {
					break
				}
			}
			w.logger.Error("the handler panicked; the attempt counts as failed", "event", "handler_panic",
				"msg_id", d.ID, "correlation_id", d.CorrelationID, "attempt", d.Attempt, "panic", fmt.Sprint(p), "at", where)
			v = Verdict{Kind: VerdictRetry, Policy: w.panicPolicy(), Error: fmt.Sprintf("internal error: panic at %s", where)}
		}
	}()
	return w.cfg.Handler.Handle(ctx, d)
}

// panicPolicy is the retry policy of an attempt whose handler panicked:
// the flow's (WorkerConfig.Policy) when known, else DefaultRetryPolicy. A
// panic used to be retried with the default policy whatever the flow's
// queue_* keys said (3 attempts where the flow allowed 10, or 20).
func (w *Worker) panicPolicy() (p RetryPolicy) {
	if w.cfg.Policy == nil {
		return DefaultRetryPolicy
	}
	defer func() {
		if recover() != nil {
			p = DefaultRetryPolicy
		}
	}()
	if p, ok := w.cfg.Policy(w.q.Tenant, w.q.Flow); ok {
		return p
	}
	return DefaultRetryPolicy
}
