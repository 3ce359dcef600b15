package gitsync_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// tearPacks zeroes the clone's packs, keeping their size and their
// indexes, as a power cut can leave a pack that go-git renamed into place
// before its data reached the disk: the refs and the indexes still name
// commits whose objects no longer read.
func tearPacks(t *testing.T, dir string) {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	if err != nil || len(packs) == 0 {
		t.Fatalf("the clone holds no pack to tear (%v)", err)
	}
	for _, p := range packs {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, info.Size()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamagedCloneIsClonedAnew: a clone whose objects no longer read is a
// cache to rebuild, not a reason to refuse a good commit or to fail every
// sync. The next sync logs sync_repaired, clones the repo anew and judges
// the head: a new commit is applied, and after a restart the head is
// judged again and found good. (A clone that lost its packs altogether
// needs nothing: go-git then fetches everything again.)
func TestDamagedCloneIsClonedAnew(t *testing.T) {
	t.Run("new commit", func(t *testing.T) {
		e := newEnv(t)
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
		e.mustApply(e.src.commit("add acme/x"), "published acme/x v1")
		tearPacks(t, e.cfg.Dir)

		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
		c2 := e.src.commit("change acme/x")
		e.mustApply(c2, "published acme/x v2")
		checkRepaired(t, e)
	})
	t.Run("restart on the same head", func(t *testing.T) {
		e := newEnv(t)
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
		c1 := e.src.commit("add acme/x")
		e.mustApply(c1, "published acme/x v1")
		e.s.Stop()
		tearPacks(t, e.cfg.Dir)

		s, err := gitsync.New(e.cfg) // the next process
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		e.s = s
		e.mustApply(c1, "unchanged acme/x v1")
		checkRepaired(t, e)
	})
}

func checkRepaired(t *testing.T, e *env) {
	t.Helper()
	evs := e.logs.Events(t, "sync_repaired")
	if len(evs) != 1 {
		t.Fatalf("%d sync_repaired events, want 1; log:\n%s", len(evs), e.logs.String())
	}
	if msg, _ := evs[0]["error"].(string); !strings.Contains(msg, "reading") {
		t.Errorf("sync_repaired error %q, want it to say what could not be read", msg)
	}
	if evs := e.logs.Events(t, "sync_failed"); len(evs) != 0 {
		t.Errorf("a good commit was refused over the damaged clone: %v", evs)
	}
}
