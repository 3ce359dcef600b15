package gitsync_test

import (
	"context"
	"os"
	"os/exec"
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
		restartRepaired(t, tearPacks)
	})
}

// TestTruncatedPackIsClonedAnew: a pack cut short (a power cut after a
// clone or a repack renamed it into place, before all of its data reached
// the disk: packs and their folder are not fsynced), or cut to nothing, or
// whose index is cut short, at the next start: the sync logs
// sync_repaired, clones the repo anew and judges the head again, rather
// than failing every round.
func TestTruncatedPackIsClonedAnew(t *testing.T) {
	for _, tc := range []struct {
		name string
		ext  string // the pack's file cut
		keep func(size int64) int64
	}{
		{"pack cut in half", ".pack", func(n int64) int64 { return n / 2 }},
		{"pack cut to its header", ".pack", func(int64) int64 { return 12 }},
		{"pack cut to nothing", ".pack", func(int64) int64 { return 0 }},
		{"index cut in half", ".idx", func(n int64) int64 { return n / 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restartRepaired(t, func(t *testing.T, dir string) {
				files, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*"+tc.ext))
				if err != nil || len(files) == 0 {
					t.Fatalf("the clone holds no %s file to cut (%v)", tc.ext, err)
				}
				for _, f := range files {
					info, err := os.Stat(f)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(f, tc.keep(info.Size())); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
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

// TestSyncReclonesWhenTheFlowsTreeIsLost: the tree object of the flows
// folder itself lost from the clone (a power cut while go-git wrote it) is
// damage to the clone, as for every other object of the head: the clone is
// rebuilt and the good commit applied, not refused as a commit without a
// flows folder (go-git's Tree reports a lost tree object as a missing
// folder).
func TestSyncReclonesWhenTheFlowsTreeIsLost(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("add acme/x"), "published acme/x v1")

	// turn the clone's packs into loose objects, then lose the flows tree
	packs, err := filepath.Glob(filepath.Join(e.cfg.Dir, "objects", "pack", "*.pack"))
	if err != nil || len(packs) == 0 {
		t.Fatalf("no pack in the clone (%v)", err)
	}
	aside := t.TempDir()
	for _, p := range packs {
		base := strings.TrimSuffix(p, ".pack")
		moved := filepath.Join(aside, filepath.Base(p))
		if err := os.Rename(p, moved); err != nil {
			t.Fatal(err)
		}
		os.Remove(base + ".idx")
		os.Remove(base + ".rev")
		f, err := os.Open(moved)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "unpack-objects", "-q")
		cmd.Dir = e.cfg.Dir
		cmd.Stdin = f
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("unpack-objects: %v\n%s", err, out)
		}
		f.Close()
	}
	flowsTree, err := e.src.headTree().FindEntry("flows")
	if err != nil {
		t.Fatal(err)
	}
	h := flowsTree.Hash.String()
	if err := os.Remove(filepath.Join(e.cfg.Dir, "objects", h[:2], h[2:])); err != nil {
		t.Fatalf("removing the flows tree from the clone: %v", err)
	}

	// a good commit that keeps the flows folder as it is
	e.src.write("access.yaml", accessFile(acmeKey, key{"acme-2", "acme", "nxk_test_acme_second_0123456789abc"}))
	c2 := e.src.commit("a second key")
	res, err := e.s.Sync(context.Background())
	if err != nil || !res.Applied() || res.Commit != c2 {
		t.Fatalf("Sync of the good commit %s over a clone that lost the flows tree: %+v, %v; want it applied (sync_repaired, cloned anew)", c2[:8], res, err)
	}
}

// TestTornCloneConfigIsRepaired: a clone whose config file is torn (a
// crash while go-git rewrote it in place, unsynced, as it does when the
// clone is made and when --repo changes) is damage: it is cloned anew and
// the head applied, as other damage to the clone is (docs/decisions.md).
// Every round failed with "opening the clone …" until someone deleted
// {state}/repo by hand.
func TestTornCloneConfigIsRepaired(t *testing.T) {
	for name, torn := range map[string][]byte{
		"zeros":           make([]byte, 256),
		"cut mid-section": []byte("[core]\n\tbare = true\n[remote \"ori"),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
			e.mustApply(e.src.commit("one"), "published acme/x v1")
			if err := os.WriteFile(filepath.Join(e.cfg.Dir, "config"), torn, 0o600); err != nil {
				t.Fatal(err)
			}
			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
			c2 := e.src.commit("two")
			res, err := e.s.Sync(context.Background())
			if err != nil {
				t.Fatalf("Sync with a torn clone config: %v (every later round fails the same way)", err)
			}
			if !res.Applied() || res.Commit != c2 {
				t.Errorf("Sync = %+v, want %s applied", res, c2[:8])
			}
		})
	}
}

// restartRepaired publishes acme/x, stops the Syncer, damages its clone
// (damage gets the clone's folder), and holds that the next process's
// Syncer clones the repo anew (sync_repaired) and finds the head unchanged.
func restartRepaired(t *testing.T, damage func(t *testing.T, dir string)) {
	t.Helper()
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("add acme/x")
	e.mustApply(c1, "published acme/x v1")
	e.s.Stop()
	damage(t, e.cfg.Dir)

	s, err := gitsync.New(e.cfg) // the next process
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	e.s = s
	e.mustApply(c1, "unchanged acme/x v1")
	checkRepaired(t, e)
}
