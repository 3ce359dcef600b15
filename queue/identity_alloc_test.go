package queue

import (
	"context"
	"testing"
)

// TestAppendPathChecksCost: the checks each batch of appends makes that
// append.lock and segment.log.seq are the files at their paths (a file
// deleted or replaced by hand is opened again) stat the two paths only:
// the files this handle has open keep their identity, read once when
// opened, and the paths are joined once. Each batch also statted both open
// files and joined both paths again: 10 allocations and 4 stat syscalls
// for the lock, the check and the read of the counter, where 6 and 2 do.
// The lock is taken as a batch takes it, bounded by LockWait.
func TestAppendPathChecksCost(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	allocs := testing.AllocsPerRun(200, func() {
		unlock, err := q.lockAppendBounded()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.nextID(0); err != nil {
			t.Fatal(err)
		}
		unlock()
	})
	// a stat of each path (2 each), the unlock and the counter's read
	if allocs > 6 {
		t.Errorf("taking the append lock and reading the id counter made %v allocations, want at most 6", allocs)
	}
}

// TestWorkerIdleChecksCost: the checks a leading worker makes at each idle
// moment that segment.log.ckpt and worker.lock are the files at their
// paths (a file deleted or replaced by hand is opened, or locked, again)
// stat the two paths only: the checkpoint and the lock it holds keep their
// identity, read once when opened, and the paths are joined once. At low
// load a queue goes idle after every message. Each idle moment also
// statted both open files and joined the checkpoint's path again: 7
// allocations and 4 stat syscalls, where 4 and 2 do.
func TestWorkerIdleChecksCost(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	w := NewWorker(q, WorkerConfig{Handler: HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{} })})
	ctx := context.Background()
	if !w.elect(ctx) {
		t.Fatal("the worker was not elected")
	}
	defer w.lock.Unlock()
	l, err := w.newDeliveryLoop(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.ckpt.Close() }()
	allocs := testing.AllocsPerRun(200, func() {
		if err := l.ckptAtPath(); err != nil {
			t.Fatal(err)
		}
		if err := l.saveCheckpoint(false); err != nil {
			t.Fatal(err)
		}
		if err := w.checkLock(); err != nil {
			t.Fatal(err)
		}
	})
	// a stat of each path (2 each)
	if allocs > 4 {
		t.Errorf("checking the checkpoint and the worker lock at an idle moment made %v allocations, want at most 4", allocs)
	}
}
