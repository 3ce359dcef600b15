package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A replay or discard whose caller's context has ended, or ends while it
// waits for the append lock another process holds, stops at once with the
// context's error (not ErrLockBusy, well before LockWait) having written
// nothing: the dead letter stays pending, segment.log and dlq.log.acked
// are as they were, and the same replay or discard goes through once the
// lock is let go. They waited for the lock for LockWait whatever their
// caller's context said, and one already cancelled went through.
func TestReplayAndDiscardStopWithTheirContext(t *testing.T) {
	type op struct {
		name string
		do   func(ctx context.Context, q *Queue, m *Manager) error
	}
	ops := []op{
		{"Queue.ReplayContext", func(ctx context.Context, q *Queue, _ *Manager) error {
			_, err := q.ReplayContext(ctx, 1, SourceReplay, "c")
			return err
		}},
		{"Queue.MarkContext", func(ctx context.Context, q *Queue, _ *Manager) error {
			return q.MarkContext(ctx, 1, MarkDiscarded)
		}},
		{"Manager.ReplayContext", func(ctx context.Context, _ *Queue, m *Manager) error {
			_, err := m.ReplayContext(ctx, testTenant, testFlow, 1, SourceReplay, "c")
			return err
		}},
		{"Manager.DiscardContext", func(ctx context.Context, _ *Queue, m *Manager) error {
			return m.DiscardContext(ctx, testTenant, testFlow, 1)
		}},
	}
	for _, o := range ops {
		for _, held := range []bool{false, true} {
			name := o.name + "/cancelled before"
			if held {
				name = o.name + "/lock held elsewhere"
			}
			t.Run(name, func(t *testing.T) {
				root := t.TempDir()
				q, _ := openQueue(t, root, Options{LockWait: 5 * time.Second})
				if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
				if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
				ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
				m := NewManager(ManagerConfig{Root: root, LockWait: 5 * time.Second, Poll: time.Hour, Handler: ack,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				t.Cleanup(m.Stop)
				dir := filepath.Join(root, testTenant, testFlow)
				files := func() map[string]string {
					out := map[string]string{}
					for _, f := range []string{segmentFile, ackedFile, dlqFile} {
						b, err := os.ReadFile(filepath.Join(dir, f))
						if err != nil && !errors.Is(err, os.ErrNotExist) {
							t.Fatal(err)
						}
						out[f] = string(b)
					}
					return out
				}
				before := files()

				var ctx context.Context
				var cancel context.CancelFunc
				release := func() {}
				if held {
					release = holdAppendLock(t, root)
					ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
				} else {
					ctx, cancel = context.WithCancel(context.Background())
					cancel()
				}
				defer cancel()
				start := time.Now()
				err := o.do(ctx, q, m)
				took := time.Since(start)
				want := context.Canceled
				if held {
					want = context.DeadlineExceeded
				}
				if !errors.Is(err, want) || errors.Is(err, ErrLockBusy) {
					t.Errorf("error = %v, want the context's (%v)", err, want)
				}
				if took > 2*time.Second {
					t.Errorf("it took %v to give up, want at once", took)
				}
				if after := files(); after[segmentFile] != before[segmentFile] || after[ackedFile] != before[ackedFile] || after[dlqFile] != before[dlqFile] {
					t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
				}
				release()
				if _, err := q.DeadLetter(1); err != nil {
					t.Fatalf("the dead letter is no longer pending: %v", err)
				}
				if err := o.do(context.Background(), q, m); err != nil {
					t.Fatalf("with the lock let go: %v", err)
				}
				if _, err := q.DeadLetter(1); !errors.Is(err, ErrNotPending) {
					t.Errorf("after the replay or discard, DeadLetter(1) = %v, want ErrNotPending", err)
				}
			})
		}
	}
}

// TestStopWaitsForAGivenUpOpen: a discard given up while it waited for
// the append lock leaves its Open waiting in the background; Stop waits for
// it, so nothing of the manager's writes in the queue's folder after Stop
// returns. Stop returned at once, and the Open went on once the lock was
// let go: it wrote in a folder its owner was deleting ("directory not
// empty", one run in a hundred of the test above).
func TestStopWaitsForAGivenUpOpen(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
	m := NewManager(ManagerConfig{Root: root, LockWait: time.Minute, Poll: time.Hour, Handler: ack,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	release := holdAppendLock(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := m.DiscardContext(ctx, testTenant, testFlow, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DiscardContext with the lock held = %v, want the context's deadline", err)
	}
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while the given-up Open still waited for the lock")
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return within 30 s of the lock being let go")
	}
	// the Open that was given up has closed its handle: the lock is free
	f, err := os.OpenFile(filepath.Join(root, testTenant, testFlow, lockFile), os.O_RDWR, FileMode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the append lock after Stop: %v, want it free (the given-up Open still holds it)", err)
	}
}

// A run over every pending dead letter (ReplayAll, MarkAll, and the
// manager's ReplayAll and DiscardAll) whose caller's context ends partway
// stops before its next chunk: the chunk done stands, the rest stay
// pending, and the error says how many were done and wraps the context's.
// One whose context has ended before it begins writes nothing. They took
// no context: the API's "replay all" went on to the last dead letter after
// its request had ended.
func TestRunsOverAllDeadLettersStopWithTheirContext(t *testing.T) {
	type run func(ctx context.Context, cancel func(), q *Queue, m *Manager) (int, error)
	for _, c := range []struct {
		name    string
		partway bool // cancel once the first chunk is under way, else before
		do      run
	}{
		{"Queue.ReplayAllContext", true, func(ctx context.Context, cancel func(), q *Queue, _ *Manager) (int, error) {
			return q.ReplayAllContext(ctx, 1<<40, SourceReplay, func() string { return "c" }, func(Replayed) { cancel() }, nil)
		}},
		{"Queue.MarkAllContext", true, func(ctx context.Context, cancel func(), q *Queue, _ *Manager) (int, error) {
			return q.MarkAllContext(ctx, 1<<40, MarkDiscarded, func(uint64) { cancel() })
		}},
		{"Manager.ReplayAllContext", true, func(ctx context.Context, cancel func(), _ *Queue, m *Manager) (int, error) {
			rs, _, err := m.ReplayAllContext(ctx, testTenant, testFlow, SourceReplay, func() string { cancel(); return "c" })
			return len(rs), err
		}},
		{"Manager.ReplayAllContext", false, func(ctx context.Context, _ func(), _ *Queue, m *Manager) (int, error) {
			rs, _, err := m.ReplayAllContext(ctx, testTenant, testFlow, SourceReplay, func() string { return "c" })
			return len(rs), err
		}},
		{"Manager.DiscardAllContext", false, func(ctx context.Context, _ func(), _ *Queue, m *Manager) (int, error) {
			ids, err := m.DiscardAllContext(ctx, testTenant, testFlow)
			return len(ids), err
		}},
	} {
		name := c.name + "/cancelled before"
		if c.partway {
			name = c.name + "/cancelled partway"
		}
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			q, _ := openQueue(t, root, Options{})
			const total = allChunk + 2
			for id := uint64(1); id <= total; id++ {
				if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
			}
			ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
			m := NewManager(ManagerConfig{Root: root, Poll: time.Hour, Handler: ack, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			t.Cleanup(m.Stop)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			want := allChunk
			if !c.partway {
				cancel()
				want = 0
			}
			n, err := c.do(ctx, cancel, q, m)
			if n != want || !errors.Is(err, context.Canceled) {
				t.Fatalf("%d done, error %v; want %d and the context's error", n, err, want)
			}
			if wantText := fmt.Sprintf("%d dead letters were", want); want > 0 && !strings.Contains(err.Error(), wantText) {
				t.Errorf("error %q does not say %q", err, wantText)
			}
			if want == 0 && !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("error %q does not say nothing was written", err)
			}
			pending, err := q.PendingIDs()
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != total-want || (len(pending) > 0 && pending[0] != uint64(want+1)) {
				t.Errorf("pending %v, want ids %d to %d", pending, want+1, total)
			}
		})
	}
}

// A DiscardAllContext given up while its handle of the queue waits for the
// append lock another process holds writes nothing and says no dead
// letter was discarded: it named "dead letter 0", an id no dead letter
// has.
func TestDiscardAllGivenUpAtTheLockNamesNoID(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	for id := uint64(1); id <= 2; id++ {
		if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
	m := NewManager(ManagerConfig{Root: root, LockWait: time.Minute, Poll: time.Hour, Handler: ack, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(m.Stop)
	release := holdAppendLock(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ids, err := m.DiscardAllContext(ctx, testTenant, testFlow)
	release()
	if len(ids) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DiscardAllContext with the lock held = %v, %v; want none and the context's deadline", ids, err)
	}
	if want := "no dead letter was discarded, nothing was written"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "dead letter 0") {
		t.Errorf("error %q, want it to say %q", err, want)
	}
	if pending, err := q.PendingIDs(); err != nil || len(pending) != 2 {
		t.Errorf("pending %v, %v; want both", pending, err)
	}
}
