package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexushq/nexus/clock"
	"github.com/nexushq/nexus/lifecycle"
)

// ErrBudget is returned when the residency budget is spent: no new worker
// can start in this process.
var ErrBudget = errors.New("no worker can be started: the residency budget (--max-workers) is spent")

// FilesPerQueue is how many open files a queue with a worker needs: it
// holds five for as long as the process runs (segment.log and its .seq,
// the checkpoint, append.lock and worker.lock), and housekeeping opens
// one more for a moment. A budget of MaxWorkers queues needs MaxWorkers·FilesPerQueue
// descriptors besides the process's others (nexus serve fits its budget
// to half the open-file limit).
const FilesPerQueue = 6

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Root       string // {state}/queues
	FS         FS     // nil: OS
	MaxWorkers int    // the residency budget; 0 means 256 (see FilesPerQueue)
	Handler    Handler
	// Policy is passed to every worker's WorkerConfig.Policy: the retry
	// policy of a flow whose handler panicked.
	Policy func(tenant, flow string) (RetryPolicy, bool)
	Clock  clock.Clock
	Logger *slog.Logger
	Poll   time.Duration
	Now    func() time.Time // the time stamped on appended messages; nil: time.Now
	// StopGrace is how long Stop lets a delivery in progress run before
	// cancelling it (not counted as an attempt); 0 means 30 s.
	StopGrace time.Duration
	// SweepEvery is how often the files of idle queues (no worker in any
	// process, nothing pending) are deleted; 0 means one minute.
	SweepEvery time.Duration
	// OnCommit is passed to every queue's Options.OnCommit.
	OnCommit func(messages int, sync time.Duration)
	// LockWait is passed to every queue's Options.LockWait, and bounds
	// Appended's wait for the append lock too; 0 means DefaultLockWait.
	LockWait time.Duration
}

// Manager holds the queues this process has opened and their workers: a
// worker starts with the first use of its queue after the process starts
// and runs until Stop. The number of queues with a worker (running or
// standing by) is capped by the residency budget.
type Manager struct {
	cfg ManagerConfig

	mu     sync.Mutex
	queues map[[2]string]*managed
	// reopening counts the reopenings in progress of each poisoned queue
	// (reopen; a reopened queue may fail again before the first is done):
	// out of queues, it keeps its slot of the budget
	reopening map[[2]string]int
	// holds spaces out the reopenings of a queue whose log keeps failing
	// (reopen): until a hold's time, the queue is not opened again
	holds map[[2]string]reopenHold
	// counts are the delivery counts of every queue opened, kept across
	// the workers of a queue reopened
	counts map[[2]string]*DeliveryCounts
	// deadLetters caches each queue's count of pending dead letters with
	// the stamp of the files it was counted from, so that describing the
	// queues (/metrics, which anyone may call) reads dlq.log only when it
	// changed
	deadLetters map[[2]string]cachedCount
	// cursors are where the last count of each queue's log ended (Counts)
	cursors map[[2]string]*countCursor
	// opening are the queues being opened (Queue), outside m.mu: opening a
	// queue waits for its append lock, which another process may hold for
	// seconds, and every other queue's submissions went through m.mu
	opening map[[2]string]*opening
	// stopping is set when Stop begins: no worker starts any more, but
	// the queues take appends until the workers have stopped (a delivery
	// in flight may publish); closed is set once they have
	stopping, closed bool

	sweeper  lifecycle.Loop // the housekeeping of idle queues (Start)
	retiring sync.WaitGroup // poisoned queues whose worker is stopping (reopen)
	// marks are the Opens of a replay or discard (marking), which go on
	// in the background when their caller gives up: Stop waits for them
	marks sync.WaitGroup
	// retired are the workers being retired (reopen) of each queue, and
	// retiredN how many there are in all (read without m.mu by Append)
	retired     map[[2]string][]*Worker
	retiredN    atomic.Int64
	done        chan struct{} // closed by Stop: reopen gives up retrying
	stopOnce    sync.Once
	workersOnce sync.Once
}

type managed struct {
	q *Queue
	w *Worker
}

// opening is a queue being opened: done is closed once it is open (in
// Manager.queues) or could not be, err saying why.
type opening struct {
	done chan struct{}
	err  error
}

// NewManager returns a Manager; it opens nothing until used.
func NewManager(cfg ManagerConfig) *Manager {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = DefaultLockWait
	}
	return &Manager{cfg: cfg, queues: map[[2]string]*managed{}, reopening: map[[2]string]int{}, holds: map[[2]string]reopenHold{},
		counts: map[[2]string]*DeliveryCounts{}, deadLetters: map[[2]string]cachedCount{},
		cursors: map[[2]string]*countCursor{}, opening: map[[2]string]*opening{}, retired: map[[2]string][]*Worker{}, done: make(chan struct{})}
}

