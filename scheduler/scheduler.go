package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/gofrs/flock"

	"github.com/nexushq/nexus/clock"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/lifecycle"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// Source is the door of the messages a tick appends.
const Source = "cron"

// LiveSource gives the current live set.
type LiveSource interface {
	Live() *registry.LiveSet
}

// Appender appends a message to a flow's own queue (a *queue.Manager),
// starting the queue's worker on first use, and tells whether a tick was
// appended.
type Appender interface {
	Append(tenant, flow string, m queue.NewMessage) (queue.Message, error)
	// NextID is a lower bound of the id the queue's next message gets.
	NextID(tenant, flow string) (uint64, error)
	// Appended tells whether the queue's log holds the message appended
	// with the correlation ID cid, whose id is at least from.
	Appended(tenant, flow string, from uint64, cid string) (queue.Presence, error)
}

// Config configures a Scheduler.
type Config struct {
	Live   LiveSource
	Queues Appender
	// Dir holds the per-flow lock files and last-tick records
	// ({state}/cron).
	Dir    string
	Clock  clock.Clock  // nil: the real clock
	Logger *slog.Logger // nil: slog.Default()
	// Poll is how often the live set is checked for changed schedules and
	// how often a standby process tries to take a flow over; default 1 s.
	Poll time.Duration
	// NewID makes a tick's correlation ID.
	NewID func() string
}

// Scheduler ticks the cron flows of the live set: each tick appends the
// flow's schedule_input to its own queue with door cron, so its retries,
// dead-letter queue and journal apply. Among processes sharing a state
// directory, a lock file per flow lets one of them tick it; a record of the
// last tick keeps a takeover from ticking the same time twice, and lets it
// queue a tick the process before recorded and went before appending.
// Ticks missed while no process ran are not replayed.
type Scheduler struct {
	cfg Config

	life lifecycle.Loop
	// views is what NextTick reads of the entries, which are the loop's
	// own: each flow's next time and whether this process holds it,
	// stored at the end of every pass.
	views atomic.Pointer[map[[2]string]entryView]
}

// entryView is what NextTick needs of an entry.
type entryView struct {
	next time.Time
	held bool
}

// New returns a Scheduler; Start runs it.
func New(cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	return &Scheduler{cfg: cfg}
}

// Start runs the scheduler in the background and returns at once.
func (s *Scheduler) Start() { s.life.Start(s.run) }

// Stop stops the scheduler, releases its locks and waits. Safe twice and
// without Start.
func (s *Scheduler) Stop() { s.life.Stop() }

// entry is one scheduled flow.
type entry struct {
	tenant, flow string
	spec         string
	zone         string
	every        time.Duration // the period of an @every schedule, 0 for the others
	next         time.Time     // the next tick, computed from the time the entry was (re)made
	// began is when this process began to follow the flow (the pass that
	// made the entry): before the flow's first tick, an @every schedule's
	// times count from it, also after a publication changes the period
	began time.Time
	lock  *flock.Flock
	held  bool
	// heldFile is the file this process holds locked (when held), to
	// tell whether it is still the file at the lock's path (checkLock)
	heldFile fs.FileInfo
	// fresh is true in the pass of the loop that made the entry. Its lock
	// is first tried at the next pass (a poll or its first due time), not
	// at once: nothing is due or pending yet, and processes started
	// together then contend at the same point of their clocks, as they did
	// when the lock was tried only at due times, rather than in whatever
	// order their goroutines first run.
	fresh bool
	// pending is the most recent due time this process passed without
	// getting the lock, because another process held it (or the lock
	// failed), zero when none. The holder may have been late for it and
	// gone before ticking it; if this process takes the lock at a poll, it
	// ticks pending unless the .last record shows it was ticked.
	//
	// Only the most recent time is kept, not a backlog of every time
	// passed: the holder has most likely ticked the earlier ones (the case
	// is a holder a little late for its last time before it went), and if
	// it was stuck through several, one late tick stands for them all, as
	// when the holder itself is late (tick makes one tick and goes on from
	// the present). Ticks missed while no process ran are still not
	// replayed: a time becomes pending only at a process that was running
	// at it, while another, running too, held the lock.
	pending time.Time
	// unqueued is a tick this process made (its .last record written)
	// whose append failed (a worker budget spent, a full disk), zero when
	// none; cid is its correlation ID. While this process holds the flow,
	// the append is tried again at every pass, until it goes through or
	// the next tick is due, which stands for it (and the older one is
	// logged as lost). If this process stops meanwhile, the next one to
	// hold the flow queues it (resume) if the queue's log can tell it was
	// not queued and no later tick is due by then.
	unqueued    time.Time
	unqueuedCID string
	// unchecked is the last tick the process before recorded, zero when
	// none, that resume could not check against the queue's log because
	// another process held the queue's append lock past the manager's
	// LockWait (paused or stuck while appending); checkedCID is its
	// correlation ID. While this process holds the flow, resume tries
	// again at every pass, until the log tells, or the next tick is due
	// or the tick is older than resumeWithin (then it is logged as lost,
	// once), or this process fires a tick itself (which stands for it).
	unchecked    time.Time
	uncheckedCID string
	// unrecorded is a due tick whose .last record could not be written
	// (a full disk) or read, zero when none: nothing was appended for it, the
	// record coming first so that ticks stay at most once. While this
	// process holds the flow, it is tried again (record, then append) at
	// every pass, until it goes through or the next tick is due, which
	// stands for it (the older one is logged as lost). It used to be
	// skipped at once: every tick due while the disk was full was lost.
	unrecorded time.Time
	// setBack is how far this process saw the wall clock go back since
	// the entry last fired, zero when it did not: the next fire ignores
	// the last tick's record if it went back by more than the gap
	// between two ticks (see fire)
	setBack time.Duration
	// seenAtSetBack is the last tick's record when this process last saw
	// the clock go back (seenKnown false when it could not be read): fire
	// sets aside that record, made before, not one made since by a holder
	// ticking by the clock set back (a standby keeps setBack until it
	// first fires, however long after)
	seenAtSetBack time.Time
	seenKnown     bool
}

