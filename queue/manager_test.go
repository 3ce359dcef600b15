package queue_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/queue"
)

// newManager returns a manager on a fresh root (not created yet), with the
// fake clock, stopped when the test ends.
func newManager(t testing.TB, clk *clocktest.Fake, h queue.Handler, maxWorkers int, fsys queue.FS) (*queue.Manager, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "queues")
	m := queue.NewManager(queue.ManagerConfig{Root: root, FS: fsys, MaxWorkers: maxWorkers, Handler: h, Clock: clk,
		Logger: quietLog(), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	return m, root
}

func enqueue(payload string) queue.NewMessage {
	return queue.NewMessage{Source: "enqueue", CorrelationID: "cid-" + payload, Payload: []byte(payload)}
}

func TestManagerOpensOnFirstUse(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 0, nil)
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NewManager created %s: %v", root, err)
	}
	if qs := m.Queues(); len(qs) != 0 {
		t.Fatalf("Queues before any use = %+v", qs)
	}
	if err := m.Has("acme", "orders"); err != nil {
		t.Fatalf("Has = %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Has created %s", root)
	}

	q, w, err := m.Queue("acme", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if q.Tenant != "acme" || q.Flow != "orders" {
		t.Errorf("Queue returned %s/%s", q.Tenant, q.Flow)
	}
	if _, err := os.Stat(filepath.Join(root, "acme", "orders", "segment.log")); err != nil {
		t.Errorf("the queue's files were not created: %v", err)
	}
	clk.WaitCalls(t, 1) // its worker started and waits
	if !w.State().Leading {
		t.Error("the worker started on first use does not lead")
	}
	q2, w2, err := m.Queue("acme", "orders")
	if err != nil || q2 != q || w2 != w {
		t.Errorf("the second use opened again: %p %p %v", q2, w2, err)
	}
	qs := m.Queues()
	if len(qs) != 1 || qs[0].Tenant != "acme" || qs[0].Flow != "orders" || qs[0].Depth != 0 || qs[0].DeadLetters != 0 || !qs[0].State.Leading {
		t.Errorf("Queues = %+v", qs)
	}
	if got := m.String(); got != "queues at "+root {
		t.Errorf("String = %q", got)
	}
}

func TestManagerBudget(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 2, nil)
	for _, f := range []string{"a", "b"} {
		if _, _, err := m.Queue("acme", f); err != nil {
			t.Fatalf("Queue(acme, %s): %v", f, err)
		}
	}
	if err := m.Has("acme", "c"); !errors.Is(err, queue.ErrBudget) {
		t.Errorf("Has for a third queue = %v, want ErrBudget", err)
	}
	for _, f := range []string{"a", "b"} {
		if err := m.Has("acme", f); err != nil {
			t.Errorf("Has(acme, %s) for an open queue = %v", f, err)
		}
	}
	if _, _, err := m.Queue("acme", "c"); !errors.Is(err, queue.ErrBudget) {
		t.Errorf("Queue for a third queue = %v, want ErrBudget", err)
	}
	if _, err := m.Append("other", "c", enqueue("x")); !errors.Is(err, queue.ErrBudget) {
		t.Errorf("Append to a third queue = %v, want ErrBudget", err)
	}
	for _, dir := range []string{filepath.Join(root, "acme", "c"), filepath.Join(root, "other")} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused queue left %s behind (%v)", dir, err)
		}
	}
	// an open queue still takes messages
	if _, err := m.Append("acme", "a", enqueue("x")); err != nil {
		t.Errorf("Append to an open queue: %v", err)
	}
	if qs := m.Queues(); len(qs) != 2 {
		t.Errorf("Queues = %+v", qs)
	}
	if taken, max := m.Budget(); taken != 2 || max != 2 {
		t.Errorf("Budget() = %d, %d; want 2 of 2", taken, max)
	}
}

func TestManagerDefaultBudgetIs256(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, _ := newManager(t, clk, rec.handler("m", ack), 0, nil)
	for i := range 256 {
		if _, _, err := m.Queue("acme", fmt.Sprintf("f%d", i)); err != nil {
			t.Fatalf("queue %d: %v", i, err)
		}
	}
	if _, _, err := m.Queue("acme", "one-more"); !errors.Is(err, queue.ErrBudget) {
		t.Errorf("queue 257 = %v, want ErrBudget", err)
	}
}

