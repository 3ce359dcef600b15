package scheduler_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
	"github.com/nexushq/nexus/scheduler"
)

// st0 is the fake clocks' starting time (whole seconds: @every schedules
// tick on whole seconds).
var st0 = time.Date(2026, 8, 9, 14, 2, 0, 0, time.UTC)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// liveBox is the scheduler's LiveSource: the set last loaded from a real
// registry, as the server's watcher keeps it.
type liveBox struct {
	p atomic.Pointer[registry.LiveSet]
}

func (b *liveBox) Live() *registry.LiveSet { return b.p.Load() }

// env is a registry, a live source following it, and the cron folder that
// the schedulers of the test (the processes) share.
type env struct {
	t     testing.TB
	reg   *registry.Registry
	live  *liveBox
	dir   string
	ticks *tickLog
	log   *slog.Logger // the schedulers' logger; nil: none
}

func newEnv(t testing.TB) *env {
	t.Helper()
	reg, err := registry.Open(context.Background(), filepath.Join(t.TempDir(), "state", "registry.db"), registry.Options{Now: func() time.Time { return st0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return &env{t: t, reg: reg, live: &liveBox{}, dir: filepath.Join(t.TempDir(), "state", "cron"), ticks: &tickLog{}}
}

// flowSrc is a flow file for tenant/name with extra front matter lines.
func flowSrc(tenant, name, frontMatter string) string {
	return fmt.Sprintf("---\nflowmarkdown_version: \"0.1\"\nflow: %s\ntenant: %s\n%s---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n", name, tenant, frontMatter)
}

// cronFlow is a flow file with a schedule (zone and input optional).
func cronFlow(tenant, name, spec, zone, input string) string {
	fm := fmt.Sprintf("schedule: %q\n", spec)
	if zone != "" {
		fm += "schedule_timezone: " + zone + "\n"
	}
	if input != "" {
		fm += "schedule_input: " + input + "\n"
	}
	return flowSrc(tenant, name, fm)
}

// publish makes srcs the whole deployed set (a git commit: the others are
// withdrawn), loads the live set and swaps it in.
func (e *env) publish(srcs ...string) *registry.LiveSet {
	e.t.Helper()
	var flows []*flow.Flow
	for i, src := range srcs {
		f, err := flow.Compile(fmt.Sprintf("flows/f%d.md", i), []byte(src))
		if err != nil {
			e.t.Fatalf("compiling:\n%s\n%v", src, err)
		}
		flows = append(flows, f)
	}
	if _, err := e.reg.Publish(context.Background(), registry.Publication{Flows: flows, Complete: true}); err != nil {
		e.t.Fatalf("Publish: %v", err)
	}
	ls, err := e.reg.Load(context.Background())
	if err != nil {
		e.t.Fatalf("Load: %v", err)
	}
	e.live.p.Store(ls)
	return ls
}

// tick is one append made by a scheduler.
type tick struct {
	Sched        string // which scheduler (process) made it
	Tenant, Flow string
	At           time.Time // its clock's time at the append
	Msg          queue.NewMessage
}

func (k tick) String() string {
	return fmt.Sprintf("%s:%s/%s@%s", k.Sched, k.Tenant, k.Flow, k.At.UTC().Format(time.RFC3339))
}

type tickLog struct {
	mu    sync.Mutex
	ticks []tick
	fail  func(tick) error
}

func (l *tickLog) all() []tick {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]tick(nil), l.ticks...)
}

// times lists the ticks' times as offsets from base.
func (l *tickLog) times(base time.Time) []time.Duration {
	var out []time.Duration
	for _, k := range l.all() {
		out = append(out, k.At.Sub(base))
	}
	return out
}

// appender is one scheduler's Appender: it records what would be appended.
type appender struct {
	name string
	clk  *clocktest.Fake
	log  *tickLog
	ids  atomic.Uint64
}

func (a *appender) Append(tenant, flowName string, m queue.NewMessage) (queue.Message, error) {
	k := tick{Sched: a.name, Tenant: tenant, Flow: flowName, At: a.clk.Now(), Msg: m}
	a.log.mu.Lock()
	fail := a.log.fail
	a.log.mu.Unlock()
	if fail != nil {
		if err := fail(k); err != nil {
			return queue.Message{}, err
		}
	}
	a.log.mu.Lock()
	a.log.ticks = append(a.log.ticks, k)
	a.log.mu.Unlock()
	id := a.ids.Add(1)
	return queue.Message{ID: id, EnqueuedAt: k.At, Source: m.Source, CorrelationID: m.CorrelationID, Payload: m.Payload}, nil
}

// NextID is one past the ticks of tenant/flowName appended so far, by any
// scheduler of the test: the queue they would share.
func (a *appender) NextID(tenant, flowName string) (uint64, error) {
	n := uint64(1)
	for _, k := range a.log.all() {
		if k.Tenant == tenant && k.Flow == flowName {
			n++
		}
	}
	return n, nil
}

// Appended finds the tick of tenant/flowName with the correlation ID cid
// among those appended, by any scheduler of the test.
func (a *appender) Appended(tenant, flowName string, _ uint64, cid string) (queue.Presence, error) {
	for _, k := range a.log.all() {
		if k.Tenant == tenant && k.Flow == flowName && k.Msg.CorrelationID == cid {
			return queue.Present, nil
		}
	}
	return queue.Absent, nil
}

// start starts a scheduler (a process) named name on the env's cron folder
// and stops it when the test ends.
func (e *env) start(name string, clk *clocktest.Fake, poll time.Duration) *scheduler.Scheduler {
	e.t.Helper()
	var n atomic.Int64
	s := scheduler.New(scheduler.Config{
		Live: e.live, Queues: &appender{name: name, clk: clk, log: e.ticks}, Dir: e.dir, Clock: clk, Logger: cmp.Or(e.log, quietLog()), Poll: poll,
		NewID: func() string { return fmt.Sprintf("%s-%d", name, n.Add(1)) },
	})
	s.Start()
	e.t.Cleanup(s.Stop)
	return s
}

// startAt starts a scheduler named name on a fake clock at start, polling
// every poll, and returns both once the scheduler waits on the clock.
func (e *env) startAt(name string, start time.Time, poll time.Duration) (*scheduler.Scheduler, *clocktest.Fake) {
	e.t.Helper()
	clk := clocktest.New(start)
	s := e.start(name, clk, poll)
	clk.WaitCalls(e.t, 1)
	return s, clk
}

// blockRecord makes the writes of tenant/flowName's last-tick record fail
// (a folder, not empty, where the record's temporary file goes, as a full
// disk fails them) until the returned function is called.
func (e *env) blockRecord(tenant, flowName string) (unblock func()) {
	e.t.Helper()
	blocker := filepath.Join(e.dir, tenant, flowName+".last.tmp")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o700); err != nil {
		e.t.Fatal(err)
	}
	return func() {
		e.t.Helper()
		if err := os.RemoveAll(blocker); err != nil {
			e.t.Fatal(err)
		}
	}
}

func secs(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * time.Second
	}
	return out
}

// captureLog makes the schedulers the test starts log to a buffer, and
// returns it.
func (e *env) captureLog() *jsonlogtest.Buffer {
	logs := &jsonlogtest.Buffer{}
	e.log = logs.Logger(slog.LevelInfo)
	return logs
}

// wantNoSetBack fails the test for each cron_clock_set_back line: the
// clock was not set back.
func wantNoSetBack(t *testing.T, logs *jsonlogtest.Buffer) {
	t.Helper()
	if got := logs.Events(t, "cron_clock_set_back"); len(got) != 0 {
		t.Errorf("the clock was not set back, yet %d cron_clock_set_back lines: %v", len(got), got)
	}
}