func (s *Scheduler) run(ctx context.Context) {
	entries := map[[2]string]*entry{}
	defer func() {
		for _, e := range entries {
			if !e.unqueued.IsZero() {
				s.cfg.Logger.Error("a cron tick could not be queued before the scheduler stopped; the next process to hold the flow queues it if the queue's log can tell it was not, and no later tick is due by then", "event", "cron_failed",
					"tenant", e.tenant, "flow", e.flow, "scheduled_for", e.unqueued.UTC().Format(time.RFC3339), "correlation_id", e.unqueuedCID)
			}
			if !e.unrecorded.IsZero() {
				s.cfg.Logger.Error("a cron tick could not be recorded before the scheduler stopped: it is lost", "event", "cron_failed",
					"tenant", e.tenant, "flow", e.flow, "scheduled_for", e.unrecorded.UTC().Format(time.RFC3339))
			}
			if e.held {
				e.lock.Unlock()
			}
		}
	}()
	var lastWall time.Time // the clock at the previous pass
	followed := false      // a pass has seen a live set
	for ctx.Err() == nil {
		now := s.cfg.Clock.Now()
		// the wall clock alone (Round(0) drops the monotonic reading,
		// which never goes back): how far it was set back since the
		// previous pass, zero when it was not
		var back time.Duration
		if wall := now.Round(0); !lastWall.IsZero() && wall.Before(lastWall) {
			back = lastWall.Sub(wall)
		}
		lastWall = now.Round(0)
		if s.follow(entries, now, back, !followed) {
			followed = true
		}
		wait := s.cfg.Poll
		for _, e := range entries {
			if e.next.IsZero() {
				continue // a schedule that never fires (30 February)
			}
			if e.held {
				s.checkLock(e)
			}
			if e.held && !e.unchecked.IsZero() {
				// before the takeover below: a flow taken over in this
				// pass was asked in it
				s.resume(e)
			}
			if !e.held && !e.fresh && e.next.After(now) {
				// standing by: try at every pass (every poll at least), not
				// only at due times, so that a due time the holder was late
				// for when it went is not lost until the next one
				s.takeOver(e, now)
			}
			e.fresh = false
			if !e.next.After(now) {
				s.tick(e, now)
			} else if e.held && !e.unqueued.IsZero() {
				s.requeue(e)
			} else if e.held && !e.unrecorded.IsZero() {
				s.rerecord(e)
			}
			if d := e.next.Sub(now); d < wait {
				wait = max(d, 0)
			}
		}
		s.storeViews(entries)
		select {
		case <-ctx.Done():
		case <-s.cfg.Clock.After(wait):
		}
	}
}

