package queue

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/nexushq/nexus/clock/clocktest"
)

// Recovery tests write a log through the real code, damage a copy of its
// bytes, open the copy and check what Open reports and Read delivers.

// logFixture is a log as the code wrote it: segment.log, the id counter
// beside it, and the messages as they were acknowledged.
type logFixture struct {
	seg, seq []byte
	msgs     []Message
}

// buildLog appends one message per size (the payload's size) to a fresh
// queue on disk.
func buildLog(t *testing.T, sizes ...int) logFixture {
	t.Helper()
	root := t.TempDir()
	c := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{Now: c.Now})
	var l logFixture
	for i, size := range sizes {
		m, err := q.Append(newMessage(i, size))
		if err != nil {
			t.Fatal(err)
		}
		l.msgs = append(l.msgs, m)
	}
	l.seg = fileBytes(t, OS{}, root, segmentFile)
	l.seq = fileBytes(t, OS{}, root, seqFile)
	return l
}

// end is the offset after the frame of message i (0 for i < 0).
func (l logFixture) end(i int) int64 {
	if i < 0 {
		return 0
	}
	if i+1 < len(l.msgs) {
		return l.msgs[i+1].Offset
	}
	return int64(len(l.seg))
}

// without returns the messages but the k-th.
func (l logFixture) without(k int) []Message {
	return slices.Delete(slices.Clone(l.msgs), k, k+1)
}

// openDamaged writes seg and the fixture's id counter into a fresh queue
// folder and opens it. The caller closes the queue.
func openDamaged(t *testing.T, l logFixture, seg []byte) (*Queue, []Damage, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segmentFile), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, seqFile), l.seq, 0o644); err != nil {
		t.Fatal(err)
	}
	q, damage, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q, damage, root
}

// checkTorn checks that damage is exactly one torn tail at off, length long.
func checkTorn(t *testing.T, damage []Damage, off, length int64) {
	t.Helper()
	if len(damage) != 1 || !damage[0].Torn || damage[0].Offset != off || damage[0].Length != length ||
		damage[0].File != segmentFile || damage[0].Reason == "" {
		t.Errorf("damage %v, want one torn tail of %s at %d, %d bytes", damage, segmentFile, off, length)
	}
}

// checkReopen closes q, opens its queue again and checks that the second
// recovery finds nothing and changes nothing. It returns the new queue.
func checkReopen(t *testing.T, q *Queue, root string) *Queue {
	t.Helper()
	size, _ := q.Size()
	q.Close()
	q, damage, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	if len(damage) != 0 {
		t.Errorf("second Open reported %v, want nothing", damage)
	}
	if got, _ := q.Size(); got != size {
		t.Errorf("second Open changed the size from %d to %d", size, got)
	}
	return q
}

// checkAppends appends n messages to q, which holds before, and checks
// that they get the ids after the highest ever acknowledged and are
// readable after the others.
func checkAppends(t *testing.T, q *Queue, before []Message, acked uint64, n int) {
	t.Helper()
	want := slices.Clone(before)
	for i := range n {
		m, err := q.Append(newMessage(1000+i, 50))
		if err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
		if m.ID != acked+uint64(i)+1 {
			t.Errorf("Append after recovery got id %d, want %d (ids are never reissued)", m.ID, acked+uint64(i)+1)
		}
		want = append(want, m)
	}
	checkMessages(t, readAll(t, q), want)
}

// TestRecoverTruncated cuts the log at every byte of its last three
// frames (RELIABILITY A.4).
func TestRecoverTruncated(t *testing.T) {
	l := buildLog(t, 40, 90, 33, 61, 128, 47, 75, 52)
	n := len(l.msgs)
	for cut := l.msgs[n-3].Offset; cut <= int64(len(l.seg)); cut++ {
		k := 0 // the complete frames before the cut
		for k < n && l.end(k) <= cut {
			k++
		}
		func() {
			q, damage, root := openDamaged(t, l, l.seg[:cut])
			defer func() { q.Close() }()
			if good := l.end(k - 1); cut > good {
				checkTorn(t, damage, good, cut-good)
			} else if len(damage) != 0 {
				t.Errorf("cut at a frame boundary %d: damage %v, want none", cut, damage)
			}
			checkMessages(t, readAll(t, q), l.msgs[:k])
			if size, _ := q.Size(); size != l.end(k-1) {
				t.Errorf("cut at %d: size %d after recovery, want %d", cut, size, l.end(k-1))
			}
			q = checkReopen(t, q, root)
			checkAppends(t, q, l.msgs[:k], l.msgs[n-1].ID, 10)
		}()
		if t.Failed() {
			t.Fatalf("cut at %d of %d (frame %d)", cut, len(l.seg), k)
		}
	}
}

