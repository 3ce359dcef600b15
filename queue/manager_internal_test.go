package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestManagerReopenedTwiceKeepsItsBudgetSlot: a queue reopened after a
// failed write may fail again (the next append to the new handle) before
// the first reopening has finished; the second reopening, retrying while
// the queue cannot be opened, keeps the queue's slot of the budget (the
// first one's end once took the slot with it, and another flow's first
// use took it). The interleaving is a race: each round tries it again.
func TestManagerReopenedTwiceKeepsItsBudgetSlot(t *testing.T) {
	k := [2]string{testTenant, testFlow}
	for round := range 200 {
		mfs, root := memQueueRoot(t)
		clk := clocktest.New(epoch)
		m := NewManager(ManagerConfig{Root: root, FS: mfs, MaxWorkers: 1, Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict { return ackAll(d) }),
			Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
		q1, _, err := m.Queue(testTenant, testFlow)
		if err != nil {
			t.Fatal(err)
		}
		second := make(chan struct{})
		go func() { // the submission that finds the reopened handle poisoned again
			defer close(second)
			for {
				m.mu.Lock()
				e := m.queues[k]
				m.mu.Unlock()
				if e != nil && e.q != q1 {
					m.reopen(testTenant, testFlow, e.q)
					// from now on the queue cannot be opened: the second
					// reopening retries after its pause
					mfs.Fail(opOpen, segmentFile, 1, syscall.EIO, true)
					return
				}
				runtime.Gosched()
			}
		}()
		m.reopen(testTenant, testFlow, q1)
		<-second
		// the first reopening ends (it has only its wake-up left), the
		// second waits out its pause
		deadline := time.Now().Add(5 * time.Second)
		for {
			m.mu.Lock()
			n := m.reopening[k]
			m.mu.Unlock()
			if n <= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the first reopening did not end", round)
			}
			runtime.Gosched()
		}
		if err := m.Has(testTenant, "other"); !errors.Is(err, ErrBudget) {
			t.Fatalf("round %d: another flow's first use while %v is reopened a second time: %v, want ErrBudget (the slot is its)", round, k, err)
		}
		m.Stop()
	}
}

// TestManagerConcurrentStopWaitsForTheFirst: a second Stop called while
// the first is closing the queues returns only once the first has
// finished (it once found the open queues emptied and returned at once).
func TestManagerConcurrentStopWaitsForTheFirst(t *testing.T) {
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	closing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)
	var armed atomic.Bool
	mfs.before = func(op, name string) {
		if op == opClose && name == segPath && armed.Load() {
			once.Do(func() { close(closing) })
			<-release
		}
	}
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict { return ackAll(d) }),
		Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	q, _, err := m.Queue(testTenant, testFlow)
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, 1) // the worker is idle
	armed.Store(true)
	first := make(chan struct{})
	go func() { m.Stop(); close(first) }()
	<-closing // the first Stop is closing the queue
	second := make(chan struct{})
	go func() { m.Stop(); close(second) }()
	select {
	case <-second:
		t.Errorf("the second Stop returned while the first is still closing the queues (segment.log of %s/%s not closed yet)", q.Tenant, q.Flow)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-first
	<-second
}
