package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wantUndecodable is the damage the readers of dlq.log report for the
// dead letter id as writeUndecodableDeadLetters writes it among ids: its
// frame's offset and length, the id its record holds, and why the record
// cannot be decoded.
func wantUndecodable(ids []uint64, bad uint64) Damage {
	var off int64
	for _, id := range ids {
		d := deadLetter(id)
		n := int64(len(appendDeadLetterRecord(nil, &d)))
		if id == bad {
			return Damage{File: dlqFile, Offset: off, Length: headerSize + n, ID: id,
				Reason: fmt.Sprintf("record cannot be decoded: its last error of %d bytes runs past the end of the record (%d bytes)", n, n)}
		}
		off += headerSize + n
	}
	panic("no such id")
}

// A dead letter whose frame verifies but whose record cannot be decoded
// (its last error said to be longer than the record) is reported as
// damage, at its frame's offset with the id its record holds, by every
// reader that reports dlq.log's damage: ReadDeadLetters, ListDeadLetters
// (nexus dlq list) and DeadLetterPage (the API and the UI). It was
// counted as pending and listed nowhere, with no damage said: a count
// with rows missing and no reason.
func TestUndecodableDeadLettersAreReportedAsDamage(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	ids := []uint64{1, 2, 3, 4, 5}
	writeUndecodableDeadLetters(t, q.dir, ids, map[uint64]bool{2: true, 4: true})
	want := []Damage{wantUndecodable(ids, 2), wantUndecodable(ids, 4)}

	dls, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, d := range dls {
		got = append(got, d.ID)
	}
	if diff := cmp.Diff([]uint64{1, 3, 5}, got); diff != "" {
		t.Errorf("ReadDeadLetters lists (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, damage); diff != "" {
		t.Errorf("ReadDeadLetters's damage (-want +got):\n%s", diff)
	}

	l, damage, err := ListDeadLetters(root, testTenant, testFlow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 3 {
		t.Errorf("ListDeadLetters holds %d, want 3", l.Len())
	}
	if diff := cmp.Diff(want, damage); diff != "" {
		t.Errorf("ListDeadLetters's damage (-want +got):\n%s", diff)
	}

	for _, after := range []uint64{0, 4} {
		page, err := q.DeadLetterPage(after, 2, 64)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, page.Damage); diff != "" || page.DamageTotal != 2 {
			t.Errorf("DeadLetterPage(%d)'s damage, %d in all (-want +got):\n%s", after, page.DamageTotal, diff)
		}
	}

	pending, damaged, err := q.deadLetterCounts()
	if err != nil || pending != 5 || damaged != 2 {
		t.Errorf("deadLetterCounts = %d pending, %d damaged, %v; want 5 (as Total counts them), 2", pending, damaged, err)
	}
}

// Replaying all the dead letters replays the others and leaves one whose
// record cannot be decoded pending, said as a Skipped one (it was passed
// over in silence); discarding all marks it, and the worker's rewrite of
// dlq.log then takes it off the disk with the others marked. The rewrite
// kept its frame and dropped its mark, so it was pending again.
func TestUndecodableDeadLetterReplayedAllAndDiscardedAll(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	ids := []uint64{1, 2, 3}
	writeUndecodableDeadLetters(t, q.dir, ids, map[uint64]bool{2: true})
	var replayed []uint64
	var skipped []string
	n, err := q.ReplayAll(3, SourceReplay, func() string { return "c" }, func(r Replayed) { replayed = append(replayed, r.ID) },
		func(s Skipped) { skipped = append(skipped, fmt.Sprintf("%d %d %v", s.ID, s.PayloadSize, s.Err)) })
	if err != nil || n != 2 {
		t.Fatalf("ReplayAll = %d, %v; want 2", n, err)
	}
	d := wantUndecodable(ids, 2)
	wantSkipped := []string{fmt.Sprintf("2 0 queue %s/%s: dead letter 2 cannot be replayed: its record at offset %d of dlq.log cannot be decoded (%s): discard it",
		testTenant, testFlow, d.Offset, strings.TrimPrefix(d.Reason, "record cannot be decoded: "))}
	if diff := cmp.Diff([]uint64{1, 3}, replayed); diff != "" {
		t.Errorf("replayed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSkipped, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if got, err := q.PendingIDs(); err != nil || !cmp.Equal(got, []uint64{2}) {
		t.Fatalf("pending after ReplayAll: %v, %v; want 2", got, err)
	}

	if n, err := q.MarkAll(3, MarkDiscarded, func(uint64) {}); err != nil || n != 1 {
		t.Fatalf("MarkAll = %d, %v; want 1", n, err)
	}
	if _, damage, err := q.CompactDLQ(); err != nil || len(damage) != 0 {
		t.Fatalf("CompactDLQ: damage %v, %v", damage, err)
	}
	if got, err := q.PendingIDs(); err != nil || len(got) != 0 {
		t.Errorf("pending after MarkAll and CompactDLQ: %v, %v; want none", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(q.dir, dlqFile)); err != nil || len(b) != 0 {
		t.Errorf("dlq.log after the rewrite: %d bytes, %v; want none", len(b), err)
	}
}
