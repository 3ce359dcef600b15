package queue_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/queue"
)

// The tests of the dead letters' reads (DeadLetterCount, DeadLetter,
// DeadLetterPage, Peek), of Replay and Mark racing across handles, of a
// replay whose mark cannot be written, and of Manager.Discard on a queue
// the manager has not opened.

// ---- helpers ----

// fileRecords are the records of the frames of a queue file's bytes, in
// file order (the frame format of the package documentation); it stops at
// the first frame that does not parse.
func fileRecords(b []byte) [][]byte {
	var recs [][]byte
	for len(b) >= 12 && string(b[:4]) == "NXQ1" {
		n := int(binary.BigEndian.Uint32(b[4:8]))
		if len(b) < 12+n {
			break
		}
		recs = append(recs, b[12:12+n])
		b = b[12+n:]
	}
	return recs
}

// fileMark is a mark record of dlq.log.acked, decoded from the file.
type fileMark struct {
	ID       uint64
	At       time.Time
	Action   byte
	ReplayID uint64
}

// fileMarks decodes the mark records of the test queue's dlq.log.acked
// under root, in file order; a missing file has none.
func fileMarks(t testing.TB, root string) []fileMark {
	t.Helper()
	b, err := os.ReadFile(queueFile(root, "dlq.log.acked"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []fileMark
	for _, rec := range fileRecords(b) {
		if len(rec) != 18 && len(rec) != 26 || rec[0] != 3 {
			t.Fatalf("dlq.log.acked holds a record that is not a mark: %x", rec)
		}
		m := fileMark{ID: binary.BigEndian.Uint64(rec[1:9]),
			At: time.Unix(0, int64(binary.BigEndian.Uint64(rec[9:17]))).UTC(), Action: rec[17]}
		if len(rec) == 26 {
			m.ReplayID = binary.BigEndian.Uint64(rec[18:26])
		}
		out = append(out, m)
	}
	return out
}

// dlqFileIDs are the ids of the dead letters in the test queue's dlq.log
// under root, in file order.
func dlqFileIDs(t testing.TB, root string) []uint64 {
	t.Helper()
	b, err := os.ReadFile(queueFile(root, "dlq.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, rec := range fileRecords(b) {
		if len(rec) >= 9 && rec[0] == 2 {
			ids = append(ids, binary.BigEndian.Uint64(rec[1:9]))
		}
	}
	return ids
}

// logMessages reads q's whole log with Read.
func logMessages(t testing.TB, q *queue.Queue) []queue.Message {
	t.Helper()
	var out []queue.Message
	for off := int64(0); ; {
		m, next, err := q.Read(off)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		out = append(out, m)
		off = next
	}
}

// segmentFileIDs are the message ids in the test queue's segment.log.
func segmentFileIDs(t testing.TB, root string) []uint64 {
	t.Helper()
	b, err := os.ReadFile(queueFile(root, "segment.log"))
	if err != nil {
		t.Fatal(err)
	}
	return segmentIDs(b)
}

// ackedFaultFS is the OS with faults on dlq.log.acked (hookFS hooks only
// segment.log): the next failWrite writes of it fail (the first tornWrite
// of them after writing half their bytes), and the next failSync
// fdatasyncs of it fail after the data reached the file.
type ackedFaultFS struct {
	queue.OS
	mu        sync.Mutex
	failWrite int
	tornWrite bool
	failSync  int
	fired     int
}

func (a *ackedFaultFS) arm(writes, syncs int, torn bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failWrite, a.failSync, a.tornWrite, a.fired = writes, syncs, torn, 0
}

// take consumes one fault of *n, if any.
func (a *ackedFaultFS) take(n *int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if *n == 0 {
		return false
	}
	*n--
	a.fired++
	return true
}

func (a *ackedFaultFS) firedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fired
}

func (a *ackedFaultFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := a.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "dlq.log.acked" {
		return f, err
	}
	return &ackedFaultFile{File: f, fs: a, name: name}, nil
}

type ackedFaultFile struct {
	queue.File
	fs   *ackedFaultFS
	name string
}

func (f *ackedFaultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.take(&f.fs.failWrite) {
		f.fs.mu.Lock()
		torn := f.fs.tornWrite
		f.fs.mu.Unlock()
		n := 0
		if torn {
			n, _ = f.File.WriteAt(p[:len(p)/2], off)
		}
		return n, &os.PathError{Op: "write", Path: f.name, Err: syscall.EIO}
	}
	return f.File.WriteAt(p, off)
}

func (f *ackedFaultFile) Sync() error {
	if f.fs.take(&f.fs.failSync) {
		return &os.PathError{Op: "fdatasync", Path: f.name, Err: syscall.EIO}
	}
	return f.File.Sync()
}

// ---- Replay and Mark across handles ----

// A replay on one handle and a discard on another (two open file
// descriptions of append.lock: two processes, as far as flock goes) of the
// same id, at the same moment: one wins, the other is ErrNotPending and
// writes nothing. Then two handles replaying the same ids at once: each id
// is replayed once.
func TestReplayAndDiscardRace(t *testing.T) {
	const n = 20
	setup := func(t *testing.T) (root string, qa, qb *queue.Queue, ids []uint64, dls map[uint64]queue.DeadLetter) {
		root, clk := t.TempDir(), clocktest.New(wt0)
		qa = openQ(t, root, clk, nil)
		qb = openQ(t, root, clk, nil) // another open of the same folder
		dls = map[uint64]queue.DeadLetter{}
		for i := range n {
			m := put(t, qa, fmt.Sprintf(`{"orderId":"R-%d"}`, i))
			dls[m.ID] = addDeadLetter(t, qa, m.ID, string(m.Payload))
			ids = append(ids, m.ID)
		}
		if got := segmentFileIDs(t, root); len(got) != n {
			t.Fatalf("segment.log holds %d messages before the race, want %d", len(got), n)
		}
		return root, qa, qb, ids, dls
	}

	t.Run("replay against discard", func(t *testing.T) {
		root, qa, qb, ids, dls := setup(t)
		var (
			replayed  []queue.Message // the winning replays' messages, by id
			wantMarks []fileMark
		)
		for i, id := range ids {
			// the replaying handle alternates, so both handles win either way
			rq, dq := qa, qb
			if i%2 == 1 {
				rq, dq = qb, qa
			}
			var (
				wg                 sync.WaitGroup
				start              = make(chan struct{})
				msg                queue.Message
				replayErr, discErr error
			)
			replay := func() {
				<-start
				msg, replayErr = rq.Replay(id, "replay", fmt.Sprintf("cid-replay-%d", id))
			}
			discard := func() {
				<-start
				discErr = dq.Mark(id, queue.MarkDiscarded)
			}
			// which goroutine the scheduler runs first after the release
			// depends on the order they were started: both orders, so that
			// both sides win some races
			if i%4 < 2 {
				wg.Go(replay)
				wg.Go(discard)
			} else {
				wg.Go(discard)
				wg.Go(replay)
			}
			close(start)
			wg.Wait()
			switch {
			case replayErr == nil && errors.Is(discErr, queue.ErrNotPending):
				if msg.ID == 0 || string(msg.Payload) != string(dls[id].Payload) || msg.Source != "replay" {
					t.Errorf("id %d: the winning Replay returned %+v", id, msg)
				}
				replayed = append(replayed, msg)
				wantMarks = append(wantMarks, fileMark{ID: id, At: wt0, Action: queue.MarkReplayed, ReplayID: msg.ID})
			case discErr == nil && errors.Is(replayErr, queue.ErrNotPending):
				if diff := cmp.Diff(queue.Message{}, msg); diff != "" {
					t.Errorf("id %d: the refused Replay returned a message (-want +got):\n%s", id, diff)
				}
				wantMarks = append(wantMarks, fileMark{ID: id, At: wt0, Action: queue.MarkDiscarded})
			default:
				t.Fatalf("id %d: Replay = %+v, %v; Mark(discarded) = %v: want exactly one to succeed and the other ErrNotPending",
					id, msg, replayErr, discErr)
			}
		}
		t.Logf("%d of %d races won by the replay", len(replayed), n)

		// exactly the winners' messages were appended, once each
		all := logMessages(t, qa)
		if len(all) < n {
			t.Fatalf("the log holds %d messages, fewer than the %d originals", len(all), n)
		}
		if diff := cmp.Diff(replayed, all[n:], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("the messages appended by the race (-want the winning replays +got the log):\n%s", diff)
		}
		if got := segmentFileIDs(t, root); len(got) != n+len(replayed) {
			t.Errorf("segment.log holds %d messages, want %d originals + %d replays", len(got), n, len(replayed))
		}
		// exactly one mark per id, written by the winner, none by a loser
		if diff := cmp.Diff(wantMarks, fileMarks(t, root)); diff != "" {
			t.Errorf("the marks in dlq.log.acked (-want +got):\n%s", diff)
		}
		if got := pendingIDs(t, qa); len(got) != 0 {
			t.Errorf("still pending: %v", got)
		}
		// and as the worker's compaction applies them
		applied, _, err := qb.CompactDLQ()
		if err != nil {
			t.Fatal(err)
		}
		var want []queue.Marked
		for _, m := range wantMarks {
			want = append(want, queue.Marked{ID: m.ID, Action: m.Action, At: m.At, ReplayID: m.ReplayID})
		}
		if diff := cmp.Diff(want, applied); diff != "" {
			t.Errorf("CompactDLQ (-want +got):\n%s", diff)
		}
	})

	t.Run("two handles replaying the same ids", func(t *testing.T) {
		root, qa, qb, ids, dls := setup(t)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			msgs  = make([][2]queue.Message, len(ids))
			errs  = make([][2]error, len(ids))
		)
		for i, id := range ids {
			for h, q := range []*queue.Queue{qa, qb} {
				wg.Go(func() {
					<-start
					msgs[i][h], errs[i][h] = q.Replay(id, "replay", fmt.Sprintf("cid-%d-%d", id, h))
				})
			}
		}
		close(start)
		wg.Wait()

		var (
			won       []queue.Message
			wantMarks = map[uint64]fileMark{}
		)
		for i, id := range ids {
			var ok []queue.Message
			for h := range 2 {
				switch err := errs[i][h]; {
				case err == nil:
					ok = append(ok, msgs[i][h])
				case !errors.Is(err, queue.ErrNotPending):
					t.Errorf("id %d: handle %d: Replay = %v, want nil or ErrNotPending", id, h, err)
				case msgs[i][h].ID != 0:
					t.Errorf("id %d: handle %d was refused but returned message %d", id, h, msgs[i][h].ID)
				}
			}
			if len(ok) != 1 {
				t.Errorf("id %d: %d of the 2 replays succeeded, want 1: %+v", id, len(ok), ok)
				continue
			}
			if string(ok[0].Payload) != string(dls[id].Payload) {
				t.Errorf("id %d: replayed payload %q, want %q", id, ok[0].Payload, dls[id].Payload)
			}
			won = append(won, ok[0])
			wantMarks[id] = fileMark{ID: id, At: wt0, Action: queue.MarkReplayed, ReplayID: ok[0].ID}
		}
		slices.SortFunc(won, func(a, b queue.Message) int { // by id: the log's order
			switch {
			case a.ID < b.ID:
				return -1
			case a.ID > b.ID:
				return 1
			}
			return 0
		})

		all := logMessages(t, qb)
		if len(all) < n {
			t.Fatalf("the log holds %d messages, fewer than the %d originals", len(all), n)
		}
		if diff := cmp.Diff(won, all[n:]); diff != "" {
			t.Errorf("the messages the replays appended (-want one per id +got the log):\n%s", diff)
		}
		// one new message per id: count the payloads in the log
		perPayload := map[string]int{}
		for _, m := range all[n:] {
			perPayload[string(m.Payload)]++
		}
		for _, id := range ids {
			if c := perPayload[string(dls[id].Payload)]; c != 1 {
				t.Errorf("id %d was replayed %d times, want once", id, c)
			}
		}
		if got := segmentFileIDs(t, root); len(got) != 2*n {
			t.Errorf("segment.log holds %d messages, want %d", len(got), 2*n)
		}
		if len(won) > 0 {
			if next := nextID(t, qa); next != won[len(won)-1].ID+1 {
				t.Errorf("NextID = %d, want %d", next, won[len(won)-1].ID+1)
			}
		}
		marks := fileMarks(t, root)
		if len(marks) != n {
			t.Errorf("dlq.log.acked holds %d marks, want %d: %+v", len(marks), n, marks)
		}
		for _, m := range marks {
			if diff := cmp.Diff(wantMarks[m.ID], m); diff != "" {
				t.Errorf("the mark of %d (-want +got):\n%s", m.ID, diff)
			}
		}
	})
}

// ---- a replay whose mark is not written ----

// When the mark cannot be written after the append, Replay returns the
// appended message and an error wrapping ErrNotMarked: the message is in
// the log and the entry still looks pending (as ErrNotMarked says).
func TestReplayNotMarked(t *testing.T) {
	cases := []struct {
		name          string
		writes, syncs int
		torn          bool
	}{
		{name: "the write of dlq.log.acked fails", writes: 1},
		{name: "the write of dlq.log.acked is torn", writes: 1, torn: true},
		{name: "the fdatasync of dlq.log.acked fails", syncs: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			faults := &ackedFaultFS{}
			root, clk := t.TempDir(), clocktest.New(wt0)
			q := openQ(t, root, clk, faults)
			orig := put(t, q, `{"orderId":"N-1"}`)
			other := put(t, q, `{"orderId":"N-2"}`)
			addDeadLetter(t, q, orig.ID, `{"orderId":"N-1"}`)
			addDeadLetter(t, q, other.ID, `{"orderId":"N-2"}`)
			// an earlier mark: dlq.log.acked exists and has a frame to keep
			if err := q.Mark(other.ID, queue.MarkDiscarded); err != nil {
				t.Fatal(err)
			}
			ackedBefore, err := os.ReadFile(queueFile(root, "dlq.log.acked"))
			if err != nil {
				t.Fatal(err)
			}
			next, end := nextID(t, q), fileSize(t, queueFile(root, "segment.log"))

			faults.arm(c.writes, c.syncs, c.torn)
			msg, err := q.Replay(orig.ID, "replay", "cid-replay")
			if faults.firedCount() != 1 {
				t.Fatalf("the fault fired %d times, want once", faults.firedCount())
			}
			if !errors.Is(err, queue.ErrNotMarked) {
				t.Fatalf("Replay = %+v, %v; want an error wrapping ErrNotMarked", msg, err)
			}
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("Replay's error %v does not wrap the cause (EIO)", err)
			}
			// nexus dlq prints it as it is: it must say what to do
			if !strings.Contains(err.Error(), "still listed: discard rather than replay again") {
				t.Errorf("Replay's error %q does not say the entry is still listed and is to be discarded", err)
			}
			if errors.Is(err, queue.ErrNotPending) || errors.Is(err, queue.ErrPoisoned) {
				t.Errorf("Replay's error %v wraps ErrNotPending or ErrPoisoned", err)
			}
			want := queue.Message{ID: next, Offset: end, EnqueuedAt: wt0, Source: "replay",
				CorrelationID: "cid-replay", Payload: []byte(`{"orderId":"N-1"}`)}
			if diff := cmp.Diff(want, msg); diff != "" {
				t.Errorf("Replay returned (-want +got):\n%s", diff)
			}

			// the message is in the log
			if diff := cmp.Diff([]queue.Message{orig, other, want}, logMessages(t, q)); diff != "" {
				t.Errorf("the log (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]uint64{orig.ID, other.ID, next}, segmentFileIDs(t, root)); diff != "" {
				t.Errorf("the ids in segment.log (-want +got):\n%s", diff)
			}
			// the entry is still pending: no mark was left in the file
			ackedAfter, err := os.ReadFile(queueFile(root, "dlq.log.acked"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ackedBefore, ackedAfter); diff != "" {
				t.Errorf("dlq.log.acked changed although Replay reported ErrNotMarked (-before +after):\n%s\nits marks now: %+v",
					diff, fileMarks(t, root))
			}
			if _, err := q.DeadLetter(orig.ID); err != nil {
				t.Errorf("DeadLetter(%d) after ErrNotMarked = %v, want the entry still pending", orig.ID, err)
			}
			if diff := cmp.Diff([]uint64{orig.ID}, pendingIDs(t, q)); diff != "" {
				t.Errorf("pending dead letters on the handle (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]uint64{orig.ID}, readPendingIDs(t, root, wTenant, wFlow)); diff != "" {
				t.Errorf("pending dead letters read from the files (-want +got):\n%s", diff)
			}

			// the segment was not poisoned, and the operator can record
			// the replay that happened instead of replaying again
			put(t, q, `{"orderId":"N-3"}`)
			if err := q.MarkReplayed(orig.ID, msg.ID); err != nil {
				t.Errorf("MarkReplayed after ErrNotMarked: %v", err)
			}
			if got := pendingIDs(t, q); len(got) != 0 {
				t.Errorf("pending after MarkReplayed: %v", got)
			}
		})
	}
}

// ---- DeadLetterCount, DeadLetter, DeadLetterPage ----

// dlPayload is a payload of exactly size bytes, distinct for each id and
// at each position, so that a cut from the wrong end shows.
func dlPayload(id uint64, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", id)
	for i := 0; b.Len() < size; i++ {
		b.WriteByte('a' + byte(i%26))
	}
	return b.String()[:size]
}

func TestDeadLetterPage(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	// dead-lettered out of id order: a later message can fail first
	order := []uint64{5, 2, 9, 3, 12, 7, 4}
	sizes := map[uint64]int{5: 40, 2: 4, 9: 1000, 3: 3, 12: 17, 7: 9, 4: 5}
	dls := map[uint64]queue.DeadLetter{}
	for _, id := range order {
		dls[id] = addDeadLetter(t, q, id, dlPayload(id, sizes[id]))
	}
	if err := q.Mark(7, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(order, dlqFileIDs(t, root)); diff != "" {
		t.Fatalf("dlq.log is not in the order of the failures (-want +got):\n%s", diff)
	}
	pending := []uint64{2, 3, 4, 5, 9, 12}

	// entries are the page entries of ids with payloads cut to maxPayload
	entries := func(maxPayload int, ids ...uint64) []queue.PageEntry {
		var out []queue.PageEntry
		for _, id := range ids {
			d := dls[id]
			e := queue.PageEntry{DeadLetter: d, PayloadSize: len(d.Payload)}
			e.Payload = d.Payload[:min(len(d.Payload), maxPayload)]
			out = append(out, e)
		}
		return out
	}
	const whole = 1 << 20
	cases := []struct {
		name              string
		after             uint64
		limit, maxPayload int
		want              queue.DeadLetterPage
	}{
		{"the first page", 0, 3, whole, queue.DeadLetterPage{Entries: entries(whole, 2, 3, 4), Total: 6, More: true, Next: 4, Last: 4}},
		{"the second page skips the discarded 7", 4, 3, whole, queue.DeadLetterPage{Entries: entries(whole, 5, 9, 12), Total: 6, HasPrev: true, Prev: 0, Last: 4}},
		{"after an id that is not pending", 6, 10, whole, queue.DeadLetterPage{Entries: entries(whole, 9, 12), Total: 6, HasPrev: true}},
		{"one entry, more after it", 5, 1, whole, queue.DeadLetterPage{Entries: entries(whole, 9), Total: 6, More: true, Next: 9, HasPrev: true, Prev: 4, Last: 9}},
		{"after the last", 12, 3, whole, queue.DeadLetterPage{Total: 6, HasPrev: true, Prev: 4, Last: 4}},
		{"after beyond every id", 1000, 3, whole, queue.DeadLetterPage{Total: 6, HasPrev: true, Prev: 4, Last: 4}},
		{"a limit larger than all", 0, 100, whole, queue.DeadLetterPage{Entries: entries(whole, pending...), Total: 6}},
		{"a limit of exactly all", 0, 6, whole, queue.DeadLetterPage{Entries: entries(whole, pending...), Total: 6}},
		{"a limit of one fewer than all", 0, 5, whole, queue.DeadLetterPage{Entries: entries(whole, 2, 3, 4, 5, 9), Total: 6, More: true, Next: 9, Last: 9}},
		{"after the largest id there can be", math.MaxUint64, 2, whole, queue.DeadLetterPage{Total: 6, HasPrev: true, Prev: 5, Last: 5}},
		// the previous page is the limit before this page's first, off
		// the grid of pages counted from the first
		{"the page before, off the grid", 3, 2, whole, queue.DeadLetterPage{Entries: entries(whole, 4, 5), Total: 6, More: true, Next: 5, HasPrev: true, Prev: 0, Last: 5}},
		{"payloads cut to 4 bytes", 0, 10, 4, queue.DeadLetterPage{Entries: entries(4, pending...), Total: 6}},
		{"payloads cut to 999 bytes", 0, 10, 999, queue.DeadLetterPage{Entries: entries(999, pending...), Total: 6}},
		{"maxPayload the size of the largest", 0, 10, 1000, queue.DeadLetterPage{Entries: entries(1000, pending...), Total: 6}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := tree(t, root)
			got, err := q.DeadLetterPage(c.after, c.limit, c.maxPayload)
			if err != nil {
				t.Fatalf("DeadLetterPage(%d, %d, %d): %v", c.after, c.limit, c.maxPayload, err)
			}
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DeadLetterPage(%d, %d, %d) (-want +got):\n%s", c.after, c.limit, c.maxPayload, diff)
			}
			for _, e := range got.Entries {
				if len(e.Payload) > c.maxPayload {
					t.Errorf("entry %d: a payload of %d bytes, over maxPayload %d", e.ID, len(e.Payload), c.maxPayload)
				}
			}
			if diff := cmp.Diff(before, tree(t, root)); diff != "" {
				t.Errorf("DeadLetterPage wrote files (-before +after):\n%s", diff)
			}
		})
	}
	// the ids alone, sorted, the discarded 7 left out
	if ids, err := q.PendingIDs(); err != nil || !slices.Equal(ids, pending) {
		t.Errorf("PendingIDs() = %v, %v; want %v", ids, err, pending)
	}

	t.Run("walking the pages", func(t *testing.T) {
		var seen []uint64
		after := uint64(0)
		for range 10 {
			page, err := q.DeadLetterPage(after, 2, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Entries {
				seen = append(seen, e.ID)
			}
			if !page.More {
				break
			}
			after = page.Entries[len(page.Entries)-1].ID
		}
		if diff := cmp.Diff(pending, seen); diff != "" {
			t.Errorf("the ids of the pages, one after the other (-want +got):\n%s", diff)
		}
	})

	t.Run("count and one entry", func(t *testing.T) {
		if n, err := q.DeadLetterCount(); err != nil || n != 6 {
			t.Errorf("DeadLetterCount = %d, %v; want 6", n, err)
		}
		for _, id := range pending {
			got, err := q.DeadLetter(id)
			if err != nil {
				t.Errorf("DeadLetter(%d): %v", id, err)
				continue
			}
			if diff := cmp.Diff(dls[id], got); diff != "" {
				t.Errorf("DeadLetter(%d) (-want +got):\n%s", id, diff)
			}
		}
		for _, id := range []uint64{7, 1, 6, 13, 0} {
			if got, err := q.DeadLetter(id); !errors.Is(err, queue.ErrNotPending) {
				t.Errorf("DeadLetter(%d) = %+v, %v; want ErrNotPending", id, got, err)
			}
		}
		if diff := cmp.Diff(pending, pendingIDs(t, q)); diff != "" {
			t.Errorf("DeadLetters (-want +got):\n%s", diff)
		}
	})

	t.Run("an empty queue", func(t *testing.T) {
		root := t.TempDir()
		q := openQ(t, root, clk, nil)
		page, err := q.DeadLetterPage(0, 10, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(queue.DeadLetterPage{}, page, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("DeadLetterPage of an empty queue (-want +got):\n%s", diff)
		}
		if n, err := q.DeadLetterCount(); err != nil || n != 0 {
			t.Errorf("DeadLetterCount = %d, %v; want 0", n, err)
		}
	})
}

// closeHookFS is the OS, calling hook once, as the first dlq.log opened
// through it once armed is closed: at the end of a read of it.
type closeHookFS struct {
	queue.OS
	armed atomic.Bool
	once  sync.Once
	hook  func()
}

func (h *closeHookFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := h.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "dlq.log" {
		return f, err
	}
	return &closeHookFile{File: f, fs: h}, nil
}

type closeHookFile struct {
	queue.File
	fs *closeHookFS
}

func (f *closeHookFile) Close() error {
	err := f.File.Close()
	if f.fs.armed.Load() {
		f.fs.once.Do(f.fs.hook)
	}
	return err
}

// A page is one read of the dead-letter files: a dead letter discarded
// by another process once dlq.log has been read is still on the page,
// which is full, as the files were when read. A page was two reads, the
// ids then the entries, and a discard between them left a page short of
// its limit (1 and 3 of a limit of 3, with more after).
func TestDeadLetterPageOneRead(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	other := openQ(t, root, clk, nil) // another process's handle
	dls := map[uint64]queue.DeadLetter{}
	for id := uint64(1); id <= 5; id++ {
		dls[id] = addDeadLetter(t, other, id, dlPayload(id, 10))
	}
	hook := &closeHookFS{hook: func() {
		if err := other.Mark(2, queue.MarkDiscarded); err != nil {
			t.Errorf("Mark(2): %v", err)
		}
	}}
	q := openQ(t, root, clk, hook) // Open reads dlq.log too
	hook.armed.Store(true)
	page, err := q.DeadLetterPage(0, 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	var entries []queue.PageEntry
	for _, id := range []uint64{1, 2, 3} {
		entries = append(entries, queue.PageEntry{DeadLetter: dls[id], PayloadSize: 10})
	}
	want := queue.DeadLetterPage{Entries: entries, Total: 5, More: true, Next: 3, Last: 3}
	if diff := cmp.Diff(want, page, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("DeadLetterPage(0, 3, 100) with 2 discarded once dlq.log was read (-want +got):\n%s", diff)
	}
	if ids := pendingIDs(t, q); !slices.Equal(ids, []uint64{1, 3, 4, 5}) {
		t.Errorf("pending after the discard: %v, want [1 3 4 5]", ids)
	}
}

// A page of a large dlq.log keeps only the page's cut payloads: the heap
// still in use after the call (after a GC) is far below the file's size,
// and below what whole payloads, or cut ones still holding their whole
// buffers, would keep.
func TestDeadLetterPageMemory(t *testing.T) {
	const (
		count = 50
		size  = 256 << 10
	)
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	for id := uint64(count); id >= 1; id-- { // the page's entries come last in the file
		addDeadLetter(t, q, id, dlPayload(id, size))
	}
	if got := fileSize(t, queueFile(root, "dlq.log")); got < count*size {
		t.Fatalf("dlq.log is %d bytes, want at least %d", got, count*size)
	}
	for _, limit := range []int{2, 20} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			page, err := q.DeadLetterPage(0, limit, 100)
			runtime.GC()
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("held %d bytes after the call (allocated %d during it); dlq.log is %d bytes",
				held, after.TotalAlloc-before.TotalAlloc, count*size)
			// 20 whole payloads would be 5 MiB; 2 would be 512 KiB
			if bound := int64(256 << 10); held > bound {
				t.Errorf("DeadLetterPage(0, %d, 100) left %d bytes in use, want under %d", limit, held, bound)
			}
			if page.Total != count || !page.More || len(page.Entries) != limit {
				t.Fatalf("page: Total %d, More %v, %d entries; want %d, true, %d", page.Total, page.More, len(page.Entries), count, limit)
			}
			for i, e := range page.Entries {
				id := uint64(i + 1)
				if e.ID != id || e.PayloadSize != size || string(e.Payload) != dlPayload(id, size)[:100] {
					t.Errorf("entry %d: id %d, PayloadSize %d, payload %q", i, e.ID, e.PayloadSize, e.Payload)
				}
				if cap(e.Payload) > 4<<10 {
					t.Errorf("entry %d: its payload has a capacity of %d bytes: it holds the whole record", i, cap(e.Payload))
				}
			}
			runtime.KeepAlive(page)
		})
	}
}

// ---- Peek ----

// Peek reads a queue's files without creating anything: a queue that does
// not exist reads as empty; a bad name is the name rule's error.
func TestPeekCreatesNothing(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, root string)
	}{
		{name: "no root"},
		{name: "no tenant folder", setup: func(t *testing.T, root string) {
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "no flow folder", setup: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, wTenant), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "an empty queue folder", setup: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, wTenant, wFlow), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a queue with messages and no dead letter", setup: func(t *testing.T, root string) {
			q := openQ(t, root, clocktest.New(wt0), nil)
			put(t, q, "one")
		}},
		{name: "marks without dlq.log", setup: func(t *testing.T, root string) {
			q := openQ(t, root, clocktest.New(wt0), nil)
			addDeadLetter(t, q, 3, "three")
			if err := q.Mark(3, queue.MarkDiscarded); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(queueFile(root, "dlq.log")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "queues")
			if c.setup != nil {
				c.setup(t, root)
			}
			before := tree(t, base)
			q, err := queue.Peek(root, wTenant, wFlow, nil)
			if err != nil {
				t.Fatalf("Peek: %v", err)
			}
			if n, err := q.DeadLetterCount(); err != nil || n != 0 {
				t.Errorf("DeadLetterCount = %d, %v; want 0", n, err)
			}
			page, err := q.DeadLetterPage(0, 10, 100)
			if err != nil {
				t.Errorf("DeadLetterPage: %v", err)
			}
			if diff := cmp.Diff(queue.DeadLetterPage{}, page, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DeadLetterPage (-want +got):\n%s", diff)
			}
			if _, err := q.DeadLetter(1); !errors.Is(err, queue.ErrNotPending) {
				t.Errorf("DeadLetter(1) = %v, want ErrNotPending", err)
			}
			if dl, damage, err := q.DeadLetters(); err != nil || len(dl) != 0 || len(damage) != 0 {
				t.Errorf("DeadLetters = %v, %v, %v; want none", dl, damage, err)
			}
			if rs, err := q.Retries(); err != nil || len(rs) != 0 {
				t.Errorf("Retries = %v, %v; want none", rs, err)
			}
			if diff := cmp.Diff(before, tree(t, base)); diff != "" {
				t.Errorf("Peek and its reads changed the files (-before +after):\n%s", diff)
			}
		})
	}

	t.Run("a queue open elsewhere", func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "queues")
		open := openQ(t, root, clocktest.New(wt0), nil)
		d := addDeadLetter(t, open, 4, "four")
		addDeadLetter(t, open, 2, "two")
		if err := open.Mark(2, queue.MarkReplayed); err != nil {
			t.Fatal(err)
		}
		before := tree(t, base)
		q, err := queue.Peek(root, wTenant, wFlow, nil)
		if err != nil {
			t.Fatal(err)
		}
		page, err := q.DeadLetterPage(0, 10, 2)
		if err != nil {
			t.Fatal(err)
		}
		cut := d
		cut.Payload = []byte("fo")
		want := queue.DeadLetterPage{Entries: []queue.PageEntry{{DeadLetter: cut, PayloadSize: 4}}, Total: 1}
		if diff := cmp.Diff(want, page); diff != "" {
			t.Errorf("DeadLetterPage through Peek (-want +got):\n%s", diff)
		}
		if n, err := q.DeadLetterCount(); err != nil || n != 1 {
			t.Errorf("DeadLetterCount = %d, %v; want 1", n, err)
		}
		if got, err := q.DeadLetter(4); err != nil || string(got.Payload) != "four" {
			t.Errorf("DeadLetter(4) = %+v, %v", got, err)
		}
		if _, err := q.DeadLetter(2); !errors.Is(err, queue.ErrNotPending) {
			t.Errorf("DeadLetter(2), replayed = %v, want ErrNotPending", err)
		}
		if diff := cmp.Diff(before, tree(t, base)); diff != "" {
			t.Errorf("Peek changed the files (-before +after):\n%s", diff)
		}
	})

	t.Run("bad names", func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "queues")
		for _, n := range [][2]string{{"../x", wFlow}, {wTenant, "A"}, {wTenant, "a.b"}, {"", wFlow}, {wTenant, ""}, {wTenant, "../../etc"}} {
			q, err := queue.Peek(root, n[0], n[1], nil)
			var ne *naming.Error
			if !errors.As(err, &ne) {
				t.Errorf("Peek(%q, %q) = %v; want the name rule's error", n[0], n[1], err)
			}
			if q != nil {
				t.Errorf("Peek(%q, %q) returned a handle with its error", n[0], n[1])
			}
		}
		if diff := cmp.Diff(map[string]string{"./": ""}, tree(t, base)); diff != "" {
			t.Errorf("Peek with bad names created files (-want +got):\n%s", diff)
		}
	})
}