// follow brings the entries in line with the live set: a schedule added,
// changed or removed by a publication takes effect here, at the swap.
// first is true until a pass has seen a live set: the flows it finds are
// the ones this process starts with. It reports whether there was a live
// set.
func (s *Scheduler) follow(entries map[[2]string]*entry, now time.Time, back time.Duration, first bool) bool {
	live := s.cfg.Live.Live()
	seen := map[[2]string]bool{}
	if live != nil {
		for _, lf := range live.Flows() {
			if lf.Flow == nil || lf.Flow.Schedule() == nil {
				continue
			}
			sc := lf.Flow.Schedule()
			k := [2]string{lf.Tenant, lf.Name}
			seen[k] = true
			e, ok := entries[k]
			if ok && e.spec == sc.Spec() && e.zone == sc.Location().String() {
				s.followClock(e, sc, now, back)
				continue
			}
			if period, every := sc.Every(); ok && every && period == e.every {
				// the same @every period written otherwise (60s as 1m)
				// or with a zone, which @every ignores: the same times,
				// so the next one and a pending one stand
				e.spec, e.zone = sc.Spec(), sc.Location().String()
				s.followClock(e, sc, now, back)
				continue
			}
			if !ok {
				e = &entry{tenant: lf.Tenant, flow: lf.Name, lock: queue.NewFileLock(filepath.Join(s.cfg.Dir, lf.Tenant, lf.Name+".lock")), fresh: true, began: now}
				entries[k] = e
			}
			e.spec, e.zone = sc.Spec(), sc.Location().String()
			e.every, _ = sc.Every()
			next := sc.Next(now)
			if !ok && first && e.every > 0 {
				// an @every flow this process starts with goes on from its
				// last tick, whichever process made it: counted from the
				// start, every restart put the next tick a whole period
				// off, and a host restarted more often than the period
				// never ticked. (A flow scheduled later, while this process
				// runs, counts from the publication.)
				if last, err := s.lastTick(e); err == nil && !lastInForce(last, sc, now).IsZero() {
					next = everyAfter(last, e.every, now)
				}
			}
			if ok && e.every > 0 {
				// a new period counts from the last tick, as a process
				// started in this one's place and nexus status count it
				// (before the first, from when this process began to
				// follow the flow); a time already passed is a late tick,
				// made at once. It counted from the publication, which no
				// other process could know.
				if last, err := s.lastTick(e); err == nil && !lastInForce(last, sc, now).IsZero() {
					next = sc.Next(last)
				} else if err == nil && last.IsZero() {
					next = sc.Next(e.began)
				}
			}
			if ok && !e.next.IsZero() && !e.next.After(now) && sc.Next(e.next.Add(-time.Nanosecond)).Equal(e.next) {
				// due, and a time of the new schedule as well (changed just
				// before it came, or changed in form only): it still ticks
				next = e.next
			}
			e.next = next
			if !e.pending.IsZero() && !sc.Next(e.pending.Add(-time.Nanosecond)).Equal(e.pending) {
				// a pending time is kept as a due one is: only if the new
				// schedule has it too
				e.pending = time.Time{}
			}
		}
	}
	for k, e := range entries {
		if !seen[k] {
			if !e.unqueued.IsZero() {
				// its record names it, and a process taking the flow up
				// again (published again within a minute) would queue it
				// (resume): the record is made the time alone, which
				// finishes nothing, so that the tick is lost as said
				msg := "a cron tick could not be queued before its flow was withdrawn or unscheduled: it is lost"
				attrs := []any{"event", "cron_failed", "tenant", e.tenant, "flow", e.flow, "scheduled_for", e.unqueued.UTC().Format(time.RFC3339), "correlation_id", e.unqueuedCID}
				if err := s.saveLastTick(e, lastRecord{at: e.unqueued}); err != nil {
					msg = "a cron tick could not be queued before its flow was withdrawn or unscheduled: it is lost, unless the flow is scheduled again within a minute (its record, which names it, could not be rewritten)"
					attrs = append(attrs, "error", err.Error())
				}
				s.cfg.Logger.Error(msg, attrs...)
			}
			if !e.unrecorded.IsZero() {
				s.cfg.Logger.Error("a cron tick could not be recorded before its flow was withdrawn or unscheduled: it is lost", "event", "cron_failed",
					"tenant", e.tenant, "flow", e.flow, "scheduled_for", e.unrecorded.UTC().Format(time.RFC3339))
			}
			if e.held {
				e.lock.Unlock()
			}
			delete(entries, k)
		}
	}
	return live != nil
}

// followClock follows the wall clock set back by back (zero when it was
// not) since the previous pass: the entry's next time, computed on the
// clock before, is brought back to the schedule's next time from now
// (timers count on a monotonic clock, and the clock's time would not
// reach it when they say: the flow stayed silent for as long as the clock
// went back), and the entry remembers how far the clock went back, for
// its next fire.
func (s *Scheduler) followClock(e *entry, sc *flow.Schedule, now time.Time, back time.Duration) {
	if back <= 0 {
		return
	}
	last, err := s.lastTick(e)
	if err == nil && e.seenKnown && !last.Equal(e.seenAtSetBack) {
		e.setBack = 0 // a set back seen before a record made since
	}
	e.setBack = max(e.setBack, back)
	e.seenAtSetBack, e.seenKnown = last, err == nil
	// a time to come: Next answers none (zero) for a schedule without one
	if n := sc.Next(now); n.After(now) && n.Before(e.next) {
		s.cfg.Logger.Warn("the clock was set back: the next tick follows it", "event", "cron_clock_set_back",
			"tenant", e.tenant, "flow", e.flow, "set_back_ms", back.Milliseconds(),
			"was", e.next.UTC().Format(time.RFC3339), "next", n.UTC().Format(time.RFC3339))
		e.next = n
	}
}

