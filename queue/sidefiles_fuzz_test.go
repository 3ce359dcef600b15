package queue

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeMem writes b as name in the queue's folder of m.
func writeMem(t testing.TB, m *memFS, dir, name string, b []byte) {
	t.Helper()
	f, err := m.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(b, 0)
	f.Close()
}

// FuzzCounterAndCheckpoint opens a queue of four messages (ids 1 to 4)
// whose segment.log.seq and segment.log.ckpt hold arbitrary bytes: Open
// does not fail or panic, the checkpoint is within the log (a checkpoint
// that verifies is taken as it is, at a frame's end or not), the next id is past the ids of the log (read
// by the queue and by NextID from the files), an append gets it, what the
// queue writes reads back, and a counter or checkpoint that decodes
// re-encodes to the same bytes.
func FuzzCounterAndCheckpoint(f *testing.F) {
	var seg []byte
	var ends []int64
	for i := range 4 {
		m := Message{ID: uint64(i + 1), EnqueuedAt: epoch, Source: "enqueue", CorrelationID: "c", Payload: payload(i, 20)}
		seg = appendFrame(seg, appendMessageRecord(nil, &m))
		ends = append(ends, int64(len(seg)))
	}
	seeds := [][2][]byte{
		{encodeValue(seqMagic, 5), encodeValue(ckptMagic, uint64(ends[1]))},
		{encodeValue(seqMagic, 2), encodeValue(ckptMagic, uint64(ends[3])+9)},
		{encodeValue(seqMagic, 9), encodeValue(drainMagic, 3)},
		{encodeValue(seqMagic, 0), encodeValue(ckptMagic, uint64(ends[0])+1)},
		{encodeValue(seqMagic, 5)[:9], encodeValue(ckptMagic, 0)[:15]},
		{nil, nil},
		{encodeValue(ckptMagic, 5), encodeValue(seqMagic, 5)},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	root := f.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	// the lock files are real files (flock), as in FuzzRecover
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seq, ckpt []byte) {
		for _, magic := range [][4]byte{seqMagic, ckptMagic, drainMagic} {
			for _, b := range [][]byte{seq, ckpt} {
				if v, ok := decodeValue(magic, b); ok && !bytes.Equal(encodeValue(magic, v), b) {
					t.Fatalf("%x decodes as %d, which encodes as %x", b, v, encodeValue(magic, v))
				}
			}
		}
		m := newMemFS(root)
		m.MkdirAll(dir, 0o755)
		writeMem(t, m, dir, segmentFile, seg)
		writeMem(t, m, dir, seqFile, seq)
		writeMem(t, m, dir, ckptFile, ckpt)

		q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer q.Close()
		c, err := q.Checkpoint()
		if err != nil || c < 0 || c > ends[3] {
			t.Fatalf("Checkpoint = %d, %v; the log is %d bytes", c, err, ends[3])
		}
		if own, _, err := q.ownCheckpoint(); err != nil || own != c {
			t.Fatalf("the worker's checkpoint is %d (%v), Checkpoint %d", own, err, c)
		}
		if again, err := q.Checkpoint(); err != nil || again != c {
			t.Fatalf("Checkpoint after the worker wrote it back = %d, %v; was %d", again, err, c)
		}
		next, err := q.NextID()
		if err != nil || next < 5 {
			t.Fatalf("NextID = %d, %v; the log holds ids 1 to 4", next, err)
		}
		if read, err := readNextID(m, dir); err != nil || read < 5 || read > next {
			t.Fatalf("readNextID = %d, %v; NextID %d", read, err, next)
		}
		added, err := q.Append(newMessage(1, 10))
		if err != nil || added.ID != next {
			t.Fatalf("Append got id %d, %v; NextID was %d", added.ID, err, next)
		}
		// what the queue writes reads back, whatever bytes the files held
		if read, err := readNextID(m, dir); err != nil || read != next+1 {
			t.Fatalf("readNextID after the append = %d, %v; want %d", read, err, next+1)
		}
		if err := q.SaveCheckpoint(ends[1]); err != nil {
			t.Fatal(err)
		}
		if c, err := q.Checkpoint(); err != nil || c != ends[1] {
			t.Fatalf("Checkpoint after SaveCheckpoint(%d) = %d, %v", ends[1], c, err)
		}
	})
}