// Queue returns the open queue tenant/flow with its worker, opening the
// queue and starting the worker on first use. It fails with the name
// rule's error for a bad name and with ErrBudget when no worker can start.
// Once Stop has begun, a queue opened takes appends but its worker does
// not start. The queue is opened outside the Manager's lock (it waits for
// the queue's append lock, which another process may hold), so that one
// queue's opening holds up no other queue; concurrent callers for the same
// queue wait for the one opening it.
func (m *Manager) Queue(tenant, flow string) (*Queue, *Worker, error) {
	k := [2]string{tenant, flow}
	m.mu.Lock()
	for {
		if m.closed {
			m.mu.Unlock()
			return nil, nil, errors.New("the queues are shut down")
		}
		if e, ok := m.queues[k]; ok {
			m.mu.Unlock()
			return e.q, e.w, nil
		}
		o := m.opening[k]
		if o == nil {
			break
		}
		m.mu.Unlock()
		if <-o.done; o.err != nil {
			return nil, nil, o.err
		}
		m.mu.Lock()
	}
	if err := m.mayOpen(k); err != nil {
		m.mu.Unlock()
		return nil, nil, err
	}
	o := &opening{done: make(chan struct{})}
	m.opening[k] = o
	m.mu.Unlock()

	locked, opened := false, false
	defer func() {
		// whatever the end, a panic included: the waiters are let go
		// (before the unlock, so that they find the queue) and the
		// queue's slot given back if it was not opened
		if !locked {
			m.mu.Lock()
		}
		if !opened && o.err == nil {
			o.err = fmt.Errorf("queue %s/%s could not be opened", tenant, flow)
		}
		delete(m.opening, k)
		close(o.done)
		m.mu.Unlock()
	}()
	q, damage, err := Open(m.cfg.Root, tenant, flow, Options{FS: m.cfg.FS, Now: m.cfg.Now, OnCommit: m.cfg.OnCommit, LockWait: m.cfg.LockWait,
		OnDamage: m.damageLogger(tenant, flow)})
	m.mu.Lock()
	locked = true
	if err == nil && m.closed { // Stop closed the queues meanwhile
		q.Close()
		err = errors.New("the queues are shut down")
	}
	if err != nil {
		o.err = err
		return nil, nil, err
	}
	m.logDamage(tenant, flow, damage)
	counts := m.counts[k]
	if counts == nil {
		counts = &DeliveryCounts{}
		m.counts[k] = counts
	}
	w := NewWorker(q, WorkerConfig{Handler: m.cfg.Handler, Clock: m.cfg.Clock, Logger: m.cfg.Logger, Poll: m.cfg.Poll,
		StopGrace: m.cfg.StopGrace, Counts: counts, Policy: m.cfg.Policy})
	m.queues[k] = &managed{q: q, w: w}
	opened = true
	if !m.stopping {
		w.Start()
	}
	return q, w, nil
}

// logDamage logs what the recovery of tenant/flow's queue found, one
// queue_damage event each.
func (m *Manager) logDamage(tenant, flow string, damage []Damage) {
	for _, d := range damage {
		m.cfg.Logger.Error("queue recovery found damage", append([]any{"event", "queue_damage", "tenant", tenant, "flow", flow}, d.logAttrs()...)...)
	}
}

// damageLogger is the Options.OnDamage of tenant/flow's queue: what the
// queue finds and repairs while it is open is logged as Open's findings
// are (logDamage).
func (m *Manager) damageLogger(tenant, flow string) func(Damage) {
	return func(d Damage) { m.logDamage(tenant, flow, []Damage{d}) }
}

// mayOpen refuses to open queue k for a bad name, while its reopening is
// held back, or when the budget is spent. The caller holds m.mu.
func (m *Manager) mayOpen(k [2]string) error {
	if _, err := Dir(m.cfg.Root, k[0], k[1]); err != nil {
		return err
	}
	if h, ok := m.holds[k]; ok {
		if wait := h.at.Sub(m.cfg.Clock.Now()); wait > 0 {
			return &heldError{wait: wait, cause: h.cause}
		}
	}
	if m.reopening[k] == 0 && m.slotsTaken() >= m.cfg.MaxWorkers {
		return ErrBudget
	}
	return nil
}

// Budget says how much of the residency budget (MaxWorkers) is spent: the
// queues this process holds open, each with its worker, and the budget.
func (m *Manager) Budget() (taken, max int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slotsTaken(), m.cfg.MaxWorkers
}

// slotsTaken is how much of the budget is spent: the open queues and
// those being opened or reopened. The caller holds m.mu.
func (m *Manager) slotsTaken() int {
	n := len(m.queues)
	for k := range m.reopening {
		if _, ok := m.queues[k]; !ok {
			n++
		}
	}
	for k := range m.opening {
		if _, ok := m.queues[k]; !ok && m.reopening[k] == 0 {
			n++
		}
	}
	return n
}

