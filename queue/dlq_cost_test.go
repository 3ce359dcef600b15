package queue

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeDeadLetters writes n dead letters of size bytes each (ids 1 to n)
// straight into the dlq.log of the queue in dir.
func writeDeadLetters(t *testing.T, dir string, n, size int) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, dlqFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	payload := bytes.Repeat([]byte("x"), size)
	for i := 1; i <= n; i++ {
		d := DeadLetter{ID: uint64(i), EnqueuedAt: time.Unix(1, 0), FailedAt: time.Unix(2, 0), Attempts: 3, LastError: "boom", Payload: payload}
		if _, err := f.Write(appendFrame(nil, appendDeadLetterRecord(nil, &d))); err != nil {
			t.Fatal(err)
		}
	}
}

// peakHeap runs fn and returns by how much the heap's objects grew at most
// while it ran, sampled every 200 µs.
func peakHeap(fn func()) int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return int64(peak.Load()) - int64(base)
}

// Rewriting dlq.log after a discard holds a record and a buffer in
// memory, not the file: a dead-letter queue of an outage can hold
// gigabytes, and the worker rewrites it at its next idle moment. The file
// is twice the bound (32 MiB, 128 dead letters of 256 KiB): a rewrite
// that held it would go over; one that holds a record and the buffer stays
// well under.
func TestCompactDLQMemoryDoesNotGrowWithTheFile(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const n, size = 128, 256 << 10
	writeDeadLetters(t, q.dir, n, size)
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	var applied []Marked
	var err error
	grew := peakHeap(func() {
		applied, _, err = q.CompactDLQ()
	})
	if err != nil || len(applied) != 1 {
		t.Fatalf("CompactDLQ: %v, %d marks applied, want 1", err, len(applied))
	}
	t.Logf("dlq.log of %d MiB: the heap grew by %d MiB during the rewrite", n*size>>20, grew>>20)
	if grew > n*size/2 {
		t.Errorf("rewriting a dlq.log of %d MiB grew the heap by %d MiB: it held the file in memory", n*size>>20, grew>>20)
	}
	ids, err := q.PendingIDs()
	if err != nil || len(ids) != n-1 || ids[0] != 2 || ids[n-2] != n {
		t.Errorf("pending after the rewrite: %d ids (%v), want 2 to %d", len(ids), err, n)
	}
	if dl, err := q.DeadLetter(n); err != nil || len(dl.Payload) != size {
		t.Errorf("the last dead letter after the rewrite: %d bytes of payload, %v", len(dl.Payload), err)
	}
}

// readCountingFS counts the bytes read from the files named name.
type readCountingFS struct {
	OS
	name string
	read *atomic.Int64
}

type readCountingFile struct {
	File
	read *atomic.Int64
}

func (c readCountingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.File.ReadAt(p, off)
	c.read.Add(int64(n))
	return n, err
}

func (c readCountingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != c.name {
		return f, err
	}
	return readCountingFile{f, c.read}, nil
}

