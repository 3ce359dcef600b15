package gitsync_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// packFiles counts the packs of the clone in dir.
func packFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pack") {
			n++
		}
	}
	return n
}

// TestCloneKeepsFewPacks: every fetch that brings objects adds a pack to
// the clone, and every round read every pack's index again: a repo taking
// a commit at every poll made each round costlier than the last. Past
// gitsync.MaxPacks a round packs the clone into one; the flows of every
// later commit are still read from it, and so is the head after a
// force-push back to an old commit. A symbolic link or a submodule in the
// repo (outside flows/, where they are allowed) does not stop the packing:
// go-git's own repack failed on both, at every round, for ever.
//
// The clone of files only takes 3*gitsync.MaxPacks commits and is packed
// at least twice; with a symbolic link or a submodule, which only have to
// not stop the packing, gitsync.MaxPacks+2 commits pack it once (a commit
// and its round cost about 0.1 s of the package's time).
func TestCloneKeepsFewPacks(t *testing.T) {
	for _, c := range []struct {
		extra            string
		commits, packing int
	}{
		{"", 3 * gitsync.MaxPacks, 2},
		{"a symbolic link", gitsync.MaxPacks + 2, 1},
		{"a submodule", gitsync.MaxPacks + 2, 1},
	} {
		t.Run(cmp.Or(c.extra, "files only"), func(t *testing.T) { testCloneKeepsFewPacks(t, c.extra, c.commits, c.packing) })
	}
}

func testCloneKeepsFewPacks(t *testing.T, extra string, commits, packing int) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "v0"))
	e.src.write("README.md", []byte("the config repo\n"))
	switch extra {
	case "a symbolic link":
		if err := os.Symlink("README.md", filepath.Join(e.src.dir, "README-link.md")); err != nil {
			t.Fatal(err)
		}
	case "a submodule":
		// an uninitialised submodule: an empty folder and a gitlink
		if err := os.MkdirAll(filepath.Join(e.src.dir, "vendor", "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		e.src.git("update-index", "--add", "--cacheinfo", "160000,1234567890abcdef1234567890abcdef12345678,vendor/sub")
	}
	first := e.src.gitCommit("v0")
	e.mustApply(first)
	most := 0
	for i := 1; i <= commits; i++ {
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", fmt.Sprintf("v%d", i)))
		e.mustApply(e.src.gitCommit(fmt.Sprintf("v%d", i)), fmt.Sprintf("published acme/x v%d", i+1))
		most = max(most, packFiles(t, e.cfg.Dir))
		if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Flow.Description() != fmt.Sprintf("v%d", i) {
			t.Fatalf("after commit v%d the live flow is %+v", i, lf)
		}
	}
	if most > gitsync.MaxPacks {
		t.Errorf("the clone held %d packs after a round, more than %d", most, gitsync.MaxPacks)
	}
	if got := e.logs.Events(t, "sync_repack_failed"); len(got) != 0 {
		t.Errorf("%d sync_repack_failed lines, the first: %v", len(got), got[0])
	}
	if got := len(e.logs.Events(t, "sync_repacked")); got < packing {
		t.Errorf("%d sync_repacked lines after %d commits, want at least %d", got, commits, packing)
	}
	checkPackedClone(t, e, first, commits)
}

// checkPackedClone checks a clone packed after commits commits on
// first: git finds every object its history needs; it was packed, not
// cloned anew (a round that read the clone after a repack through the
// indexes of the packs it deleted took that for damage); and a force-push
// back to first, whose objects the packing kept, is served.
func checkPackedClone(t *testing.T, e *env, first string, commits int) {
	t.Helper()
	runGit(t, e.cfg.Dir, "fsck", "--no-dangling")
	if got := e.logs.Events(t, "sync_repaired"); len(got) != 0 {
		t.Errorf("the clone was repaired %d times: %v", len(got), got[0])
	}
	e.src.git("reset", "--hard", first)
	e.mustApply(first, fmt.Sprintf("published acme/x v%d", commits+2))
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Flow.Description() != "v0" {
		t.Fatalf("after the force-push back to v0 the live flow is %+v", lf)
	}
}

// TestCloneRollsUpItsSmallPacks: a clone of a large repo (600 files of
// 1 KB) packs the small packs its later fetches brought into one and keeps
// its large pack as it is (packing the whole clone every gitsync.MaxPacks fetches read and
// wrote every object of the repo each time: 5.8 s for 2,000 commits, in
// the sync round); the clone stays whole.
func TestCloneRollsUpItsSmallPacks(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "v0"))
	for i := range 600 {
		page := make([]byte, 512)
		rand.NewChaCha8([32]byte{byte(i), byte(i >> 8)}).Read(page)
		e.src.write(fmt.Sprintf("docs/page-%03d.md", i), fmt.Appendf(nil, "page %d\n%x\n", i, page))
	}
	first := e.src.gitCommit("v0")
	e.mustApply(first)
	entries, err := os.ReadDir(filepath.Join(e.cfg.Dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	var large []string // the first fetch's pack and its index
	for _, en := range entries {
		large = append(large, en.Name())
	}
	for i := 1; i <= 3*gitsync.MaxPacks; i++ {
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", fmt.Sprintf("v%d", i)))
		e.mustApply(e.src.gitCommit(fmt.Sprintf("v%d", i)), fmt.Sprintf("published acme/x v%d", i+1))
		if n := packFiles(t, e.cfg.Dir); n > gitsync.MaxPacks {
			t.Fatalf("the clone held %d packs after commit v%d, more than %d", n, i, gitsync.MaxPacks)
		}
	}
	repacked := e.logs.Events(t, "sync_repacked")
	if len(repacked) < 2 {
		t.Fatalf("%d sync_repacked lines after %d commits, want at least 2", len(repacked), 3*gitsync.MaxPacks)
	}
	for _, l := range repacked {
		if l["whole"] != false || l["packed"] == l["packs"] {
			t.Errorf("the whole clone was packed: %v", l)
		}
	}
	for _, name := range large {
		if _, err := os.Stat(filepath.Join(e.cfg.Dir, "objects", "pack", name)); err != nil {
			t.Errorf("the first fetch's large pack was rewritten: %v", err)
		}
	}
	checkPackedClone(t, e, first, 3*gitsync.MaxPacks)
}

// openUnder lists the files under dir this process holds open (from
// /proc/self/fd).
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing this process's descriptors: %v", err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			open = append(open, target)
		}
	}
	return open
}

