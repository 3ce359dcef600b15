package queue

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// allocated is how many bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocBound is what a decoder may allocate for n bytes of input: a copy
// or two of them, and the fixed buffers the scans of a file or two read
// frames with.
func allocBound(n int) uint64 { return uint64(8*n) + 1<<20 }

// withTruncations is each seed and its cuts at a few places.
func withTruncations(seeds ...[]byte) [][]byte {
	var out [][]byte
	for _, s := range seeds {
		out = append(out, s)
		for _, n := range []int{len(s) - 1, len(s) / 2, 1} {
			if n > 0 && n < len(s) {
				out = append(out, s[:n])
			}
		}
	}
	return out
}

// FuzzRecords decodes arbitrary bytes as the records of segment.log,
// dlq.log and dlq.log.acked (a message, a dead letter, a mark): no decoder
// panics or allocates more than a few copies of its input, and a record
// that decodes re-encodes to the same bytes (else a reader and a
// compaction, which re-encodes, would disagree about it), but for a
// mark's replay id of 0, which the encoder leaves out.
func FuzzRecords(f *testing.F) {
	m := Message{ID: 7, EnqueuedAt: epoch, Source: "enqueue", CorrelationID: "c-1", Payload: []byte(`{"a":1}`)}
	d := deadLetter(9)
	for _, s := range withTruncations(
		appendMessageRecord(nil, &m),
		appendDeadLetterRecord(nil, &d),
		appendMarkRecord(nil, mark{id: 9, at: epoch, action: MarkDiscarded}),
		appendMarkRecord(nil, mark{id: 9, at: epoch, action: MarkReplayed, replayID: 12}),
	) {
		f.Add(s, uint16(4))
	}
	f.Fuzz(func(t *testing.T, rec []byte, maxPayload uint16) {
		var (
			msg           Message
			dl            DeadLetter
			mk            mark
			slot          pageSlot
			mErr, dErr    error
			kErr, pErr    error
			head, headErr = deadLetterPayload(rec)
		)
		// pageEntry reads what its head does not hold from the frame
		frame := bytes.NewReader(append(make([]byte, headerSize), rec...))
		if n := allocated(func() {
			msg, mErr = decodeMessage(rec, 40)
			dl, dErr = decodeDeadLetter(rec)
			mk, kErr = decodeMark(rec)
			slot, pErr = pageEntry(rec[:min(len(rec), recordHead)], int64(len(rec)), 0, frame, int(maxPayload))
		}); n > allocBound(len(rec)) {
			t.Fatalf("decoding %d bytes allocated %d", len(rec), n)
		}
		if mErr == nil {
			if msg.Offset != 40 {
				t.Fatalf("decodeMessage: offset %d, want 40", msg.Offset)
			}
			if again := appendMessageRecord(nil, &msg); !bytes.Equal(again, rec) {
				t.Fatalf("message record %x decodes as %+v, which re-encodes as %x", rec, msg, again)
			}
		}
		if (dErr == nil) != (headErr == nil) || (dErr == nil) != (pErr == nil) {
			t.Fatalf("decodeDeadLetter: %v, deadLetterPayload: %v, pageEntry: %v", dErr, headErr, pErr)
		}
		if dErr == nil {
			if again := appendDeadLetterRecord(nil, &dl); !bytes.Equal(again, rec) {
				t.Fatalf("dead-letter record %x decodes as %+v, which re-encodes as %x", rec, dl, again)
			}
			if head != len(rec)-len(dl.Payload) {
				t.Fatalf("deadLetterPayload = %d, the payload is the last %d bytes of %d", head, len(dl.Payload), len(rec))
			}
			want := dl
			want.Payload = dl.Payload[:min(len(dl.Payload), int(maxPayload))]
			if diff := cmp.Diff(want, slot.DeadLetter); diff != "" || slot.PayloadSize != len(dl.Payload) {
				t.Fatalf("pageEntry(%d) (-want +got):\n%s\nsize %d, want %d", maxPayload, diff, slot.PayloadSize, len(dl.Payload))
			}
		}
		if kErr == nil {
			// a replay id of 0 is none recorded: written in 18 bytes, read
			// from 26 as well (the same mark)
			same := rec
			if len(rec) == 26 && mk.replayID == 0 {
				same = rec[:18]
			}
			if again := appendMarkRecord(nil, mk); !bytes.Equal(again, same) {
				t.Fatalf("mark record %x decodes as %+v, which re-encodes as %x", rec, mk, again)
			}
		}
	})
}

