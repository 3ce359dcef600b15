package queue

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/go-cmp/cmp"
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
		// kept for the worker, which logs dlq_discarded as it applies it
		{"a discarded dead letter", func(q *Queue) {
			q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 3, LastError: "x", Payload: []byte(`{}`)})
			q.Mark(1, MarkDiscarded)
		}, false},
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

// deliveries runs a worker on q, then calls meanwhile (when set: once the
// worker is elected and had 100 ms to deliver what it read first), until
// want ids were delivered (or 10 s passed), and returns the ids it
// delivered, sorted.
func deliveries(t *testing.T, q *Queue, want int, meanwhile func()) []uint64 {
	t.Helper()
	var mu sync.Mutex
	var got []uint64
	w := NewWorker(q, WorkerConfig{Poll: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Handler: HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
			mu.Lock()
			got = append(got, d.ID)
			mu.Unlock()
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})})
	w.Start()
	if meanwhile != nil {
		// elected, and given the time to deliver whatever it reads first
		for deadline := time.Now().Add(10 * time.Second); !w.State().Leading && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		meanwhile()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= want {
			break
		}
	}
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got)
	return got
}

// TestWorkerElectedAfterDeletionReadsTheNewLog: a process's worker stood by
// while another's processed m1..m3 and stopped; the janitor deleted the
// queue's files and a third process appended m4 and m5 to a new
// segment.log. Elected now, the worker delivers m4 and m5 from the new
// file: not m1..m3 again from the deleted one, and without emptying the new
// file before m4 and m5 are delivered.
func TestWorkerElectedAfterDeletionReadsTheNewLog(t *testing.T) {
	root := t.TempDir()
	standby, _ := openQueue(t, root, Options{})
	for i := 1; i <= 3; i++ {
		if _, err := standby.Append(newMessage(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	size, _ := standby.Size()
	if err := standby.SaveCheckpoint(size); err != nil { // the other process's worker processed them
		t.Fatal(err)
	}
	if deleted, err := deleteIdleQueue(root, testTenant, testFlow, OS{}); !deleted || err != nil {
		t.Fatalf("the janitor: deleted %v, %v", deleted, err)
	}
	third, _ := openQueue(t, root, Options{})
	var acked []uint64
	for i := 4; i <= 5; i++ {
		m, err := third.Append(newMessage(i, 100))
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, m.ID)
	}
	if got := deliveries(t, standby, len(acked), nil); !slices.Equal(got, acked) {
		t.Errorf("delivered %v; want the acknowledged %v, once", got, acked)
	}
}

// TestOpenRacingTheJanitor: the janitor deletes an idle queue's files
// between Open's opening of segment.log and its recovery under the append
// lock, and the queue's worker starts before anything is appended. The queue
// recovers, delivers and appends from the file at the path, not from the
// deleted one (whose messages were all processed).
func TestOpenRacingTheJanitor(t *testing.T) {
	m, root := settledMemQueue(t)
	q0, _ := openQueue(t, root, Options{FS: m})
	for i := 1; i <= 3; i++ {
		if _, err := q0.Append(newMessage(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	size, _ := q0.Size()
	if err := q0.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	q0.Close()
	var fired atomic.Bool // the janitor opens the counter too: the hook must not run again then
	m.before = func(op, name string) {
		if op == opOpen && filepath.Base(name) == seqFile && fired.CompareAndSwap(false, true) { // after segment.log, before the recovery
			if deleted, err := deleteIdleQueue(root, testTenant, testFlow, m); !deleted || err != nil {
				t.Errorf("the janitor: deleted %v, %v", deleted, err)
			}
		}
	}
	q, _ := openQueue(t, root, Options{FS: m})
	m.before = nil
	var next Message
	got := deliveries(t, q, 1, func() { // the worker starts before the first append
		var err error
		if next, err = q.Append(newMessage(4, 100)); err != nil {
			t.Error(err)
		}
	})
	if next.ID != 4 || next.Offset != 0 {
		t.Errorf("the append after the deletion: id %d at offset %d, want id 4 at 0 in the new file", next.ID, next.Offset)
	}
	if !slices.Equal(got, []uint64{next.ID}) {
		t.Errorf("delivered %v; want only %d", got, next.ID)
	}
}

// TestJanitorKeepsTheCounter: appends rewrite the id counter without fsync
// (recovery raises it from the log); the janitor deletes the log, so it
// makes the counter durable first. After a power cut, ids go on.
func TestJanitorKeepsTheCounter(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 1; i <= 3; i++ {
		msg, err := q.Append(newMessage(i, 50))
		if err != nil {
			t.Fatal(err)
		}
		last = msg.ID
	}
	size, _ := q.Size()
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if deleted, err := deleteIdleQueue(root, testTenant, testFlow, m); !deleted || err != nil {
		t.Fatalf("the janitor: deleted %v, %v", deleted, err)
	}
	m.Crash()
	q2, _ := openQueue(t, root, Options{FS: m})
	msg, err := q2.Append(newMessage(9, 50))
	if err != nil {
		t.Fatal(err)
	}
	if msg.ID != last+1 {
		t.Errorf("after the janitor and a power cut: id %d, want %d (ids up to %d were issued)", msg.ID, last+1, last)
	}
}

// TestJanitorReadsACheckpointPastTheEndAsZero: the janitor reads the
// checkpoint as every reader does (resolveCheckpoint): one past the end of
// the log is 0, nothing processed, so a log whose messages were never
// delivered is kept, not deleted as processed.
func TestJanitorReadsACheckpointPastTheEndAsZero(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, q, 0, 3)
	end := size(t, q)
	q.Close()
	// a checkpoint past the end, as an older version's drain left it (doc.go:
	// "A checkpoint past the end of the log ... reads as 0")
	if err := os.WriteFile(filepath.Join(root, testTenant, testFlow, ckptFile), encodeValue(ckptMagic, uint64(end+1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCounts(root, testTenant, testFlow, nil)
	if err != nil || c.Total != 3 || c.Processed != 0 {
		t.Fatalf("ReadCounts = %+v, %v; want 3 messages, none processed", c, err)
	}
	deleted, err := deleteIdleQueue(root, testTenant, testFlow, OS{})
	if err != nil {
		t.Fatal(err)
	}
	if deleted {
		t.Errorf("the janitor deleted a queue whose 3 messages are unprocessed (checkpoint %d past the end %d reads as 0 everywhere else)", end+1000, end)
	}
}

// TestAppendAfterTheJanitorSurvivesAPowerCut: a handle open while the
// janitor deletes its queue's files creates segment.log again at its next
// append; the new file's folder entry is durable before the append is
// acknowledged, so the message survives a power cut (RELIABILITY A.8 "a
// crash at each housekeeping step loses nothing").
func TestAppendAfterTheJanitorSurvivesAPowerCut(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: m})
	first, err := q.Append(newMessage(1, 50))
	if err != nil {
		t.Fatal(err)
	}
	size, _ := q.Size()
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	if deleted, err := deleteIdleQueue(root, testTenant, testFlow, m); !deleted || err != nil {
		t.Fatalf("the janitor: deleted %v, %v", deleted, err)
	}
	acked, err := q.Append(newMessage(2, 50))
	if err != nil {
		t.Fatal(err)
	}
	if acked.ID != first.ID+1 || acked.Offset != 0 {
		t.Fatalf("the append after the deletion: id %d at offset %d, want id %d at 0 in a new file", acked.ID, acked.Offset, first.ID+1)
	}
	q.Close()
	m.Crash()
	q, _ = openQueue(t, root, Options{FS: m})
	checkMessages(t, readAll(t, q), []Message{acked})
}

// TestSweepPassesOverAHeldAppendLock: another process (nexus dlq, an
// appender paused) holds an idle queue's append lock. The sweep passes
// over that queue at once, deleting nothing, rather than waiting for the
// lock (a shutdown waits for the sweep), and deletes its files at the
// next pass once the lock is let go.
func TestSweepPassesOverAHeldAppendLock(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	size, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(size); err != nil { // processed: the queue is idle
		t.Fatal(err)
	}
	q.Close()
	segment := filepath.Join(root, testTenant, testFlow, segmentFile)
	release := holdAppendLock(t, root)

	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	defer m.Stop()
	done := make(chan struct{})
	go func() {
		m.sweepIdle()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		release() // lets the sweep end, so that Stop does
		<-done
		t.Fatal("the sweep still waited for the append lock held elsewhere after 10 s")
	}
	if _, err := os.Stat(segment); err != nil {
		t.Errorf("the queue was deleted while another process held its append lock: %v", err)
	}

	release()
	m.sweepIdle()
	if _, err := os.Stat(segment); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the next sweep, the lock let go, left the idle queue's log: %v", err)
	}
}

// The janitor empties the segment.log of an idle queue whose pending
// retries all carry their message, and keeps the queue (its retries, its
// id counter): a worker that starts later delivers the retry from its
// copy, and ids go on counting. A pending retry kept the whole log, for
// as long as the queue stayed idle. A retry that reads its message in the
// log (an older version's) keeps it.
func TestJanitorEmptiesTheLogOfCarriedRetries(t *testing.T) {
	for _, carried := range []bool{true, false} {
		t.Run(map[bool]string{true: "carried", false: "read in the log"}[carried], func(t *testing.T) {
			root := t.TempDir()
			q, _ := openQueue(t, root, Options{})
			m, err := q.Append(NewMessage{Source: "enqueue", CorrelationID: "c-1", Payload: []byte(`{"n":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":2}`)}); err != nil {
				t.Fatal(err)
			}
			size, _ := q.Size()
			if err := q.SaveCheckpoint(size); err != nil {
				t.Fatal(err)
			}
			r := Retry{ID: m.ID, Offset: m.Offset, Attempt: 2, Due: time.Now().Add(time.Hour)}
			if carried {
				c := m
				r.Message = &c
			}
			if err := q.SaveRetries([]Retry{r}); err != nil {
				t.Fatal(err)
			}
			q.Close()

			deleted, err := deleteIdleQueue(root, testTenant, testFlow, OS{})
			if err != nil || deleted {
				t.Fatalf("deleted %v, %v; want the queue kept for its retry", deleted, err)
			}
			info, err := os.Stat(filepath.Join(root, testTenant, testFlow, segmentFile))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{true: 0, false: size}[carried]; info.Size() != want {
				t.Fatalf("segment.log holds %d bytes, want %d", info.Size(), want)
			}
			q2, damage := openQueue(t, root, Options{})
			if len(damage) > 0 {
				t.Fatalf("damage at open: %v", damage)
			}
			if c, err := q2.Checkpoint(); err != nil || c != map[bool]int64{true: 0, false: size}[carried] {
				t.Errorf("checkpoint %d, %v", c, err)
			}
			rs, err := q2.Retries()
			if r.Message != nil {
				c := *r.Message
				c.Payload = nil // Retries does not hold a payload
				r.Message = &c
			}
			if diff := cmp.Diff([]Retry{r}, rs); err != nil || diff != "" {
				t.Errorf("retries (-want +got):\n%s\n%v", diff, err)
			}
			if next, err := q2.NextID(); err != nil || next != m.ID+2 {
				t.Errorf("next id %d, %v; want %d", next, err, m.ID+2)
			}
		})
	}
}
