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

// A discard through the manager of a queue this process has not open (a
// handle of its own, which starts no worker) waits for the append lock
// another process holds for the manager's LockWait at most, as its
// siblings (a replay, an append) do, then fails with ErrLockBusy having
// written nothing. Its handle was opened with the default LockWait (5 s),
// whatever the manager's said.
func TestManagerDiscardHonoursLockWait(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(m *Manager) error
	}{
		{"DiscardContext", func(m *Manager) error { return m.DiscardContext(context.Background(), testTenant, testFlow, 1) }},
		{"DiscardAll", func(m *Manager) error { _, err := m.DiscardAll(testTenant, testFlow); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			q, _ := openQueue(t, root, Options{})
			if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 1, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			q.Close()
			ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })
			const wait = 200 * time.Millisecond
			m := NewManager(ManagerConfig{Root: root, LockWait: wait, Poll: time.Hour, Handler: ack,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			t.Cleanup(m.Stop)
			acked := filepath.Join(root, testTenant, testFlow, ackedFile)
			release := holdAppendLock(t, root)
			start := time.Now()
			err := c.do(m)
			took := time.Since(start)
			if !errors.Is(err, ErrLockBusy) {
				t.Errorf("error = %v, want ErrLockBusy", err)
			}
			if took > 2*time.Second {
				t.Errorf("it gave up after %v, want the manager's LockWait (%v)", took, wait)
			}
			if b, err := os.ReadFile(acked); len(b) > 0 {
				t.Errorf("%s holds %d bytes (%v), want nothing written", ackedFile, len(b), err)
			}
			release()
			if err := c.do(m); err != nil {
				t.Fatalf("with the lock let go: %v", err)
			}
		})
	}
}