// TestRecoverZeroedTail zeroes the log from every 512-byte boundary inside
// its last frame to the end, in place and with zeroed space after it
// (RELIABILITY A.5): a torn tail.
func TestRecoverZeroedTail(t *testing.T) {
	l := buildLog(t, 40, 90, 33, 61, 2100)
	n := len(l.msgs)
	start, end := l.msgs[n-1].Offset, int64(len(l.seg))
	boundaries := 0
	for b := (start + 511) / 512 * 512; b < end; b += 512 {
		for _, extra := range []int{0, 4096} {
			seg := append(slices.Clone(l.seg[:b]), make([]byte, end-b+int64(extra))...)
			func() {
				q, damage, root := openDamaged(t, l, seg)
				defer func() { q.Close() }()
				checkTorn(t, damage, start, int64(len(seg))-start)
				checkMessages(t, readAll(t, q), l.msgs[:n-1])
				q = checkReopen(t, q, root)
				checkAppends(t, q, l.msgs[:n-1], l.msgs[n-1].ID, 1)
			}()
			if t.Failed() {
				t.Fatalf("zeroes from %d to %d", b, len(seg))
			}
		}
		boundaries++
	}
	if boundaries < 3 {
		t.Fatalf("only %d boundaries inside the last frame", boundaries)
	}
}

// TestRecoverBitFlipInLastFrame flips one bit of the last frame's checksum
// or record, 200 times: the frame is whole and no sector's part of it is
// zeros, so it is damage, not a torn write (etcd's rule): reported as such
// (Torn false) at every Open, never delivered, and kept, the next append
// going after it. It was reported as a torn tail, and cut: an acknowledged
// message lost to a flipped bit read as a write a crash had cut short, and
// the next message took its offset (a reader past it, or a retry
// scheduled at it, then missed the new one).
func TestRecoverBitFlipInLastFrame(t *testing.T) {
	l := buildLog(t, 40, 90, 700)
	n := len(l.msgs)
	start, end := l.msgs[n-1].Offset, int64(len(l.seg))
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range figure(200, 50, 2000) {
		at := start + 8 + rng.Int64N(end-start-8)
		seg := slices.Clone(l.seg)
		seg[at] ^= 1 << rng.IntN(8)
		q, damage, root := openDamaged(t, l, seg)
		check := func(damage []Damage) {
			t.Helper()
			if len(damage) != 1 || damage[0].Torn || damage[0].Offset != start || damage[0].Length != end-start {
				t.Errorf("damage %v, want the last frame at %d, %d bytes, reported as damage (not torn)", damage, start, end-start)
			}
		}
		check(damage)
		checkMessages(t, readAll(t, q), l.msgs[:n-1])
		q.Close()
		q, damage, err := Open(root, testTenant, testFlow, Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(damage) // kept, reported again
		m, err := q.Append(newMessage(9, 50))
		if err != nil || m.Offset != end || m.ID != l.msgs[n-1].ID+1 {
			t.Errorf("the next append: %+v, %v; want it at offset %d (after the damaged frame), id %d", m, err, end, l.msgs[n-1].ID+1)
		}
		checkMessages(t, readAll(t, q), append(slices.Clone(l.msgs[:n-1]), m))
		q.Close()
		if t.Failed() {
			t.Fatalf("trial %d: byte %d of the last frame", trial, at-start)
		}
	}
}

// TestRecoverBitFlips flips one random bit of a frame before the last,
// 1,000 times (RELIABILITY A.6): the frame is quarantined and named, never
// delivered, and every other frame is.
func TestRecoverBitFlips(t *testing.T) {
	trials := figure(1000, 200, 20000)
	sizes := []int{40, 90, 33, 61, 128, 47, 75, 52, 200, 31, 64, 80}
	l := buildLog(t, sizes...)
	n := len(l.msgs)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range trials {
		k := rng.IntN(n - 1)
		off, length := l.msgs[k].Offset, l.end(k)-l.msgs[k].Offset
		bit := rng.Int64N(length * 8)
		at := off + bit/8
		seg := slices.Clone(l.seg)
		seg[at] ^= 1 << (bit % 8)

		q, damage, _ := openDamaged(t, l, seg)
		if len(damage) != 1 || damage[0].Torn || damage[0].Offset != off || damage[0].Length != length {
			t.Errorf("damage %v, want frame %d quarantined at %d, %d bytes", damage, k, off, length)
		} else if named := at >= off+8 && at < off+12 || at >= off+21; named && damage[0].ID != l.msgs[k].ID {
			// a flip in the CRC or after the id; the header and the kind are
			// TestRecoverNamesDamagedHeaderID's
			t.Errorf("damage %v does not name id %d", damage[0], l.msgs[k].ID)
		}
		checkMessages(t, readAll(t, q), l.without(k))
		q.Close()
		if t.Failed() {
			t.Fatalf("trial %d: bit %d of frame %d (byte %d of the frame)", trial, bit, k, bit/8)
		}
	}
}

// TestRecoverNamesDamagedHeaderID flips each bit of the magic, the length
// and the record's kind of a middle frame: the id is intact where the frame
// starts, so the quarantined frame can be named (RELIABILITY A.6
// "quarantines exactly frame k and names its id").
func TestRecoverNamesDamagedHeaderID(t *testing.T) {
	l := buildLog(t, 40, 90, 33, 61, 128)
	k := 2
	off := l.msgs[k].Offset
	var unnamed []int
	var bits []int
	for bit := range 13 * 8 {
		if bit < 64 || bit >= 96 { // not the CRC
			bits = append(bits, bit)
		}
	}
	for _, bit := range bits {
		seg := slices.Clone(l.seg)
		seg[off+int64(bit/8)] ^= 1 << (bit % 8)
		q, damage, _ := openDamaged(t, l, seg)
		if len(damage) != 1 || damage[0].Offset != off || damage[0].Torn {
			t.Errorf("bit %d: damage %v, want frame %d quarantined", bit, damage, k)
		} else if damage[0].ID != l.msgs[k].ID {
			unnamed = append(unnamed, bit)
		}
		checkMessages(t, readAll(t, q), l.without(k))
		q.Close()
	}
	if len(unnamed) > 0 {
		// The damage names the id from its bytes at offset+13 whatever was
		// flipped before them (magic, length, kind).
		t.Errorf("a flip of bits %v (0-31 magic, 32-63 length, 96-103 kind) quarantines frame %d without naming id %d",
			unnamed, k, l.msgs[k].ID)
	}
}

// TestRecoverLyingLength gives a frame a length field that lies
// (RELIABILITY A.7): the frame is damage, and nothing near the claimed size
// is allocated.
func TestRecoverLyingLength(t *testing.T) {
	l := buildLog(t, 40, 90, 33, 61, 128, 47)
	n := len(l.msgs)
	size := uint32(len(l.seg))
	for _, k := range []int{n / 2, n - 1} {
		for _, length := range []uint32{1 << 31, 1<<32 - 1, size + 1} {
			off := l.msgs[k].Offset
			seg := slices.Clone(l.seg)
			binary.BigEndian.PutUint32(seg[off+4:], length)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			q, damage, _ := openDamaged(t, l, seg)
			got := readAll(t, q)
			runtime.ReadMemStats(&after)
			q.Close()

			if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
				t.Errorf("frame %d, length %d: recovery allocated %d bytes", k, length, grown)
			}
			if k == n-1 {
				// the last frame: its record is all there, so a length
				// over the limit, or past the end with a checksum that
				// verifies for the length the file holds, is damage
				// (kept, like any damaged last frame), not a record
				// that never all arrived (TestRecoverTruncated's)
				if len(damage) != 1 || damage[0].Torn || damage[0].Offset != off || damage[0].Length != int64(size)-off {
					t.Errorf("frame %d, length %d: damage %v, want the frame reported as damage", k, length, damage)
				}
				checkMessages(t, got, l.msgs[:n-1])
				continue
			}
			if len(damage) != 1 || damage[0].Torn || damage[0].Offset != off || damage[0].Length != l.end(k)-off {
				t.Errorf("frame %d, length %d: damage %v, want the frame quarantined", k, length, damage)
			}
			checkMessages(t, got, l.without(k))
		}
	}
}