// Has reports whether this process can take a message for tenant/flow: its
// worker exists or the budget allows one more.
func (m *Manager) Has(tenant, flow string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{tenant, flow}
	if _, ok := m.queues[k]; ok || m.reopening[k] > 0 || m.opening[k] != nil {
		return nil
	}
	if m.slotsTaken() >= m.cfg.MaxWorkers {
		return ErrBudget
	}
	return nil
}

// Append appends a message to tenant/flow's queue (after its fdatasync)
// and wakes its worker.
func (m *Manager) Append(tenant, flow string, nm NewMessage) (Message, error) {
	q, w, err := m.Queue(tenant, flow)
	if err != nil {
		return Message{}, err
	}
	msg, err := q.Append(nm)
	return m.appended(tenant, flow, q, w, msg, err)
}

// AppendContext is Append for a caller with a deadline of its own (a
// queue_publish step, under its execution's ceiling): when ctx ends while
// the queue is being opened (Open waits for the append lock) or while the
// append waits for the lock (see Queue.AppendContext), it returns at once,
// having appended nothing, with an error wrapping context.Cause(ctx); an
// opening it leaves goes on, and the queue is open for the next append.
func (m *Manager) AppendContext(ctx context.Context, tenant, flow string, nm NewMessage) (Message, error) {
	q, w, err := m.queueContext(ctx, tenant, flow)
	if err != nil {
		return Message{}, err
	}
	msg, err := q.AppendContext(ctx, nm)
	return m.appended(tenant, flow, q, w, msg, err)
}

// queueContext is Queue, returning when ctx ends first (the opening goes
// on without its caller).
func (m *Manager) queueContext(ctx context.Context, tenant, flow string) (*Queue, *Worker, error) {
	m.mu.Lock()
	_, open := m.queues[[2]string{tenant, flow}]
	open = open && !m.closed
	m.mu.Unlock()
	if open || ctx.Done() == nil {
		return m.Queue(tenant, flow)
	}
	type opened struct {
		q   *Queue
		w   *Worker
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		defer func() {
			// the caller's goroutine would have had it (the engine turns a
			// panic into an internal error): not the whole process's end
			if p := recover(); p != nil {
				ch <- opened{err: fmt.Errorf("queue %s/%s could not be opened: %v", tenant, flow, p)}
			}
		}()
		q, w, err := m.Queue(tenant, flow)
		ch <- opened{q, w, err}
	}()
	select {
	case o := <-ch:
		return o.q, o.w, o.err
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("queue %s/%s: not opened yet, nothing was appended: %w", tenant, flow, context.Cause(ctx))
	}
}

// appended is the end of Append and AppendContext: a poisoned queue is
// reopened, and the worker woken after an append.
func (m *Manager) appended(tenant, flow string, q *Queue, w *Worker, msg Message, err error) (Message, error) {
	if err != nil {
		if errors.Is(err, ErrPoisoned) {
			m.reopen(tenant, flow, q, err)
		}
		return Message{}, err
	}
	w.Wake()
	if m.retiredN.Load() > 0 {
		m.wakeRetired([2]string{tenant, flow})
	}
	return msg, nil
}

// wakeRetired wakes the workers being retired of queue k: a submission
// went through, so one waiting for a write of the queue's state (a full
// disk) tries it again now rather than after its pause (Worker.persist).
func (m *Manager) wakeRetired(k [2]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.retired[k] {
		w.Wake()
	}
}

// Replay replays tenant/flow's pending dead letter id (see Queue.Replay)
// through this process's queue and wakes its worker, starting it if need
// be (ErrBudget when none can be started). An id that is not pending is
// ErrNotPending, checked before any queue is opened or created.
func (m *Manager) Replay(tenant, flow string, id uint64, source, correlationID string) (Message, error) {
	return m.ReplayContext(context.Background(), tenant, flow, id, source, correlationID)
}

// ReplayContext is Replay for a caller with a context of its own (an
// operator's request): when ctx has ended, or ends while the queue is
// being opened or the replay waits for the append lock, it returns at
// once having written nothing, with an error wrapping context.Cause(ctx)
// (see Queue.ReplayContext). It ignored its caller's context, and waited
// LockWait for a lock another process held.
func (m *Manager) ReplayContext(ctx context.Context, tenant, flow string, id uint64, source, correlationID string) (Message, error) {
	if ctx.Err() != nil {
		return Message{}, notHandled(ctx, tenant, flow, id, "replayed")
	}
	if err := m.checkPending(tenant, flow, id); err != nil {
		return Message{}, err
	}
	q, w, err := m.queueContext(ctx, tenant, flow)
	if err != nil {
		return Message{}, err
	}
	msg, err := q.ReplayContext(ctx, id, source, correlationID)
	if errors.Is(err, ErrPoisoned) {
		m.reopen(tenant, flow, q, err) // as Append does: the next replay can work
	}
	if msg.ID != 0 {
		w.Wake()
	}
	return msg, err
}