// FuzzRecordRoundTrip encodes records of arbitrary fields: each decodes
// to what was encoded.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(uint64(7), int64(epoch.UnixNano()), int64(epoch.UnixNano()+1), uint32(3), "enqueue", "c-1", "boom", []byte("{}"), uint64(0))
	f.Add(uint64(0), int64(-1), int64(0), uint32(1<<31), "", "", "", []byte(nil), uint64(1))
	f.Fuzz(func(t *testing.T, id uint64, at, failed int64, attempts uint32, source, cid, lastErr string, payload []byte, replay uint64) {
		if len(source) > 255 || len(cid) > 1<<16-1 {
			return // the encoder's callers refuse these
		}
		m := Message{ID: id, Offset: 3, EnqueuedAt: time.Unix(0, at).UTC(), Source: source, CorrelationID: cid, Payload: payload}
		got, err := decodeMessage(appendMessageRecord(nil, &m), 3)
		if err != nil || sameMessage(got, m) != "" {
			t.Fatalf("message %+v reads back as %+v, %v", m, got, err)
		}
		d := DeadLetter{ID: id, EnqueuedAt: time.Unix(0, at).UTC(), FailedAt: time.Unix(0, failed).UTC(), Attempts: int(attempts), LastError: lastErr, Payload: payload}
		gotD, err := decodeDeadLetter(appendDeadLetterRecord(nil, &d))
		if diff := cmp.Diff(d, gotD, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); err != nil || diff != "" {
			t.Fatalf("dead letter reads back (-want +got):\n%s\n%v", diff, err)
		}
		k := mark{id: id, at: time.Unix(0, at).UTC(), action: byte(attempts), replayID: replay}
		gotK, err := decodeMark(appendMarkRecord(nil, k))
		if err != nil || gotK != k {
			t.Fatalf("mark %+v reads back as %+v, %v", k, gotK, err)
		}
		r := Retry{ID: id, Offset: at, Attempt: int(attempts), Due: time.Unix(0, failed).UTC()}
		s := newRetrySchedule(nil, "")
		if _, _, damage, err := s.load(bytes.NewReader(encodeRetryLog([]Retry{r})), retrySetFrame); err != nil || len(damage) > 0 || !slices.Equal(s.list(), []Retry{r}) {
			t.Fatalf("retry %+v reads back as %+v, %v %v", r, s.list(), damage, err)
		}
		// and one that carries its message: Retries reads it without its
		// payload, the worker where it is, and reads it back whole
		c := m
		c.Offset = at
		r.Message = &c
		log := encodeRetryLog([]Retry{r})
		s = newRetrySchedule(nil, "")
		s.heads = true
		_, _, damage, err := s.load(bytes.NewReader(log), int64(len(log)))
		head := c
		head.Payload = nil
		want := r
		want.Message = &head
		if diff := cmp.Diff([]Retry{want}, s.list(), cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); err != nil || len(damage) > 0 || diff != "" {
			t.Fatalf("a retry carrying its message reads back (-want +got):\n%s\n%v %v", diff, damage, err)
		}
		path := filepath.Join(t.TempDir(), retryFile)
		if err := os.WriteFile(path, log, 0o600); err != nil {
			t.Fatal(err)
		}
		s = newRetrySchedule(OS{}, path)
		if _, _, damage, err := s.load(bytes.NewReader(log), int64(len(log))); err != nil || len(damage) > 0 || s.heldPayload() != 0 {
			t.Fatalf("the worker's load: %v %v, %d payload bytes held", damage, err, s.heldPayload())
		}
		got, carried, bad, err := s.message(r)
		if err != nil || !carried || bad != nil || sameMessage(got, c) != "" {
			t.Fatalf("the carried message reads back as %+v (carried %v, damage %v, %v)", got, carried, bad, err)
		}
	})
}

// legacyRetries is a retry schedule in the format of older versions.
func legacyRetries(rs []Retry) []byte {
	b := append(retMagic[:], binary.BigEndian.AppendUint32(nil, uint32(len(rs)))...)
	for _, r := range rs {
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Offset))
		b = binary.BigEndian.AppendUint32(b, uint32(r.Attempt))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Due.UnixNano()))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// FuzzRetrySchedule loads arbitrary bytes as segment.log.retry (the log
