package queue

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// listIDs is the ids Each gives of l, in its order.
func listIDs(t *testing.T, l *DeadLetterList, wantGone int) []uint64 {
	t.Helper()
	var ids []uint64
	gone, err := l.Each(func(d DeadLetter) error {
		if d.Payload != nil || d.LastError != "boom" || d.Attempts != 3 || !d.FailedAt.Equal(time.Unix(2, 0)) {
			t.Errorf("dead letter %d: %+v; want its fields as written, without its payload", d.ID, d)
		}
		ids = append(ids, d.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gone != wantGone {
		t.Errorf("Each passed over %d dead letters, want %d", gone, wantGone)
	}
	return ids
}

// A DeadLetterList gives the dead letters pending when it was read, by
// id, read again one at a time: from the same file while it only grew
// (a dead letter appended since is not in it), and from the rewritten
// one after the worker's rewrite (a dead letter discarded and rewritten
// away meanwhile is passed over, the others found where they now are).
func TestDeadLetterListReadsTheDeadLettersAgain(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	root := filepath.Dir(filepath.Dir(q.dir))
	writeDeadLetters(t, q.dir, 10, 100)
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	l, damage, err := ListDeadLetters(root, q.Tenant, q.Flow, nil)
	if err != nil || len(damage) > 0 || l.Len() != 9 {
		t.Fatalf("ListDeadLetters: %d dead letters, damage %v, %v; want 9", l.Len(), damage, err)
	}
	if err := q.MoveToDLQ(DeadLetter{ID: 11, EnqueuedAt: time.Unix(1, 0), FailedAt: time.Unix(2, 0), Attempts: 3, LastError: "boom", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 4, 5, 6, 7, 8, 9, 10}
	if got := listIDs(t, l, 0); !slices.Equal(got, want) {
		t.Errorf("after an append: %v, want %v", got, want)
	}
	if err := q.Mark(5, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if applied, _, err := q.CompactDLQ(); err != nil || len(applied) != 2 {
		t.Fatalf("CompactDLQ: %d marks applied, %v; want 2", len(applied), err)
	}
	want = []uint64{1, 2, 4, 6, 7, 8, 9, 10}
	if got := listIDs(t, l, 1); !slices.Equal(got, want) {
		t.Errorf("after the rewrite: %v, want %v", got, want)
	}
}