// TestRecoverKeepsFramesAfterZeroedSector zeroes a 512-byte sector in the
// middle of the log: the frames it touches are quarantined as one damage
// (those that start inside it have no magic left), named by the first, and
// the frames after it are delivered.
func TestRecoverKeepsFramesAfterZeroedSector(t *testing.T) {
	l := buildLog(t, 300, 300, 300, 300, 300, 300)
	seg := slices.Clone(l.seg)
	copy(seg[512:1024], make([]byte, 512))
	first, last := -1, -1 // the frames the sector touches
	for i, m := range l.msgs {
		if m.Offset < 1024 && l.end(i) > 512 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	want := slices.Delete(slices.Clone(l.msgs), first, last+1)
	q, damage, root := openDamaged(t, l, seg)
	defer q.Close()
	off := l.msgs[first].Offset
	if len(damage) != 1 || damage[0].Torn || damage[0].Offset != off || damage[0].Length != l.end(last)-off ||
		damage[0].ID != l.msgs[first].ID {
		t.Errorf("damage %v, want frames %d to %d quarantined at %d, %d bytes, id %d",
			damage, first, last, off, l.end(last)-off, l.msgs[first].ID)
	}
	checkMessages(t, readAll(t, q), want)
	if size, _ := q.Size(); size != int64(len(l.seg)) {
		t.Errorf("recovery changed the size from %d to %d", len(l.seg), size)
	}
	if !bytes.Equal(fileBytes(t, OS{}, root, segmentFile), seg) {
		t.Errorf("recovery rewrote a log with damage in its middle")
	}
}
