package queue_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/queue"
)

// The tests of replaying and discarding dead letters (Queue.Replay,
// Manager.Replay, Manager.Discard) and of ReadCounts.

// addDeadLetter dead-letters a message id with payload in q's dlq.log.
func addDeadLetter(t testing.TB, q *queue.Queue, id uint64, payload string) queue.DeadLetter {
	t.Helper()
	d := queue.DeadLetter{ID: id, EnqueuedAt: wt0, FailedAt: wt0.Add(time.Minute), Attempts: 3, LastError: http503, Payload: []byte(payload)}
	if err := q.MoveToDLQ(d); err != nil {
		t.Fatalf("MoveToDLQ(%d): %v", id, err)
	}
	return d
}

// pendingIDs are the ids of q's pending dead letters, in order.
func pendingIDs(t testing.TB, q *queue.Queue) []uint64 {
	t.Helper()
	var ids []uint64
	for _, d := range deadLetters(t, q) {
		ids = append(ids, d.ID)
	}
	return ids
}

// readPendingIDs are the ids of the pending dead letters of tenant/flow
// under root, read from the files (ReadDeadLetters).
func readPendingIDs(t testing.TB, root, tenant, flow string) []uint64 {
	t.Helper()
	dl, _, err := queue.ReadDeadLetters(root, tenant, flow, nil)
	if err != nil {
		t.Fatalf("ReadDeadLetters: %v", err)
	}
	var ids []uint64
	for _, d := range dl {
		ids = append(ids, d.ID)
	}
	return ids
}

// tree is every folder (with a trailing slash) and file under dir, with the
// files' contents: what a test compares to show that nothing was created
// or written. A dir that does not exist is empty.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = string(b)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("listing %s: %v", dir, err)
	}
	return out
}

// nextID is q.NextID, or the test fails.
func nextID(t testing.TB, q *queue.Queue) uint64 {
	t.Helper()
	n, err := q.NextID()
	if err != nil {
		t.Fatalf("NextID: %v", err)
	}
	return n
}

// frameEnds reads q's log from the start with Read: the offset after each
// message, in order.
func frameEnds(t testing.TB, q *queue.Queue) []int64 {
	t.Helper()
	var ends []int64
	for off := int64(0); ; {
		_, next, err := q.Read(off)
		if errors.Is(err, io.EOF) {
			return ends
		}
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		ends = append(ends, next)
		off = next
	}
}

// ---- Queue.Replay ----