// Discard marks tenant/flow's pending dead letter id discarded: it leaves
// the listings at once and the disk at the queue's next drain. It starts
// no worker (a worker of a flow no longer live would drop the queue's
// waiting messages) and needs none of the budget: it marks through the
// queue this process has open, or else through a handle of its own, as
// nexus dlq discard does. An id that is not pending is ErrNotPending,
// checked before anything is opened or created.
func (m *Manager) Discard(tenant, flow string, id uint64) error {
	return m.DiscardContext(context.Background(), tenant, flow, id)
}

// DiscardContext is Discard for a caller with a context of its own (an
// operator's request): when ctx has ended, or ends while a handle of the
// queue is being opened or the mark waits for the append lock, it returns
// at once having written nothing, with an error wrapping
// context.Cause(ctx). It ignored its caller's context, and waited
// LockWait for a lock another process held.
func (m *Manager) DiscardContext(ctx context.Context, tenant, flow string, id uint64) error {
	if ctx.Err() != nil {
		return notHandled(ctx, tenant, flow, id, "discarded")
	}
	if err := m.checkPending(tenant, flow, id); err != nil {
		return err
	}
	return m.marking(ctx, tenant, flow, id, "discarded", func(q *Queue) error { return q.MarkContext(ctx, id, MarkDiscarded) })
}

// notHandled is the error of a replay or discard of tenant/flow's dead
// letter id given up, having written nothing, as ctx ended; id 0 is a run
// over every dead letter (ReplayAllContext, DiscardAllContext).
func notHandled(ctx context.Context, tenant, flow string, id uint64, what string) error {
	if id == 0 {
		return fmt.Errorf("queue %s/%s: no dead letter was %s, nothing was written: %w", tenant, flow, what, context.Cause(ctx))
	}
	return fmt.Errorf("queue %s/%s: dead letter %d was not %s, nothing was written: %w", tenant, flow, id, what, context.Cause(ctx))
}

// marking runs mark on tenant/flow's queue: the one this process has
// open, or else a handle of its own, closed after, so that a discard
// starts no worker (its recovery's findings logged as Queue logs them).
// When ctx ends while that handle is being opened (Open waits for the
// append lock), it returns at once; the handle is closed once opened. The
// handle waits for the append lock the manager's LockWait at most, as
// every queue the manager opens does (it waited DefaultLockWait).
func (m *Manager) marking(ctx context.Context, tenant, flow string, id uint64, what string, mark func(*Queue) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("the queues are shut down")
	}
	e, open := m.queues[[2]string{tenant, flow}]
	if !open {
		m.marks.Add(1) // under m.mu, before Stop's Wait: it sets m.closed first
	}
	m.mu.Unlock()
	if open {
		return mark(e.q)
	}
	type opened struct {
		q      *Queue
		damage []Damage
		err    error
	}
	ch := make(chan opened) // unbuffered: a handle is handed over, or closed by its opener
	abandoned := make(chan struct{})
	go func() {
		defer m.marks.Done()
		q, damage, err := Open(m.cfg.Root, tenant, flow, Options{FS: m.cfg.FS, Now: m.cfg.Now, LockWait: m.cfg.LockWait, OnDamage: m.damageLogger(tenant, flow)})
		select {
		case ch <- opened{q, damage, err}:
		case <-abandoned:
			m.logDamage(tenant, flow, damage)
			if err == nil {
				q.Close()
			}
		}
	}()
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		close(abandoned)
		return notHandled(ctx, tenant, flow, id, what)
	}
	if o.err != nil {
		return o.err
	}
	m.logDamage(tenant, flow, o.damage)
	err := mark(o.q)
	if cerr := o.q.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReplayAll is Replay for every dead letter of tenant/flow pending when it
// begins, oldest first (Queue.ReplayAll), and returns the replays made
// (also with an error, those made before it) and the dead letters left
// pending because they cannot be replayed (Skipped). With none pending it
// opens nothing and starts no worker.
func (m *Manager) ReplayAll(tenant, flow, source string, correlationID func() string) ([]Replayed, []Skipped, error) {
	return m.ReplayAllContext(context.Background(), tenant, flow, source, correlationID)
}

