package queue

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeUndecodableDeadLetters writes the dead letters ids straight into
// the dlq.log of the queue in dir, those of bad with a last error longer
// than their record: each frame's checksum verifies, but the record is no
// dead letter (errBadRecord), so it is counted as pending, not listed,
// and reported as damage.
func writeUndecodableDeadLetters(t *testing.T, dir string, ids []uint64, bad map[uint64]bool) {
	t.Helper()
	var b []byte
	for _, id := range ids {
		d := deadLetter(id)
		rec := appendDeadLetterRecord(nil, &d)
		if bad[id] {
			binary.BigEndian.PutUint32(rec[29:33], uint32(len(rec))) // past the record's end
		}
		b = appendFrame(b, rec)
	}
	if err := os.WriteFile(filepath.Join(dir, dlqFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// pageShape is what a test checks of a DeadLetterPage: its entries' ids
// and where the pages around it start.
type pageShape struct {
	IDs               []uint64
	Total             int
	More, HasPrev     bool
	Next, Prev, Last  uint64
	Damage, DamageAll int
}

func shapeOf(p DeadLetterPage) pageShape {
	s := pageShape{Total: p.Total, More: p.More, HasPrev: p.HasPrev, Next: p.Next, Prev: p.Prev, Last: p.Last,
		Damage: len(p.Damage), DamageAll: p.DamageTotal}
	for _, e := range p.Entries {
		s.IDs = append(s.IDs, e.ID)
	}
	return s
}

// A page whose dead letters all fail to decode (their frames verify, so
// they are counted) says where the next page starts all the same: the
// highest id it looked at. The page said More and listed none, so the
// API and the UI, which took the next page's after from its last entry,
// ended the pages there, and the dead letters after it could not be
// reached.
func TestDeadLetterPageOfUndecodableRecords(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	ids := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	writeUndecodableDeadLetters(t, q.dir, ids, map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true})
	tests := []struct {
		name  string
		after uint64
		want  pageShape
	}{
		{"the first page, none readable", 0, pageShape{Total: 8, More: true, Next: 2, Last: 6, Damage: 5, DamageAll: 5}},
		{"the second page, none readable", 2, pageShape{Total: 8, More: true, HasPrev: true, Next: 4, Prev: 0, Last: 6, Damage: 5, DamageAll: 5}},
		{"one readable after one that is not", 4, pageShape{IDs: []uint64{6}, Total: 8, More: true, HasPrev: true, Next: 6, Prev: 2, Last: 6, Damage: 5, DamageAll: 5}},
		{"the last page", 6, pageShape{IDs: []uint64{7, 8}, Total: 8, HasPrev: true, Prev: 4, Last: 6, Damage: 5, DamageAll: 5}},
		{"off the grid, among the unreadable", 1, pageShape{Total: 8, More: true, HasPrev: true, Next: 3, Prev: 0, Last: 6, Damage: 5, DamageAll: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := q.DeadLetterPage(tt.after, 2, 64)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, shapeOf(page)); diff != "" {
				t.Errorf("DeadLetterPage(%d, 2, 64) (-want +got):\n%s", tt.after, diff)
			}
		})
	}

	// following Next from the first page reaches every readable one, and
	// the Last page is one of the pages followed
	var got, afters []uint64
	var last uint64
	after := uint64(0)
	for range len(ids) + 1 {
		page, err := q.DeadLetterPage(after, 2, 64)
		if err != nil {
			t.Fatal(err)
		}
		afters = append(afters, after)
		for _, e := range page.Entries {
			got = append(got, e.ID)
		}
		if !page.More {
			break
		}
		after, last = page.Next, page.Last
	}
	if diff := cmp.Diff([]uint64{6, 7, 8}, got); diff != "" {
		t.Errorf("the pages followed list (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{0, 2, 4, 6}, afters); diff != "" {
		t.Errorf("the pages followed start after (-want +got):\n%s", diff)
	}
	if last != afters[len(afters)-1] {
		t.Errorf("Last is %d, want the last page followed, after %d", last, afters[len(afters)-1])
	}
}
