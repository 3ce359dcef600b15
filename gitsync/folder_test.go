package gitsync_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// CommitFolder makes a repository hold exactly a folder's files, one
// commit per change, and the Syncer serves it like any config repo.
func TestCommitFolder(t *testing.T) {
	src := t.TempDir()
	write := func(p string, data []byte) {
		t.Helper()
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("access.yaml", accessFile(acmeKey))
	write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	write("flows/acme/y.md", flowtest.Marked("acme", "y", "one"))
	write(".git/config", []byte("[core]\n")) // a folder that is itself a repo: its .git is not copied
	if err := os.Symlink("x.md", filepath.Join(src, "flows", "acme", "link.md")); err != nil {
		t.Fatal(err)
	}

	repoDir := filepath.Join(t.TempDir(), "dev", "repo")
	files := func(commit string) []string {
		t.Helper()
		out := strings.Fields(runGit(t, repoDir, "ls-tree", "-r", "--name-only", commit))
		slices.Sort(out)
		return out
	}
	c1, err := gitsync.CommitFolder(repoDir, src)
	if err != nil {
		t.Fatalf("CommitFolder: %v", err)
	}
	if got, want := files(c1), []string{"access.yaml", "flows/acme/x.md", "flows/acme/y.md"}; !slices.Equal(got, want) {
		t.Errorf("the first commit holds %q, want %q", got, want)
	}
	if head := strings.TrimSpace(runGit(t, repoDir, "rev-parse", "refs/heads/main")); head != c1 {
		t.Errorf("main is %s, want %s", head, c1)
	}

	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	s, err := gitsync.New(gitsync.Config{Repo: repoDir, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(want string, changes ...string) {
		t.Helper()
		res, err := s.Sync(t.Context())
		if err != nil || !res.Applied() || res.Commit != want || !slices.Equal(changeStrings(res.Changes), changes) {
			t.Fatalf("Sync = %+v, %v; want %s applied with %q", res, err, want, changes)
		}
	}
	apply(c1, "published acme/x v1", "published acme/y v1")

	// Nothing changed: no new commit.
	c2, err := gitsync.CommitFolder(repoDir, src)
	if err != nil || c2 != c1 {
		t.Fatalf("CommitFolder of an unchanged folder = %s, %v; want %s", c2, err, c1)
	}
	if n := strings.TrimSpace(runGit(t, repoDir, "rev-list", "--count", "main")); n != "1" {
		t.Errorf("%s commits after an unchanged folder, want 1", n)
	}

	// A change and a deletion.
	write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	if err := os.Remove(filepath.Join(src, "flows", "acme", "y.md")); err != nil {
		t.Fatal(err)
	}
	c3, err := gitsync.CommitFolder(repoDir, src)
	if err != nil || c3 == c1 {
		t.Fatalf("CommitFolder after a change = %s, %v", c3, err)
	}
	if got, want := files(c3), []string{"access.yaml", "flows/acme/x.md"}; !slices.Equal(got, want) {
		t.Errorf("the commit holds %q, want %q", got, want)
	}
	apply(c3, "published acme/x v2", "withdrawn acme/y v1")
}