// A replay appends the dead letter's payload as a new message with the
// given source and correlation ID, and marks the entry replayed naming it.
func TestQueueReplay(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	m1 := put(t, q, `{"orderId":"A-1"}`)
	m2 := put(t, q, `{"orderId":"A-2"}`)
	dl := addDeadLetter(t, q, m1.ID, `{"orderId":"A-1"}`)
	addDeadLetter(t, q, m2.ID, `{"orderId":"A-2"}`)
	clk.Advance(time.Minute) // the replay is stamped with its own time
	before, size := nextID(t, q), fileSize(t, queueFile(root, "segment.log"))

	got, err := q.Replay(m1.ID, "replay", "cid-replay")
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	want := queue.Message{ID: before, Offset: size, EnqueuedAt: wt0.Add(time.Minute), Source: "replay",
		CorrelationID: "cid-replay", Payload: dl.Payload}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Replay returned (-want +got):\n%s", diff)
	}
	if got.ID <= m2.ID {
		t.Errorf("the replayed message has id %d, not above the ids before it (up to %d)", got.ID, m2.ID)
	}
	if n := nextID(t, q); n != got.ID+1 {
		t.Errorf("NextID after the replay = %d, want %d", n, got.ID+1)
	}
	if diff := cmp.Diff([]uint64{m2.ID}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending dead letters after the replay (-want +got):\n%s", diff)
	}
	read, next, err := q.Read(got.Offset)
	if err != nil {
		t.Fatalf("Read(%d): %v", got.Offset, err)
	}
	if diff := cmp.Diff(want, read); diff != "" {
		t.Errorf("Read at the replayed message's offset (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(queueFile(root, "segment.log"))
	if err != nil {
		t.Fatal(err)
	}
	if next != int64(len(b)) {
		t.Errorf("the replayed message ends at %d, segment.log at %d", next, len(b))
	}
	if diff := cmp.Diff([]uint64{m1.ID, m2.ID, got.ID}, segmentIDs(b)); diff != "" {
		t.Errorf("the ids in segment.log (-want +got):\n%s", diff)
	}
	// the mark names the message the replay appended
	applied, _, err := q.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	wantMarks := []queue.Marked{{ID: m1.ID, Action: queue.MarkReplayed, At: wt0.Add(time.Minute), ReplayID: got.ID}}
	if diff := cmp.Diff(wantMarks, applied); diff != "" {
		t.Errorf("the marks the replay wrote (-want +got):\n%s", diff)
	}
	if _, err := q.Replay(m1.ID, "replay", "cid-again"); !errors.Is(err, queue.ErrNotPending) {
		t.Errorf("Replay after compaction = %v, want ErrNotPending", err)
	}
}

// An id that is not a pending dead letter is ErrNotPending, and nothing is
// written: no message, no mark, the id counter unchanged.
func TestQueueReplayNotPending(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	var msgs []queue.Message
	for _, p := range []string{"one", "two", "three"} {
		msgs = append(msgs, put(t, q, p))
		addDeadLetter(t, q, msgs[len(msgs)-1].ID, p)
	}
	replayed, err := q.Replay(msgs[0].ID, "replay", "cid-first")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Mark(msgs[1].ID, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		id   uint64
	}{
		{"unknown id", 99},
		{"id 0", 0},
		{"replayed already", msgs[0].ID},
		{"discarded", msgs[1].ID},
		{"the replayed message, which never failed", replayed.ID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files, next := tree(t, root), nextID(t, q)
			got, err := q.Replay(c.id, "replay", "cid-"+c.name)
			if !errors.Is(err, queue.ErrNotPending) {
				t.Errorf("Replay(%d) = %v, want ErrNotPending", c.id, err)
			}
			if diff := cmp.Diff(queue.Message{}, got); diff != "" {
				t.Errorf("Replay(%d) returned a message (-want +got):\n%s", c.id, diff)
			}
			if diff := cmp.Diff(files, tree(t, root)); diff != "" {
				t.Errorf("a refused replay wrote files (-before +after):\n%s", diff)
			}
			if n := nextID(t, q); n != next {
				t.Errorf("NextID %d → %d", next, n)
			}
			if diff := cmp.Diff([]uint64{msgs[2].ID}, pendingIDs(t, q)); diff != "" {
				t.Errorf("pending dead letters (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("no dead letter ever", func(t *testing.T) {
		root := t.TempDir()
		q := openQ(t, root, clk, nil)
		put(t, q, "fine")
		files := tree(t, root)
		if _, err := q.Replay(1, "replay", "cid"); !errors.Is(err, queue.ErrNotPending) {
			t.Errorf("Replay = %v, want ErrNotPending", err)
		}
		if diff := cmp.Diff(files, tree(t, root)); diff != "" {
			t.Errorf("a refused replay wrote files (-before +after):\n%s", diff)
		}
	})
}

// Eight replays of one dead letter at once through one handle (a double
// click, many times over): one replays, the others are ErrNotPending, and
// the log holds one new message. The race depends on timing: 20 rounds.
func TestQueueReplayConcurrent(t *testing.T) {
	const callers = 8
	for round := 1; round <= 20; round++ {
		root, clk := t.TempDir(), clocktest.New(wt0)
		q := openQ(t, root, clk, nil)
		orig := put(t, q, `{"orderId":"A-1"}`)
		addDeadLetter(t, q, orig.ID, `{"orderId":"A-1"}`)

		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results [callers]queue.Message
			errs    [callers]error
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = q.Replay(orig.ID, "replay", "cid-replay")
			})
		}
		close(start)
		wg.Wait()

		var won []queue.Message
		for i, err := range errs {
			switch {
			case err == nil:
				won = append(won, results[i])
			case !errors.Is(err, queue.ErrNotPending):
				t.Errorf("round %d: caller %d: %v, want nil or ErrNotPending", round, i, err)
			case results[i].ID != 0:
				t.Errorf("round %d: caller %d was refused but returned message %d", round, i, results[i].ID)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d of %d concurrent replays succeeded, want 1: %+v", round, len(won), callers, won)
		}
		b, err := os.ReadFile(queueFile(root, "segment.log"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]uint64{orig.ID, won[0].ID}, segmentIDs(b)); diff != "" {
			t.Fatalf("round %d: the ids in segment.log (-want +got):\n%s", round, diff)
		}
		if n := nextID(t, q); n != won[0].ID+1 {
			t.Errorf("round %d: NextID = %d, want %d", round, n, won[0].ID+1)
		}
		if ids := pendingIDs(t, q); len(ids) != 0 {
			t.Errorf("round %d: still pending: %v", round, ids)
		}
		applied, _, err := q.CompactDLQ()
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) != 1 || applied[0].ID != orig.ID || applied[0].Action != queue.MarkReplayed || applied[0].ReplayID != won[0].ID {
			t.Errorf("round %d: marks %+v, want one replay of %d as %d", round, applied, orig.ID, won[0].ID)
		}
	}
}