// ReplayAllContext is ReplayAll for a caller with a context of its own (an
// operator's request): when ctx has ended, or ends while the queue is
// being opened, it returns at once having written nothing; when it ends
// during the run, the run stops before its next chunk (or as that chunk
// waits for the append lock, having written nothing of it) and returns the
// replays made, with an error that says how many and wraps
// context.Cause(ctx) (Queue.ReplayAllContext). ReplayAll took no context:
// a run whose request had ended went on to the last dead letter.
func (m *Manager) ReplayAllContext(ctx context.Context, tenant, flow, source string, correlationID func() string) ([]Replayed, []Skipped, error) {
	if ctx.Err() != nil {
		return nil, nil, notHandled(ctx, tenant, flow, 0, "replayed")
	}
	upTo, err := m.newestPending(tenant, flow)
	if err != nil || upTo == 0 {
		return nil, nil, err
	}
	q, w, err := m.queueContext(ctx, tenant, flow)
	if err != nil {
		return nil, nil, err
	}
	var out []Replayed
	var skipped []Skipped
	_, err = q.ReplayAllContext(ctx, upTo, source, correlationID, func(r Replayed) { out = append(out, r) }, func(s Skipped) { skipped = append(skipped, s) })
	if errors.Is(err, ErrPoisoned) {
		m.reopen(tenant, flow, q, err)
	}
	if len(out) > 0 {
		w.Wake()
	}
	return out, skipped, err
}

// DiscardAll is Discard for every dead letter of tenant/flow pending when
// it begins (Queue.MarkAll), and returns the ids discarded. Like Discard,
// it starts no worker.
func (m *Manager) DiscardAll(tenant, flow string) ([]uint64, error) {
	return m.DiscardAllContext(context.Background(), tenant, flow)
}

// DiscardAllContext is DiscardAll for a caller with a context of its own:
// it stops as ReplayAllContext does (Queue.MarkAllContext), returning the
// ids discarded before. DiscardAll took no context.
func (m *Manager) DiscardAllContext(ctx context.Context, tenant, flow string) ([]uint64, error) {
	if ctx.Err() != nil {
		return nil, notHandled(ctx, tenant, flow, 0, "discarded")
	}
	upTo, err := m.newestPending(tenant, flow)
	if err != nil || upTo == 0 {
		return nil, err
	}
	var out []uint64
	err = m.marking(ctx, tenant, flow, 0, "discarded", func(q *Queue) error {
		_, err := q.MarkAllContext(ctx, upTo, MarkDiscarded, func(id uint64) { out = append(out, id) })
		return err
	})
	return out, err
}

// newestPending is the id of tenant/flow's newest pending dead letter,
// read from its files (nothing is opened or created), 0 when none is.
func (m *Manager) newestPending(tenant, flow string) (uint64, error) {
	p, err := m.Peek(tenant, flow)
	if err != nil {
		return 0, err
	}
	ids, err := p.PendingIDs()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[len(ids)-1], nil
}

// Peek is Peek(root, tenant, flow, fs) for this manager's queues: their
// files, read without opening or creating anything.
func (m *Manager) Peek(tenant, flow string) (*Queue, error) {
	return Peek(m.cfg.Root, tenant, flow, m.cfg.FS)
}

// Counts counts tenant/flow's messages from its files, as ReadCounts does
// (nothing is opened or created), but reads only what came after its last
// count of the queue: the management UI and API count every queue at each
// view, and read each whole log again every time (0.3 s for a backlog of
// 200,000 messages, where the count after an append now takes 50 µs).
func (m *Manager) Counts(tenant, flow string) (Counts, error) {
	if _, err := Dir(m.cfg.Root, tenant, flow); err != nil {
		return Counts{}, err
	}
	k := [2]string{tenant, flow}
	m.mu.Lock()
	cur := m.cursors[k]
	if cur == nil {
		cur = &countCursor{}
	}
	m.mu.Unlock()
	c, err := readCountsFrom(cur, m.cfg.Root, tenant, flow, m.cfg.FS)
	// kept for the queues with messages in their log (not for every name
	// asked about, nor for the logs the janitor has removed)
	cur.mu.Lock()
	keep := cur.at.headed
	cur.mu.Unlock()
	m.mu.Lock()
	if keep {
		m.cursors[k] = cur
	} else if m.cursors[k] == cur {
		delete(m.cursors, k)
	}
	m.mu.Unlock()
	return c, err
}

// checkPending is ErrNotPending unless id is a pending dead letter of
// tenant/flow, read from the files (so that a wrong name or id creates
// nothing).
func (m *Manager) checkPending(tenant, flow string, id uint64) error {
	q, err := m.Peek(tenant, flow)
	if err != nil {
		return err
	}
	_, err = q.DeadLetter(id)
	return err
}

