package gitsync

import "testing"

// TestRepackDue: the clone is packed once it holds more than MaxPacks
// packs; after a repack that failed, only once MaxPacks more have come,
// not at every round (a clone that could not be packed cost a walk of its
// history and a warning at every poll).
func TestRepackDue(t *testing.T) {
	for _, c := range []struct {
		failedAt, packs int
		want            bool
	}{
		{0, MaxPacks, false},
		{0, MaxPacks + 1, true},
		{MaxPacks + 1, MaxPacks + 1, false},
		{MaxPacks + 1, 2 * MaxPacks, false},
		{MaxPacks + 1, 2*MaxPacks + 1, true},
	} {
		s := &Syncer{repackFailedAt: c.failedAt}
		if got := s.repackDue(c.packs); got != c.want {
			t.Errorf("failed at %d packs, %d packs now: repackDue = %v, want %v", c.failedAt, c.packs, got, c.want)
		}
	}
}
