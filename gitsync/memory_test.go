package gitsync_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// memUse is what the process allocated during a phase, the most heap it
// had in use, sampled every millisecond, and the heap in use before it.
type memUse struct {
	allocated, peak, base uint64
}

func (m memUse) String() string {
	return fmt.Sprintf("allocated %d MB, peak heap %d MB (%d MB before)", m.allocated>>20, m.peak>>20, m.base>>20)
}

// measure runs f and returns the memory it took.
func measure(f func()) memUse {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	peak.Store(before.HeapInuse)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return memUse{allocated: after.TotalAlloc - before.TotalAlloc, peak: peak.Load(), base: before.HeapInuse}
}

// TestLargeFileOutsideFlows: a 100 MB file of random bytes outside the
// flows folder is read whole only where go-git indexes a pack holding it
// (the first fetch, and the packing of the whole clone, whose new pack go-git
// indexes by reading every object), never by the rounds that follow it;
// the packing itself streams it from the old pack to the new one. It
// decompressed the file into memory whole, several times over: 603 MB
// allocated and a 347 MB heap in the round that packed the clone. The
// rounds that change a flow pack the small packs they fetched, never the
// pack holding the file: the plan weighed packs by objects, so the first
// fetch's pack, a few objects, was packed again with them about every
// MaxPacks rounds, the file rewritten and indexed each time (MaxPacks+2
// rounds pack the clone once, which shows it).
func TestLargeFileOutsideFlows(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and syncs a file of 16–100 MB")
	}
	// the race detector doubles what go-git allocates, and takes a minute
	// over 100 MB: a smaller file and a looser bound, which the packing
	// that held the file whole (six times its size) still breaks
	size, bound := 100<<20, 3.0/2
	if raceDetector {
		size, bound = 16<<20, 4
	}
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "v0"))
	writeRandom(e.src, "tools/big.bin", size)
	first := e.src.gitCommit("v0")
	// go-git's: the received pack is indexed by reading each object whole
	t.Logf("first round: %v", measure(func() { e.mustApply(first) }))
	big := largestPack(t, e.cfg.Dir)
	packings := 0
	for i := 1; i <= gitsync.MaxPacks+2; i++ {
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", fmt.Sprintf("v%d", i)))
		c := e.src.gitCommit(fmt.Sprintf("v%d", i))
		before := len(e.logs.Events(t, "sync_repacked"))
		m := measure(func() { e.mustApply(c) })
		if len(e.logs.Events(t, "sync_repacked")) > before {
			packings++
			t.Logf("round %d, packing the clone: %v", i, m)
		} else if i == 1 {
			t.Logf("round %d: %v", i, m)
		}
		if m.allocated > 20<<20 {
			t.Errorf("round %d, which changed a flow only: %v", i, m)
		}
		if got := largestPack(t, e.cfg.Dir); got != big {
			t.Fatalf("round %d rewrote the pack holding the file: %s, then %s", i, big, got)
		}
	}
	if packings == 0 {
		t.Fatalf("the clone was never packed in %d rounds", gitsync.MaxPacks+2)
	}
	// the index go-git builds for the new pack reads the file once
	var err error
	packing := measure(func() { err = gitsync.PackWholeClone(e.cfg.Dir) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("packing the whole clone: %v", packing)
	if limit := uint64(bound * float64(size)); packing.allocated > limit || packing.peak > limit {
		t.Errorf("packing the whole clone took more than %.1f times the file: %v", bound, packing)
	}
	runGit(t, e.cfg.Dir, "fsck", "--no-dangling")
}

// largestPack returns the name of the largest pack of the clone in dir.
func largestPack(t *testing.T, dir string) string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var size int64
	for _, de := range des {
		if filepath.Ext(de.Name()) != ".pack" {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > size {
			name, size = de.Name(), fi.Size()
		}
	}
	if name == "" {
		t.Fatalf("no pack in %s", dir)
	}
	return name
}

// writeRandom writes a file of size random bytes to the work tree.
//
//go:noinline
func writeRandom(r *srcRepo, path string, size int) {
	big := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(big)
	r.write(path, big)
}