// reopen replaces a poisoned queue: it leaves the open queues at once, so
// that the next submission opens the queue again (which verifies its log)
// with a new worker, and in the background its worker is retired and the
// old handle closed. The worker may be in the middle of a delivery, or
// waiting for a write of the queue's state that it needs (a full disk),
// which Retire lets it finish, however long that takes (until the
// Manager stops): the submission whose write failed answers without
// waiting for it. Stopped instead, a worker waiting on a full disk left
// its last attempt to be made again by the next worker, once per failed
// submission. The new worker stands by on the worker lock until the old
// one has let it go, and is woken then. The queue keeps its slot of the
// budget meanwhile, and the reopening is tried again after a pause until
// it works: the messages acknowledged before the failure need a worker.
//
// A queue whose log keeps failing (a disk full for minutes) is reopened at
// once the first time, then after 1 s, 2 s, 4 s and so on up to 10 s
// (reopenHold) rather than at every failed submission: each reopening
// opens and verifies the files and starts a worker, and a host under load
// did that a few hundred times a second. Meanwhile its submissions are
// refused with the failure that poisoned it (heldError, which wraps
// ErrPoisoned).
func (m *Manager) reopen(tenant, flow string, old *Queue, cause error) {
	k := [2]string{tenant, flow}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.queues[k]
	if !ok || e.q != old || m.stopping {
		return // reopened already, or Stop closes it
	}
	delete(m.queues, k)
	m.holdReopening(k, cause)
	m.reopening[k]++
	m.retiring.Add(1) // under m.mu, before Stop sets stopping and waits
	m.retired[k] = append(m.retired[k], e.w)
	m.retiredN.Add(1)
	go func() {
		defer m.retiring.Done()
		e.w.Retire(m.done)
		m.mu.Lock()
		if m.retired[k] = slices.DeleteFunc(m.retired[k], func(w *Worker) bool { return w == e.w }); len(m.retired[k]) == 0 {
			delete(m.retired, k)
		}
		m.retiredN.Add(-1)
		m.mu.Unlock()
		e.q.Close()
		defer func() {
			m.mu.Lock()
			if m.reopening[k]--; m.reopening[k] == 0 {
				delete(m.reopening, k)
			}
			m.mu.Unlock()
		}()
		pause := max(m.cfg.Poll, 100*time.Millisecond)
		for {
			// the queue opened again (by a submission meanwhile, or here):
			// its worker, standing by on the lock the old one held, tries
			// it now
			_, w, err := m.Queue(tenant, flow)
			if err == nil {
				w.Wake()
				return
			}
			m.mu.Lock()
			stopping := m.stopping // shut down meanwhile: nothing to reopen
			m.mu.Unlock()
			if stopping {
				return
			}
			if held := (*heldError)(nil); errors.As(err, &held) {
				select { // not before its time
				case <-m.done:
					return
				case <-m.cfg.Clock.After(held.wait):
				}
				continue
			}
			m.cfg.Logger.Error("a queue could not be reopened after a failed write; trying again after a pause", "event", "queue_reopen_failed",
				"tenant", tenant, "flow", flow, "error", err.Error(), "pause_ms", pause.Milliseconds())
			select {
			case <-m.done:
				return
			case <-m.cfg.Clock.After(pause):
			}
			pause = min(2*pause, maxRestartPause)
		}
	}()
}

// reopenHold is when a poisoned queue may be opened again (at), the
// failure that poisoned it, and the spacing of the reopening after that.
type reopenHold struct {
	at    time.Time
	next  time.Duration
	cause error
}

// The spacing of a failing queue's reopenings: the second waits
// firstReopenSpacing after the first, each later one twice as long as the
// one before, up to maxReopenSpacing.
const (
	firstReopenSpacing = time.Second
	maxReopenSpacing   = 10 * time.Second
)

// holdReopening records that k is reopened after a failure (cause): at
// once if its last reopening is long past (twice its spacing), else not
// before the spacing since it has passed. Holds of quiet queues are
// dropped. The caller holds m.mu.
func (m *Manager) holdReopening(k [2]string, cause error) {
	now := m.cfg.Clock.Now()
	for o, h := range m.holds {
		if now.Sub(h.at) > 2*h.next {
			delete(m.holds, o)
		}
	}
	h, ok := m.holds[k]
	if !ok {
		h = reopenHold{at: now, next: firstReopenSpacing}
	} else {
		h.at = h.at.Add(h.next)
		if h.at.Before(now) {
			h.at = now
		}
		h.next = min(2*h.next, maxReopenSpacing)
	}
	h.cause = cause
	m.holds[k] = h
}

// heldError refuses a submission to a queue whose reopening is held back
// (holdReopening); it wraps the failure that poisoned the queue.
type heldError struct {
	wait  time.Duration
	cause error
}

func (e *heldError) Error() string {
	// (the cause names the queue)
	return fmt.Sprintf("%v (the queue is reopened in %s)", e.cause, e.wait.Round(time.Millisecond))
}

func (e *heldError) Unwrap() error { return e.cause }

