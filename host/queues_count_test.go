package host_test

import (
	"io/fs"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/queue"
)

// dlqCloseHook is the OS, calling hook once, as the first dlq.log opened
// through it once armed is closed: at the end of a read of it.
type dlqCloseHook struct {
	queue.OS
	armed atomic.Bool
	once  sync.Once
	hook  func()
}

func (h *dlqCloseHook) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := h.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "dlq.log" {
		return f, err
	}
	return &dlqCloseHookFile{File: f, fs: h}, nil
}

type dlqCloseHookFile struct {
	queue.File
	fs *dlqCloseHook
}

func (f *dlqCloseHookFile) Close() error {
	err := f.File.Close()
	if f.fs.armed.Load() {
		f.fs.once.Do(f.fs.hook)
	}
	return err
}

// TestAPIQueuesOneCount: a queue's line of GET /api/queues takes its
// counts from the one read of the queue's files that also gives its
// retries: another process's worker that fails a message's first attempt
// once they are read (the message scheduled for a retry, the checkpoint
// past it) does not make the message vanish from the line. The log was
// counted again for the line, after the retries were read, so the message
// was neither pending nor retrying.
func TestAPIQueuesOneCount(t *testing.T) {
	disk := &dlqCloseHook{}
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	var msgs []queue.Message
	seedQueue(t, fx.root, "acme", "echo", fx.clock.Now, func(q *queue.Queue) {
		msgs = appendMessages(t, q, `{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`)
		processed(t, q, msgs, 2)
		deadLetter(t, q, msgs[0], t0, 3, "x")
	})
	disk.hook = func() {
		// the third message's first attempt fails: a retry, and the
		// checkpoint moves past it
		seedQueue(t, fx.root, "acme", "echo", fx.clock.Now, func(q *queue.Queue) {
			if err := q.SaveRetries([]queue.Retry{{ID: msgs[2].ID, Offset: msgs[2].Offset, Attempt: 2, Due: t0.Add(time.Hour)}}); err != nil {
				t.Error(err)
			}
			processed(t, q, msgs, 3)
		})
	}
	disk.armed.Store(true)
	w := fx.admin(http.MethodGet, "/api/queues")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /api/queues: %d %s", w.Code, w.Body)
	}
	wantDocument(t, w, mustJSON(t, queuesDoc{Queues: []queueDoc{
		{Tenant: "acme", Flow: "echo", Total: 4, Processed: 2, Pending: 2, DeadLetters: 1, Worker: "idle"},
	}}))
	// the next read sees the retry
	wantDocument(t, fx.admin(http.MethodGet, "/api/queues"), mustJSON(t, queuesDoc{Queues: []queueDoc{
		{Tenant: "acme", Flow: "echo", Total: 4, Processed: 3, Pending: 1, Retrying: 1, DeadLetters: 1, Worker: "idle"},
	}}))
}