// tick makes the entry's due tick if this process holds the flow's lock,
// taking it if free, and the tick was not already made by another process.
func (s *Scheduler) tick(e *entry, now time.Time) {
	due := e.next
	live := s.cfg.Live.Live()
	lf, ok := live.Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return
	}
	sc := lf.Flow.Schedule()
	// a late tick stands for every time it was late for: it is the last
	// of them, which the record and a process taking over then hold, so
	// that none of those times is ticked again. An @every schedule's
	// times count from its last tick, so a late one is the time it is
	// made (to the second; its times are whole seconds, and due is one at
	// or before it): the next is a period after it for the holder, a
	// process taking over, a restart and nexus status alike. The last
	// time of the period's grid was recorded instead, while the holder
	// went on a period after the tick: a process taking over or started
	// then ticked sooner, less than a period after the late tick.
	if _, every := sc.Every(); every {
		due = now.Truncate(time.Second)
	} else {
		due = lastDue(sc, due, now)
	}
	e.next = sc.Next(now)
	log := s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow)
	if !e.held {
		held, err := s.tryLock(e)
		if err != nil {
			log.Error("the cron lock could not be taken", "event", "cron_failed", "error", err.Error())
		}
		if !held {
			// another process ticks this flow; if it goes before ticking
			// due, this one ticks it when it takes over (takeOver). After
			// an error due is pending as well: it was not ticked while
			// this process ran.
			e.pending = due
			return
		}
	}
	e.pending = time.Time{} // due is more recent
	s.fire(e, sc, due, log)
}

// takeOver tries the lock of a flow that another process held at the last
// try and, when it gets it, ticks the time pending, if any, that the other
// process did not tick.
func (s *Scheduler) takeOver(e *entry, now time.Time) {
	// An error is not logged here, at every poll, but at the due times,
	// where tick tries the lock too.
	if held, _ := s.tryLock(e); !held {
		return
	}
	due := e.pending
	e.pending = time.Time{}
	if due.IsZero() || due.After(now) {
		return
	}
	live := s.cfg.Live.Live()
	lf, ok := live.Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return
	}
	s.fire(e, lf.Flow.Schedule(), due, s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow))
}

// tryLock takes the flow's lock if no process holds it, and when it takes
// it, queues the last tick if the process that made it went before it
// could (resume).
func (s *Scheduler) tryLock(e *entry) (bool, error) {
	if err := queue.MakeDir(nil, s.cfg.Dir, e.tenant); err != nil {
		return false, err
	}
	was := e.held
	held, err := e.lock.TryLock()
	e.held = held
	if held && !was {
		e.heldFile, _ = e.lock.Stat() // nil: checkLock asks again
		s.resume(e)
	}
	return held, err
}

// checkLock makes sure the lock this process holds for the flow is on the
// file at the lock's path. A lock file deleted by hand (taken for a stale
// one) or replaced excludes no one: another process would find a new file
// free and tick the flow alongside this one, both queueing a tick whose
// append failed here, and both ticking a due time when they read the
// .last record before either wrote it. When the file was deleted or
// replaced, the process locks the file at the path and goes on (logged as
// cron_lock_replaced), or, when another process holds it already (or it
// cannot be locked), lets the flow go and stands by (logged as
// cron_failed): a due time it could not record is pending, as one passed
// standing by, and a tick it could not queue is the holder's to queue
// (resume), as after a stop.
func (s *Scheduler) checkLock(e *entry) {
	if e.heldFile == nil {
		info, err := e.lock.Stat()
		if err != nil {
			return // cannot tell: the lock is kept
		}
		e.heldFile = info
	}
	path := e.lock.Path()
	atPath, err := os.Lstat(path)
	if err == nil && os.SameFile(e.heldFile, atPath) {
		return
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return // cannot tell (an I/O error): the lock is kept
	}
	log := s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow)
	lock := queue.NewFileLock(path)
	held := false
	err = queue.MakeDir(nil, s.cfg.Dir, e.tenant)
	if err == nil {
		held, err = lock.TryLock()
	}
	var info fs.FileInfo
	if held {
		if info, err = lock.Stat(); err != nil {
			lock.Unlock()
			held = false
		}
	}
	e.lock.Unlock()
	e.lock = lock
	if held {
		e.heldFile = info
		log.Warn("the cron lock was deleted or replaced; the file at its path is locked again", "event", "cron_lock_replaced", "file", path)
		return
	}
	e.held, e.heldFile = false, nil
	why := fmt.Sprintf("%s was deleted or replaced, and another process holds the file at its path", path)
	if err != nil {
		why = fmt.Sprintf("%s was deleted or replaced, and the file at its path cannot be locked: %v", path, err)
	}
	log.Error("the cron lock was lost: this process stands by", "event", "cron_failed", "file", path, "error", why)
	if !e.unrecorded.IsZero() {
		if e.unrecorded.After(e.pending) {
			e.pending = e.unrecorded
		}
		e.unrecorded = time.Time{}
	}
	if !e.unqueued.IsZero() {
		log.Error("a cron tick could not be queued before this process lost the flow's lock; the process holding it queues it if the queue's log can tell it was not, and no later tick is due by then", "event", "cron_failed",
			"scheduled_for", e.unqueued.UTC().Format(time.RFC3339), "correlation_id", e.unqueuedCID)
		e.unqueued, e.unqueuedCID = time.Time{}, ""
	}
	e.unchecked, e.uncheckedCID = time.Time{}, ""
}