// ---- ReadCounts ----

// withMessages opens the test queue under root and appends n messages;
// it returns the queue and the offset after each message, found with Read.
func withMessages(t testing.TB, root string, n int) (*queue.Queue, []int64) {
	t.Helper()
	q := openQ(t, root, clocktest.New(wt0), nil)
	for range n {
		put(t, q, `{"orderId":"A-1"}`)
	}
	ends := frameEnds(t, q)
	if len(ends) != n {
		t.Fatalf("%d messages appended, %d read", n, len(ends))
	}
	return q, ends
}

func saveCheckpoint(t testing.TB, q *queue.Queue, offset int64) {
	t.Helper()
	if err := q.SaveCheckpoint(offset); err != nil {
		t.Fatalf("SaveCheckpoint(%d): %v", offset, err)
	}
}

// appendToLog appends b to the test queue's segment.log under root, as a
// crash in the middle of a write leaves it.
func appendToLog(t testing.TB, root string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(queueFile(root, "segment.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// encodeFrame is rec in a frame that verifies (the frame format of the
// package documentation).
func encodeFrame(rec []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte("NXQ1"), uint32(len(rec)))
	sum := crc32.Update(crc32.Checksum(b[4:8], crc32.MakeTable(crc32.Castagnoli)), crc32.MakeTable(crc32.Castagnoli), rec)
	return append(binary.BigEndian.AppendUint32(b, sum), rec...)
}

// TestReadCountsDuringDrains: ReadCounts takes no lock, so a drain may
// empty the log while it reads; it reads again rather than failing (the
// management UI and API answered 500 for such a moment).
func TestReadCountsDuringDrains(t *testing.T) {
	root := t.TempDir()
	q, _ := withMessages(t, root, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 20 {
				if _, err := q.Append(queue.NewMessage{Source: "enqueue", Payload: []byte(`{"orderId":"A-1"}`)}); err != nil {
					t.Error(err)
					return
				}
			}
			size, err := q.Size()
			if err == nil {
				err = q.SaveCheckpoint(size)
			}
			if err == nil {
				err = q.Drain()
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 300 {
		if c, err := queue.ReadCounts(root, wTenant, wFlow, nil); err != nil || c.Processed > c.Total {
			t.Fatalf("read %d: %+v, %v", i, c, err)
		}
	}
}

// ReadCounts counts from the files, without creating anything.
func TestReadCounts(t *testing.T) {
	cases := []struct {
		name         string
		tenant, flow string
		setup        func(t *testing.T, root string) // nil: nothing on disk
		want         queue.Counts
		wantErr      bool
	}{
		{name: "no queue", tenant: "acme", flow: "nothing"},
		{name: "tenant ../x", tenant: "../x", flow: "orders", wantErr: true},
		{name: "flow A", tenant: "acme", flow: "A", wantErr: true},
		{name: "tenant A", tenant: "A", flow: "orders", wantErr: true},
		{name: "flow a.b", tenant: "acme", flow: "a.b", wantErr: true},
		{name: "opened, empty", setup: func(t *testing.T, root string) { withMessages(t, root, 0) }},
		{
			name: "5, none processed", want: queue.Counts{Total: 5},
			setup: func(t *testing.T, root string) { withMessages(t, root, 5) },
		},
		{
			name: "5, checkpoint after the 2nd", want: queue.Counts{Total: 5, Processed: 2},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[1])
			},
		},
		{
			name: "5, all processed", want: queue.Counts{Total: 5, Processed: 5},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[4])
			},
		},
		{
			name: "5, all processed and drained",
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[4])
				if err := q.Drain(); err != nil {
					t.Fatalf("Drain: %v", err)
				}
				if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
					t.Fatalf("segment.log is %d bytes after Drain", size)
				}
			},
		},
		{
			name: "drained, then 2 more, 1 processed", want: queue.Counts{Total: 2, Processed: 1},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[4])
				if err := q.Drain(); err != nil {
					t.Fatalf("Drain: %v", err)
				}
				put(t, q, "six")
				put(t, q, "seven")
				ends = frameEnds(t, q)
				if len(ends) != 2 {
					t.Fatalf("read %d messages after the drain, want 2", len(ends))
				}
				saveCheckpoint(t, q, ends[0])
			},
		},
		{
			name: "a folder without segment.log",
			setup: func(t *testing.T, root string) {
				if err := os.MkdirAll(filepath.Join(root, wTenant, wFlow), 0o755); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "5, 2 processed, then a frame that holds no message", want: queue.Counts{Total: 5, Processed: 2},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[1])
				mark := append([]byte{3}, make([]byte, 17)...) // a mark record (kind 3), not a message
				appendToLog(t, root, encodeFrame(mark))
				if got := frameEnds(t, q); len(got) != 5 {
					t.Fatalf("Read finds %d messages, want 5", len(got))
				}
			},
		},
		{
			name: "5, 2 processed, a torn tail of garbage", want: queue.Counts{Total: 5, Processed: 2},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[1])
				appendToLog(t, root, []byte("\x00\x17garbage, not a frame\xff\xfe"))
			},
		},
		{
			name: "5, 2 processed, half a frame at the tail", want: queue.Counts{Total: 5, Processed: 2},
			setup: func(t *testing.T, root string) {
				q, ends := withMessages(t, root, 5)
				saveCheckpoint(t, q, ends[1])
				b, err := os.ReadFile(queueFile(root, "segment.log"))
				if err != nil {
					t.Fatal(err)
				}
				appendToLog(t, root, b[:ends[0]/2]) // the first frame's first half
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "queues")
			tenant, flow := c.tenant, c.flow
			if tenant == "" {
				tenant, flow = wTenant, wFlow
			}
			if c.setup != nil {
				c.setup(t, root)
			}
			before := tree(t, base)
			got, err := queue.ReadCounts(root, tenant, flow, nil)
			if c.wantErr {
				var ne *naming.Error
				if !errors.As(err, &ne) {
					t.Errorf("ReadCounts(%q, %q) = %+v, %v; want the name rule's error", tenant, flow, got, err)
				}
			} else if err != nil {
				t.Errorf("ReadCounts: %v", err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("ReadCounts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tree(t, base)); diff != "" {
				t.Errorf("ReadCounts changed the files (-before +after):\n%s", diff)
			}
			if c.setup == nil && len(before) != 1 { // only base itself
				t.Errorf("files before ReadCounts: %v", before)
			}
		})
	}
}

