package queue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bigDeadLetters makes a dead-letter queue of an outage: dead letter 1
// small, then dead letters 2 to 5 of size bytes each (each payload its
// own byte, so that one returned is known for its own), written straight
// into dlq.log, and returns them by id.
func bigDeadLetters(t *testing.T, q *Queue, size int) map[uint64]DeadLetter {
	t.Helper()
	out := map[uint64]DeadLetter{}
	for id := uint64(1); id <= 5; id++ {
		d := deadLetter(id)
		if id > 1 {
			d.Payload = bytes.Repeat([]byte{byte('a' + id)}, size)
		}
		appendRawDeadLetter(t, q, d)
		out[id] = d
	}
	return out
}

// allocatedBy is how many bytes fn allocated.
func allocatedBy(fn func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// Reading one dead letter of a dlq.log of large ones, or replaying the
// small one before them, reads the others' payloads to check their CRCs
// but holds none of them: what is allocated beyond the payload returned
// is the scan's buffers (some 200 KiB), well under one payload. Both read
// every pending record whole until the one they wanted (DeadLetter) or to
// the end (ReplayPending): a buffer as large as the largest record, and
// the payload returned copied out of it, twice the bytes.
func TestDeadLetterReadsOnlyThePayloadItReturns(t *testing.T) {
	const slack = 1 << 20 // the scan's buffers, the marks, the answer: well under a payload
	for _, c := range []struct {
		name  string
		read  func(q *Queue) error
		bound int64 // the bytes returned
	}{
		{"DeadLetter of the fourth large one", func(q *Queue) error {
			d, err := q.DeadLetter(5)
			if err == nil && len(d.Payload) != largeRecord {
				err = errors.New("a payload of the wrong size")
			}
			return err
		}, largeRecord},
		{"DeadLetter of one not pending", func(q *Queue) error {
			if _, err := q.DeadLetter(99); !errors.Is(err, ErrNotPending) {
				return errors.New("not ErrNotPending")
			}
			return nil
		}, 0},
		{"ReplayPending of the small one before them", func(q *Queue) error {
			got, _, err := q.ReplayPending(1, 10, 1<<30, "replay", func() string { return "cid" })
			if err == nil && (len(got) != 1 || got[0].ID != 1) {
				err = errors.New("did not replay dead letter 1 alone")
			}
			return err
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, _ := openQueue(t, t.TempDir(), Options{})
			bigDeadLetters(t, q, largeRecord)
			var err error
			allocated := allocatedBy(func() { err = c.read(q) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("allocated %d KiB; a payload is %d KiB", allocated>>10, largeRecord>>10)
			if allocated > c.bound+slack {
				t.Errorf("allocated %d KiB reading a dlq.log of dead letters of %d KiB, want at most %d KiB (the payload returned, and no other)",
					allocated>>10, largeRecord>>10, (c.bound+slack)>>10)
			}
		})
	}
}

// DeadLetter reads through the frames' heads and returns the whole of
// the one asked for: found among large ones, after a damaged frame, with a
// last error longer than a head holds (an older nexus wrote them), the
// first of an id dead-lettered twice; not pending when marked, never
// dead-lettered, or damaged itself.
func TestDeadLetterStreamedTable(t *testing.T) {
	longError := deadLetter(6)
	longError.LastError = strings.Repeat("e", 3*MaxLastError) // as a version before MaxLastError wrote it
	twice := deadLetter(7)
	again := twice
	again.LastError = "dead-lettered again after a crash"
	for _, c := range []struct {
		name    string
		id      uint64
		prepare func(t *testing.T, q *Queue)
		want    func(dl map[uint64]DeadLetter) DeadLetter // nil: ErrNotPending
	}{
		{"a large one", 4, nil, func(dl map[uint64]DeadLetter) DeadLetter { return dl[4] }},
		{"the small one", 1, nil, func(dl map[uint64]DeadLetter) DeadLetter { return dl[1] }},
		{"after a damaged frame", 4, func(t *testing.T, q *Queue) { damageDeadLetter(t, q, 3) },
			func(dl map[uint64]DeadLetter) DeadLetter { return dl[4] }},
		{"a damaged one", 3, func(t *testing.T, q *Queue) { damageDeadLetter(t, q, 3) }, nil},
		{"a long last error", 6, func(t *testing.T, q *Queue) { appendRawDeadLetter(t, q, longError) },
			func(map[uint64]DeadLetter) DeadLetter { return longError }},
		{"dead-lettered twice", 7, func(t *testing.T, q *Queue) {
			appendRawDeadLetter(t, q, twice)
			appendRawDeadLetter(t, q, again)
		}, func(map[uint64]DeadLetter) DeadLetter { return twice }},
		{"marked", 2, func(t *testing.T, q *Queue) {
			if err := q.Mark(2, MarkDiscarded); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"never dead-lettered", 99, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, _ := openQueue(t, t.TempDir(), Options{})
			// larger than a head and a CRC buffer: read through both
			dl := bigDeadLetters(t, q, 4*(recordHead+crcStreamed))
			if c.prepare != nil {
				c.prepare(t, q)
			}
			got, err := q.DeadLetter(c.id)
			if c.want == nil {
				if !errors.Is(err, ErrNotPending) {
					t.Fatalf("DeadLetter(%d): %v, want ErrNotPending", c.id, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DeadLetter(%d): %v", c.id, err)
			}
			if diff := cmp.Diff(c.want(dl), got); diff != "" {
				t.Errorf("DeadLetter(%d) (-want +got):\n%s", c.id, diff)
			}
		})
	}
}

// damageDeadLetter flips a byte in the middle of the payload of dead
// letter id's first frame in dlq.log.
func damageDeadLetter(t *testing.T, q *Queue, id uint64) {
	t.Helper()
	path := filepath.Join(q.dir, dlqFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(b); {
		rec, n, ok := frameIn(b[off:])
		if !ok {
			t.Fatalf("no frame at %d", off)
		}
		if d, err := decodeDeadLetter(rec); err == nil && d.ID == id {
			b[off+n-len(rec)/2] ^= 0xff
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
		off += n
	}
	t.Fatalf("dead letter %d is not in dlq.log", id)
}

// appendRawDeadLetter appends d's frame to dlq.log as it is, its last
// error not cut.
func appendRawDeadLetter(t *testing.T, q *Queue, d DeadLetter) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(q.dir, dlqFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(appendFrame(nil, appendDeadLetterRecord(nil, &d))); err != nil {
		t.Fatal(err)
	}
}

// Rewriting dlq.log after a discard checks each frame through the
// streaming head reader and copies the kept ones through its buffer: of a
// dlq.log of dead letters of 2 MiB (twice the buffer), it allocates its
// buffers, not a record. It read each record whole (the discarded one too, to skip it)
// into a buffer as large as the largest, and gathered each kept one whole
// in its write buffer.
func TestCompactDLQCopiesLargeDeadLettersStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const size = 2 * frameWriterBuf
	dl := bigDeadLetters(t, q, size)
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	var applied []Marked
	var err error
	allocated := allocatedBy(func() { applied, _, err = q.CompactDLQ() })
	if err != nil || len(applied) != 1 {
		t.Fatalf("CompactDLQ: %v, %d marks applied, want 1", err, len(applied))
	}
	t.Logf("allocated %d KiB; a dead letter is %d KiB", allocated>>10, size>>10)
	if limit := int64(frameWriterBuf + 512<<10); allocated > limit {
		t.Errorf("rewriting a dlq.log of dead letters of %d KiB allocated %d KiB, want at most %d KiB (its buffers, no record)",
			size>>10, allocated>>10, limit>>10)
	}
	got, damage, err := q.DeadLetters()
	if err != nil || len(damage) > 0 {
		t.Fatalf("DeadLetters after the rewrite: damage %v, %v", damage, err)
	}
	want := []DeadLetter{dl[1], dl[2], dl[4], dl[5]}
	if len(got) != len(want) {
		t.Fatalf("%d dead letters after the rewrite, want %d", len(got), len(want))
	}
	for i := range want {
		// the payloads apart: go-cmp compares megabytes a byte at a time
		if !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Errorf("dead letter %d after the rewrite: a payload of %d bytes, not the one dead-lettered", got[i].ID, len(got[i].Payload))
		}
		got[i].Payload, want[i].Payload = nil, nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the dead letters after the rewrite (-want +got):\n%s", diff)
	}
}