func TestManagerBadNames(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 1, nil)
	cases := []struct{ tenant, flow, want string }{
		{"acme", "a.b", `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		{"../x", "orders", `invalid name "../x" for tenant (flow "orders"): character '.' at position 1 is not allowed`},
		{"acme", "Orders", `invalid name "Orders" for flow (tenant "acme"): character 'O' at position 1 is not allowed`},
		{"acme", "../../etc", ""},
		{"", "orders", ""},
		{"acme", "", ""},
		{"acme", "x/y", ""},
		{"-acme", "orders", ""},
	}
	for _, c := range cases {
		want := c.want
		if want == "" {
			if err := naming.Check(c.tenant, naming.Tenant(c.flow)); err != nil {
				want = err.Error()
			} else {
				want = naming.Check(c.flow, naming.Flow(c.tenant)).Error()
			}
		}
		_, _, err := m.Queue(c.tenant, c.flow)
		var ne *naming.Error
		if !errors.As(err, &ne) || err.Error() != want {
			t.Errorf("Queue(%q, %q) = %v, want the name rule's error %q", c.tenant, c.flow, err, want)
		}
		if _, err := m.Append(c.tenant, c.flow, enqueue("x")); err == nil || err.Error() != want {
			t.Errorf("Append(%q, %q) = %v, want %q", c.tenant, c.flow, err, want)
		}
	}
	if entries, err := os.ReadDir(root); err == nil && len(entries) > 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bad names created something under the root: %v %v", entries, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("../x created a folder beside the root")
	}
	// refused names did not spend the budget of 1
	if _, _, err := m.Queue("acme", "orders"); err != nil {
		t.Errorf("a good queue after the bad names: %v", err)
	}
}

// Append wakes the queue's worker: the message is delivered without the
// worker's Poll (one hour here) going by.
func TestManagerAppendWakesWorker(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, _ := newManager(t, clk, rec.handler("m", ack), 0, nil)
	msg, err := m.Append("acme", "orders", enqueue(`{"orderId":"A-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if msg.ID != 1 || msg.Offset != 0 || !msg.EnqueuedAt.Equal(wt0) || msg.Source != "enqueue" || msg.CorrelationID != `cid-{"orderId":"A-1"}` {
		t.Errorf("Append returned %+v", msg)
	}
	rec.wait(t, 1)
	clk.WaitCalls(t, 1) // at rest (the first Append's wake may still be on its way)
	if _, err := m.Append("acme", "orders", enqueue("second")); err != nil {
		t.Fatal(err)
	}
	got := rec.wait(t, 2)
	if len(got) != 2 || got[1].Payload != "second" || got[1].At != 0 || got[0].Tenant != "acme" || got[0].Flow != "orders" {
		t.Errorf("deliveries = %v", got)
	}
	if !clk.Now().Equal(wt0) {
		t.Errorf("the clock moved to %v", clk.Now())
	}
}

func TestManagerQueuesReportsDepthAndState(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	release := make(chan struct{})
	m, _ := newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		switch string(d.Payload) {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
			}
		case "dead":
			return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "corrupt"}
		}
		return ack(ctx, d)
	}), 0, nil)
	if _, err := m.Append("acme", "b", enqueue("dead")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	if _, _, err := m.Queue("acme", "a"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"slow", "x", "y"} {
		if _, err := m.Append("acme", "a", enqueue(p)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "slow is in flight and b is idle", func() bool {
		qs := m.Queues()
		return len(qs) == 2 && qs[0].State.InFlight == 1 && qs[1].DeadLetters == 1 && qs[1].Depth == 0
	})
	qs := m.Queues()
	if a := qs[0]; a.Tenant != "acme" || a.Flow != "a" || a.Depth != 3 || !a.State.Leading || a.State.InFlight != 1 || a.DeadLetters != 0 {
		t.Errorf("queue a while slow runs = %+v, want depth 3 messages (nothing processed)", a)
	}
	if b := qs[1]; b.Flow != "b" || b.DeadLetters != 1 || b.State.Delivered["dead_lettered"] != 1 {
		t.Errorf("queue b = %+v", b)
	}
	close(release)
	rec.wait(t, 4)
	eventually(t, "queue a is processed", func() bool {
		qs := m.Queues()
		return qs[0].Depth == 0 && qs[0].State.InFlight == 0 && qs[0].State.Delivered["succeeded"] == 3
	})
}

// countHookFS is the OS, calling hook once, at the first count of a log
// once armed (segment.log opened read-only): as it opens the log, before
// it reads the checkpoint (atOpen), or as it closes it, the count made;
// and it closes written at the first write of a checkpoint once the
// handler was let go.
type countHookFS struct {
	queue.OS
	atOpen   bool
	armed    atomic.Bool
	taken    atomic.Bool
	released atomic.Bool
	hook     func()
	written  chan struct{}
	once     sync.Once
}

func (h *countHookFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	count := filepath.Base(name) == "segment.log" && flag == os.O_RDONLY && h.armed.Load() && h.taken.CompareAndSwap(false, true)
	if count && h.atOpen {
		h.hook()
	}
	f, err := h.OS.OpenFile(name, flag, perm)
	switch {
	case err != nil:
		return f, err
	case count && !h.atOpen:
		return &countHookFile{File: f, close: h.hook}, nil
	case filepath.Base(name) == "segment.log.ckpt":
		return &countHookFile{File: f, wrote: func() {
			if h.released.Load() {
				h.once.Do(func() { close(h.written) })
			}
		}}, nil
	}
	return f, nil
}

type countHookFile struct {
	queue.File
	close, wrote func()
}

func (f *countHookFile) Close() error {
	err := f.File.Close()
	if f.close != nil {
		f.close()
	}
	return err
}

func (f *countHookFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if f.wrote != nil {
		f.wrote()
	}
	return n, err
}

// A queue open in this process is counted before its worker's state is
// read: a message whose first attempt fails while the queue is described
// (its retry scheduled, then the checkpoint past it) is pending, retrying
// or both, never in neither. The state was read first, and an attempt
// failing before the log was counted made the message neither pending
// (processed by the checkpoint) nor retrying (not in the state read).
func TestManagerInfoCountsBeforeTheWorkersState(t *testing.T) {
	type seen struct{ Depth, Retrying int64 }
	for _, tc := range []struct {
		name   string
		atOpen bool
		want   seen
	}{
		{"the attempt fails as the count begins", true, seen{Depth: 0, Retrying: 1}},
		{"the attempt fails once the log is counted", false, seen{Depth: 1, Retrying: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(wt0)
			rec := newRecorder(clk)
			fail := make(chan struct{})
			var failOnce sync.Once
			letGo := func() { failOnce.Do(func() { close(fail) }) }
			disk := &countHookFS{atOpen: tc.atOpen, written: make(chan struct{})}
			m, _ := newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				<-fail
				return queue.Verdict{Kind: queue.VerdictRetry, Policy: workedPolicy, Error: http503}
			}), 0, disk)
			t.Cleanup(letGo) // before m.Stop
			disk.hook = func() {
				// the attempt fails: its retry is scheduled, then the
				// checkpoint written past it as the worker goes idle
				disk.released.Store(true)
				letGo()
				select {
				case <-disk.written:
				case <-time.After(10 * time.Second):
					t.Error("the worker wrote no checkpoint after the failed attempt")
				}
			}
			if _, err := m.Append("acme", "orders", enqueue("x")); err != nil {
				t.Fatal(err)
			}
			rec.wait(t, 1) // the attempt is being made
			disk.armed.Store(true)
			info, ok := m.Info("acme", "orders")
			if !ok || !info.Open || info.CountsErr != nil {
				t.Fatalf("Info = %+v, %v", info, ok)
			}
			if !disk.taken.Load() {
				t.Fatal("the description did not count the log")
			}
			got := seen{Depth: info.Depth, Retrying: int64(info.State.RetriesPending)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the message whose attempt failed during Info (-want +got):\n%s", diff)
			}
			// the next description sees the message retrying only
			info, _ = m.Info("acme", "orders")
			if got := (seen{Depth: info.Depth, Retrying: int64(info.State.RetriesPending)}); got != (seen{Retrying: 1}) {
				t.Errorf("the next Info: %+v, want retrying only", got)
			}
		})
	}
}

