package queue

// The checkpoint against the dead-letter rewrite (CompactDLQ) and against
// another process's Open: the worker writes it in place, without fsync and
// without the append lock.

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// powerCutCopy returns a new memFS holding what a power cut leaves of m
// (each file as of its last Sync, each folder as of its last SyncDir),
// leaving m as it is: the processes using m can be stopped afterwards
// without their writes reaching the world after the cut.
func powerCutCopy(m *memFS) *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cp func(n *memNode) *memNode
	cp = func(n *memNode) *memNode {
		if !n.dir {
			return &memNode{data: slices.Clone(n.synced), synced: slices.Clone(n.synced)}
		}
		c := newMemDir()
		for name, child := range n.durable {
			cc := cp(child)
			c.entries[name], c.durable[name] = cc, cc
		}
		return c
	}
	return &memFS{root: cp(m.root), count: map[string]int{}}
}

func pendingDeadLetters(t *testing.T, q *Queue) []uint64 {
	t.Helper()
	dl, _, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, d := range dl {
		ids = append(ids, d.ID)
	}
	return ids
}

// deadLetterAgain is the next worker after a restart, with a handler
// that fails every message for good: from the checkpoint to the end, each
// message is dead-lettered again (as the worker does: MoveToDLQ).
func deadLetterAgain(t *testing.T, q *Queue) []uint64 {
	t.Helper()
	off, err := q.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	var again []uint64
	for {
		msg, next, err := q.Read(off)
		if errors.Is(err, io.EOF) {
			return again
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := q.MoveToDLQ(DeadLetter{ID: msg.ID, EnqueuedAt: msg.EnqueuedAt, FailedAt: epoch, Attempts: 1,
			LastError: "corrupt artifact", Payload: msg.Payload}); err != nil {
			t.Fatal(err)
		}
		again = append(again, msg.ID)
		off = next
	}
}

// TestCompactDLQSyncsTheCheckpointFirst: the worker's idle moment, in
// its order: the checkpoint rewritten in place without fsync (deliver's
// saveCheckpoint), Drain refused (another process appended meanwhile:
// ErrNotDrained), CompactDLQ applied a mark (the dead letter and the mark
// leave the disk). CompactDLQ now syncs the checkpoint before the marks go.
// It did not: a power cut then took the checkpoint back before the
// dead-lettered message, the next worker delivered it again, it failed
// again, and it was dead-lettered again with no mark left to hide it: the
// discarded (or replayed) dead letter was pending again.
func TestCompactDLQSyncsTheCheckpointFirst(t *testing.T) {
	for _, how := range []string{"discard", "replay"} {
		t.Run(how, func(t *testing.T) {
			m, root := settledMemQueue(t)
			q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := q.Append(newMessage(1, 40))
			if err != nil {
				t.Fatal(err)
			}
			// the worker: the message fails for good, it is dead-lettered
			if err := q.MoveToDLQ(DeadLetter{ID: msg.ID, EnqueuedAt: msg.EnqueuedAt, FailedAt: epoch, Attempts: 1,
				LastError: "corrupt artifact", Payload: msg.Payload}); err != nil {
				t.Fatal(err)
			}
			// the operator, from the CLI
			switch how {
			case "discard":
				err = q.Mark(msg.ID, MarkDiscarded)
			case "replay":
				_, err = q.Replay(msg.ID, "enqueue", "corr-replay")
			}
			if err != nil {
				t.Fatal(err)
			}
			// the worker goes idle: checkpoint in place, no fsync
			size, err := q.Size()
			if err != nil {
				t.Fatal(err)
			}
			ck, err := q.openCheckpoint()
			if err != nil {
				t.Fatal(err)
			}
			if err := writeCheckpoint(ck, size, false); err != nil {
				t.Fatal(err)
			}
			ck.Close()
			// another process appends before the drain takes the lock
			if _, err := q.Append(newMessage(2, 40)); err != nil {
				t.Fatal(err)
			}
			if err := q.Drain(); !errors.Is(err, ErrNotDrained) {
				t.Fatalf("setup: Drain = %v, want ErrNotDrained", err)
			}
			applied, _, err := q.CompactDLQ()
			if err != nil || len(applied) != 1 {
				t.Fatalf("setup: CompactDLQ = %v, %v", applied, err)
			}
			q.Close()

			m.Crash()
			q2, _, err := Open(root, testTenant, testFlow, Options{FS: m})
			if err != nil {
				t.Fatal(err)
			}
			defer q2.Close()
			deadLetterAgain(t, q2)
			if slices.Contains(pendingDeadLetters(t, q2), msg.ID) {
				t.Errorf("dead letter %d was %sed and compacted away, and is pending again after a power cut: "+
					"CompactDLQ erased its mark while the checkpoint past the message was not durable", msg.ID, how)
			}
		})
	}
}

// TestWorkerCompactionThenPowerCut is the same case through the real
// worker: a message dead-lettered, the operator's discard and another
// process's append racing the worker's idle moment (between its checkpoint
// write and its Drain), the compaction, then a power cut. The next worker
// dead-lettered the message again and it was pending again.
func TestWorkerCompactionThenPowerCut(t *testing.T) {
	m, root := settledMemQueue(t)
	clk := clocktest.New(epoch)
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	other, _, err := Open(root, testTenant, testFlow, Options{FS: m, Now: clk.Now}) // nexus dlq, another server
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	bad, err := q.Append(newMessage(1, 40))
	if err != nil {
		t.Fatal(err)
	}
	var delivered atomic.Bool // the bad message: its dead letter is written before the idle checkpoint
	handler := HandlerFunc(func(_ context.Context, d Delivery) Verdict {
		if d.ID == bad.ID {
			delivered.Store(true)
			return Verdict{Kind: VerdictDeadLetter, Error: "corrupt artifact"}
		}
		return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
	})
	var armed atomic.Bool
	armed.Store(true)
	m.before = func(op, name string) {
		// (the worker writes the file it made once before delivering)
		if op != opWrite || filepath.Base(name) != ckptFile || !delivered.Load() || !armed.CompareAndSwap(true, false) {
			return
		}
		// the worker's first idle checkpoint write: meanwhile the operator
		// discards the dead letter and another process appends
		if err := other.Mark(bad.ID, MarkDiscarded); err != nil {
			t.Error(err)
		}
		if _, err := other.Append(newMessage(2, 40)); err != nil {
			t.Error(err)
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	w := NewWorker(q, WorkerConfig{Handler: handler, Clock: clk, Logger: quiet, StopGrace: 50 * time.Millisecond})
	w.Start()
	clk.WaitCalls(t, 1) // idle: checkpoint written, Drain refused, CompactDLQ done
	if armed.Load() {
		t.Fatal("setup: the hook did not run")
	}
	if b := fileBytes(t, m, root, ackedFile); len(b) != 0 {
		t.Fatalf("setup: dlq.log.acked holds %d bytes: CompactDLQ did not run", len(b))
	}
	if p := pendingDeadLetters(t, q); len(p) != 0 {
		t.Fatalf("setup: pending %v", p)
	}

	cut := powerCutCopy(m) // the power goes
	w.Stop()

	q2, _, err := Open(root, testTenant, testFlow, Options{FS: cut, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	n := clk.Calls()
	w2 := NewWorker(q2, WorkerConfig{Handler: handler, Clock: clk, Logger: quiet, StopGrace: 50 * time.Millisecond})
	w2.Start()
	clk.WaitCalls(t, n+1)
	w2.Stop()
	if slices.Contains(pendingDeadLetters(t, q2), bad.ID) {
		t.Errorf("dead letter %d, discarded and compacted away, is pending again after a power cut", bad.ID)
	}
}

// TestCompactDLQCutAtEveryStep: CompactDLQ's own writes, with a
// durable checkpoint (so that nothing is delivered again), cut short at
// every operation and followed by a power cut: a discarded and a replayed
// dead letter stay hidden, a pending one stays pending, and a second
// compaction ends the job: dlq.log is replaced, its folder synced, and
// only then the marks.
func TestCompactDLQCutAtEveryStep(t *testing.T) {
	for k := 1; ; k++ {
		m, root := settledMemQueue(t)
		q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatal(err)
		}
		moveToDLQ(t, q, 1, 2, 3)
		if err := q.Mark(2, MarkDiscarded); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Replay(3, "enqueue", "c"); err != nil {
			t.Fatal(err)
		}
		size, _ := q.Size()
		if err := q.SaveCheckpoint(size); err != nil {
			t.Fatal(err)
		}
		m.Fail("", "", k, syscall.EIO, true)
		q.CompactDLQ()
		fired := m.Fired()
		q.Close()
		m.Crash()
		q2, _, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatal(err)
		}
		if p := pendingDeadLetters(t, q2); !slices.Equal(p, []uint64{1}) {
			t.Fatalf("cut at operation %d of CompactDLQ: pending %v, want [1]", k, p)
		}
		if _, _, err := q2.CompactDLQ(); err != nil {
			t.Fatal(err)
		}
		if p := pendingDeadLetters(t, q2); !slices.Equal(p, []uint64{1}) {
			t.Fatalf("cut at operation %d, compacted again: pending %v, want [1]", k, p)
		}
		q2.Close()
		if !fired {
			break
		}
		if k > 500 {
			t.Fatal("CompactDLQ does not end")
		}
	}
}

// tornReadFS is a memFS whose next read of segment.log.ckpt, once armed,
// returns torn bytes: what a pread racing the serving worker's in-place
// pwrite of the checkpoint (no lock taken by the writer) can return.
type tornReadFS struct {
	*memFS
	torn  atomic.Pointer[[]byte]
	after func() // run after the torn read, in the reader's goroutine
}

func (f *tornReadFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.memFS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != ckptFile {
		return file, err
	}
	return &tornReadFile{File: file, fs: f}, nil
}

type tornReadFile struct {
	File
	fs *tornReadFS
}

func (f *tornReadFile) ReadAt(p []byte, off int64) (int, error) {
	b := f.fs.torn.Swap(nil)
	if b == nil {
		return f.File.ReadAt(p, off)
	}
	n := copy(p, (*b)[off:])
	if f.fs.after != nil {
		f.fs.after()
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestOpenReadsACheckpointMidWrite: the worker rewrites the checkpoint in
// place without the append lock; another process's Open (nexus dlq
// replay/discard, a second server) reads it under the append lock only, so
// it can read it mid-write, and takes the unverifiable value for 0. Open
// now writes back what it resolved only when no worker runs. It wrote the
// 0 back, fsynced, over the worker's value; the worker, which believed its
// value saved, synced that 0 when it stopped, and a clean restart
// delivered the whole log again.
func TestOpenReadsACheckpointMidWrite(t *testing.T) {
	m, root := settledMemQueue(t)
	clk := clocktest.New(epoch)
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var msgs []Message
	for i := range 3 {
		msg, err := q.Append(newMessage(i, 40))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	end, _ := q.Size()
	// the first message waits for a retry an hour away, one that reads
	// its message in the log: no drain, the checkpoint stays at the end
	// of the log
	RetriesInLog(t)
	handler := HandlerFunc(func(_ context.Context, d Delivery) Verdict {
		if d.ID == msgs[0].ID {
			return Verdict{Kind: VerdictRetry, Policy: RetryPolicy{MaxAttempts: 5, InitialDelay: time.Hour, BackoffFactor: 1, MaxDelay: time.Hour}}
		}
		return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
	})
	quiet := slog.New(slog.DiscardHandler)
	w := NewWorker(q, WorkerConfig{Handler: handler, Clock: clk, Logger: quiet, StopGrace: 50 * time.Millisecond, CheckpointEvery: 1})
	w.Start()
	clk.WaitCalls(t, 1)
	if c, _ := q.Checkpoint(); c != end {
		t.Fatalf("setup: checkpoint %d, want %d", c, end)
	}

	// another process opens the queue while the worker's last rewrite (from
	// the previous value to end) is in flight: half the new bytes, half
	// the old
	tfs := &tornReadFS{memFS: m}
	torn := append(encodeValue(ckptMagic, uint64(end))[:12:12], encodeValue(ckptMagic, uint64(msgs[2].Offset))[12:]...)
	tfs.torn.Store(&torn)
	other, _, err := Open(root, testTenant, testFlow, Options{FS: tfs, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if tfs.torn.Load() != nil {
		t.Fatal("setup: Open did not read the checkpoint")
	}
	w.Stop() // a clean stop: the worker syncs what it believes it wrote

	m.Crash()
	q2, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if c, _ := q2.Checkpoint(); c != end {
		t.Errorf("after another process's Open and a clean stop, the checkpoint is %d, want %d: "+
			"Open's recover wrote back its reading of a checkpoint the live worker was rewriting, and messages %d and %d, processed, are delivered again",
			c, end, msgs[1].ID, msgs[2].ID)
	}
}

// TestOpenLeavesARunningWorkersDrainMarker: no torn read needed. A drain
// stopped after its marker (an I/O error) leaves segment.log.ckpt holding
// the marker until the worker's next idle write. Another process's Open
// reads the marker and resolves it; the worker, which does not take the
// append lock for its checkpoint, writes its later value meanwhile. Open,
// which wrote the resolved offset back, landed last, and the checkpoint
// went back for good (the worker believed its value saved); it now leaves
// the file to the running worker.
func TestOpenLeavesARunningWorkersDrainMarker(t *testing.T) {
	m, root := settledMemQueue(t)
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// this handle stands for the elected worker: it holds worker.lock
	wl := NewFileLock(filepath.Join(root, testTenant, testFlow, workerLockFile))
	if ok, err := wl.TryLock(); !ok || err != nil {
		t.Fatalf("worker lock: %v, %v", ok, err)
	}
	defer wl.Unlock()
	for i := range 2 {
		if _, err := q.Append(newMessage(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	size, _ := q.Size()
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	// the drain fails after its marker: truncating segment.log fails
	m.Fail(opTruncate, segmentFile, 1, syscall.EIO, false)
	if err := q.Drain(); err == nil {
		t.Fatal("setup: the drain did not fail")
	}
	// the worker goes on: more messages, processed, checkpoint in place
	var last Message
	for i := 2; i < 4; i++ {
		if last, err = q.Append(newMessage(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	end, _ := q.Size()
	ck, err := q.openCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tfs := &tornReadFS{memFS: m}
	b := fileBytes(t, m, root, ckptFile)
	if _, ok := decodeValue(drainMagic, b); !ok {
		t.Fatalf("setup: the checkpoint is not a drain marker: %x", b)
	}
	tfs.torn.Store(&b) // the true bytes: no tearing
	tfs.after = func() {
		// the worker's idle write lands after Open read the file
		if err := writeCheckpoint(ck, end, false); err != nil {
			t.Error(err)
		}
	}
	other, _, err := Open(root, testTenant, testFlow, Options{FS: tfs})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if c, _ := q.Checkpoint(); c != end {
		t.Errorf("the checkpoint is %d after another process's Open, want the worker's %d: its update was lost, and message %d, processed, is delivered again",
			c, end, last.ID)
	}
}
