package queue

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// holdAppendLock flock(2)s the queue's append.lock on a descriptor of its
// own, as another process would (one paused while it appends); it returns
// the release.
func holdAppendLock(t *testing.T, root string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, testTenant, testFlow, lockFile), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var released bool
	release := func() {
		if !released {
			released = true
			f.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// An append, Open, and an operator's replay or discard wait for the append
// lock held by another process for LockWait at most, then fail with
// ErrLockBusy having written nothing; the queue is not poisoned, and takes
// the next append once the lock is let go.
func TestAppendLockHeldTooLong(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{LockWait: 100 * time.Millisecond})
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	release := holdAppendLock(t, root)
	segment := filepath.Join(root, testTenant, testFlow, segmentFile)
	before, err := os.ReadFile(segment)
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":2}`)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLockBusy) || errors.Is(err, ErrPoisoned) {
			t.Errorf("Append with the append lock held elsewhere: %v, want ErrLockBusy and not ErrPoisoned", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append still waits for the append lock held elsewhere after 10 s")
	}
	if _, err := q.Replay(1, SourceReplay, "c"); !errors.Is(err, ErrLockBusy) {
		t.Errorf("Replay with the append lock held elsewhere: %v, want ErrLockBusy", err)
	}
	if err := q.Mark(1, MarkDiscarded); !errors.Is(err, ErrLockBusy) {
		t.Errorf("Mark with the append lock held elsewhere: %v, want ErrLockBusy", err)
	}
	if _, _, err := Open(root, testTenant, testFlow, Options{LockWait: 100 * time.Millisecond}); !errors.Is(err, ErrLockBusy) {
		t.Errorf("Open with the append lock held elsewhere: %v, want ErrLockBusy", err)
	}
	if after, err := os.ReadFile(segment); err != nil || string(after) != string(before) {
		t.Errorf("segment.log changed while the lock was held elsewhere (%v)", err)
	}

	release()
	// the waits given up finish in the background, taking the lock and
	// letting it go; the next append would wait LockWait for them at most
	for deadline := time.Now().Add(10 * time.Second); !q.appendMu.TryLock(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a wait given up still holds the append mutex 10 s after the lock was let go")
		}
	}
	q.appendMu.Unlock()
	m, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":3}`)})
	if err != nil {
		t.Fatalf("Append after the lock was let go: %v", err)
	}
	if m.ID != 2 {
		t.Errorf("the append after the failed one got id %d, want 2: nothing was written meanwhile", m.ID)
	}
	if _, err := q.Replay(1, SourceReplay, "c"); err != nil {
		t.Errorf("Replay after the lock was let go: %v", err)
	}
	if HeldAtPath(t, filepath.Join(root, testTenant, testFlow, lockFile)) {
		t.Errorf("the append lock is still held after the calls returned")
	}
}

// A lock let go within LockWait is taken: the wait is the kernel's, not a
// give-up at the first refusal.
func TestAppendLockLetGoWithinTheWait(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{LockWait: time.Minute})
	release := holdAppendLock(t, root)
	done := make(chan error, 1)
	go func() {
		_, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Append returned (%v) while the lock was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Append once the lock was let go: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append did not take the lock let go")
	}
}