// Stop stops every worker, each after its delivery in progress, writes the
// checkpoints and closes the queues; it is safe twice.
func TestManagerStop(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "running" {
			<-ctx.Done()
		}
		return ack(ctx, d)
	}), 0, nil)
	var workers []*queue.Worker
	for _, f := range []string{"a", "b"} {
		_, w, err := m.Queue("acme", f)
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	if _, err := m.Append("acme", "a", enqueue("running")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("acme", "a", enqueue("queued")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	m.Stop()
	for i, w := range workers {
		if st := w.State(); st.Leading || st.InFlight != 0 {
			t.Errorf("worker %d after Stop: %+v", i, st)
		}
	}
	if got := payloads(rec.all()); !slices.Equal(got, []string{"running"}) {
		t.Errorf("deliveries = %v", got)
	}
	m.Stop() // safe twice
	if _, _, err := m.Queue("acme", "a"); err == nil {
		t.Error("Queue after Stop succeeded")
	}
	if _, err := m.Append("acme", "c", enqueue("x")); err == nil {
		t.Error("Append after Stop succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "acme", "c")); !errors.Is(err, os.ErrNotExist) {
		t.Error("Append after Stop created a queue")
	}
	// after Stop the queues are still described from their files, with
	// no worker of this process leading or delivering
	for _, q := range m.Queues() {
		if q.State.Leading || q.State.InFlight != 0 {
			t.Errorf("Queues after Stop: %+v", q)
		}
	}

	// the locks are free and the checkpoint was written: a worker of the
	// next process leads and delivers only what was left
	q := openQueueAt(t, root, "acme", "a", clk)
	n := clk.Calls()
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("next", ack)})
	clk.WaitCalls(t, n+1)
	if !w.State().Leading {
		t.Error("a worker after Stop cannot lead")
	}
	if got := payloads(rec.all()); !slices.Equal(got, []string{"running", "queued"}) {
		t.Errorf("deliveries = %v, want queued delivered once by the next process", got)
	}
}

// TestManagerStopWorkers: StopWorkers, nexus serve's first step at a
// shutdown, lets a delivery in flight finish and starts no other, while
// the queues go on taking appends (a request still being answered); Stop
// then closes them, and the next process delivers what was left. The
// workers went on delivering a backlog until Stop, which nexus serve calls
// only after the HTTP server has drained.
func TestManagerStopWorkers(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "running" {
			<-ctx.Done() // the stop has begun: StopGrace after it
		}
		return ack(ctx, d)
	}), 0, nil)
	for _, p := range []string{"running", "waiting-1", "waiting-2"} {
		if _, err := m.Append("acme", "a", enqueue(p)); err != nil {
			t.Fatal(err)
		}
	}
	rec.wait(t, 1)
	m.StopWorkers()
	// appends are taken, and none is delivered
	if _, err := m.Append("acme", "a", enqueue("late")); err != nil {
		t.Errorf("Append after StopWorkers: %v", err)
	}
	if _, err := m.Append("acme", "b", enqueue("new queue")); err != nil {
		t.Errorf("Append to a queue opened after StopWorkers: %v", err)
	}
	m.StopWorkers() // safe twice
	m.Stop()
	if got := payloads(rec.all()); !slices.Equal(got, []string{"running"}) {
		t.Errorf("deliveries = %v, want the one in flight only", got)
	}
	q := openQueueAt(t, root, "acme", "a", clk)
	n := clk.Calls()
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("next", ack)})
	clk.WaitCalls(t, n+1)
	if got := payloads(rec.all()); !slices.Equal(got, []string{"running", "waiting-1", "waiting-2", "late"}) {
		t.Errorf("deliveries = %v, want the rest delivered by the next process", got)
	}
}

