package queue

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

func TestDeleteIdleQueue(t *testing.T) {
	exists := func(root, name string) bool {
		_, err := os.Stat(filepath.Join(root, "acme", "orders", name))
		return !errors.Is(err, fs.ErrNotExist)
	}
	prepare := func(t *testing.T, setup func(q *Queue)) string {
		root := t.TempDir()
		q, _, err := Open(root, "acme", "orders", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		size, err := q.Size()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.SaveCheckpoint(size); err != nil { // the first message is processed
			t.Fatal(err)
		}
		setup(q)
		q.Close()
		return root
	}
	tests := []struct {
		name    string
		setup   func(q *Queue)
		deleted bool
	}{
		{"everything processed", func(*Queue) {}, true},
		{"an unprocessed message", func(q *Queue) {
			q.Append(NewMessage{Payload: []byte(`{"n":2}`)})
		}, false},
		{"a pending retry", func(q *Queue) {
			q.SaveRetries([]Retry{{ID: 1, Offset: 0, Attempt: 2, Due: time.Now().Add(time.Hour)}})
		}, false},
		{"a pending dead letter", func(q *Queue) {
			q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 3, LastError: "x", Payload: []byte(`{}`)})
		}, false},
		{"a discarded dead letter", func(q *Queue) {
			q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 3, LastError: "x", Payload: []byte(`{}`)})
			q.Mark(1, MarkDiscarded)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := prepare(t, tt.setup)
			deleted, err := deleteIdleQueue(root, "acme", "orders", OS{})
			if err != nil || deleted != tt.deleted {
				t.Fatalf("deleted %v, %v; want %v", deleted, err, tt.deleted)
			}
			if exists(root, segmentFile) == tt.deleted {
				t.Errorf("segment.log exists: %v", exists(root, segmentFile))
			}
			if !exists(root, seqFile) {
				t.Fatal("the id counter was deleted")
			}
			if !tt.deleted {
				return
			}
			for _, name := range []string{ckptFile, retryFile, dlqFile, ackedFile} {
				if exists(root, name) {
					t.Errorf("%s survived", name)
				}
			}
			// the next submission recreates the files, and ids keep counting
			q, _, err := Open(root, "acme", "orders", Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			m, err := q.Append(NewMessage{Payload: []byte(`{"n":3}`)})
			if err != nil || m.ID < 2 || m.Offset != 0 {
				t.Fatalf("after the deletion: id %d offset %d, %v; want an id above 1 at offset 0", m.ID, m.Offset, err)
			}
		})
	}
}

func TestDeleteIdleQueueSparesAWorkersQueue(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, "acme", "orders", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	wl := flock.New(filepath.Join(root, "acme", "orders", "worker.lock"))
	if ok, err := wl.TryLock(); !ok || err != nil {
		t.Fatal(ok, err)
	}
	defer wl.Unlock()
	if deleted, err := deleteIdleQueue(root, "acme", "orders", OS{}); deleted || err != nil {
		t.Fatalf("deleted %v, %v: a worker holds the queue", deleted, err)
	}
}

// TestOpenHandleSurvivesDeletion: a handle open in another process while
// the janitor deletes the files recreates segment.log at its next append,
// and the message is durable where a fresh Open finds it.
func TestOpenHandleSurvivesDeletion(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, "acme", "orders", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if deleted, err := deleteIdleQueue(root, "acme", "orders", OS{}); !deleted || err != nil {
		t.Fatalf("deleted %v, %v", deleted, err)
	}
	m, err := q.Append(NewMessage{Payload: []byte(`{"after":"deletion"}`)})
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := Open(root, "acme", "orders", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	got, _, err := fresh.Read(0)
	if err != nil || got.ID != m.ID || string(got.Payload) != `{"after":"deletion"}` {
		t.Fatalf("read %+v, %v; want message %d", got, err, m.ID)
	}
}

func TestManagerSweepsOnlyQueuesItHasNotOpened(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"idle", "busy"} {
		q, _, err := Open(root, "acme", f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
	}
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	defer m.Stop()
	if _, _, err := m.Queue("acme", "busy"); err != nil {
		t.Fatal(err)
	}
	m.sweepIdle()
	if _, err := os.Stat(filepath.Join(root, "acme", "idle", segmentFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the idle queue's log is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "acme", "busy", segmentFile)); err != nil {
		t.Errorf("the open queue's log was deleted: %v", err)
	}
}