// Appended, which a standby cron scheduler calls when it takes a flow
// over, waits for the append lock held by another process (one paused
// while it appends) for the manager's LockWait at most, then fails with
// ErrLockBusy; it reads the log as before once the lock is let go.
func TestAppendedLockHeldTooLong(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if _, err := q.Append(NewMessage{Source: "cron", CorrelationID: "tick", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	m := NewManager(ManagerConfig{Root: root, LockWait: 100 * time.Millisecond})
	release := holdAppendLock(t, root)
	type result struct {
		p   Presence
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := m.Appended(testTenant, testFlow, 1, "tick")
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		if !errors.Is(r.err, ErrLockBusy) {
			t.Errorf("Appended with the append lock held elsewhere: %v, %v; want ErrLockBusy", r.p, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Appended still waits for the append lock held elsewhere after 10 s")
	}
	release()
	if p, err := m.Appended(testTenant, testFlow, 1, "tick"); err != nil || p != Present {
		t.Errorf("Appended once the lock was let go: %v, %v; want present", p, err)
	}
	// the wait given up takes the lock in the background once it is let
	// go, and lets it go
	for deadline := time.Now().Add(10 * time.Second); HeldAtPath(t, filepath.Join(root, testTenant, testFlow, lockFile)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the append lock is still held 10 s after Appended returned")
		}
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count descriptors:", err)
	}
	return len(fds)
}

// Opens and Appended calls that give up, one after the other, while
// another process holds the append lock (a server retries opening the
// queue at each /enqueue for as long as the pause lasts) leave one wait
// in the background, not one each: each used to keep a descriptor and a
// goroutine until the lock was let go.
func TestLockWaitsGivenUpLeaveOneBehind(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	q.Close()
	release := holdAppendLock(t, root)
	m := NewManager(ManagerConfig{Root: root, LockWait: 5 * time.Millisecond})
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	const n = 20
	for i := range n {
		if _, _, err := Open(root, testTenant, testFlow, Options{LockWait: 5 * time.Millisecond}); !errors.Is(err, ErrLockBusy) {
			t.Fatalf("Open %d with the append lock held elsewhere: %v, want ErrLockBusy", i, err)
		}
		if _, err := m.Appended(testTenant, testFlow, 1, "tick"); !errors.Is(err, ErrLockBusy) {
			t.Fatalf("Appended %d with the append lock held elsewhere: %v, want ErrLockBusy", i, err)
		}
	}
	if got := openFDs(t) - fds; got > 1 {
		t.Errorf("%d waits given up left %d more descriptors open, want 1 at most", 2*n, got)
	}
	if got := runtime.NumGoroutine() - goroutines; got > 2 {
		t.Errorf("%d waits given up left %d more goroutines, want 2 at most (the blocked flock(2) and its waiter)", 2*n, got)
	}
	release()
	for deadline := time.Now().Add(10 * time.Second); openFDs(t) > fds || runtime.NumGoroutine() > goroutines; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the lock was let go, %d more descriptors and %d more goroutines", openFDs(t)-fds, runtime.NumGoroutine()-goroutines)
		}
	}
	q2, _, err := Open(root, testTenant, testFlow, Options{LockWait: 5 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open once the lock was let go: %v", err)
	}
	q2.Close()
}

// An append waiting for the append lock held elsewhere, when the file is
// replaced at its path meanwhile (deleted by hand as a stale lock, and
// made again by another process, which holds the new one), takes the file
// at the path once the old one is let go: it waits for the new one's
// holder, and appends once that one lets go, within the one wait.
func TestAppendLockReplacedWhileWaiting(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{LockWait: time.Minute})
	path := filepath.Join(root, testTenant, testFlow, lockFile)
	releaseOld := holdAppendLock(t, root)
	done := make(chan error, 1)
	go func() {
		_, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Append returned (%v) while the lock was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	releaseNew := holdAppendLock(t, root) // creates the new file and holds it
	releaseOld()
	select {
	case err := <-done:
		t.Fatalf("Append returned (%v) while the file at the lock's path was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	releaseNew()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Append once the new lock was let go: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append did not take the new lock let go")
	}
	if HeldAtPath(t, path) {
		t.Errorf("the append lock is still held after the append returned")
	}
}

// A worker stops while another process holds the append lock (paused in
// the middle of an append: its frame is written in part, not synced). It used to wait for the
// lock to read past the synced end, and its Stop, and with it the host's
// shutdown, waited as long as the pause.
func TestWorkerStopsBehindAPausedAppender(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{LockWait: 50 * time.Millisecond})
	delivered := make(chan uint64, 10)
	w := NewWorker(q, WorkerConfig{Poll: 20 * time.Millisecond, StopGrace: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict {
			delivered <- d.Message.ID
			return Verdict{Kind: VerdictAck}
		})})
	w.Start()
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message was not delivered")
	}
	release := holdAppendLock(t, root)
	// the paused process's frame, written in part, not synced
	frame := []byte("the first bytes of a frame")
	f, err := os.OpenFile(filepath.Join(root, testTenant, testFlow, segmentFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(frame); err != nil {
		t.Fatal(err)
	}
	f.Close()
	time.Sleep(200 * time.Millisecond) // a few polls: the worker reads past the synced end, or would
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Error("the worker did not stop within 10 s while another process held the append lock")
	}
	release()
	<-stopped
}
