package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// TestLocalRepoWithoutGit: a repo given as a local path or a file:// URL
// is followed on a host without the git command (the release image is
// distroless: it has none), as the spec promises file:// repos: a first
// clone, a commit fetched on top of it, and a branch rewritten after the
// commits it dropped were pruned from the repo. go-git fetches a local
// repo by running git-upload-pack, and every round failed with `exec:
// "git": executable file not found in $PATH`.
func TestLocalRepoWithoutGit(t *testing.T) {
	for _, scheme := range []string{"", "file://"} {
		t.Run("repo "+scheme+"PATH", func(t *testing.T) {
			e := newEnv(t)
			e.follow(t, scheme+e.src.dir)
			gitPath := os.Getenv("PATH")
			t.Setenv("PATH", t.TempDir()) // restored when the test ends
			withoutGit := func(f func()) {
				os.Setenv("PATH", t.TempDir())
				f()
				os.Setenv("PATH", gitPath)
			}

			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
			a := e.src.commit("one")
			withoutGit(func() { e.mustApply(a, "published acme/x v1") })

			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
			e.src.write("flows/acme/y.md", flowtest.Marked("acme", "y", "one"))
			b := e.src.commit("two")
			withoutGit(func() { e.mustApply(b, "published acme/x v2", "published acme/y v1") })

			// b dropped and pruned: the clone still has it, and says so
			os.Setenv("PATH", gitPath)
			e.src.git("reset", "-q", "--hard", a)
			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "three"))
			c := e.src.commit("three, rewritten")
			e.src.git("reflog", "expire", "--expire=now", "--all")
			e.src.git("gc", "-q", "--prune=now")
			withoutGit(func() { e.mustApply(c, "published acme/x v3", "withdrawn acme/y v1") })

			// no such repo: an unreachable repo, as with git
			e.follow(t, scheme+e.src.dir+"-missing")
			withoutGit(func() {
				if _, err := e.s.Sync(context.Background()); err == nil {
					t.Errorf("Sync of a missing local repo: no error")
				}
			})
		})
	}
}

// TestLinkedWorktreeWithoutGit: a repo given as the folder of a linked
// work tree (git worktree add), whose .git is a file naming the main
// repository's, is read through it on a host without git, as git reads it.
func TestLinkedWorktreeWithoutGit(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	a := e.src.commit("one")
	wt := filepath.Join(t.TempDir(), "wt")
	e.src.git("worktree", "add", "-q", "-b", "other", wt)
	e.follow(t, wt)
	t.Setenv("PATH", t.TempDir())
	e.mustApply(a, "published acme/x v1")
}

// follow makes e's syncer one that follows repo instead.
func (e *env) follow(t *testing.T, repo string) {
	t.Helper()
	e.s.Stop()
	e.cfg.Repo = repo
	s, err := gitsync.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	e.s = s
}