// ---- Manager.Replay and Manager.Discard ----

// Manager.Replay opens the queue through the manager (its worker starts)
// and the replayed message is delivered.
func TestManagerReplayStartsWorker(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 0, nil)
	q := openQ(t, root, clk, nil) // another handle, as nexus dlq would
	addDeadLetter(t, q, 7, `{"orderId":"A-7"}`)
	addDeadLetter(t, q, 8, `{"orderId":"A-8"}`)

	msg, err := m.Replay(wTenant, wFlow, 7, "replay", "cid-7")
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if msg.ID == 0 || msg.Source != "replay" || msg.CorrelationID != "cid-7" || string(msg.Payload) != `{"orderId":"A-7"}` {
		t.Errorf("Replay returned %+v", msg)
	}
	got := rec.wait(t, 1)
	want := []delivery{{Worker: "m", ID: msg.ID, Offset: msg.Offset, Attempt: 1, Payload: `{"orderId":"A-7"}`,
		Source: "replay", Tenant: wTenant, Flow: wFlow}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{8}, readPendingIDs(t, root, wTenant, wFlow)); diff != "" {
		t.Errorf("pending dead letters (-want +got):\n%s", diff)
	}
	if _, err := m.Replay(wTenant, wFlow, 7, "replay", "cid-7-again"); !errors.Is(err, queue.ErrNotPending) {
		t.Errorf("a second Replay = %v, want ErrNotPending", err)
	}
	clk.WaitCalls(t, 1)
	if got := rec.all(); len(got) != 1 {
		t.Errorf("deliveries after the second replay = %v, want one", got)
	}
}