// resume runs when this process takes a flow's lock: if the flow's last
// tick was recorded but never appended, because the process that made it
// was killed between the two or stopped while its append kept failing, it
// queues the tick, as long as no later tick is due (which stands for it,
// as for a tick whose append fails until then) and the tick is at most
// resumeWithin old (a host down for hours does not replay a tick when it
// comes back). The record names the tick's correlation ID and a lower
// bound of its message id, and the queue's log tells whether it holds it.
// A tick the log cannot tell about is not queued again, so that ticks
// stay at most once: messages issued since it could have been were
// drained, which is also how a log reads after an append that raised the
// id counter and failed before its frame was written (queue.Gone). When
// the log cannot be read yet because another process holds the queue's
// append lock past the manager's LockWait (queue.ErrLockBusy: paused while
// appending), the check is left for the next pass (e.unchecked), so that
// a pause does not stall this process's other flows for as long as it
// lasts, nor drop the tick at once.
func (s *Scheduler) resume(e *entry) {
	retrying := !e.unchecked.IsZero()
	e.unchecked, e.uncheckedCID = time.Time{}, ""
	rec, err := readLastRecord(s.lastPath(e))
	if err != nil || rec.cid == "" {
		return // no record, or one without its tick's id (an older version's)
	}
	lf, ok := s.cfg.Live.Live().Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return
	}
	sc := lf.Flow.Schedule()
	now := s.cfg.Clock.Now()
	if lastInForce(rec.at, sc, now).IsZero() {
		return // made before the clock was set back: fire ticks by the clock
	}
	log := s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow)
	if next := sc.Next(rec.at); retrying && (next.IsZero() || !next.After(now) || now.Sub(rec.at) > resumeWithin) {
		log.Error("the queue's append lock stayed held by another process until the last tick the process before recorded was too late to queue, so whether it was queued could not be told; it is not queued again", "event", "cron_failed",
			"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid)
		s.settle(e, rec)
		return
	}
	p, err := s.cfg.Queues.Appended(e.tenant, e.flow, rec.from, rec.cid)
	if errors.Is(err, queue.ErrLockBusy) {
		// another process holds the append lock (paused or stuck while
		// appending): tried again at every pass, logged once
		if !retrying {
			log.Warn("whether the last tick the process before recorded was queued cannot be told yet: another process holds the queue's append lock; checked again at every poll", "event", "cron_resume_deferred",
				"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid, "error", err.Error())
		}
		e.unchecked, e.uncheckedCID = rec.at, rec.cid
		return
	}
	if err != nil {
		log.Error("the queue could not be read to tell whether the last tick was queued; it is not queued again", "event", "cron_failed",
			"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid, "error", err.Error())
		s.settle(e, rec)
		return
	}
	if p != queue.Absent {
		return // queued, or perhaps queued and processed since: not again
	}
	if next := sc.Next(rec.at); next.IsZero() || !next.After(now) {
		log.Error("the last tick was recorded but never queued (the process that made it went before); a later tick is due and stands for it", "event", "cron_failed",
			"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid)
		s.settle(e, rec)
		return
	}
	if late := now.Sub(rec.at); late > resumeWithin {
		log.Error("the last tick was recorded but never queued (the process that made it went before), too long ago to queue it now: ticks missed while no process ran are not replayed", "event", "cron_failed",
			"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid, "late_ms", late.Milliseconds())
		s.settle(e, rec)
		return
	}
	if err := s.queueTick(e, sc, rec.at, rec.cid, log.With("resumed", true)); err != nil {
		log.Error("a cron tick the process before recorded could not be queued; it is tried again at every poll until the next tick is due", "event", "cron_failed",
			"scheduled_for", rec.at.UTC().Format(time.RFC3339), "correlation_id", rec.cid, "error", err.Error())
		e.unqueued, e.unqueuedCID = rec.at, rec.cid
	}
}

// settle writes the last-tick record rec again as its time alone, under
// the flow's lock, once resume has logged its tick as not queued: a record
// of the time alone finishes nothing, so that the next process to take the
// flow up does not ask about it and log it as lost again (every restart
// before the next tick did). A write that fails leaves the record as it
// was: the tick is still not queued, only logged again.
func (s *Scheduler) settle(e *entry, rec lastRecord) {
	_ = s.saveLastTick(e, lastRecord{at: rec.at})
}

// resumeWithin is how late resume queues a tick the process before
// recorded and never queued: a standby takes over within a poll or two,
// and a supervisor restarts a killed host within seconds; a tick older
// than this was missed while no process ran, which is not replayed.
const resumeWithin = time.Minute

// fire appends the flow's input for the time due, held under the flow's
// lock, unless the last-tick record shows it made already.
func (s *Scheduler) fire(e *entry, sc *flow.Schedule, due time.Time, log *slog.Logger) {
	// tried again now (due is it: quietly, it was logged), or the next
	// tick stands for it
	retrying := !e.unrecorded.IsZero() && e.unrecorded.Equal(due)
	if !e.unrecorded.IsZero() && !retrying {
		log.Error("a cron tick could not be recorded before the next one was due: it is lost", "event", "cron_failed",
			"scheduled_for", e.unrecorded.UTC().Format(time.RFC3339))
	}
	e.unrecorded = time.Time{}
	last, err := s.lastTick(e)
	// the clock read after the record: a pass that stalled (a slow disk
	// under many flows) must not take a record another process made
	// meanwhile for one ahead of its clock
	now := s.cfg.Clock.Now()
	if err != nil {
		// as a record that cannot be written: nothing is appended (the
		// record tells whether due was ticked), and due is tried again at
		// every poll until the next tick is due. It was skipped at once.
		if !retrying {
			log.Error("the last tick's record could not be read, so nothing was queued; it is tried again at every poll until the next tick is due", "event", "cron_failed",
				"scheduled_for", due.UTC().Format(time.RFC3339), "error", err.Error())
		}
		e.unrecorded = due
		return
	}
	// a record of due itself, when due is tried again, is this process's
	// own (it holds the flow's lock): the write that failed did rename it
	// into place (its folder's sync failed), and nothing was queued
	ours := retrying && last.Equal(due)
	if !last.IsZero() && lastInForce(last, sc, now).IsZero() {
		// made before the clock was set back by more than the gap, while
		// no process that follows the flow ran to see it (then setBack
		// says so, below)
		log.Warn("the last tick's record is ahead of the clock by more than the gap between two ticks: the clock was set back; ticking by the clock",
			"event", "cron_clock_set_back", "last_tick", last.UTC().Format(time.RFC3339), "scheduled_for", due.UTC().Format(time.RFC3339))
		last, e.setBack = time.Time{}, 0
	}
	if back := e.setBack; back > 0 {
		e.setBack = 0
		if gap := sc.Next(due).Sub(due); gap > 0 && back > gap && last.After(due) && (!e.seenKnown || last.Equal(e.seenAtSetBack)) {
			// the record was made before this process saw the clock go
			// back by more than the gap between two ticks: the times of
			// the gap are new ones, ticked by the clock. (One made since,
			// by a holder ticking by the clock set back, holds. A record ahead
			// of the time due without a set back is another process's,
			// whose clock runs a little ahead, and keeps a time it ticked
			// from being ticked again.)
			log.Warn("the last tick's record is ahead of the clock, which was set back by more than the gap between two ticks: ticking by the clock",
				"event", "cron_clock_set_back", "set_back_ms", back.Milliseconds(),
				"last_tick", last.UTC().Format(time.RFC3339), "scheduled_for", due.UTC().Format(time.RFC3339))
			last = time.Time{}
		}
	}
	if !due.After(last) && !ours {
		return // made by the process that held the lock before
	}
	if next := sc.Next(last); !last.IsZero() && next.After(due) && !ours {
		// an @every schedule, whose times count from when a process
		// started, goes on from the last tick (perhaps another process's)
		// rather than ticking again before a whole period has passed
		e.next = next
		return
	}
	if !e.unqueued.IsZero() {
		log.Error("a cron tick could not be queued before the next one was due: it is lost", "event", "cron_failed",
			"scheduled_for", e.unqueued.UTC().Format(time.RFC3339), "correlation_id", e.unqueuedCID)
		e.unqueued, e.unqueuedCID = time.Time{}, ""
	}
	if !e.unchecked.IsZero() {
		log.Error("the queue's append lock stayed held by another process until the next tick was due, so whether the last tick the process before recorded was queued could not be told; the next tick stands for it", "event", "cron_failed",
			"scheduled_for", e.unchecked.UTC().Format(time.RFC3339), "correlation_id", e.uncheckedCID)
		e.unchecked, e.uncheckedCID = time.Time{}, ""
	}
	cid := ""
	if s.cfg.NewID != nil {
		cid = s.cfg.NewID()
	}
	// the record names the tick's correlation ID and a lower bound of its
	// message id, so that a process taking the flow over can tell from the
	// log whether it was queued (resume); without the id (the counter could
	// not be read) it cannot, and the tick stays at most once
	from, err := s.cfg.Queues.NextID(e.tenant, e.flow)
	if err != nil {
		from = 0
	}
	if err := s.saveLastTick(e, lastRecord{at: due, from: from, cid: cid}); err != nil {
		if !retrying {
			log.Error("the last tick could not be recorded, so nothing was queued; it is tried again at every poll until the next tick is due", "event", "cron_failed",
				"scheduled_for", due.UTC().Format(time.RFC3339), "error", err.Error())
		}
		e.unrecorded = due
		return
	}
	if err := s.queueTick(e, sc, due, cid, log); err != nil {
		log.Error("a cron tick could not be queued; it is tried again at every poll until the next tick is due", "event", "cron_failed",
			"scheduled_for", due.UTC().Format(time.RFC3339), "correlation_id", cid, "error", err.Error())
		e.unqueued, e.unqueuedCID = due, cid
	}
}

// rerecord tries again the tick whose record this process could not write
// (e.unrecorded): fire records it and appends it, or keeps it unrecorded.
func (s *Scheduler) rerecord(e *entry) {
	lf, ok := s.cfg.Live.Live().Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return // withdrawn or unscheduled: follow drops the entry
	}
	s.fire(e, lf.Flow.Schedule(), e.unrecorded, s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow))
}

// requeue tries again to append the tick this process made and could not
// queue (e.unqueued), for the flow's live schedule_input.
func (s *Scheduler) requeue(e *entry) {
	lf, ok := s.cfg.Live.Live().Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return // withdrawn or unscheduled: follow drops the entry
	}
	if s.queueTick(e, lf.Flow.Schedule(), e.unqueued, e.unqueuedCID, s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow)) == nil {
		e.unqueued, e.unqueuedCID = time.Time{}, ""
	}
}

