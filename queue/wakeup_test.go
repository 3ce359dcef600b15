package queue_test

import (
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// gateFS is the OS with two one-shot gates: the next Stat of an open
// segment.log runs, then waits (its answer already taken); the next open
// of dlq.log.acked waits before it runs.
type gateFS struct {
	queue.OS
	mu                sync.Mutex
	statGate, ackGate chan struct{} // armed when non-nil; closed to release
	statHit, ackHit   chan struct{}
}

func (g *gateFS) take(p *chan struct{}) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := *p
	*p = nil
	return c
}

func (g *gateFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	if filepath.Base(name) == "dlq.log.acked" {
		if c := g.take(&g.ackGate); c != nil {
			g.ackHit <- struct{}{}
			<-c
		}
	}
	f, err := g.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "segment.log" {
		return f, err
	}
	return &gateFile{File: f, g: g}, nil
}

type gateFile struct {
	queue.File
	g *gateFS
}

func (f *gateFile) Stat() (fs.FileInfo, error) {
	info, err := f.File.Stat()
	if c := f.g.take(&f.g.statGate); c != nil {
		f.g.statHit <- struct{}{}
		<-c
	}
	return info, err
}

// TestWakeUpNotLostToTheSyncedEndMovedBack: the worker's read took the
// log's size, then the synced end; an append that ended in between made
// the size look short of it, as after a drain, and the synced end was
// moved back under the message just acknowledged. The append's wake-up
// was then spent on a read that, finding the append lock taken (here by a
// discard from the UI), trusted the synced end moved back: the message
// waited for the next poll (an hour here).
func TestWakeUpNotLostToTheSyncedEndMovedBack(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	g := &gateFS{statHit: make(chan struct{}, 1), ackHit: make(chan struct{}, 1)}
	q := openQ(t, root, clk, g)
	rec := newRecorder(clk)
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	put(t, q, "m0")
	w.Wake()
	rec.wait(t, 1)
	clk.WaitCalls(t, 2) // idle again (m0's log drained)

	statRelease := make(chan struct{})
	g.mu.Lock()
	g.statGate = statRelease
	g.mu.Unlock()
	w.Wake()
	<-g.statHit // the worker has read the size: 0

	put(t, q, "m1") // acknowledged: durable, synced end moved on
	n := clk.Calls()
	w.Wake() // as Manager.Append does

	ackRelease := make(chan struct{})
	g.mu.Lock()
	g.ackGate = ackRelease
	g.mu.Unlock()
	markDone := make(chan error, 1)
	go func() { markDone <- q.Mark(99, queue.MarkDiscarded) }() // nexus UI: discard
	<-g.ackHit                                                  // the discard holds the append lock

	close(statRelease)
	clk.WaitCalls(t, n+2) // the worker read, woke on m1's wake-up, read again, and sleeps
	close(ackRelease)
	<-markDone

	if got := rec.wait(t, 2); got[1].Payload != "m1" {
		t.Errorf("deliveries %v, want m0 then m1", payloads(got))
	}
}