// Manager.Replay wakes the queue's worker at rest: the message is delivered
// without the worker's Poll (an hour) going by. The mark names the message.
func TestManagerReplayWakesWorker(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 0, nil)
	mq, _, err := m.Queue(wTenant, wFlow)
	if err != nil {
		t.Fatal(err)
	}
	addDeadLetter(t, mq, 8, `{"orderId":"A-8"}`)
	clk.WaitCalls(t, 1) // at rest, housekeeping done, no wake pending

	msg, err := m.Replay(wTenant, wFlow, 8, "replay", "cid-8")
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	got := rec.wait(t, 1)
	want := []delivery{{Worker: "m", ID: msg.ID, Offset: msg.Offset, Attempt: 1, Payload: `{"orderId":"A-8"}`,
		Source: "replay", Tenant: wTenant, Flow: wFlow}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if !clk.Now().Equal(wt0) {
		t.Errorf("the clock moved to %v", clk.Now())
	}
	if ids := readPendingIDs(t, root, wTenant, wFlow); len(ids) != 0 {
		t.Errorf("still pending: %v", ids)
	}
	// the worker's housekeeping ran before the replay and the clock has not
	// moved since: the mark is still there to read
	clk.WaitCalls(t, 2)
	applied, _, err := mq.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]queue.Marked{{ID: 8, Action: queue.MarkReplayed, At: wt0, ReplayID: msg.ID}}, applied); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
}

// With the budget spent by other queues, Replay is ErrBudget and writes
// nothing; Discard, which needs no worker, still works.
func TestManagerReplayDiscardBudget(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 1, nil)
	if _, _, err := m.Queue("acme", "busy"); err != nil {
		t.Fatal(err)
	}
	q := openQ(t, root, clk, nil)
	addDeadLetter(t, q, 7, `{"orderId":"A-7"}`)
	clk.WaitCalls(t, 1) // the busy queue's worker is at rest: its files are settled
	base := filepath.Dir(root)
	files, next := tree(t, base), nextID(t, q)

	msg, err := m.Replay(wTenant, wFlow, 7, "replay", "cid-7")
	if !errors.Is(err, queue.ErrBudget) {
		t.Errorf("Replay with the budget spent = %v, want ErrBudget", err)
	}
	if diff := cmp.Diff(queue.Message{}, msg); diff != "" {
		t.Errorf("Replay returned a message (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(files, tree(t, base)); diff != "" {
		t.Errorf("a refused replay wrote files (-before +after):\n%s", diff)
	}
	if n := nextID(t, q); n != next {
		t.Errorf("NextID %d → %d", next, n)
	}
	if diff := cmp.Diff([]uint64{7}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending dead letters (-want +got):\n%s", diff)
	}
	if err := m.Discard(wTenant, wFlow, 7); err != nil {
		t.Errorf("Discard with the budget spent = %v, want it done without a worker", err)
	}
	if got := pendingIDs(t, q); len(got) != 0 {
		t.Errorf("pending dead letters after Discard: %v", got)
	}
	if got := rec.all(); len(got) != 0 {
		t.Errorf("deliveries = %v", got)
	}
}

