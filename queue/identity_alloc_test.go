package queue

import "testing"

// TestAppendPathChecksCost: the checks each batch of appends makes that
// append.lock and segment.log.seq are the files at their paths (a file
// deleted or replaced by hand is opened again) stat the two paths only:
// the files this handle has open keep their identity, read once when
// opened, and the paths are joined once. Each batch also statted both open
// files and joined both paths again: 10 allocations and 4 stat syscalls
// for the lock, the check and the read of the counter, where 6 and 2 do.
func TestAppendPathChecksCost(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	allocs := testing.AllocsPerRun(200, func() {
		unlock, err := q.lockAppend()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.nextID(0); err != nil {
			t.Fatal(err)
		}
		unlock()
	})
	// a stat of each path (2 each), the unlock and the counter's read
	if allocs > 6 {
		t.Errorf("taking the append lock and reading the id counter made %v allocations, want at most 6", allocs)
	}
}