// queueTick appends the schedule's input for the tick due and logs
// cron_tick; it returns the append's error.
func (s *Scheduler) queueTick(e *entry, sc *flow.Schedule, due time.Time, cid string, log *slog.Logger) error {
	msg, err := s.cfg.Queues.Append(e.tenant, e.flow, queue.NewMessage{Source: Source, CorrelationID: cid, Payload: appendInput(sc.Input())})
	if err != nil {
		return err
	}
	log.Info("cron tick", "event", "cron_tick", "scheduled_for", due.UTC().Format(time.RFC3339), "correlation_id", cid, "msg_id", msg.ID)
	return nil
}

// storeViews publishes the entries' next times for NextTick.
func (s *Scheduler) storeViews(entries map[[2]string]*entry) {
	views := make(map[[2]string]entryView, len(entries))
	for k, e := range entries {
		views[k] = entryView{next: e.next, held: e.held}
	}
	s.views.Store(&views)
}

// NextTick is the time the flow's schedule sc will next tick after now, as
// the processes sharing the state directory tick it, for the UI,
// /api/flows and /status. A cron expression's times are every process's:
// sc.Next(now), or the next after the last tick's record when that is a
// little ahead of the clock (see NextTick). An @every schedule counts from
// the tick before: from the flow's last tick (its record, whichever
// process made it), or, before the first, from when this process began to
// follow the flow; so its next time is the one of the process that holds
// the flow, then the last tick plus the period, then this process's own
// next time, and sc.Next(now) only when none of them is still to come.
func (s *Scheduler) NextTick(tenant, flowName string, sc *flow.Schedule, now time.Time) time.Time {
	if _, every := sc.Every(); !every {
		return NextTick(s.cfg.Dir, tenant, flowName, sc, now)
	}
	var view entryView
	if views := s.views.Load(); views != nil {
		view = (*views)[[2]string{tenant, flowName}]
	}
	afterLast := nextAfterLast(lastPath(s.cfg.Dir, tenant, flowName), sc, now)
	if view.held && view.next.After(now) {
		// a process that took the flow over ticks no sooner than a
		// period after the last tick (fire), which its own next time,
		// counted from when it began to follow the flow, may precede
		return maxTime(view.next, afterLast)
	}
	if !afterLast.IsZero() {
		return afterLast
	}
	if view.next.After(now) {
		return view.next
	}
	return sc.Next(now)
}

