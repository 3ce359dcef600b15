package queue

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// appendLarge appends a small message, one with a payload of largeRecord
// bytes and another small one to q's log, and saves the checkpoint after
// the large one; it returns the three.
func appendLarge(t *testing.T, q *Queue) []Message {
	t.Helper()
	var msgs []Message
	for i, p := range [][]byte{[]byte(`{"n":1}`), bytes.Repeat([]byte("x"), largeRecord), []byte(`{"n":3}`)} {
		m, err := q.Append(NewMessage{Source: "enqueue", CorrelationID: "c" + itoa(int64(i)), Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	_, after, err := q.Read(msgs[1].Offset)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(after); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestCountsReadLargeMessagesStreaming: a count of a queue's log
// (ReadCounts, and Manager.Counts: the Queues page, /metrics) checks each
// frame's CRC through a small buffer: a log holding a message of 8 MiB is
// counted with less than 1 MiB allocated, and counts as before. Each whole
// record was read into memory just to count it, and the last one copied.
func TestCountsReadLargeMessagesStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	appendLarge(t, q)
	q.Close()
	want := Counts{Total: 3, Processed: 2}
	var got Counts
	var err error
	n := allocated(func() { got, err = ReadCounts(root, testTenant, testFlow, nil) })
	if err != nil || got != want {
		t.Fatalf("ReadCounts = %+v, %v; want %+v", got, err, want)
	}
	wantStreamed(t, "ReadCounts", "a message", n)
	m := NewManager(ManagerConfig{Root: root})
	n = allocated(func() { got, err = m.Counts(testTenant, testFlow) })
	if err != nil || got != want {
		t.Fatalf("Manager.Counts = %+v, %v; want %+v", got, err, want)
	}
	wantStreamed(t, "Manager.Counts", "a message", n)
	// counted again: only the header of the last frame counted is read
	if got, err = m.Counts(testTenant, testFlow); err != nil || got != want {
		t.Fatalf("Manager.Counts again = %+v, %v; want %+v", got, err, want)
	}
}

// TestAppendedReadsLargeMessagesStreaming: Appended (a standby cron
// scheduler's check of a tick) reads the log's first message id and each
// message's correlation ID checking each frame's CRC through a small
// buffer: a log whose first message is of 8 MiB is read with less than
// 1 MiB allocated, and says what it said. The first record was read whole
// for its id (twice), and each record whole for its correlation ID.
func TestAppendedReadsLargeMessagesStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	var msgs []Message
	for i, p := range [][]byte{bytes.Repeat([]byte("x"), largeRecord), []byte(`{"n":2}`)} {
		m, err := q.Append(NewMessage{Source: "cron", CorrelationID: "c" + itoa(int64(i)), Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	q.Close()
	m := NewManager(ManagerConfig{Root: root})
	for _, tc := range []struct {
		from uint64
		cid  string
		want Presence
	}{
		{msgs[0].ID, "c1", Present},
		{msgs[0].ID, "c0", Present},
		{msgs[1].ID, "c0", Absent}, // before from: not it
		{msgs[0].ID, "none", Absent},
		{msgs[1].ID + 1, "c1", Absent},
	} {
		var got Presence
		var err error
		n := allocated(func() { got, err = m.Appended(testTenant, testFlow, tc.from, tc.cid) })
		if err != nil || got != tc.want {
			t.Errorf("Appended(%d, %q) = %v, %v; want %v", tc.from, tc.cid, got, err, tc.want)
		}
		if n > streamLimit {
			t.Errorf("Appended(%d, %q) allocated %d bytes (%.1f MiB) for a message of %d MiB, want at most %d", tc.from, tc.cid, n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
		}
	}
}

// TestMarkPendingReadsLargeDeadLettersStreaming: MarkPending (discard
// all) reads the pending dead letters' ids checking each frame's CRC
// through a small buffer: a dlq.log holding a dead letter of 8 MiB is
// marked with less than 1 MiB allocated, the same ids as before. Each
// whole record was read into memory for its id.
func TestMarkPendingReadsLargeDeadLettersStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	big := deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	for _, d := range []DeadLetter{deadLetter(3), big, deadLetter(8), deadLetter(9)} {
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		upTo  uint64
		limit int
		want  []uint64
	}{
		{8, 1, []uint64{3}},
		{8, 100, []uint64{7, 8}},
		{8, 100, nil},
		{^uint64(0), 100, []uint64{9}},
	} {
		var got []uint64
		var err error
		n := allocated(func() { got, err = q.MarkPending(tc.upTo, tc.limit, MarkDiscarded) })
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("MarkPending(%d, %d) = %v, %v; want %v", tc.upTo, tc.limit, got, err, tc.want)
		}
		if n > streamLimit {
			t.Errorf("MarkPending(%d, %d) allocated %d bytes (%.1f MiB) for a dead letter of %d MiB, want at most %d", tc.upTo, tc.limit, n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
		}
	}
}

// TestCompactDLQReadsLargeMarkFramesStreaming: CompactDLQ's second read
// of dlq.log.acked (the marks made since the first, kept) checks each
// frame's CRC through a small buffer: a frame of 8 MiB there that is no
// mark is passed over with less than 1 MiB allocated, and the marks apply
// as before. It read each whole record into memory to tell it is no mark.
func TestCompactDLQReadsLargeMarkFramesStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	for _, id := range []uint64{3, 4, 5} {
		if err := q.MoveToDLQ(deadLetter(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(q.path(ackedFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(appendFrame(nil, bytes.Repeat([]byte{kindMark}, largeRecord))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := q.Mark(4, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	var applied []Marked
	var damage []Damage
	n := allocated(func() { applied, damage, err = q.CompactDLQ() })
	if err != nil || len(damage) != 0 {
		t.Fatalf("CompactDLQ: %v, damage %v", err, damage)
	}
	if got := []uint64{applied[0].ID, applied[1].ID}; len(applied) != 2 || !slices.Equal(got, []uint64{3, 4}) {
		t.Errorf("CompactDLQ applied %+v, want the marks of 3 and 4", applied)
	}
	if n > streamLimit {
		t.Errorf("CompactDLQ allocated %d bytes (%.1f MiB) beside a frame of %d MiB, want at most %d", n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
	}
	dls, _, err := q.DeadLetters()
	if err != nil || len(dls) != 1 || dls[0].ID != 5 {
		t.Errorf("pending after CompactDLQ: %+v, %v; want 5 only", dls, err)
	}
}

// TestLostCounterReadsLargeDeadLettersStreaming: a queue whose id counter
// was lost is opened reading the ids its dead letters and marks keep
// checking each frame's CRC through a small buffer: a dlq.log holding a
// dead letter of 8 MiB, and a frame of 8 MiB in dlq.log.acked that is no
// mark, are read with less than 1 MiB allocated, and the counter is
// raised past the same ids. Each whole record was read into memory for
// its id.
func TestLostCounterReadsLargeDeadLettersStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	big := deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	for _, d := range []DeadLetter{deadLetter(3), big} {
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	// a replay's mark (its message's id, past the dead letters'), then a
	// frame that verifies but is no mark (its "id" past them all)
	frames := appendFrame(nil, appendMarkRecord(nil, mark{id: 3, at: epoch, action: MarkReplayed, replayID: 12}))
	frames = appendFrame(frames, bytes.Repeat([]byte{kindMark}, largeRecord))
	if err := q.appendDurable(ackedFile, frames); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := os.Remove(filepath.Join(root, testTenant, testFlow, seqFile)); err != nil {
		t.Fatal(err)
	}
	var next uint64
	var err error
	n := allocated(func() {
		q, _, err = Open(root, testTenant, testFlow, Options{})
		if err != nil {
			return
		}
		next, err = q.NextID()
		q.Close()
	})
	if err != nil || next != 13 {
		t.Fatalf("NextID after the counter was lost = %d, %v; want 13", next, err)
	}
	if n > streamLimit {
		t.Errorf("Open and NextID allocated %d bytes (%.1f MiB) beside records of %d MiB, want at most %d", n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
	}
}

// failingReader fails t at any read: what a reader must not need.
type failingReader struct{ t *testing.T }

func (r failingReader) ReadAt([]byte, int64) (int, error) {
	r.t.Error("a read past the head of the record")
	return 0, io.EOF
}

// TestRecordHeadHoldsDeadLetterFields: the head a scan keeps of a record
// holds a dead letter's fields before its payload whole, its last error
// at MaxLastError: it is decoded without another read. A head of 4 KiB
// left the last 33 bytes of such an error out, read again from the file.
func TestRecordHeadHoldsDeadLetterFields(t *testing.T) {
	long := deadLetter(8)
	long.LastError = strings.Repeat("e", MaxLastError)
	long.Payload = bytes.Repeat([]byte("x"), 3*recordHead)
	file := appendFrame(nil, appendDeadLetterRecord(nil, &long))
	var got []DeadLetter
	if _, err := scanHeads(bytes.NewReader(file), dlqFile, 0, int64(len(file)), func(head []byte, length, off int64) error {
		rec, err := deadLetterHead(head, length, off, failingReader{t})
		if err != nil {
			return err
		}
		d, err := decodeDeadLetter(rec)
		got = append(got, d)
		return err
	}, func(d Damage) { t.Errorf("damage: %v", d) }); err != nil {
		t.Fatal(err)
	}
	long.Payload = []byte{}
	if diff := cmp.Diff([]DeadLetter{long}, got); diff != "" {
		t.Errorf("the dead letter read from its head (-want +got):\n%s", diff)
	}
}

// TestDrainMarkerResolvesStreaming: a checkpoint that is a drain marker
// (a drain stopped midway) is resolved, at a count of the log, reading
// the messages' ids checking each frame's CRC through a small buffer: a
// log holding a message of 8 MiB before the marker's id is counted with
// less than 1 MiB allocated, as before. Each whole message was read into
// memory for its id.
func TestDrainMarkerResolvesStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	msgs := appendLarge(t, q)
	if err := q.markDrain(msgs[2].ID); err != nil {
		t.Fatal(err)
	}
	q.Close()
	want := Counts{Total: 3, Processed: 2}
	var got Counts
	var err error
	n := allocated(func() { got, err = ReadCounts(root, testTenant, testFlow, nil) })
	if err != nil || got != want {
		t.Fatalf("ReadCounts = %+v, %v; want %+v", got, err, want)
	}
	wantStreamed(t, "ReadCounts", "a message", n)
}

// TestOpenReadsLargeMessagesIDsStreaming: Open's recovery reads the ids
// of the log's messages (the highest, for the id counter) checking each
// frame's CRC through a small buffer: a log holding a message of 8 MiB is
// opened with less than 1 MiB allocated, and the next id is as before.
// Each whole message was read into memory for its id.
func TestOpenReadsLargeMessagesIDsStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	msgs := appendLarge(t, q)
	q.Close()
	var next uint64
	var err error
	n := allocated(func() {
		q, _, err = Open(root, testTenant, testFlow, Options{})
		if err != nil {
			return
		}
		next, err = q.NextID()
		q.Close()
	})
	if err != nil || next != msgs[2].ID+1 {
		t.Fatalf("NextID after Open = %d, %v; want %d", next, err, msgs[2].ID+1)
	}
	wantStreamed(t, "Open", "a message", n)
}

// TestPendingIDsReadLargeDeadLettersStreaming: PendingIDs (nexus dlq,
// the UI, the API) reads the pending dead letters' ids checking each
// frame's CRC through a small buffer: a dlq.log holding a dead letter of
// 8 MiB is read with less than 1 MiB allocated, the same ids as before.
// Each whole record was read into memory for its id.
func TestPendingIDsReadLargeDeadLettersStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	big := deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	for _, d := range []DeadLetter{deadLetter(9), big, deadLetter(3)} {
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	var err error
	n := allocated(func() { got, err = q.PendingIDs() })
	if err != nil || !slices.Equal(got, []uint64{3, 7, 9}) {
		t.Fatalf("PendingIDs() = %v, %v; want [3 7 9]", got, err)
	}
	wantStreamed(t, "PendingIDs", "a dead letter", n)
}