// TestRoundsLeaveNoPackOpen: a round reads the clone's packs through
// descriptors it keeps open while it lasts (it opened a pack for every
// object it read), and closes them at its end, the packing of the clone
// and a clone made anew included: rounds after rounds hold no file of the
// clone, and none of the packs a packing deleted.
func TestRoundsLeaveNoPackOpen(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/f0.md", flowtest.Marked("acme", "f0", "v0"))
	e.mustApply(e.src.gitCommit("v0"))
	for i := 1; i <= gitsync.MaxPacks+2; i++ {
		e.src.write("flows/acme/f0.md", flowtest.Marked("acme", "f0", fmt.Sprintf("v%d", i)))
		e.mustApply(e.src.gitCommit(fmt.Sprintf("v%d", i)), fmt.Sprintf("published acme/f0 v%d", i+1))
		if open := openUnder(t, e.cfg.Dir); len(open) > 0 {
			t.Fatalf("after round %d the process holds files of the clone open: %v", i, open)
		}
	}
	if got := len(e.logs.Events(t, "sync_repacked")); got == 0 {
		t.Fatalf("the clone was not packed in %d rounds", gitsync.MaxPacks+2)
	}
	// a clone cloned anew in the round, its packs read before
	tearPacks(t, e.cfg.Dir)
	e.src.write("flows/acme/f0.md", flowtest.Marked("acme", "f0", "anew"))
	e.mustApply(e.src.gitCommit("anew"), fmt.Sprintf("published acme/f0 v%d", gitsync.MaxPacks+4))
	if len(e.logs.Events(t, "sync_repaired")) == 0 {
		t.Fatal("a clone whose packs were torn was not cloned anew")
	}
	if open := openUnder(t, e.cfg.Dir); len(open) > 0 {
		t.Fatalf("after a round that cloned anew the process holds files of the clone open: %v", open)
	}
}