// NextTick is Scheduler.NextTick for a process that runs no scheduler
// (nexus status), with dir the scheduler's Dir: an @every schedule's next
// time is the first one after now of its last tick plus whole periods (a
// server ticks there, the one holding the flow or one that starts
// before), sc.Next(now) when it has no last tick. A cron expression's is
// sc.Next(now), or its next time after a record that is ahead of now by
// less than the gap between two ticks (the clock was set back by less:
// the time recorded is not ticked again). A record further ahead is set
// aside (lastInForce).
func NextTick(dir, tenant, flowName string, sc *flow.Schedule, now time.Time) time.Time {
	last, err := readLastTick(lastPath(dir, tenant, flowName))
	if err != nil {
		return sc.Next(now)
	}
	last = lastInForce(last, sc, now)
	if period, every := sc.Every(); every && !last.IsZero() {
		return everyAfter(last, period, now)
	}
	// a record a little ahead of the clock keeps its time from being
	// ticked again (fire)
	return sc.Next(maxTime(now, last))
}

// lastInForce is the last-tick record last as the flow's ticks go on from
// it at now: last, or zero when it is ahead of now by more than the gap
// between two ticks of sc and by more than clockSkew. A tick is recorded
// at or after its time, so such a record was made before the clock was set
// back (by more than the gap: the times since are new ones) while no
// process that follows the flow ran to see it go back; kept, it would
// silence the flow until the clock caught up with it (a day, after a clock
// that ran a day ahead). A record ahead by less keeps the time it holds
// from being ticked again.
func lastInForce(last time.Time, sc *flow.Schedule, now time.Time) time.Time {
	ahead := last.Sub(now)
	if ahead <= clockSkew {
		return last
	}
	if gap := sc.Next(last).Sub(last); gap > 0 && ahead > gap {
		return time.Time{}
	}
	return last
}

// clockSkew is how far ahead of a process's clock another process's record
// may be without being taken for a clock set back: the processes sharing a
// state directory are on one machine, but one may read its clock just
// before a small step of NTP and another after.
const clockSkew = 5 * time.Minute

// everyAfter is the first time after now of last plus whole periods: where
// an @every schedule that ticked at last ticks next. (Times missed while no
// process ran are not made up.)
func everyAfter(last time.Time, period time.Duration, now time.Time) time.Time {
	if last.After(now) {
		return last.Add(period)
	}
	return last.Add((now.Sub(last)/period + 1) * period)
}