// FuzzDeadLetterFiles reads arbitrary bytes as dlq.log and dlq.log.acked:
// no reader fails or panics, they agree on the pending dead letters (the
// list, the count, the ids, a page), each read as the record it came from
// decodes, and CompactDLQ keeps them, leaving files that verify when it
// ran.
func FuzzDeadLetterFiles(f *testing.F) {
	var dlq, acked []byte
	for id := uint64(1); id <= 4; id++ {
		dlq = appendFrame(dlq, appendDeadLetterRecord(nil, ptr(deadLetter(id))))
	}
	dlq = appendFrame(dlq, appendDeadLetterRecord(nil, ptr(deadLetter(2))))
	acked = appendFrame(acked, appendMarkRecord(nil, mark{id: 3, at: epoch, action: MarkDiscarded}))
	acked = appendFrame(acked, appendMarkRecord(nil, mark{id: 1, at: epoch, action: MarkReplayed, replayID: 9}))
	flipped := slices.Clone(dlq)
	flipped[len(dlq)/3] ^= 8
	f.Add(dlq, acked)
	f.Add(dlq[:len(dlq)-5], acked[:len(acked)-3])
	f.Add(flipped, acked[:len(acked)/2])
	f.Add([]byte(nil), acked)
	f.Add(dlq, []byte(nil))
	root := f.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	// the lock files are real files (flock), as in FuzzRecover
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, dlqBytes, ackedBytes []byte) {
		m := newMemFS(root)
		m.MkdirAll(dir, 0o755)
		writeMem(t, m, dir, dlqFile, dlqBytes)
		writeMem(t, m, dir, ackedFile, ackedBytes)
		q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer q.Close()
		var dls []DeadLetter
		if n := allocated(func() { dls, _, err = q.DeadLetters() }); n > allocBound(len(dlqBytes)+len(ackedBytes)) {
			t.Fatalf("DeadLetters of %d bytes allocated %d", len(dlqBytes)+len(ackedBytes), n)
		}
		if err != nil {
			t.Fatalf("DeadLetters: %v", err)
		}
		var ids []uint64
		for _, d := range dls {
			ids = append(ids, d.ID)
			if !bytes.Contains(dlqBytes, appendDeadLetterRecord(nil, &d)) {
				t.Fatalf("dead letter %+v is no record of dlq.log", d)
			}
		}
		if pending, err := q.PendingIDs(); err != nil || !slices.Equal(pending, ids) {
			t.Fatalf("PendingIDs = %v, %v; DeadLetters %v", pending, err, ids)
		}
		if n, err := q.DeadLetterCount(); err != nil || n != len(ids) {
			t.Fatalf("DeadLetterCount = %d, %v; DeadLetters %v", n, err, ids)
		}
		page, err := q.DeadLetterPage(0, 3, 4)
		if err != nil {
			t.Fatalf("DeadLetterPage: %v", err)
		}
		var pageIDs []uint64
		for _, e := range page.Entries {
			pageIDs = append(pageIDs, e.ID)
		}
		if want := ids[:min(3, len(ids))]; !slices.Equal(pageIDs, want) {
			t.Fatalf("DeadLetterPage ids %v, want %v", pageIDs, want)
		}
		for _, id := range ids {
			if _, err := q.DeadLetter(id); err != nil {
				t.Fatalf("DeadLetter(%d): %v", id, err)
			}
		}
		marked, left, err := q.CompactDLQ()
		if err != nil {
			t.Fatalf("CompactDLQ: %v", err)
		}
		after, damage, err := q.DeadLetters()
		if err != nil {
			t.Fatalf("DeadLetters after CompactDLQ: %v", err)
		}
		// a compaction that ran (a mark or damage in dlq.log.acked) leaves
		// the damaged frames out; one with nothing to apply does nothing
		if len(marked)+len(left) > 0 && len(damage) > 0 {
			t.Fatalf("DeadLetters after CompactDLQ found damage %v", damage)
		}
		var afterIDs []uint64
		for _, d := range after {
			afterIDs = append(afterIDs, d.ID)
		}
		if !slices.Equal(afterIDs, ids) {
			t.Fatalf("CompactDLQ changed the pending dead letters from %v to %v", ids, afterIDs)
		}
	})
}
