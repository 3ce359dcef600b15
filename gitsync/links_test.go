package gitsync_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/gitsync"
)

// TestStateDirectoryLinks: a symbolic link planted in the state directory
// where the clone would be makes New fail naming it, and one where the
// sync lock would be makes a sync fail; neither writes or creates anything
// through the link.
func TestStateDirectoryLinks(t *testing.T) {
	t.Run("clone", func(t *testing.T) {
		state, outside := t.TempDir(), t.TempDir()
		dir := filepath.Join(state, "repo")
		if err := os.Symlink(outside, dir); err != nil {
			t.Fatal(err)
		}
		_, err := gitsync.New(gitsync.Config{Repo: newSrcRepo(t).dir, Dir: dir, Registry: openRegistry(t, filepath.Join(state, "registry.db"))})
		if err == nil || !strings.Contains(err.Error(), dir+" is a symbolic link") {
			t.Errorf("New over a linked clone folder: %v, want an error naming %s", err, dir)
		}
		if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
			t.Errorf("the link's target holds %v (%v), want nothing", entries, err)
		}
	})
	t.Run("lock", func(t *testing.T) {
		dangling := filepath.Join(t.TempDir(), "nothing-here")
		e := newEnv(t)
		if err := os.Symlink(dangling, e.cfg.Dir+".lock"); err != nil {
			t.Fatal(err)
		}
		e.src.commit("first")
		if _, err := e.s.Sync(context.Background()); err == nil {
			t.Errorf("a sync took a lock through a link")
		}
		if _, err := os.Lstat(dangling); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the dangling link's target was created: %v", err)
		}
	})
}
