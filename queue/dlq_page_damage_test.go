package queue

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// writeDamagedDeadLetters writes 2n dead letters (ids 1 to 2n) straight
// into the dlq.log of the queue in dir, a byte of every odd one's record
// flipped, as bit rot or a torn copy leaves a file: n damaged frames, each
// followed by a valid one, so that each is a damaged frame of its own.
// With oneValid, the valid ones all have id 2 (one pending dead letter,
// written again), so that reading the file holds next to nothing for
// them.
func writeDamagedDeadLetters(t *testing.T, dir string, n int, oneValid bool) {
	t.Helper()
	two := appendFrame(nil, appendDeadLetterRecord(nil, new(deadLetter(2))))
	b := make([]byte, 0, 2*n*(len(two)+8)) // (ids of up to 6 digits)
	var rec []byte
	for id := uint64(1); id <= uint64(2*n); id++ {
		if oneValid && id%2 == 0 {
			b = append(b, two...)
			continue
		}
		d := deadLetter(id)
		rec = appendDeadLetterRecord(rec[:0], &d)
		b = appendFrame(b, rec)
		if id%2 == 1 {
			b[len(b)-1] ^= 0xff // the payload's last byte: the checksum fails
		}
	}
	if err := os.WriteFile(filepath.Join(dir, dlqFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A dead-letter page lists the first PageDamage damaged frames of the
// dead-letter files, in file order, and counts them all (DamageTotal): a
// dlq.log with thousands of damaged frames (a disk error, a torn copy)
// made every page list them all.
func TestDeadLetterPageCapsTheDamage(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const n = 1000
	writeDamagedDeadLetters(t, q.dir, n, false)
	page, err := q.DeadLetterPage(0, 50, 64)
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != n || len(page.Entries) != 50 || page.Entries[0].ID != 2 {
		t.Errorf("page: total %d, %d entries from id %d; want %d, 50 from id 2", page.Total, len(page.Entries), page.Entries[0].ID, n)
	}
	if len(page.Damage) != PageDamage || page.DamageTotal != n {
		t.Fatalf("page: %d damaged frames listed, %d counted; want %d listed, %d counted", len(page.Damage), page.DamageTotal, PageDamage, n)
	}
	// the first ones, in file order: ids 1, 3, 5…
	for i, d := range page.Damage {
		if d.File != dlqFile || d.ID != uint64(2*i+1) || d.Torn {
			t.Fatalf("damage %d: %+v, want the frame of id %d in dlq.log", i, d, 2*i+1)
		}
	}
}

// TestDeadLetterPageDamageMemory: the damaged frames past the first
// PageDamage are counted as the files are read, not kept, and the search
// for the frame after each reuses one buffer: 200,000 of them (14 MB as
// Damage values) grew the heap by their size at every page, and each
// damaged frame's search allocated 64 KiB (13 GB for them all).
func TestDeadLetterPageDamageMemory(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const n = 200_000
	writeDamagedDeadLetters(t, q.dir, n, true)
	var page DeadLetterPage
	var err error
	grew := peakHeap(func() {
		page, err = q.DeadLetterPage(0, 50, 64)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d damaged frames: the heap grew by %d KiB during the page's read", n, grew>>10)
	// the read's buffers are what is left (the valid frames are one
	// pending dead letter)
	if grew > 8<<20 {
		t.Errorf("a page of a dlq.log with %d damaged frames grew the heap by %d KiB: it held them all", n, grew>>10)
	}
	if page.DamageTotal != n || len(page.Damage) != PageDamage {
		t.Errorf("page: %d damaged frames listed, %d counted; want %d listed, %d counted", len(page.Damage), page.DamageTotal, PageDamage, n)
	}
}

// TestDeadLetterCountsDamageMemory: the count of damaged dead letters the
// Queues page shows (and every queue line of GET /api/queues) counts them
// as the files are read: it kept them all, then counted them.
func TestDeadLetterCountsDamageMemory(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const n = 200_000
	writeDamagedDeadLetters(t, q.dir, n, true)
	var pending, damaged int
	var err error
	grew := peakHeap(func() {
		pending, damaged, err = q.deadLetterCounts()
	})
	if err != nil || pending != 1 || damaged != n {
		t.Fatalf("counts: %d pending, %d damaged, %v; want 1 and %d", pending, damaged, err, n)
	}
	t.Logf("%d damaged frames: the heap grew by %d KiB while they were counted", n, grew>>10)
	if grew > 8<<20 {
		t.Errorf("counting %d damaged frames grew the heap by %d KiB: it held them all", n, grew>>10)
	}
}

// TestDamagedMarksWithoutADeadLetterFile: a damaged mark of a queue whose
// dlq.log is gone (removed by hand, as queues-retries-dlq.md tells how to
// delete at once) is not reported by the page, the counts or the listing:
// it marked no dead letter there is. Counting damage as it is read keeps
// that.
func TestDamagedMarksWithoutADeadLetterFile(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	moveToDLQ(t, q, 1)
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	acked := filepath.Join(q.dir, ackedFile)
	b, err := os.ReadFile(acked)
	if err != nil {
		t.Fatal(err)
	}
	b[headerSize+2] ^= 0xff // inside the mark's id: it does not verify
	if err := os.WriteFile(acked, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(q.dir, dlqFile)); err != nil {
		t.Fatal(err)
	}
	page, err := q.DeadLetterPage(0, 50, 64)
	if err != nil || page.Total != 0 || len(page.Damage) != 0 || page.DamageTotal != 0 {
		t.Errorf("page: %+v, %v; want nothing", page, err)
	}
	if pending, damaged, err := q.deadLetterCounts(); err != nil || pending != 0 || damaged != 0 {
		t.Errorf("counts: %d pending, %d damaged, %v; want none", pending, damaged, err)
	}
	if dl, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil); err != nil || len(dl) != 0 || len(damage) != 0 {
		t.Errorf("ReadDeadLetters: %v, %v, %v; want none", dl, damage, err)
	}
	// with dlq.log there, the damaged mark is reported
	if err := os.WriteFile(filepath.Join(q.dir, dlqFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if page, err := q.DeadLetterPage(0, 50, 64); err != nil || page.DamageTotal != 1 || len(page.Damage) != 1 || page.Damage[0].File != ackedFile {
		t.Errorf("page with an empty dlq.log: %+v, %v; want the damaged mark", page, err)
	}
}

// TestDamagedDeadLettersAreReadOnce: the search past each damaged frame
// for the next one that verifies reads what lies after it, not 64 KiB of
// the file a damaged frame: a count of 2,000 damaged dead letters of
// about 200 bytes (a 0.4 MB dlq.log) read 120 MB, 200,000 of them 13 GB
// (seconds of a page's answer, each time).
func TestDamagedDeadLettersAreReadOnce(t *testing.T) {
	var read atomic.Int64
	q, _, err := Open(t.TempDir(), testTenant, testFlow, Options{FS: readCountingFS{name: dlqFile, read: &read}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 2000
	writeDamagedDeadLetters(t, q.dir, n, false)
	info, err := os.Stat(filepath.Join(q.dir, dlqFile))
	if err != nil {
		t.Fatal(err)
	}
	read.Store(0)
	pending, damaged, err := q.deadLetterCounts()
	if err != nil || pending != n || damaged != n {
		t.Fatalf("counts: %d pending, %d damaged, %v; want %d of each", pending, damaged, err, n)
	}
	// once for the scan, once more for what the searches read past a
	// window's end, and a window to spare
	if limit := 2*info.Size() + 64<<10; read.Load() > limit {
		t.Errorf("counting %d damaged dead letters in a dlq.log of %d bytes read %d bytes, want at most %d", n, info.Size(), read.Load(), limit)
	}
}