// An id that is not pending, in a queue that exists or not, and a bad name
// are refused before any queue is opened or created.
func TestManagerReplayDiscardNotPending(t *testing.T) {
	ops := []struct {
		name string
		call func(m *queue.Manager, tenant, flow string, id uint64) error
	}{
		{"Replay", func(m *queue.Manager, tenant, flow string, id uint64) error {
			msg, err := m.Replay(tenant, flow, id, "replay", "cid")
			if msg.ID != 0 {
				return errors.New("a refused replay returned a message")
			}
			return err
		}},
		{"Discard", func(m *queue.Manager, tenant, flow string, id uint64) error {
			return m.Discard(tenant, flow, id)
		}},
	}
	cases := []struct {
		name         string
		tenant, flow string
		id           uint64
		wantName     bool // the name rule's error, else ErrNotPending
	}{
		{name: "no such flow", tenant: wTenant, flow: "nothing", id: 1},
		{name: "no such tenant", tenant: "nobody", flow: wFlow, id: 1},
		{name: "unknown id", tenant: wTenant, flow: wFlow, id: 99},
		{name: "discarded id", tenant: wTenant, flow: wFlow, id: 5},
		{name: "replayed id", tenant: wTenant, flow: wFlow, id: 6},
		{name: "tenant ../x", tenant: "../x", flow: wFlow, id: 5, wantName: true},
		{name: "flow A", tenant: wTenant, flow: "A", id: 5, wantName: true},
		{name: "flow a.b", tenant: wTenant, flow: "a.b", id: 5, wantName: true},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			clk := clocktest.New(wt0)
			rec := newRecorder(clk)
			m, root := newManager(t, clk, rec.handler("m", ack), 1, nil)
			q := openQ(t, root, clk, nil)
			addDeadLetter(t, q, 5, "five")
			addDeadLetter(t, q, 6, "six")
			if err := q.Mark(5, queue.MarkDiscarded); err != nil {
				t.Fatal(err)
			}
			if err := q.MarkReplayed(6, 60); err != nil {
				t.Fatal(err)
			}
			base := filepath.Dir(root)
			for _, c := range cases {
				files := tree(t, base)
				err := op.call(m, c.tenant, c.flow, c.id)
				var ne *naming.Error
				if c.wantName && !errors.As(err, &ne) || !c.wantName && !errors.Is(err, queue.ErrNotPending) {
					t.Errorf("%s: %s(%q, %q, %d) = %v", c.name, op.name, c.tenant, c.flow, c.id, err)
				}
				if diff := cmp.Diff(files, tree(t, base)); diff != "" {
					t.Errorf("%s: files changed (-before +after):\n%s", c.name, diff)
				}
			}
			// none of them opened a queue: the budget of one is unspent
			if err := m.Has("acme", "other"); err != nil {
				t.Errorf("Has after the refusals = %v: a refused call opened a queue", err)
			}
			if got := rec.all(); len(got) != 0 {
				t.Errorf("deliveries = %v", got)
			}
		})
	}
}