// QueueInfo describes one open queue.
type QueueInfo struct {
	Tenant, Flow string
	Depth        int64 // messages of the log not yet processed (Counts)
	// Counts is the count of the log that Depth was taken from, read
	// with the rest of the description (a second read for the same
	// description could count a message that moved meanwhile twice, or
	// not at all); CountsErr is why it could not be read (Depth is 0)
	Counts      Counts
	CountsErr   error
	State       WorkerState
	DeadLetters int
	// DamagedDeadLetters counts the damaged frames of the dead-letter
	// files (see nexus dlq list): dead letters that cannot be read
	DamagedDeadLetters int
	// DeadLettersErr is why the dead-letter files could not be read
	// (DeadLetters and DamagedDeadLetters are then 0)
	DeadLettersErr error
	// RetriesErr is why the retry schedule could not be read, for a queue
	// whose retries are read from its files (State.RetriesPending is then 0)
	RetriesErr error
	Open       bool // opened in this process, its worker started
}

// Queues describes the queues open in this process and, read from their
// files, the others on disk (so that their dead letters and retries are
// seen after a restart too), sorted.
func (m *Manager) Queues() []QueueInfo {
	return m.QueuesOf("", "")
}

// QueuesOf is Queues for the queues of tenant and of flows named flow (""
// for any): the others are left out before their files are read, so a
// filtered listing costs the queues it lists, not every queue's counts.
func (m *Manager) QueuesOf(tenant, flow string) []QueueInfo {
	keep := func(k [2]string) bool {
		return (tenant == "" || k[0] == tenant) && (flow == "" || k[1] == flow)
	}
	m.mu.Lock()
	list := make([]*managed, 0, len(m.queues))
	open := make(map[[2]string]bool, len(m.queues))
	for k, e := range m.queues {
		if keep(k) {
			list = append(list, e)
		}
		open[k] = true
	}
	m.mu.Unlock()
	out := make([]QueueInfo, 0, len(list))
	if names, err := QueueNames(m.cfg.Root, m.cfg.FS); err == nil {
		for _, n := range names {
			if !open[n] && keep(n) {
				out = append(out, m.onDisk(n[0], n[1]))
			}
		}
	}
	for _, e := range list {
		out = append(out, m.openInfo(e))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Flow < out[j].Flow
	})
	return out
}

// Info describes tenant/flow's queue as Queues does, reading only its
// files; false when it is neither open here nor on disk.
func (m *Manager) Info(tenant, flow string) (QueueInfo, bool) {
	m.mu.Lock()
	e, open := m.queues[[2]string{tenant, flow}]
	m.mu.Unlock()
	if open {
		return m.openInfo(e), true
	}
	dir, err := Dir(m.cfg.Root, tenant, flow)
	if err != nil {
		return QueueInfo{}, false
	}
	if st, err := m.fs().Stat(dir); err != nil || !st.IsDir() {
		return QueueInfo{}, false
	}
	return m.onDisk(tenant, flow), true
}

// countDeadLetters sets info's dead-letter counts, or DeadLettersErr when
// q's dead-letter files cannot be read (the counts are then 0).
func (m *Manager) countDeadLetters(info *QueueInfo, q *Queue) {
	n, damaged, err := m.deadLetterCounts(q)
	if err != nil {
		info.DeadLettersErr = err
		return
	}
	info.DeadLetters, info.DamagedDeadLetters = n, damaged
}

// openInfo describes a queue this process has open. The log is counted
// before the worker's state is read, as onDisk counts it before reading
// the retries: a message whose attempt fails between the two reads is
// then pending and retrying at once (as the worker itself passes through
// it), never in neither count (processed by the checkpoint, its retry
// not yet in the state read before).
func (m *Manager) openInfo(e *managed) QueueInfo {
	info := QueueInfo{Tenant: e.q.Tenant, Flow: e.q.Flow, Open: true}
	m.count(&info)
	info.State = e.w.State()
	m.countDeadLetters(&info, e.q)
	if !info.State.Leading {
		// another process's worker delivers the queue: its retries are in
		// the files, not in this worker's state
		rs, err := e.q.Retries()
		info.State.RetriesPending, info.RetriesErr = len(rs), err
	}
	return info
}

// count sets info's Counts, and its Depth, the messages not yet processed
// (0 when the log cannot be read): after the first count of a log, only
// what was appended and processed since is read, so /metrics can say it in
// messages at every scrape.
func (m *Manager) count(info *QueueInfo) {
	info.Counts, info.CountsErr = m.Counts(info.Tenant, info.Flow)
	if info.CountsErr == nil {
		info.Depth = max(info.Counts.Total-info.Counts.Processed, 0)
	}
}