// lastDue is the last time of sc, a cron expression (an @every schedule's
// late tick is the time it is made), at or before now, from due, one of
// its times at or before now. It is found without stepping through every
// time between them, which after a wall clock stepped years forward (a
// host booted at a default date, then set by NTP) took a pass, and Stop,
// tens of seconds: it probes back from now, 1, 2, 4… minutes (the times
// of a cron expression are at least a minute apart), then steps the few
// times left.
func lastDue(sc *flow.Schedule, due, now time.Time) time.Time {
	from := due
	for w := time.Minute; now.Add(-w).After(due); w *= 2 {
		if n := sc.Next(now.Add(-w)); n.After(due) && !n.After(now) {
			from = n
			break
		}
	}
	for n := sc.Next(from); !n.IsZero() && n.After(from) && !n.After(now); n = sc.Next(n) {
		from = n
	}
	return from
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nextAfterLast is the tick of sc after the last-tick record at path if
// that is after now, zero otherwise (no record, or none readable).
func nextAfterLast(path string, sc *flow.Schedule, now time.Time) time.Time {
	last, err := readLastTick(path)
	if err != nil {
		return time.Time{}
	}
	if last = lastInForce(last, sc, now); last.IsZero() {
		return time.Time{}
	}
	if next := sc.Next(last); next.After(now) {
		return next
	}
	return time.Time{}
}

func (s *Scheduler) lastPath(e *entry) string { return lastPath(s.cfg.Dir, e.tenant, e.flow) }

func lastPath(dir, tenant, flowName string) string {
	return filepath.Join(dir, tenant, flowName+".last")
}

// lastTick reads the time of the flow's last tick (zero when none).
func (s *Scheduler) lastTick(e *entry) (time.Time, error) { return readLastTick(s.lastPath(e)) }

// lastRecord is a flow's last-tick record: the tick's time and, to tell
// whether it was queued, a lower bound of its message id (the queue's
// next id before the append) and its correlation ID. On disk, written
// whole (queue.WriteAtomic), it is two lines: the time in Unix nanoseconds
// padded with spaces to 31 bytes and a newline, so that the first 32
// bytes are what an earlier version wrote and reads (it reads 32 bytes and
// trims them: a process of an earlier version sharing the state directory,
// in a rolling upgrade or after a rollback, still finds the time); then
// the id and the correlation ID, a space between, and a newline:
//
//	"1786284180000000000            \n42 5d0c7f0e-8a3b-4f7e-9c55-2b1d8e4a6f10\n"
//
// A record of the time alone (an earlier version's) has neither: from is
// 0 and cid empty.
type lastRecord struct {
	at   time.Time
	from uint64
	cid  string
}

// readLastTick reads the time of the last-tick record at path (zero when
// none).
func readLastTick(path string) (time.Time, error) {
	rec, err := readLastRecord(path)
	return rec.at, err
}

// readLastRecord reads the last-tick record at path (zero when none). A
// symbolic link where the record should be is refused (queue.ErrLink), as
// everywhere in the state directory: a planted record could silence the
// flow.
func readLastRecord(path string) (lastRecord, error) {
	f, err := queue.OS{}.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return lastRecord{}, nil
	}
	if err != nil {
		return lastRecord{}, err
	}
	defer f.Close()
	// 32 bytes, 20 digits, a space, a correlation ID (at most 128 bytes)
	// and a newline
	b := make([]byte, 192)
	k, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return lastRecord{}, fmt.Errorf("reading %s: %w", path, err)
	}
	fields := strings.Fields(string(b[:k]))
	if len(fields) == 0 {
		return lastRecord{}, nil // not a record WriteAtomic wrote: none
	}
	n, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return lastRecord{}, nil
	}
	rec := lastRecord{at: time.Unix(0, n)}
	if len(fields) == 3 {
		if from, err := strconv.ParseUint(fields[1], 10, 64); err == nil && from > 0 {
			rec.from, rec.cid = from, fields[2]
		}
	}
	return rec, nil
}

// maxRecordCID is the longest correlation ID a last-tick record holds.
const maxRecordCID = 128

// saveLastTick writes the flow's last-tick record. It must survive a
// power cut: if it were lost or empty, a takeover after the restart would
// tick its time again.
func (s *Scheduler) saveLastTick(e *entry, rec lastRecord) error {
	b := []byte(strconv.FormatInt(rec.at.UnixNano(), 10))
	// the correlation ID only when it reads back as itself: readLastRecord
	// reads 192 bytes and splits them at Unicode spaces
	if rec.from > 0 && rec.cid != "" && len(rec.cid) <= maxRecordCID && !strings.ContainsFunc(rec.cid, unicode.IsSpace) {
		b = fmt.Appendf(nil, "%-31s\n%d %s", b, rec.from, rec.cid)
	}
	return queue.WriteAtomic(nil, s.lastPath(e), append(b, '\n'))
}

// appendInput is the JSON of a schedule_input document.
func appendInput(v any) []byte { return flow.AppendJSON(nil, v) }