// format, or the format of older versions): no panic, a few copies of the
// input allocated at most, only a torn tail as damage when it loads, and
// what it loads is written back (compacted) as a log that loads to the
// same entries; a log of sets of distinct ids only is written back byte
// for byte.
func FuzzRetrySchedule(f *testing.F) {
	rs := []Retry{
		{ID: 3, Offset: 0, Attempt: 1, Due: epoch.Add(time.Second)},
		{ID: 5, Offset: 90, Attempt: 2, Due: epoch},
		{ID: 8, Offset: 200, Attempt: 7, Due: epoch.Add(-time.Hour)},
	}
	// retries that carry their message (kind 6)
	carried := []Retry{
		{ID: 3, Offset: 0, Attempt: 2, Due: epoch.Add(time.Minute), Message: &Message{ID: 3, EnqueuedAt: epoch, Source: "enqueue", CorrelationID: "c-3", Payload: []byte(`{"a":1}`)}},
		{ID: 9, Offset: 300, Attempt: 1, Due: epoch, Message: &Message{ID: 9, Offset: 300, EnqueuedAt: epoch.Add(-time.Second)}},
	}
	var changes, mixed []byte
	for _, b := range [][]byte{appendRetrySet(nil, rs[0]), appendRetryClear(nil, 3), appendRetrySet(nil, rs[1])} {
		changes = appendFrame(changes, b)
	}
	// an entry set by an older version, then set again carrying its message
	for _, b := range [][]byte{appendRetrySet(nil, rs[0]), appendRetryCopy(nil, carried[0]), appendRetrySet(nil, rs[2]), appendRetryClear(nil, 8), appendRetryCopy(nil, carried[1])} {
		mixed = appendFrame(mixed, b)
	}
	for _, s := range withTruncations(encodeRetryLog(rs), changes, legacyRetries(rs), encodeRetryLog(carried), mixed) {
		f.Add(s)
	}
	f.Add(legacyRetries(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := newRetrySchedule(nil, "")
		var (
			legacy bool
			end    int64
			damage []Damage
			err    error
		)
		if n := allocated(func() { legacy, end, damage, err = s.load(bytes.NewReader(b), int64(len(b))) }); n > allocBound(len(b)) {
			t.Fatalf("loading %d bytes allocated %d", len(b), n)
		}
		if err != nil {
			return
		}
		if end < 0 || end > int64(len(b)) || legacy && end != int64(len(b)) {
			t.Fatalf("load: end %d of %d bytes (legacy %v)", end, len(b), legacy)
		}
		for _, d := range damage {
			if !d.Torn || d.Offset != end {
				t.Fatalf("load succeeded with damage %v (end %d)", d, end)
			}
		}
		list := s.list()
		if s.Len() != len(list) {
			t.Fatalf("Len %d, list of %d", s.Len(), len(list))
		}
		if first, ok := s.first(); ok != (len(list) > 0) || ok && slices.ContainsFunc(list, func(r Retry) bool { return r.Due.Before(first.Due) }) {
			t.Fatalf("first = %+v, %v of %+v", first, ok, list)
		}
		// the worker's compaction of the file: the frames that carry a
		// message copied from it
		path := filepath.Join(t.TempDir(), retryFile)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s.fs, s.path, s.end = OS{}, path, end
		if err := s.compact(); err != nil {
			t.Fatalf("compaction: %v", err)
		}
		if lost := s.takeLost(); len(lost) > 0 {
			t.Fatalf("the compaction lost %+v", lost)
		}
		out, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if s.end != int64(len(out)) || s.heldPayload() != 0 {
			t.Fatalf("compacted: end %d of %d bytes, %d payload bytes held", s.end, len(out), s.heldPayload())
		}
		heads, againHeads := newRetrySchedule(nil, ""), newRetrySchedule(nil, "")
		heads.heads, againHeads.heads = true, true
		heads.load(bytes.NewReader(b), int64(len(b)))
		if _, _, _, err := againHeads.load(bytes.NewReader(out), int64(len(out))); err != nil {
			t.Fatalf("the compacted log does not load: %v", err)
		}
		if diff := cmp.Diff(heads.list(), againHeads.list()); diff != "" {
			t.Fatalf("the compacted log loads other messages (-loaded +compacted):\n%s", diff)
		}
		again := newRetrySchedule(nil, "")
		if legacy2, end2, damage2, err := again.load(bytes.NewReader(out), int64(len(out))); err != nil || legacy2 || end2 != int64(len(out)) || len(damage2) > 0 {
			t.Fatalf("the compacted log does not load: %v, end %d of %d, %v", err, end2, len(out), damage2)
		}
		if diff := cmp.Diff(list, again.list()); diff != "" {
			t.Fatalf("the compacted log loads other entries (-loaded +compacted):\n%s", diff)
		}
		if !legacy && end == s.liveBytes() && !bytes.Equal(out, b[:end]) {
			t.Fatalf("a log of %d sets of distinct ids is written back as other bytes:\n%x\n%x", len(list), b[:end], out)
		}
	})
}