// Discard starts no worker and leaves the queue's waiting messages alone;
// the entry leaves the listings at once and, once dlq.log is compacted,
// its body the disk.
func TestManagerDiscard(t *testing.T) {
	const secret = `{"card":"4111-1111-1111-1111"}`
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	m, root := newManager(t, clk, rec.handler("m", ack), 1, nil)
	q := openQ(t, root, clk, nil)
	addDeadLetter(t, q, 7, secret)
	addDeadLetter(t, q, 8, `{"also":"secret-8"}`)
	addDeadLetter(t, q, 9, `{"keep":true}`)
	dlqPath := queueFile(root, "dlq.log")
	if b, err := os.ReadFile(dlqPath); err != nil || !bytes.Contains(b, []byte(secret)) {
		t.Fatalf("dlq.log = %q, %v", b, err)
	}

	// the queue is not open in the manager yet
	if err := m.Discard(wTenant, wFlow, 7); err != nil {
		t.Fatalf("Discard(7): %v", err)
	}
	if diff := cmp.Diff([]uint64{8, 9}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending dead letters after Discard (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{8, 9}, readPendingIDs(t, root, wTenant, wFlow)); diff != "" {
		t.Errorf("ReadDeadLetters after Discard (-want +got):\n%s", diff)
	}
	if err := m.Has("acme", "other"); err != nil {
		t.Errorf("Has(acme, other) = %v: Discard took the budget's one worker", err)
	}
	if info, ok := m.Info(wTenant, wFlow); !ok || info.Open || info.DeadLetters != 2 {
		t.Errorf("Info after Discard = %+v, %v: want the queue on disk, not open, with 2 dead letters", info, ok)
	}
	mq, _, err := m.Queue(wTenant, wFlow)
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, 1) // the worker is at rest after its first housekeeping

	// the worker waits for an hour now: the next mark stays until compacted
	if err := m.Discard(wTenant, wFlow, 8); err != nil {
		t.Fatalf("Discard(8): %v", err)
	}
	if diff := cmp.Diff([]uint64{9}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending dead letters after the second Discard (-want +got):\n%s", diff)
	}
	if b, _ := os.ReadFile(dlqPath); !bytes.Contains(b, []byte(`"secret-8"`)) {
		t.Errorf("Discard rewrote dlq.log itself")
	}
	applied, _, err := mq.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	var marked8 []queue.Marked
	for _, a := range applied {
		if a.ID == 8 {
			marked8 = append(marked8, a)
		}
	}
	if diff := cmp.Diff([]queue.Marked{{ID: 8, Action: queue.MarkDiscarded, At: wt0}}, marked8); diff != "" {
		t.Errorf("the mark of 8 (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(dlqPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{secret, `"secret-8"`} {
		if bytes.Contains(b, []byte(body)) {
			t.Errorf("dlq.log still holds %s after compaction", body)
		}
	}
	if !bytes.Contains(b, []byte(`{"keep":true}`)) {
		t.Errorf("compaction removed the pending dead letter 9")
	}
	for _, id := range []uint64{7, 8} {
		if err := m.Discard(wTenant, wFlow, id); !errors.Is(err, queue.ErrNotPending) {
			t.Errorf("Discard(%d) again = %v, want ErrNotPending", id, err)
		}
		if _, err := m.Replay(wTenant, wFlow, id, "replay", "cid"); !errors.Is(err, queue.ErrNotPending) {
			t.Errorf("Replay(%d) of a discarded entry = %v, want ErrNotPending", id, err)
		}
	}
	if got := rec.all(); len(got) != 0 {
		t.Errorf("a discarded dead letter was delivered: %v", got)
	}
}

// A replay whose fdatasync fails poisons the queue (like an Append); the
// manager reopens a queue poisoned by Append at once, so a replay retried
// by the operator is expected to succeed the same way. It fails today:
// Manager.Replay does not reopen the queue (Manager.Append does), so every
// later replay of the queue is ErrPoisoned until an Append reopens it.
func TestManagerReplayAfterFailedSync(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, root := newManager(t, clk, rec.handler("m", ack), 0, hooks)
	q := openQ(t, root, clk, nil)
	addDeadLetter(t, q, 7, `{"orderId":"A-7"}`)
	if _, _, err := m.Queue(wTenant, wFlow); err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, 1)
	hooks.failNextSync()
	if _, err := m.Replay(wTenant, wFlow, 7, "replay", "cid-1"); !errors.Is(err, queue.ErrPoisoned) {
		t.Fatalf("Replay with a failing fdatasync = %v, want ErrPoisoned", err)
	}
	if diff := cmp.Diff([]uint64{7}, readPendingIDs(t, root, wTenant, wFlow)); diff != "" {
		t.Errorf("pending after the failed replay (-want +got):\n%s", diff)
	}
	msg, err := m.Replay(wTenant, wFlow, 7, "replay", "cid-2")
	if err != nil {
		t.Fatalf("Replay retried after the failed fdatasync: %v (the poisoned queue was not reopened)", err)
	}
	eventually(t, "the retried replay is delivered", func() bool {
		for _, d := range rec.all() {
			if d.ID == msg.ID {
				return true
			}
		}
		return false
	})
}