// A dead letter is appended after the one this handle appended last
// without reading dlq.log again: during an outage every dead letter read
// all those before it, holding the append lock the doors' 202s wait for.
// When another process wrote to the file since (here, a torn frame a crash
// left), it is read again and the torn tail cut. Any byte read fails the
// test, so the file need not be large: 64 dead letters of 16 KiB (1 MiB)
// are read whole by an append that reads the file again, as 64 of 1 MiB
// were.
func TestMoveToDLQDoesNotReadTheFileAgain(t *testing.T) {
	var read atomic.Int64
	q, _, err := Open(t.TempDir(), testTenant, testFlow, Options{FS: readCountingFS{name: dlqFile, read: &read}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n, size = 64, 16 << 10
	writeDeadLetters(t, q.dir, n, size)
	dead := func(id uint64) DeadLetter {
		return DeadLetter{ID: id, EnqueuedAt: time.Unix(3, 0), FailedAt: time.Unix(4, 0), Attempts: 3, LastError: "x", Payload: []byte(`{}`)}
	}
	if err := q.MoveToDLQ(dead(1000)); err != nil { // the first reads the file, once
		t.Fatal(err)
	}
	read.Store(0)
	for id := uint64(1001); id <= 1010; id++ {
		if err := q.MoveToDLQ(dead(id)); err != nil {
			t.Fatal(err)
		}
	}
	if read.Load() > 0 {
		t.Errorf("ten dead letters appended after this handle's own read %d bytes of a %d MiB dlq.log under the append lock", read.Load(), n*size>>20)
	}

	// another process's append, cut short by a crash: half a frame
	f, err := os.OpenFile(filepath.Join(q.dir, dlqFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	frame := appendFrame(nil, appendDeadLetterRecord(nil, &DeadLetter{ID: 2000, Payload: []byte(`{"torn":true}`)}))
	if _, err := f.Write(frame[:len(frame)/2]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := q.MoveToDLQ(dead(1011)); err != nil {
		t.Fatal(err)
	}
	dl, damage, err := q.DeadLetters()
	if err != nil || len(damage) > 0 || len(dl) != n+12 || dl[len(dl)-1].ID != 1011 {
		t.Errorf("after another process's torn append: %d dead letters (last %d), damage %v, %v; want %d ending with 1011 and the torn frame cut", len(dl), dl[len(dl)-1].ID, damage, err, n+12)
	}
}

// A run of ReplayAll reads an oversized dead letter (its payload over
// MaxPayload, skipped) in every chunk, and copies its payload in none:
// the bytes allocated over a run of three chunks are about the three
// reads of its frame. Each chunk copied its payload from the frame read
// as well (decoding it whole before its size was checked), twice the
// allocations, 64 MiB more a chunk.
func TestReplayAllCopiesNoOversizedPayload(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	f, err := os.OpenFile(filepath.Join(q.dir, dlqFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	const small = 2 * allChunk // after the oversized one: two chunks of them, then a call that finds none
	big := MaxPayload + 1
	for id := uint64(1); id <= small+1; id++ {
		d := DeadLetter{ID: id, EnqueuedAt: time.Unix(1, 0), FailedAt: time.Unix(2, 0), Attempts: 3, LastError: "boom", Payload: []byte(`{}`)}
		if id == 1 {
			d.Payload = bytes.Repeat([]byte("x"), big)
		}
		if _, err := f.Write(appendFrame(nil, appendDeadLetterRecord(nil, &d))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var skipped []Skipped
	replayed := 0
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n, err := q.ReplayAll(small+1, "replay", func() string { return "cid" }, func(Replayed) { replayed++ },
		func(s Skipped) { skipped = append(skipped, s) })
	runtime.ReadMemStats(&after)
	if err != nil || n != small || replayed != small {
		t.Fatalf("ReplayAll: %d replayed (%d told), %v; want %d", n, replayed, err, small)
	}
	if len(skipped) != 1 || skipped[0].ID != 1 || skipped[0].PayloadSize != big || !errors.Is(skipped[0].Err, ErrTooLarge) {
		t.Errorf("skipped: %+v; want dead letter 1, %d bytes, ErrTooLarge, once", skipped, big)
	}
	const calls = 3 // two chunks, then none
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d calls allocated %d MiB; the oversized payload is %d MiB", calls, allocated>>20, big>>20)
	// one read of its frame a call, and what the small ones cost (under 16 MiB)
	if limit := uint64(calls*big + 16<<20); allocated > limit {
		t.Errorf("a run of %d calls skipping a payload of %d MiB allocated %d MiB, want at most %d MiB (its frame read once a call, its payload never copied)",
			calls, big>>20, allocated>>20, limit>>20)
	}
}

// Listing the dead letters (nexus dlq list, the API's and the UI's page)
// reads dlq.log whole, and holds one frame of it at a time in one buffer:
// the bytes allocated are about the largest frame, not the file. Each
// frame read was a new allocation as large as it: a dlq.log of 1,200
// dead letters of 1 MiB allocated 1.2 GB at every listing, and the
// listing took 2 s in the server and 6–9 s in nexus dlq list (the
// allocator's zeroing, page faults and returns to the system), where
// reading the file takes a fraction of a second.
func TestListingDeadLettersAllocatesAFrameNotTheFile(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	const n, size = 48, 1 << 20
	writeDeadLetters(t, q.dir, n, size)
	const limit = 8 << 20 // a frame, the read window, a page's previews
	for _, c := range []struct {
		name string
		list func() (int, error)
	}{
		{"ReadDeadLetters", func() (int, error) {
			dl, _, err := ReadDeadLetters(filepath.Dir(filepath.Dir(q.dir)), q.Tenant, q.Flow, nil)
			return len(dl), err
		}},
		{"DeadLetterPage", func() (int, error) {
			page, err := q.DeadLetterPage(0, 50, 4<<10)
			return page.Total, err
		}},
		{"PendingIDs", func() (int, error) {
			ids, err := q.PendingIDs()
			return len(ids), err
		}},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got, err := c.list()
		runtime.ReadMemStats(&after)
		if err != nil || got != n {
			t.Fatalf("%s: %d dead letters, %v; want %d", c.name, got, err, n)
		}
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s of a dlq.log of %d MiB allocated %d MiB", c.name, n*size>>20, allocated>>20)
		if allocated > limit {
			t.Errorf("%s of a dlq.log of %d dead letters of %d KiB allocated %d MiB, want at most %d MiB (one frame in memory at a time)",
				c.name, n, size>>10, allocated>>20, limit>>20)
		}
	}
}
