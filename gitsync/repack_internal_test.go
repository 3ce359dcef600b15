package gitsync

import (
	"fmt"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

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

// TestPlanRollUp: the small packs are packed into one and the large ones
// kept while each is at least twice the size in bytes of the next smaller
// (git repack --geometric=2), and the smallest kept ones join the roll-up
// while more than MaxPacks/2 would be kept; the whole clone is packed when
// the roll-up would reach the largest pack or take fewer than two packs.
func TestPlanRollUp(t *testing.T) {
	same := func(n int, size int64) []int64 { return slices.Repeat([]int64{size}, n) }
	progression := func(n int, from, factor int64) []int64 {
		var out []int64
		for range n {
			out = append(out, from)
			from *= factor
		}
		return out
	}
	cat := func(packs ...[]int64) []int64 { return slices.Concat(packs...) }
	for _, c := range []struct {
		name   string
		packs  []int64 // sizes in bytes, in the order ObjectPacks gives them
		rollUp []int64 // those of the packs rolled up, smallest first
		whole  bool
	}{
		{"packs alike", same(17, 5), nil, true},
		{"a large pack and the fetches since", append([]int64{600}, same(16, 5)...), same(16, 5), false},
		{"the fetches since and the last roll-up", append([]int64{600, 80}, same(16, 5)...), append(same(16, 5), 80), false},
		{"the roll-up reaches the largest pack", append([]int64{150, 80}, same(16, 5)...), nil, true},
		{"a pack in the middle joins the roll-up", append([]int64{5000, 150, 120}, same(15, 5)...), append(same(15, 5), 120, 150), false},
		{"kept packs in progression", append(progression(7, 1000, 2), same(16, 5)...), same(16, 5), false},
		{"a large file's pack, the last roll-up and the fetches since", cat([]int64{100 << 20, 3000}, same(16, 1000)), append(same(16, 1000), 3000), false},
		{"too many packs kept: the smallest join", cat([]int64{1 << 40}, progression(8, 1000, 4), same(16, 5)), cat(same(16, 5), []int64{1000, 4000}), false},
		{"too many packs kept: the packs they reach join", cat([]int64{1 << 40}, progression(8, 1000, 2), same(16, 5)), cat(same(16, 5), progression(8, 1000, 2)), false},
		{"too many packs kept: the roll-up reaches the largest", append(progression(8, 1000, 2), same(16, 5)...), nil, true},
		{"one pack", []int64{10}, nil, true},
		{"no pack", nil, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var packs []packWeight
			for i, n := range c.packs {
				packs = append(packs, packWeight{hash: plumbing.NewHash(fmt.Sprintf("%040x", i+1)), bytes: n})
			}
			rollUp, whole := planRollUp(packs)
			if whole != c.whole {
				t.Fatalf("whole = %v, want %v", whole, c.whole)
			}
			if whole {
				if len(rollUp) != len(packs) {
					t.Errorf("the whole clone packed, and %d packs of %d said rolled up", len(rollUp), len(packs))
				}
				return
			}
			var got []int64
			for _, p := range rollUp {
				got = append(got, p.bytes)
			}
			if diff := cmp.Diff(c.rollUp, got); diff != "" {
				t.Errorf("rolled up (-want +got):\n%s", diff)
			}
		})
	}
}