// TestQueueReplayPending: ReplayPending replays the oldest pending dead
// letters up to upTo, limit or maxBytes at a time, each as a new message
// with a fresh correlation ID, and marks them naming it; a caller that
// calls it until it returns none replays every one present when it began,
// and none dead-lettered after (a newer id). MarkPending marks the same
// way.
func TestQueueReplayPending(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	var ids []uint64
	for _, p := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`} {
		m := put(t, q, p)
		addDeadLetter(t, q, m.ID, p)
		ids = append(ids, m.ID)
	}
	upTo := ids[3] // the fifth came after the run began
	n := 0
	cid := func() string { n++; return fmt.Sprintf("cid-%d", n) }
	var calls [][]uint64
	var replays []queue.Replayed
	for {
		got, _, err := q.ReplayPending(upTo, 3, 1<<20, "replay", cid)
		if err != nil {
			t.Fatalf("ReplayPending: %v", err)
		}
		if len(got) == 0 {
			break
		}
		var call []uint64
		for _, r := range got {
			call = append(call, r.ID)
		}
		calls, replays = append(calls, call), append(replays, got...)
	}
	if diff := cmp.Diff([][]uint64{{ids[0], ids[1], ids[2]}, {ids[3]}}, calls); diff != "" {
		t.Errorf("the dead letters of each call (-want +got):\n%s", diff)
	}
	for i, r := range replays {
		if string(r.Message.Payload) != fmt.Sprintf(`{"n":%d}`, i+1) || r.Message.CorrelationID != fmt.Sprintf("cid-%d", i+1) || r.Message.ID <= ids[4] {
			t.Errorf("replay %d: %+v", i, r)
		}
	}
	if diff := cmp.Diff([]uint64{ids[4]}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending after the run (-want +got):\n%s", diff)
	}
	// a byte budget stops after the dead letter that reaches it
	for _, p := range []string{`{"big":"xxxxxxxxxx"}`, `{"n":7}`} {
		addDeadLetter(t, q, put(t, q, p).ID, p)
	}
	got, _, err := q.ReplayPending(^uint64(0), 100, 5, "replay", cid)
	if err != nil || len(got) != 1 || got[0].ID != ids[4] {
		t.Errorf("ReplayPending with a 5-byte budget: %+v, %v; want the oldest alone", got, err)
	}
	// the marks name the messages the replays appended
	applied, _, err := q.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 5 || applied[0].ReplayID != replays[0].Message.ID || applied[0].Action != queue.MarkReplayed {
		t.Errorf("the marks: %+v", applied)
	}

	marked, err := q.MarkPending(^uint64(0), 1, queue.MarkDiscarded)
	if err != nil || len(marked) != 1 {
		t.Fatalf("MarkPending, limit 1: %v, %v", marked, err)
	}
	if rest, err := q.MarkPending(^uint64(0), 100, queue.MarkDiscarded); err != nil || len(rest) != 1 || len(pendingIDs(t, q)) != 0 {
		t.Errorf("MarkPending of the rest: %v, %v; pending %v", rest, err, pendingIDs(t, q))
	}
	if none, err := q.MarkPending(^uint64(0), 100, queue.MarkDiscarded); err != nil || len(none) != 0 {
		t.Errorf("MarkPending with none pending: %v, %v", none, err)
	}
}

// TestQueueReplayAllLeavesAnOversizedDeadLetter: a dead letter whose
// payload is over MaxPayload (one an older nexus wrote: a dead-letter
// frame holds up to MaxRecord) cannot be replayed, as no message may be
// that large. ReplayAll replays every other one, leaves it pending and
// reports it; it failed at it, replaying none (the error of the chunk
// dropped the ones before it). Replay of it alone
// fails with ErrTooLarge, naming the limit.
func TestQueueReplayAllLeavesAnOversizedDeadLetter(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	var ids []uint64
	for _, p := range []string{`{"n":1}`, "big", `{"n":3}`} {
		m := put(t, q, p)
		if p == "big" {
			// MoveToDLQ writes what a frame holds, beyond MaxPayload
			p = string(bytes.Repeat([]byte("x"), queue.MaxPayload+1))
		}
		addDeadLetter(t, q, m.ID, p)
		ids = append(ids, m.ID)
	}
	var replayed []uint64
	var skipped []queue.Skipped
	n, err := q.ReplayAll(ids[2], "replay", func() string { return "cid" }, func(r queue.Replayed) { replayed = append(replayed, r.ID) },
		func(s queue.Skipped) { skipped = append(skipped, s) })
	if err != nil {
		t.Fatalf("ReplayAll: %v", err)
	}
	if diff := cmp.Diff([]uint64{ids[0], ids[2]}, replayed); diff != "" || n != 2 {
		t.Errorf("replayed %d (-want +got):\n%s", n, diff)
	}
	if len(skipped) != 1 || skipped[0].ID != ids[1] || skipped[0].PayloadSize != queue.MaxPayload+1 || !errors.Is(skipped[0].Err, queue.ErrTooLarge) {
		t.Errorf("skipped: %+v; want dead letter %d, %d bytes, ErrTooLarge, reported once", skipped, ids[1], queue.MaxPayload+1)
	}
	if diff := cmp.Diff([]uint64{ids[1]}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending after ReplayAll (-want +got):\n%s", diff)
	}
	_, err = q.Replay(ids[1], "replay", "cid")
	if want := fmt.Sprintf("payload of %d bytes is over the limit of %d bytes", queue.MaxPayload+1, queue.MaxPayload); !errors.Is(err, queue.ErrTooLarge) || !strings.Contains(err.Error(), want) {
		t.Errorf("Replay of the oversized dead letter: %v; want ErrTooLarge saying %q", err, want)
	}
	if diff := cmp.Diff([]uint64{ids[1]}, pendingIDs(t, q)); diff != "" {
		t.Errorf("pending after Replay (-want +got):\n%s", diff)
	}
}
