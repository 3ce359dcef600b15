package queue

import (
	"fmt"
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
