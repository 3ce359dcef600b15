package queue

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// idleQueue is a queue on a memFS whose worker, on a fake clock, has
// delivered one message, emptied the log and gone idle: the state of most
// of a server's queues most of the time.
type idleQueue struct {
	mfs       *memFS
	root, dir string
	clk       *clocktest.Fake
	logs      *jsonlogtest.Buffer
	delivered chan Delivery
	next      time.Time // the end of the wait the worker is in

	mu        sync.Mutex
	recording bool
	ops       []string // the FS operations made while recording: "Op file"
}

const idlePoll = time.Second

// newIdleQueue starts the worker of a queue whose handler dead-letters a
// message with the payload "bad" and acknowledges the others.
func newIdleQueue(t *testing.T) *idleQueue {
	t.Helper()
	mfs, root := memQueueRoot(t)
	iq := &idleQueue{mfs: mfs, root: root, dir: filepath.Join(root, testTenant, testFlow), clk: clocktest.New(epoch),
		logs: &jsonlogtest.Buffer{}, delivered: make(chan Delivery, 16)}
	mfs.before = func(op, name string) {
		iq.mu.Lock()
		if iq.recording {
			iq.ops = append(iq.ops, op+" "+filepath.Base(name))
		}
		iq.mu.Unlock()
	}
	q, _ := openQueue(t, root, Options{FS: mfs, Now: iq.clk.Now})
	w := NewWorker(q, WorkerConfig{Clock: iq.clk, Poll: idlePoll, Logger: iq.logs.Logger(0),
		Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict {
			iq.delivered <- d
			if string(d.Payload) == `"bad"` {
				return Verdict{Kind: VerdictDeadLetter, Error: "corrupt"}
			}
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})})
	// appended before the worker starts: its first wait on the clock is
	// the one after the message
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`"bad"`)}); err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(w.Stop)
	iq.waitDelivery(t)
	// delivered, dead-lettered and housekept at once (the first idle
	// moment): the worker waits for the next poll
	iq.next = epoch.Truncate(idlePoll).Add(idlePoll)
	iq.clk.WaitDeadline(t, iq.next)
	if size := len(fileBytes(t, mfs, root, segmentFile)); size != 0 {
		t.Fatalf("segment.log is %d bytes once its message was dead-lettered and the worker idle, want 0", size)
	}
	return iq
}

func (iq *idleQueue) waitDelivery(t *testing.T) Delivery {
	t.Helper()
	select {
	case d := <-iq.delivered:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10 s")
		return Delivery{}
	}
}

// idleMoments advances the clock to the next n polls, one at a time, and
// waits each time until the worker waits for the next one: it has gone
// through its idle moment. It returns the FS operations they made.
func (iq *idleQueue) idleMoments(t *testing.T, n int) []string {
	t.Helper()
	iq.mu.Lock()
	iq.recording, iq.ops = true, nil
	iq.mu.Unlock()
	for range n {
		iq.clk.AdvanceTo(iq.next)
		iq.next = iq.next.Add(idlePoll)
		iq.clk.WaitDeadline(t, iq.next)
	}
	iq.mu.Lock()
	defer iq.mu.Unlock()
	iq.recording = false
	return iq.ops
}

