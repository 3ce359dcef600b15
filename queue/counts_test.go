package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestManagerCountsFollowTheLog: Manager.Counts, which reads only what came
// after its last count of a queue, says what a count of the whole log says
// (ReadCounts) through appends, a checkpoint moving on, a drain, and a log
// grown again past where the last count ended, counted or not in between
// (the drain is told by the log's first message, whose id changes).
func TestManagerCountsFollowTheLog(t *testing.T) {
	mfs, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: mfs})
	m := NewManager(ManagerConfig{Root: root, FS: mfs})
	var msgs []Message // since the last drain
	drains := 0
	appendN := func(n int) func() error {
		return func() error {
			for range n {
				// (frames of another size after each drain: a count going
				// on from an old log's offsets would not meet the frames)
				msg, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(fmt.Sprintf(`{"n":%d,"drains":"%s"}`, len(msgs), strings.Repeat("x", 50*drains)))})
				if err != nil {
					return err
				}
				msgs = append(msgs, msg)
			}
			return nil
		}
	}
	processed := func(n int) func() error { // the first n processed
		return func() error {
			_, after, err := q.Read(msgs[n-1].Offset)
			if err != nil {
				return err
			}
			return q.SaveCheckpoint(after)
		}
	}
	drain := func() error {
		msgs = nil
		drains++
		return q.Drain()
	}
	steps := []struct {
		what    string
		do      func() error
		counted bool // counted after this step
		want    Counts
	}{
		{"an empty log", func() error { return nil }, true, Counts{}},
		{"5 appended", appendN(5), true, Counts{Total: 5}},
		{"2 processed", processed(2), true, Counts{Total: 5, Processed: 2}},
		{"3 more appended", appendN(3), true, Counts{Total: 8, Processed: 2}},
		{"all processed", processed(8), true, Counts{Total: 8, Processed: 8}},
		{"drained", drain, true, Counts{}},
		{"12 appended (past the last count's end)", appendN(12), true, Counts{Total: 12}},
		{"4 processed", processed(4), true, Counts{Total: 12, Processed: 4}},
		{"all processed, not counted", processed(12), false, Counts{}},
		{"drained, not counted", drain, false, Counts{}},
		{"20 appended after an uncounted drain", appendN(20), true, Counts{Total: 20}},
		{"7 processed", processed(7), true, Counts{Total: 20, Processed: 7}},
		{"all processed", processed(20), true, Counts{Total: 20, Processed: 20}},
		// the log and its checkpoint both past where the last count ended
		{"drained, 30 appended and 25 processed, counted only then", func() error {
			if err := drain(); err != nil {
				return err
			}
			if err := appendN(30)(); err != nil {
				return err
			}
			return processed(25)()
		}, true, Counts{Total: 30, Processed: 25}},
		{"all processed and drained", func() error {
			if err := processed(30)(); err != nil {
				return err
			}
			return drain()
		}, true, Counts{}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if !s.counted {
			continue
		}
		got, err := m.Counts(testTenant, testFlow)
		if err != nil || got != s.want {
			t.Errorf("%s: Manager.Counts = %+v, %v; want %+v", s.what, got, err, s.want)
		}
		if whole, err := ReadCounts(root, testTenant, testFlow, mfs); err != nil || whole != s.want {
			t.Errorf("%s: ReadCounts = %+v, %v; want %+v", s.what, whole, err, s.want)
		}
	}
}

