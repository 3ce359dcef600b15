package scheduler

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
// starting the queue's worker on first use.
type Appender interface {
	Append(tenant, flow string, m queue.NewMessage) (queue.Message, error)
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
// last tick keeps a takeover from ticking the same time twice. Ticks missed
// while no process ran are not replayed.
type Scheduler struct {
	cfg Config

	life lifecycle.Loop
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
	next         time.Time // the next tick, computed from the time the entry was (re)made
	lock         *flock.Flock
	held         bool
}

func (s *Scheduler) run(ctx context.Context) {
	entries := map[[2]string]*entry{}
	defer func() {
		for _, e := range entries {
			if e.held {
				e.lock.Unlock()
			}
		}
	}()
	for ctx.Err() == nil {
		now := s.cfg.Clock.Now()
		s.follow(entries, now)
		wait := s.cfg.Poll
		for _, e := range entries {
			if e.next.IsZero() {
				continue // a schedule that never fires (30 February)
			}
			if !e.next.After(now) {
				s.tick(e, now)
			}
			if d := e.next.Sub(now); d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-ctx.Done():
		case <-s.cfg.Clock.After(wait):
		}
	}
}

// follow brings the entries in line with the live set: a schedule added,
// changed or removed by a publication takes effect here, at the swap.
func (s *Scheduler) follow(entries map[[2]string]*entry, now time.Time) {
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
				continue
			}
			if !ok {
				e = &entry{tenant: lf.Tenant, flow: lf.Name, lock: flock.New(filepath.Join(s.cfg.Dir, lf.Tenant, lf.Name+".lock"))}
				entries[k] = e
			}
			e.spec, e.zone = sc.Spec(), sc.Location().String()
			next := sc.Next(now)
			if ok && !e.next.IsZero() && !e.next.After(now) && sc.Next(e.next.Add(-time.Nanosecond)).Equal(e.next) {
				// due, and a time of the new schedule as well (changed just
				// before it came, or changed in form only): it still ticks
				next = e.next
			}
			e.next = next
		}
	}
	for k, e := range entries {
		if !seen[k] {
			if e.held {
				e.lock.Unlock()
			}
			delete(entries, k)
		}
	}
}

// tick appends the flow's input to its queue if this process holds the
// flow's lock and the tick was not already made by another process.
func (s *Scheduler) tick(e *entry, now time.Time) {
	due := e.next
	live := s.cfg.Live.Live()
	lf, ok := live.Lookup(e.tenant, e.flow)
	if !ok || lf.Flow == nil || lf.Flow.Schedule() == nil {
		return
	}
	sc := lf.Flow.Schedule()
	e.next = sc.Next(now)
	log := s.cfg.Logger.With("tenant", e.tenant, "flow", e.flow)
	if !e.held {
		if err := os.MkdirAll(filepath.Dir(e.lock.Path()), 0o755); err != nil {
			log.Error("the cron lock could not be made", "event", "cron_failed", "error", err.Error())
			return
		}
		held, err := e.lock.TryLock()
		if err != nil {
			log.Error("the cron lock could not be taken", "event", "cron_failed", "error", err.Error())
		}
		if !held {
			return // another process ticks this flow
		}
		e.held = true
	}
	last := s.lastTick(e)
	if !due.After(last) {
		return // made by the process that held the lock before
	}
	if next := sc.Next(last); !last.IsZero() && next.After(due) {
		// an @every schedule, whose times count from when a process
		// started, goes on from the last tick (perhaps another process's)
		// rather than ticking again before a whole period has passed
		e.next = next
		return
	}
	if err := s.saveLastTick(e, due); err != nil {
		log.Error("the last tick could not be recorded; skipping the tick", "event", "cron_failed", "error", err.Error())
		return
	}
	cid := ""
	if s.cfg.NewID != nil {
		cid = s.cfg.NewID()
	}
	payload := appendInput(sc.Input())
	msg, err := s.cfg.Queues.Append(e.tenant, e.flow, queue.NewMessage{Source: Source, CorrelationID: cid, Payload: payload})
	if err != nil {
		log.Error("a cron tick could not be queued", "event", "cron_tick", "scheduled_for", due.UTC().Format(time.RFC3339), "correlation_id", cid, "error", err.Error())
		return
	}
	log.Info("cron tick", "event", "cron_tick", "scheduled_for", due.UTC().Format(time.RFC3339), "correlation_id", cid, "msg_id", msg.ID)
}

func (s *Scheduler) lastPath(e *entry) string {
	return filepath.Join(s.cfg.Dir, e.tenant, e.flow+".last")
}

// lastTick reads the time of the flow's last tick (zero when none).
func (s *Scheduler) lastTick(e *entry) time.Time {
	b, err := os.ReadFile(s.lastPath(e))
	if err != nil {
		return time.Time{}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (s *Scheduler) saveLastTick(e *entry, t time.Time) error {
	tmp := s.lastPath(e) + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(t.UnixNano(), 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.lastPath(e))
}

// appendInput is the JSON of a schedule_input document.
func appendInput(v any) []byte { return flow.AppendJSON(nil, v) }