// TestIdleCleanQueueTakesNoLockAndOpensNothing: the idle moment of a queue
// whose log is empty, with no retry scheduled and no mark for dlq.log's
// rewrite to apply, takes no lock and opens no file; it stats the two
// files that tell whether there is anything to do (segment.log, dlq.log.acked)
// besides the checks of every idle moment (the open log's size, the
// checkpoint at its path). Each idle moment took the append lock to find
// the log empty, took it again and opened dlq.log.acked to find no mark:
// 13 system calls per idle queue per poll, 6-7% of a core for 400 idle
// queues. Another process holding the append lock (a long nexus dlq
// replay, a second server's append waiting on a full disk) held up every
// idle worker of the queue at its poll.
func TestIdleCleanQueueTakesNoLockAndOpensNothing(t *testing.T) {
	iq := newIdleQueue(t)
	// an empty dlq.log.acked (as a rewrite leaves it) is as clean as none
	for _, acked := range []string{"none", "empty"} {
		if acked == "empty" {
			if err := WriteAtomic(iq.mfs, filepath.Join(iq.dir, ackedFile), nil); err != nil {
				t.Fatal(err)
			}
		}
		// another process holds the append lock throughout: an idle
		// moment that takes it would wait for it, and the worker would
		// never wait for its next poll
		held, err := os.OpenFile(filepath.Join(iq.dir, lockFile), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// closed before the worker is stopped (cleanups run last first),
		// should the test fail with the worker waiting for the lock
		t.Cleanup(func() { held.Close() })
		if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		const n = 8
		ops := iq.idleMoments(t, n)
		held.Close() // lets the lock go
		for _, op := range ops {
			if strings.HasPrefix(op, opOpen) {
				t.Errorf("dlq.log.acked %s: an idle moment of a clean queue opened a file: %s", acked, op)
			}
		}
		// per idle moment: the open log's size (the reader), the
		// checkpoint at its path, segment.log and dlq.log.acked at theirs
		want := slices.Repeat([]string{"Stat segment.log", "Stat segment.log.ckpt", "Stat segment.log", "Stat dlq.log.acked"}, n)
		if !slices.Equal(ops, want) {
			t.Errorf("dlq.log.acked %s: %d idle moments made %d operations, want %d:\n%s", acked, n, len(ops), len(want), strings.Join(ops, "\n"))
		}
	}
}

// TestIdleQueueStillSeesOtherProcesses: once its idle moments take no
// lock, a clean queue's worker still applies at its next idle moment a
// discard made by another process (nexus dlq), delivers within a poll a
// message another process appended, and follows a segment.log deleted by
// hand and made again by another process's append.
func TestIdleQueueStillSeesOtherProcesses(t *testing.T) {
	iq := newIdleQueue(t)
	iq.idleMoments(t, 3)
	other, _ := openQueue(t, iq.root, Options{FS: iq.mfs, Now: iq.clk.Now})

	// nexus dlq discard, from another process
	ids, err := other.PendingIDs()
	if err != nil || len(ids) != 1 {
		t.Fatalf("pending dead letters %v, %v; want one", ids, err)
	}
	if err := other.Mark(ids[0], MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	iq.idleMoments(t, 1)
	if b := fileBytes(t, iq.mfs, iq.root, dlqFile); bytes.Contains(b, []byte(`"bad"`)) {
		t.Error("the discarded dead letter is still in dlq.log after the next idle moment")
	}
	if evs := iq.logs.Events(t, "dlq_discarded"); len(evs) != 1 {
		t.Errorf("dlq_discarded lines %v, want one", evs)
	}

	// an append by another process, delivered at the next poll
	m, err := other.Append(NewMessage{Source: "enqueue", Payload: []byte(`"elsewhere"`)})
	if err != nil {
		t.Fatal(err)
	}
	iq.idleMoments(t, 1)
	if d := iq.waitDelivery(t); d.ID != m.ID {
		t.Errorf("delivered message %d, want %d", d.ID, m.ID)
	}
	iq.idleMoments(t, 1) // housekept: emptied again
	if size := len(fileBytes(t, iq.mfs, iq.root, segmentFile)); size != 0 {
		t.Errorf("segment.log is %d bytes a poll after its message was delivered, want 0", size)
	}

	// segment.log deleted by hand, and made again by another process's
	// append: the worker reads the file at the path
	if err := iq.mfs.Remove(filepath.Join(iq.dir, segmentFile)); err != nil {
		t.Fatal(err)
	}
	iq.idleMoments(t, 1)
	m, err = other.Append(NewMessage{Source: "enqueue", Payload: []byte(`"again"`)})
	if err != nil {
		t.Fatal(err)
	}
	iq.idleMoments(t, 1)
	if d := iq.waitDelivery(t); d.ID != m.ID || string(d.Payload) != `"again"` {
		t.Errorf("delivered message %d %s, want %d", d.ID, d.Payload, m.ID)
	}
}