func openQueueAt(t testing.TB, root, tenant, flow string, clk *clocktest.Fake) *queue.Queue {
	t.Helper()
	q, _, err := queue.Open(root, tenant, flow, queue.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// A failed fdatasync poisons the queue; the manager reopens it and starts a
// new worker, and the next Append is taken and delivered.
func TestManagerReopensPoisonedQueue(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, _ := newManager(t, clk, rec.handler("m", ack), 0, hooks)
	q1, w1, err := m.Queue("acme", "orders")
	if err != nil {
		t.Fatal(err)
	}
	hooks.failNextSync()
	if _, err := m.Append("acme", "orders", enqueue("lost?")); err == nil {
		t.Fatal("Append with a failing fdatasync succeeded")
	}
	// The Append whose fdatasync failed already reports ErrPoisoned, so the
	// Manager reopens the queue at once and the next submission is taken.
	q2, w2, err := m.Queue("acme", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if q2 == q1 || w2 == w1 {
		t.Error("the queue was not reopened after the failed fdatasync")
	}
	msg, err := m.Append("acme", "orders", enqueue("next"))
	if err != nil {
		t.Errorf("the first Append after the failed fdatasync: %v", err)
		if msg, err = m.Append("acme", "orders", enqueue("next")); err != nil {
			t.Fatalf("the second Append after the failed fdatasync: %v", err)
		}
	}
	if q3, _, _ := m.Queue("acme", "orders"); q3 == q1 {
		t.Fatal("the poisoned queue was never reopened")
	}
	eventually(t, "the poisoned queue's worker stops leading", func() bool { return !w1.State().Leading })
	eventually(t, "next is delivered", func() bool {
		return slices.ContainsFunc(rec.all(), func(d delivery) bool { return d.ID == msg.ID && d.Payload == "next" })
	})
}

// A failed append answers at once, while the queue's worker is in the
// middle of a delivery (which its Stop waits for, up to StopGrace: an hour
// here); the next submission is taken by the reopened queue, whose worker
// takes over once the old one has finished.
func TestManagerFailedAppendDoesNotWaitForTheDelivery(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, release := slowManager(t, clk, rec, hooks, 0)
	if _, err := m.Append("acme", "orders", enqueue("slow")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1) // the slow delivery is in flight
	hooks.failNextSync()
	done := make(chan error, 1)
	go func() {
		_, err := m.Append("acme", "orders", enqueue("lost?"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, queue.ErrPoisoned) {
			t.Errorf("Append with a failing fdatasync: %v, want ErrPoisoned", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failed Append did not answer while the worker's delivery was in flight")
	}
	msg, err := m.Append("acme", "orders", enqueue("next"))
	if err != nil {
		t.Fatalf("the Append after the failed one: %v", err)
	}
	if d := rec.all(); len(d) != 1 {
		t.Errorf("deliveries while the slow one is in flight: %v", d)
	}
	release()
	// the new worker stood by on the worker lock; it is woken when the old
	// one has stopped (no poll: the fake clock does not move)
	eventually(t, "next is delivered by the reopened queue's worker", func() bool {
		return slices.ContainsFunc(rec.all(), func(d delivery) bool { return d.ID == msg.ID && d.Payload == "next" })
	})
}

// slowManager is a manager over hooks (at most maxWorkers workers; 0: the
// default) whose handler holds a delivery of "slow" until release is
// called (or the delivery is cancelled); the test's end calls it too.
func slowManager(t *testing.T, clk *clocktest.Fake, rec *recorder, hooks *hookFS, maxWorkers int) (m *queue.Manager, release func()) {
	t.Helper()
	held := make(chan struct{})
	release = sync.OnceFunc(func() { close(held) })
	m = queue.NewManager(queue.ManagerConfig{Root: filepath.Join(t.TempDir(), "queues"), FS: hooks, MaxWorkers: maxWorkers, Clock: clk, Logger: quietLog(), Poll: time.Hour, Now: clk.Now,
		StopGrace: time.Hour, Handler: rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
			if string(d.Payload) == "slow" {
				select {
				case <-held:
				case <-ctx.Done():
				}
			}
			return ack(ctx, d)
		})})
	t.Cleanup(m.Stop)
	t.Cleanup(release)
	return m, release
}

// readCountingFS is the OS, counting the bytes read from every dlq.log.
type readCountingFS struct {
	queue.OS
	dlqBytes atomic.Int64
}

type readCountingFile struct {
	queue.File
	n *atomic.Int64
}

func (f readCountingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.n.Add(int64(n))
	return n, err
}

func (c *readCountingFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := c.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "dlq.log" {
		return f, err
	}
	return readCountingFile{File: f, n: &c.dlqBytes}, nil
}

// TestManagerQueuesReadsDeadLettersOnlyWhenChanged: describing the queues
// (what /metrics, open to anyone, does at every scrape) counts the dead
// letters from dlq.log once, and again only when dlq.log or its marks
// change, instead of reading every payload at every call.
func TestManagerQueuesReadsDeadLettersOnlyWhenChanged(t *testing.T) {
	clk := clocktest.New(wt0)
	cfs := &readCountingFS{}
	m, root := newManager(t, clk, queue.HandlerFunc(ack), 0, cfs)
	// dead letters of a queue on disk, and of one open in this process
	payload := []byte(`{"blob":"` + strings.Repeat("x", 64<<10) + `"}`)
	for _, flow := range []string{"closed", "open"} {
		q, _, err := queue.Open(root, wTenant, flow, queue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for id := uint64(1); id <= 4; id++ {
			if err := q.MoveToDLQ(queue.DeadLetter{ID: id, Attempts: 1, Payload: payload}); err != nil {
				t.Fatal(err)
			}
		}
		q.Close()
		// written a while ago: a stamp that changed within the last
		// moments is never cached
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(filepath.Join(root, wTenant, flow, "dlq.log"), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Queue(wTenant, "open"); err != nil {
		t.Fatal(err)
	}
	deadLetters := func() map[string]int {
		out := map[string]int{}
		for _, info := range m.Queues() {
			out[info.Flow] = info.DeadLetters
		}
		return out
	}
	want := map[string]int{"closed": 4, "open": 4}
	if diff := cmp.Diff(want, deadLetters()); diff != "" {
		t.Fatalf("dead letters (-want +got):\n%s", diff)
	}
	once := cfs.dlqBytes.Load()
	for range 5 {
		deadLetters()
	}
	if got := cfs.dlqBytes.Load(); got != once {
		t.Errorf("five more descriptions read %d bytes of dlq.log, want none (nothing changed)", got-once)
	}
	// a mark changes the count, and is seen
	q, _, err := queue.Open(root, wTenant, "closed", queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Mark(2, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	want["closed"] = 3
	if diff := cmp.Diff(want, deadLetters()); diff != "" {
		t.Errorf("dead letters after a discard (-want +got):\n%s", diff)
	}
}

// TestManagerStopWorkersWithPublishAndReplay: while StopWorkers waits for
// a delivery in flight, that delivery publishes to a queue not yet open
// and to one whose worker is being stopped, and a request replays a dead
// letter of a third queue: nothing deadlocks, all three are taken, none
// is delivered, and Stop then closes the queues.
func TestManagerStopWorkersWithPublishAndReplay(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	var m *queue.Manager
	var pubErrs [2]error
	m, _ = newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		switch string(d.Payload) {
		case "dl":
			return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "x"}
		case "pub":
			close(inFlight)
			<-release
			_, pubErrs[0] = m.Append("acme", "fresh", enqueue("published-fresh"))
			_, pubErrs[1] = m.Append("acme", "c", enqueue("published-c"))
		}
		return ack(ctx, d)
	}), 0, nil)
	if _, err := m.Append("acme", "d", enqueue("dl")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("acme", "c", enqueue("c0")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 2)
	eventually(t, "the dead letter", func() bool { i, _ := m.Info("acme", "d"); return i.DeadLetters == 1 })
	if _, err := m.Append("acme", "a", enqueue("pub")); err != nil {
		t.Fatal(err)
	}
	<-inFlight
	stopped := make(chan struct{})
	go func() { m.StopWorkers(); close(stopped) }()
	time.Sleep(20 * time.Millisecond) // StopWorkers is waiting for the delivery
	replayed := make(chan error, 1)
	go func() {
		dl, err := m.Peek("acme", "d")
		if err != nil {
			replayed <- err
			return
		}
		ids, err := dl.PendingIDs()
		if err != nil || len(ids) != 1 {
			replayed <- fmt.Errorf("pending %v %v", ids, err)
			return
		}
		_, err = m.Replay("acme", "d", ids[0], "replay", "cid-r")
		replayed <- err
	}()
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("StopWorkers did not return: deadlock")
	}
	select {
	case err := <-replayed:
		if err != nil {
			t.Errorf("Replay during StopWorkers: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Replay did not return")
	}
	if pubErrs[0] != nil || pubErrs[1] != nil {
		t.Errorf("publishes during StopWorkers: %v", pubErrs)
	}
	done := make(chan struct{})
	go func() { m.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	for _, d := range rec.all() {
		if strings.HasPrefix(d.Payload, "published") || d.Source == "replay" {
			t.Errorf("delivered after StopWorkers: %v", d)
		}
	}
}

// holdAppendLock makes tenant/flow's files under root and takes its append
// lock as another process would; release lets it go (at the test's end if
// not before).
func holdAppendLock(t *testing.T, root, tenant, flow string) (release func()) {
	t.Helper()
	q, _, err := queue.Open(root, tenant, flow, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	lf, err := os.OpenFile(filepath.Join(root, tenant, flow, "append.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { lf.Close() }) } // closing the file lets the lock go
	t.Cleanup(release)
	return release
}

// TestManagerOpeningOneQueueHoldsUpNoOther: opening a queue waits for its
// append lock, which another process may hold for seconds (a janitor
// reading a large dlq.log, a dead-letter compaction, a replay of a whole
// queue, a process stopped mid-append); it did so holding the Manager's
// lock, so every other queue's submissions, Has, Budget and the metrics
// waited too. A second submission to the queue being opened waits for that
// opening and takes the same queue; the opening holds a slot of the budget.
func TestManagerOpeningOneQueueHoldsUpNoOther(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 3, nil)
	if _, err := m.Append("acme", "b", enqueue("b1")); err != nil {
		t.Fatal(err)
	}
	release := holdAppendLock(t, root, "acme", "a")
	aDone := make(chan error, 2)
	for _, p := range []string{"a1", "a2"} {
		go func() { _, err := m.Append("acme", "a", enqueue(p)); aDone <- err }()
	}
	// within a bounded time: Budget waited on the Manager's lock
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			release()
			t.Fatalf("%s waited 5 s for acme/a's append lock, held by another process", what)
		}
	}
	for taken := 0; taken != 2; {
		within("Budget", func() { taken, _ = m.Budget() })
	}
	within("an append to the open queue acme/b", func() {
		if _, err := m.Append("acme", "b", enqueue("b2")); err != nil {
			t.Error(err)
		}
	})
	within("Has for a third queue", func() {
		if err := m.Has("acme", "c"); err != nil {
			t.Errorf("Has(acme/c) = %v; the budget of 3 has a slot left", err)
		}
	})
	select {
	case err := <-aDone:
		t.Fatalf("an append to acme/a went through while another process held its append lock: %v", err)
	default:
	}
	release()
	for range 2 {
		if err := <-aDone; err != nil {
			t.Fatal(err)
		}
	}
	if taken, _ := m.Budget(); taken != 2 {
		t.Errorf("%d slots of the budget taken, want 2 (acme/a opened once)", taken)
	}
	rec.wait(t, 4)
}

// TestManagerStopWaitsForAnOpening: Stop returns once every queue is
// closed, one being opened when it began included (it closes itself,
// finding the queues shut down): Stop returned while such a queue was
// still opening, and it was opened and closed after.
func TestManagerStopWaitsForAnOpening(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 0, nil)
	release := holdAppendLock(t, root, "acme", "a")
	appended := make(chan error, 1)
	go func() { _, err := m.Append("acme", "a", enqueue("a1")); appended <- err }()
	for taken := 0; taken != 1; taken, _ = m.Budget() {
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while acme/a was being opened")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	<-stopped
	if err := <-appended; err == nil {
		t.Error("the append to a queue opened while the Manager stopped went through")
	}
}

// TestQueueFilesHeld: a queue with an idle worker holds at most
// FilesPerQueue-1 open files (FilesPerQueue leaves one for housekeeping's
// moment), which nexus serve counts on to fit its worker budget to the
// open-file limit. Read from /proc/self/fd: the files this process holds
// under each queue's folder.
func TestQueueFilesHeld(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 0, nil)
	const queues = 8
	for i := range queues {
		if _, err := m.Append("acme", fmt.Sprintf("f%d", i), enqueue(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	held := func() map[string][]string {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		out := map[string][]string{}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
			if err != nil || !strings.HasPrefix(target, root+string(filepath.Separator)) {
				continue
			}
			out[filepath.Dir(target)] = append(out[filepath.Dir(target)], filepath.Base(target))
		}
		return out
	}
	rec.wait(t, queues)
	// once every worker is idle (housekept, waiting for the next Poll);
	// a handle opened for a moment is closed by then
	over := func(files map[string][]string) (bad []string) {
		for dir, names := range files {
			if len(names) > queue.FilesPerQueue-1 {
				slices.Sort(names)
				bad = append(bad, fmt.Sprintf("%s: %d files held (%v)", dir, len(names), names))
			}
		}
		return bad
	}
	files := held()
	for deadline := time.Now().Add(5 * time.Second); len(files) != queues || len(over(files)) > 0; files = held() {
		if time.Now().After(deadline) {
			t.Fatalf("files held in %d queue folders, want %d, at most FilesPerQueue-1 = %d each: %v", len(files), queues, queue.FilesPerQueue-1, over(files))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