// ---- Manager.Discard ----

// Discard of a dead letter of a queue the manager has not opened marks it
// and nothing else: no worker starts (none of the budget is taken, nothing
// waits on the clock), the waiting messages stay waiting and unprocessed.
// With the queue open in the manager, Discard marks through its handle
// (opening none of its own) and the entry leaves at once.
func TestManagerDiscardLeavesWaitingMessages(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	m, root := newManager(t, clk, rec.handler("m", ack), 1, hooks)
	q := openQ(t, root, clk, nil) // another handle, as nexus dlq would

	// an earlier message failed for good and the log was drained since;
	// three messages wait now, none processed
	early := put(t, q, `{"orderId":"E-1"}`)
	saveCheckpoint(t, q, fileSize(t, queueFile(root, "segment.log")))
	if err := q.Drain(); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	addDeadLetter(t, q, early.ID, `{"orderId":"E-1"}`)
	var waiting []queue.Message
	for i := range 3 {
		waiting = append(waiting, put(t, q, fmt.Sprintf(`{"orderId":"W-%d"}`, i)))
	}
	if c, err := queue.ReadCounts(root, wTenant, wFlow, nil); err != nil || c != (queue.Counts{Total: 3}) {
		t.Fatalf("ReadCounts before Discard = %+v, %v", c, err)
	}
	if info, ok := m.Info(wTenant, wFlow); !ok || info.Open || info.DeadLetters != 1 || info.Depth != 3 {
		t.Fatalf("Info before Discard = %+v, %v; want on disk, not open, 1 dead letter, depth 3 messages", info, ok)
	}

	var (
		mu     sync.Mutex
		opened []string
	)
	hooks.mu.Lock()
	hooks.onOpen = func(path string, flag int) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, fmt.Sprintf("%s %#x", filepath.Base(path), flag))
	}
	hooks.mu.Unlock()
	takeOpened := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := opened
		opened = nil
		return out
	}
	openedSegment := func(list []string) bool {
		return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, "segment.log") })
	}

	files := tree(t, root)
	if err := m.Discard(wTenant, wFlow, early.ID); err != nil {
		t.Fatalf("Discard(%d): %v", early.ID, err)
	}
	if list := takeOpened(); !openedSegment(list) {
		t.Errorf("Discard of a queue not open in the manager opened %v: no handle of its own", list)
	}

	// the mark, and nothing else, was written
	if diff := cmp.Diff([]fileMark{{ID: early.ID, At: wt0, Action: queue.MarkDiscarded}}, fileMarks(t, root)); diff != "" {
		t.Errorf("dlq.log.acked after Discard (-want +got):\n%s", diff)
	}
	after := tree(t, root)
	acked := filepath.Join(wTenant, wFlow, "dlq.log.acked")
	delete(files, acked)
	delete(after, acked)
	if diff := cmp.Diff(files, after); diff != "" {
		t.Errorf("Discard changed files besides dlq.log.acked (-before +after):\n%s", diff)
	}
	if got := pendingIDs(t, q); len(got) != 0 {
		t.Errorf("pending after Discard: %v", got)
	}

	// no worker: not open, none of the budget (one) taken, nothing on the
	// clock, nothing delivered however long the time goes on
	if info, ok := m.Info(wTenant, wFlow); !ok || info.Open || info.DeadLetters != 0 || info.Depth != 3 {
		t.Errorf("Info after Discard = %+v, %v; want on disk, not open, no dead letter, depth 3 messages", info, ok)
	}
	for _, info := range m.Queues() {
		if info.Open {
			t.Errorf("Queues after Discard: %s/%s is open", info.Tenant, info.Flow)
		}
	}
	if err := m.Has("acme", "other"); err != nil {
		t.Errorf("Has(acme, other) = %v: Discard took the budget's one worker", err)
	}
	clk.Advance(5 * time.Hour) // five polls
	if n := clk.Calls(); n != 0 {
		t.Errorf("%d waits on the clock after Discard: a worker started", n)
	}
	if got := rec.all(); len(got) != 0 {
		t.Errorf("deliveries after Discard = %v, want none", got)
	}
	if c, err := queue.ReadCounts(root, wTenant, wFlow, nil); err != nil || c != (queue.Counts{Total: 3}) {
		t.Errorf("ReadCounts after Discard = %+v, %v; want Total 3, Processed 0", c, err)
	}
	if diff := cmp.Diff(waiting, logMessages(t, q)); diff != "" {
		t.Errorf("the log after Discard (-want +got):\n%s", diff)
	}

	// now the manager opens the queue: its worker delivers the three
	// messages, once each, and rests
	mq, _, err := m.Queue(wTenant, wFlow)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.wait(t, 3)
	var want []delivery
	for _, w := range waiting {
		want = append(want, delivery{Worker: "m", ID: w.ID, Offset: w.Offset, Attempt: 1, At: 5 * time.Hour,
			Payload: string(w.Payload), Source: "enqueue", Tenant: wTenant, Flow: wFlow})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries once the manager opened the queue (-want +got):\n%s", diff)
	}
	clk.WaitCalls(t, 1) // at rest, housekeeping done: the next one is an hour away
	later := addDeadLetter(t, q, 77, `{"orderId":"L-77"}`)
	takeOpened()

	if err := m.Discard(wTenant, wFlow, later.ID); err != nil {
		t.Fatalf("Discard(%d) with the queue open: %v", later.ID, err)
	}
	if list := takeOpened(); openedSegment(list) {
		t.Errorf("Discard with the queue open in the manager opened %v: a handle of its own", list)
	}
	if _, err := mq.DeadLetter(later.ID); !errors.Is(err, queue.ErrNotPending) {
		t.Errorf("DeadLetter(%d) through the manager's queue after Discard = %v, want ErrNotPending", later.ID, err)
	}
	if info, ok := m.Info(wTenant, wFlow); !ok || !info.Open || info.DeadLetters != 0 {
		t.Errorf("Info after the second Discard = %+v, %v; want open, no dead letter", info, ok)
	}
	applied, _, err := mq.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]queue.Marked{{ID: later.ID, Action: queue.MarkDiscarded, At: wt0.Add(5 * time.Hour)}}, applied); diff != "" {
		t.Errorf("the marks through the manager's queue (-want +got):\n%s", diff)
	}
	if got := rec.all(); len(got) != 3 {
		t.Errorf("deliveries = %v, want the three messages only", got)
	}
}
