package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A run over every dead letter (replay all, discard all) whose caller's
// context ends while a chunk waits for the append lock another process
// holds stops at once with the context's error (not ErrLockBusy, well
// before LockWait) having written nothing, as a single replay or discard
// does; the same run goes through once the lock is let go. Each chunk
// waited for the lock for LockWait whatever the context said, and the
// request's answer waited with it.
func TestReplayAndDiscardAllStopWaitingWithTheirContext(t *testing.T) {
	type op struct {
		name string
		do   func(ctx context.Context, q *Queue, m *Manager) error
	}
	ops := []op{
		{"Queue.ReplayAllContext", func(ctx context.Context, q *Queue, _ *Manager) error {
			_, err := q.ReplayAllContext(ctx, 2, SourceReplay, func() string { return "c" }, func(Replayed) {}, nil)
			return err
		}},
		{"Queue.MarkAllContext", func(ctx context.Context, q *Queue, _ *Manager) error {
			_, err := q.MarkAllContext(ctx, 2, MarkDiscarded, func(uint64) {})
			return err
		}},
		{"Manager.ReplayAllContext", func(ctx context.Context, _ *Queue, m *Manager) error {
			_, _, err := m.ReplayAllContext(ctx, testTenant, testFlow, SourceReplay, func() string { return "c" })
			return err
		}},
		{"Manager.DiscardAllContext", func(ctx context.Context, _ *Queue, m *Manager) error {
			_, err := m.DiscardAllContext(ctx, testTenant, testFlow)
			return err
		}},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			const lockWait = 5 * time.Second
			root := t.TempDir()
			q, _ := openQueue(t, root, Options{LockWait: lockWait})
			for id := uint64(1); id <= 2; id++ {
				if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
				if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
			}
			ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
			m := NewManager(ManagerConfig{Root: root, LockWait: lockWait, Poll: time.Hour, Handler: ack,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			t.Cleanup(m.Stop)
			// open in the manager: the run's chunks wait, not its Open
			if _, _, err := m.Queue(testTenant, testFlow); err != nil {
				t.Fatal(err)
			}
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
			// the files read once the lock is held: the manager's worker,
			// delivering the two messages, drains segment.log under it (read
			// before, they changed under the run about 1 time in 10 on a
			// loaded machine)
			release := holdAppendLock(t, root)
			before := files()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := o.do(ctx, q, m)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLockBusy) {
				t.Errorf("error = %v, want the context's (%v)", err, context.DeadlineExceeded)
			}
			if took > lockWait/2 {
				t.Errorf("it took %v to give up, want at once (LockWait is %v)", took, lockWait)
			}
			if after := files(); after[segmentFile] != before[segmentFile] || after[ackedFile] != before[ackedFile] || after[dlqFile] != before[dlqFile] {
				t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
			}
			release()
			for _, id := range []uint64{1, 2} {
				if _, err := q.DeadLetter(id); err != nil {
					t.Fatalf("dead letter %d is no longer pending: %v", id, err)
				}
			}
			if err := o.do(context.Background(), q, m); err != nil {
				t.Fatalf("with the lock let go: %v", err)
			}
			for _, id := range []uint64{1, 2} {
				if _, err := q.DeadLetter(id); !errors.Is(err, ErrNotPending) {
					t.Errorf("after the run, DeadLetter(%d) = %v, want ErrNotPending", id, err)
				}
			}
		})
	}
}