// onDisk describes a queue this process has not opened, from its files.
func (m *Manager) onDisk(tenant, flow string) QueueInfo {
	info := QueueInfo{Tenant: tenant, Flow: flow, State: WorkerState{Delivered: map[string]int64{}}}
	m.mu.Lock()
	if c := m.counts[[2]string{tenant, flow}]; c != nil {
		info.State.Delivered = c.Snapshot() // opened before (being reopened, say)
	}
	m.mu.Unlock()
	dir, err := Dir(m.cfg.Root, tenant, flow)
	if err != nil {
		return info
	}
	q := &Queue{Tenant: tenant, Flow: flow, dir: dir, fs: m.fs()}
	m.count(&info)
	rs, err := q.Retries()
	info.State.RetriesPending, info.RetriesErr = len(rs), err
	m.countDeadLetters(&info, q)
	return info
}

// Stop stops the housekeeping and every worker (each finishes its
// delivery in progress, up to StopGrace, and writes its checkpoint), then closes the
// queues. Until the workers have stopped the queues take appends: a
// delivery in flight may publish to another queue (opened then if need be,
// without starting its worker), and failing it would turn the delivery
// into a failed attempt. Safe twice, and at once: a second call returns
// when the first has finished.
func (m *Manager) Stop() {
	m.StopWorkers()
	m.stopOnce.Do(m.closeQueues)
}

// StopWorkers is the first half of Stop: every worker finishes the
// delivery it is in (up to its StopGrace) and starts no other, and none
// starts any more, while the queues go on taking appends (a /run or an
// /enqueue still being answered, a delivery in flight that publishes);
// what they take waits in the log for the next start. nexus serve calls it
// as soon as it is told to stop, while the HTTP server drains, so that a
// shutdown does not go on delivering a backlog. Safe to call more than
// once, and before Stop.
func (m *Manager) StopWorkers() { m.workersOnce.Do(m.stopWorkers) }

func (m *Manager) stopWorkers() {
	m.mu.Lock()
	m.stopping = true // before the sweeper stops: Start cannot start it again
	m.mu.Unlock()
	m.sweeper.Stop()
	close(m.done)
	m.retiring.Wait() // the poisoned queues being closed (reopen)
	m.mu.Lock()
	running := make([]*managed, 0, len(m.queues))
	for _, e := range m.queues {
		running = append(running, e)
	}
	m.mu.Unlock()
	m.each(running, func(e *managed) { e.w.Stop() })
}

// closeQueues is the second half of Stop, once the workers have stopped.
func (m *Manager) closeQueues() {
	m.mu.Lock()
	m.closed = true
	list := make([]*managed, 0, len(m.queues))
	for _, e := range m.queues {
		list = append(list, e) // those opened since too, their workers not started
	}
	m.queues = map[[2]string]*managed{}
	var openings []*opening // each closes its queue itself, finding m.closed
	for _, o := range m.opening {
		openings = append(openings, o)
	}
	m.mu.Unlock()
	m.each(list, func(e *managed) {
		e.w.Stop()
		if err := e.q.Close(); err != nil {
			m.cfg.Logger.Error("a queue did not close cleanly", "event", "queue_close_failed", "tenant", e.q.Tenant, "flow", e.q.Flow, "error", err.Error())
		}
	})
	for _, o := range openings {
		<-o.done
	}
	m.marks.Wait() // a replay or discard given up: its Open, LockWait at most
}

// each calls f for every entry of list at once and waits for them.
func (m *Manager) each(list []*managed, f func(*managed)) {
	var wg sync.WaitGroup
	for _, e := range list {
		wg.Go(func() { f(e) })
	}
	wg.Wait()
}

// String names the manager's root, for logs.
func (m *Manager) String() string { return fmt.Sprintf("queues at %s", m.cfg.Root) }

// stampSettle is how old a dlq.log stamp must be to be cached: far more
// than any file system's time step.
const stampSettle = 2 * time.Second

// cachedCount is a queue's count of pending dead letters with the stamp of
// the files it was counted from.
type cachedCount struct {
	stamp      dlqStamp
	n, damaged int
}

// deadLetterCounts is q.deadLetterCounts, read again only when dlq.log or
// its marks changed (their stamp).
func (m *Manager) deadLetterCounts(q *Queue) (int, int, error) {
	k := [2]string{q.Tenant, q.Flow}
	stamp, ok := q.dlqStamp()
	if ok {
		m.mu.Lock()
		c, hit := m.deadLetters[k]
		m.mu.Unlock()
		if hit && c.stamp == stamp {
			return c.n, c.damaged, nil
		}
	}
	// the stamp read before the count: a change meanwhile makes the next
	// call count again
	n, damaged, err := q.deadLetterCounts()
	// a stamp whose files changed within the file system's time step may
	// not change again when they do (an append over a torn tail keeps the
	// size): only a settled one is cached, as git treats its index
	if err == nil && ok && time.Since(stamp.changed()) > stampSettle {
		m.mu.Lock()
		m.deadLetters[k] = cachedCount{stamp: stamp, n: n, damaged: damaged}
		m.mu.Unlock()
	}
	return n, damaged, err
}