// TestManagerCountsAfterACutBatch: a count made while a batch is written
// but before its fdatasync fails counts that batch; the batch is cut from
// the log, the queue reopened, and smaller frames written in its place.
// The next count starts over (the last frame it counted has changed)
// rather than going on from inside a new frame, which kept the counts
// wrong until the next drain (more processed than there are messages).
func TestManagerCountsAfterACutBatch(t *testing.T) {
	mfs, root := memQueueRoot(t)
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)
	m := NewManager(ManagerConfig{Root: root, FS: mfs})
	var countNow atomic.Bool
	var during Counts
	mfs.before = func(op, name string) {
		if op == opSync && name == segPath && countNow.CompareAndSwap(true, false) {
			during, _ = m.Counts(testTenant, testFlow) // a view of the UI at that moment
		}
	}
	q, _, err := Open(root, testTenant, testFlow, Options{FS: mfs})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`"a"`)}); err != nil {
			t.Fatal(err)
		}
	}
	countNow.Store(true)
	mfs.Fail(opSync, segmentFile, 1, syscall.EIO, false)
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`"` + strings.Repeat("b", 300) + `"`)}); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("setup: the append whose fdatasync fails: %v, want ErrPoisoned", err)
	}
	q.Close()
	if during != (Counts{Total: 4}) {
		t.Fatalf("setup: counted %+v while the batch was written, want the 4 messages then in the log", during)
	}
	q2, _ := openQueue(t, root, Options{FS: mfs})
	for range 12 {
		if _, err := q2.Append(NewMessage{Source: "enqueue", Payload: []byte(`"c"`)}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := m.Counts(testTenant, testFlow); err != nil || got != (Counts{Total: 15}) {
		t.Errorf("Manager.Counts = %+v, %v; want the 15 messages of the log", got, err)
	}
	size, err := q2.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Counts(testTenant, testFlow); err != nil || got != (Counts{Total: 15, Processed: 15}) {
		t.Errorf("all processed: Manager.Counts = %+v, %v; want 15 of 15", got, err)
	}
}

// countedLog is a queue of 2,000 messages of 1 KiB (2 MiB: 32 windows of
// the scan's read-ahead) on a memory file system, a Manager over it, and
// the count of reads of its segment.log. The frames are written to
// segment.log at once, before the queue opens, as 2,000 appends would
// have left them (ids 1 to 2,000): an append each, each with its
// fdatasync (a copy of the whole file on a memFS), took most of the
// tests' time.
func countedLog(t *testing.T) (q *Queue, m *Manager, mfs *memFS, segPath string, reads *atomic.Int64) {
	t.Helper()
	mfs, root := memQueueRoot(t)
	segPath = filepath.Join(root, testTenant, testFlow, segmentFile)
	payload := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	var log []byte
	for id := uint64(1); id <= 2000; id++ {
		msg := Message{ID: id, EnqueuedAt: epoch, Source: "enqueue", Payload: payload}
		log = appendFrame(log, appendMessageRecord(nil, &msg))
	}
	if err := mfs.MkdirAll(filepath.Dir(segPath), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := mfs.OpenFile(segPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(log, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	reads = new(atomic.Int64)
	mfs.before = func(op, name string) {
		if op == opRead && name == segPath {
			reads.Add(1)
		}
	}
	q, damage := openQueue(t, root, Options{FS: mfs})
	if len(damage) > 0 {
		t.Fatalf("setup: the log written has damage: %v", damage)
	}
	m = NewManager(ManagerConfig{Root: root, FS: mfs})
	return q, m, mfs, segPath, reads
}

// countAfterOneMore counts q's log, appends one message and counts it
// again, and fails the test when the second count read segment.log more
// than 10 times: the new frame (a window), the last frame counted before
// it, and the first one twice (to tell a drain, two reads each) take 6,
// where a whole reading takes 32 or more.
func countAfterOneMore(t *testing.T, q *Queue, m *Manager, reads *atomic.Int64, first Counts) {
	t.Helper()
	if c, err := m.Counts(testTenant, testFlow); err != nil || c != first {
		t.Fatalf("the first count: %+v, %v; want %+v", c, err, first)
	}
	if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte("one more")}); err != nil {
		t.Fatal(err)
	}
	reads.Store(0)
	if c, err := m.Counts(testTenant, testFlow); err != nil || c != (Counts{Total: first.Total + 1}) {
		t.Fatalf("the second count: %+v, %v; want %d messages", c, err, first.Total+1)
	}
	if n := reads.Load(); n > 10 {
		t.Errorf("the second count read segment.log %d times after one append to 2000 messages, want at most 10", n)
	}
}

// TestManagerCountsReadOnlyWhatIsNew: a second count of a queue reads the
// frames appended since the first, not the whole log again.
func TestManagerCountsReadOnlyWhatIsNew(t *testing.T) {
	q, m, _, _, reads := countedLog(t)
	countAfterOneMore(t, q, m, reads, Counts{Total: 2000})
}

// TestManagerCountsAfterADamagedFirstFrame: a log whose first frame is
// damaged (its other frames are read past it) is told from another log by
// its first bytes, so a count after an append reads only what is new, as
// for any log; it was read whole at every count (every scrape of
// /metrics), for want of a first message's id.
func TestManagerCountsAfterADamagedFirstFrame(t *testing.T) {
	q, m, mfs, segPath, reads := countedLog(t)
	f, err := mfs.OpenFile(segPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a byte of the first message's payload: its checksum fails
	if _, err := f.WriteAt([]byte("y"), headerSize+40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	countAfterOneMore(t, q, m, reads, Counts{Total: 1999})
}
