package queue

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestJanitorReadsLargeDeadLettersStreaming: the janitor's read of a
// queue's dead letters and marks (whether any is pending), as nexus dlq
// list's, checks each frame's CRC through a small buffer and keeps the
// fields before the payload: a dead letter of 8 MiB, and a frame of
// dlq.log.acked of 8 MiB that is no mark, are read with less than 1 MiB
// allocated, and the dead letters read as before. Each whole record was
// read into memory just to check it: 8 MiB for each.
func TestJanitorReadsLargeDeadLettersStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	big, long := moveLargeAndLong(t, q)
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	// a frame that verifies but is no mark: passed over, as before
	acked := filepath.Join(root, testTenant, testFlow, ackedFile)
	f, err := os.OpenFile(acked, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(appendFrame(nil, bytes.Repeat([]byte{kindMark}, largeRecord))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	q.Close()

	want := []DeadLetter{big, long}
	for i := range want {
		want[i].Payload = nil
	}
	var got []DeadLetter
	var damage []Damage
	n := allocated(func() { got, damage, err = ReadDeadLetters(root, testTenant, testFlow, nil) })
	if err != nil || len(damage) != 0 {
		t.Fatalf("ReadDeadLetters: %v, damage %v", err, damage)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadDeadLetters (-want +got):\n%s", diff)
	}
	wantStreamed(t, "ReadDeadLetters", "a dead letter", n)
	var deleted bool
	n = allocated(func() { deleted, err = deleteIdleQueue(root, testTenant, testFlow, OS{}) })
	if err != nil || deleted {
		t.Fatalf("the janitor's pass: deleted %v, %v; want the queue kept for its dead letters", deleted, err)
	}
	wantStreamed(t, "the janitor's pass", "a dead letter", n)
}

// TestDeadLetterCountReadsLargeDeadLettersStreaming: the count of pending
// dead letters (the Queues page, /metrics) checks each frame's CRC through
// a small buffer: a dlq.log holding a dead letter of 8 MiB is counted with
// less than 1 MiB allocated. It read each whole record into memory just to
// count it.
func TestDeadLetterCountReadsLargeDeadLettersStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	big := deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	for _, d := range []DeadLetter{deadLetter(3), big} {
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	var got int
	var err error
	n := allocated(func() { got, err = q.DeadLetterCount() })
	if err != nil || got != 2 {
		t.Fatalf("DeadLetterCount() = %d, %v; want 2", got, err)
	}
	wantStreamed(t, "DeadLetterCount", "a dead letter", n)
}

// TestDeadLetterAppendFindsTheEndStreaming: an append to dlq.log by a
// handle that did not write its end last (another process's, or a new
// one) finds the end checking each frame's CRC through a small buffer: a
// dlq.log holding a dead letter of 8 MiB takes another with less than
// 1 MiB allocated. It read each whole record into memory to find the end.
func TestDeadLetterAppendFindsTheEndStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	big := deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	if err := q.MoveToDLQ(big); err != nil {
		t.Fatal(err)
	}
	q.Close()
	q, _ = openQueue(t, root, Options{})
	n := allocated(func() {
		if err := q.MoveToDLQ(deadLetter(8)); err != nil {
			t.Fatal(err)
		}
	})
	if n > streamLimit {
		t.Errorf("MoveToDLQ allocated %d bytes (%.1f MiB) after a dead letter of %d MiB, want at most %d", n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
	}
	if got, err := q.DeadLetterCount(); err != nil || got != 2 {
		t.Errorf("DeadLetterCount() = %d, %v; want 2", got, err)
	}
}

// TestDeadLetterListReadsLargeDeadLettersStreaming: nexus dlq list's read
// (ListDeadLetters, and Each after the worker rewrote dlq.log, which finds
// the dead letters again) checks each frame's CRC through a small buffer
// and keeps each dead letter's id and offset: a dlq.log holding a dead
// letter of 8 MiB is listed with less than 1 MiB allocated, and the dead
// letters read as before. Each read every whole record into memory just to
// take its id.
func TestDeadLetterListReadsLargeDeadLettersStreaming(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	big, long := moveLargeAndLong(t, q)
	var l *DeadLetterList
	var damage []Damage
	var err error
	n := allocated(func() { l, damage, err = ListDeadLetters(root, testTenant, testFlow, nil) })
	if err != nil || len(damage) != 0 || l.Len() != 3 {
		t.Fatalf("ListDeadLetters: %v, damage %v; want 3 dead letters", err, damage)
	}
	wantStreamed(t, "ListDeadLetters", "a dead letter", n)
	// the worker's rewrite of dlq.log: Each finds the dead letters again
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.CompactDLQ(); err != nil {
		t.Fatal(err)
	}
	var got []DeadLetter
	var gone int
	n = allocated(func() {
		gone, err = l.Each(func(d DeadLetter) error {
			got = append(got, d)
			return nil
		})
	})
	want := []DeadLetter{big, long}
	for i := range want {
		want[i].Payload = nil
	}
	if err != nil || gone != 1 {
		t.Fatalf("Each after the rewrite: %d passed over, %v; want 1", gone, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Each after the rewrite (-want +got):\n%s", diff)
	}
	wantStreamed(t, "Each after the rewrite", "a dead letter", n)
}

// TestDeadLetterPageReadsLargeDeadLettersStreaming: a page of the dead
// letters (the Queue page, GET /api/queues/…/dlq) checks each frame's CRC
// through a small buffer and reads of a dead letter on the page its fields
// and the first maxPayload bytes of its payload only: a dlq.log holding a
// dead letter of 8 MiB, on the page or before it, is read with less than
// 1 MiB allocated, and the page is as before. Each whole record was read
// into memory, the dead letters before the page's too.
func TestDeadLetterPageReadsLargeDeadLettersStreaming(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	big, long := moveLargeAndLong(t, q)
	entry := func(d DeadLetter, maxPayload int) PageEntry {
		e := PageEntry{DeadLetter: d, PayloadSize: len(d.Payload)}
		e.Payload = d.Payload[:min(len(d.Payload), maxPayload)]
		return e
	}
	for _, tt := range []struct {
		after      uint64
		maxPayload int
		want       []PageEntry
	}{
		{0, 4 << 10, []PageEntry{entry(deadLetter(3), 4<<10), entry(big, 4<<10), entry(long, 4<<10)}},
		{0, 0, []PageEntry{entry(deadLetter(3), 0), entry(big, 0), entry(long, 0)}},
		{7, 4 << 10, []PageEntry{entry(long, 4<<10)}},
	} {
		var page DeadLetterPage
		var err error
		n := allocated(func() { page, err = q.DeadLetterPage(tt.after, 50, tt.maxPayload) })
		if err != nil || page.Total != 3 {
			t.Fatalf("DeadLetterPage(%d, 50, %d): total %d, %v; want 3", tt.after, tt.maxPayload, page.Total, err)
		}
		if diff := cmp.Diff(tt.want, page.Entries); diff != "" {
			t.Errorf("DeadLetterPage(%d, 50, %d) (-want +got):\n%s", tt.after, tt.maxPayload, diff)
		}
		if n > streamLimit {
			t.Errorf("DeadLetterPage(%d, 50, %d) allocated %d bytes (%.1f MiB) for a dead letter of %d MiB, want at most %d", tt.after, tt.maxPayload, n, float64(n)/(1<<20), largeRecord>>20, streamLimit)
		}
	}
}

// moveLargeAndLong dead-letters message 3, then big (7), whose payload is
// largeRecord bytes, then long (8), whose last error is MaxLastError
// bytes (its fields before the payload at their longest), and returns
// big and long.
func moveLargeAndLong(t *testing.T, q *Queue) (big, long DeadLetter) {
	t.Helper()
	big = deadLetter(7)
	big.Payload = bytes.Repeat([]byte("x"), largeRecord)
	long = deadLetter(8)
	long.LastError = strings.Repeat("e", MaxLastError)
	for _, d := range []DeadLetter{deadLetter(3), big, long} {
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	return big, long
}
