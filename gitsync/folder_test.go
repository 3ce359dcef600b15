package gitsync_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	c1, _, err := gitsync.CommitFolder(repoDir, src)
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
	c2, _, err := gitsync.CommitFolder(repoDir, src)
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
	c3, _, err := gitsync.CommitFolder(repoDir, src)
	if err != nil || c3 == c1 {
		t.Fatalf("CommitFolder after a change = %s, %v", c3, err)
	}
	if got, want := files(c3), []string{"access.yaml", "flows/acme/x.md"}; !slices.Equal(got, want) {
		t.Errorf("the commit holds %q, want %q", got, want)
	}
	apply(c3, "published acme/x v2", "withdrawn acme/y v1")
}

// TestCommitFolderDoesNotCopyItsOwnStateDir: nexus serve --dev
// --dev-flows . run in a config repo keeps its state in ./.nexus-dev and
// its repo in ./.nexus-dev/dev-repo, inside the folder served: the folder
// holding the repository is left out of the copy. CommitFolder copied it
// into itself, recursing into what it had just written until a path was too
// long.
func TestCommitFolderDoesNotCopyItsOwnStateDir(t *testing.T) {
	src := t.TempDir()
	for p, data := range map[string][]byte{
		"access.yaml":             accessFile(acmeKey),
		"flows/acme/x.md":         flowtest.Marked("acme", "x", "one"),
		".nexus-dev/registry.db":  []byte("SQLite format 3 (the dev registry)"),
		".nexus-dev/queues/q.log": []byte("queued messages"),
	} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repoDir := filepath.Join(src, ".nexus-dev", "dev-repo")
	done := make(chan error, 1)
	var commit string
	go func() {
		var err error
		commit, _, err = gitsync.CommitFolder(repoDir, src)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CommitFolder(%s inside %s): %v", repoDir, src, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("CommitFolder of a folder holding its own repo did not return within 20 s")
	}
	var leaked []string
	for _, f := range strings.Fields(runGit(t, repoDir, "ls-tree", "-r", "--name-only", commit)) {
		if strings.HasPrefix(f, ".nexus-dev/") {
			leaked = append(leaked, f)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the dev repo's commit holds its own state directory (%d files), e.g. %q", len(leaked), leaked[:min(len(leaked), 5)])
	}
}

// TestCommitFolderThroughALink: the folder given may be a symbolic link
// to the folder of flows (nexus serve --dev --dev-flows ./examples, a link
// to a checkout), as nexus validate reads one: its files are committed.
// CommitFolder committed nothing (the walk does not follow the link it
// starts at), and the sync refused the empty commit for lacking
// access.yaml and flows/, which the folder holds.
func TestCommitFolderThroughALink(t *testing.T) {
	real := t.TempDir()
	for p, data := range map[string][]byte{
		"access.yaml":     accessFile(acmeKey),
		"flows/acme/x.md": flowtest.Marked("acme", "x", "one"),
	} {
		full := filepath.Join(real, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(t.TempDir(), "examples")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(t.TempDir(), "dev-repo")
	commit, _, err := gitsync.CommitFolder(repoDir, link)
	if err != nil {
		t.Fatalf("CommitFolder(%s, a link to %s): %v", repoDir, real, err)
	}
	got := strings.Fields(runGit(t, repoDir, "ls-tree", "-r", "--name-only", commit))
	slices.Sort(got)
	if want := []string{"access.yaml", "flows/acme/x.md"}; !slices.Equal(got, want) {
		t.Errorf("the commit of a folder given through a link holds %q, want %q", got, want)
	}
}

// TestCommitFolderReportsLinks: the symbolic links of the folder are not
// copied, wherever they lead, and each is returned with where it leads,
// for the development mode to say so. They were skipped without a word:
// a flow linked into flows/ was never served, and nothing said why.
func TestCommitFolderReportsLinks(t *testing.T) {
	src, outside := t.TempDir(), t.TempDir()
	for p, data := range map[string][]byte{
		"access.yaml":     accessFile(acmeKey),
		"flows/acme/x.md": flowtest.Marked("acme", "x", "one"),
	} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "y.md"), flowtest.Marked("acme", "y", "one"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"flows/acme/inside.md":   "x.md",
		"flows/acme/outside.md":  filepath.Join(outside, "y.md"),
		"flows/acme/dangling.md": "gone.md",
		"flows/shared":           "acme",
		"flows/all":              "..",
		"flows/up":               filepath.Dir(src),
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(src, filepath.FromSlash(p))); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(src, "flows", "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(t.TempDir(), "dev-repo")
	commit, skipped, err := gitsync.CommitFolder(repoDir, src)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(runGit(t, repoDir, "ls-tree", "-r", "--name-only", commit))
	slices.Sort(got)
	if want := []string{"access.yaml", "flows/acme/x.md"}; !slices.Equal(got, want) {
		t.Errorf("the commit holds %q, want %q", got, want)
	}
	want := []gitsync.SkippedEntry{
		{Path: "flows/acme/dangling.md", Reason: "a symbolic link to gone.md, which does not exist", Advice: "remove it, or copy in the file it was meant to lead to"},
		{Path: "flows/acme/inside.md", Reason: "a symbolic link to the file flows/acme/x.md", Advice: "copy the file in"},
		{Path: "flows/acme/outside.md", Reason: "a symbolic link to " + filepath.Join(outside, "y.md") + ", outside the folder", Advice: "copy the file in"},
		{Path: "flows/all", Reason: "a symbolic link to the top of the folder", Advice: "remove it"},
		{Path: "flows/pipe", Reason: "a named pipe (FIFO), not a regular file", Advice: "remove it or move it out of the folder"},
		{Path: "flows/shared", Reason: "a symbolic link to the folder flows/acme", Advice: "copy the folder in"},
		{Path: "flows/up", Reason: "a symbolic link to " + filepath.Dir(src) + ", outside the folder", Advice: "remove it: it leads to a folder holding this one"},
	}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped entries (-want +got):\n%s", diff)
	}
}

// TestCommitFolderLeavesOutANestedStateDirAlone: a state directory deeper
// in the folder (--db ./flows/.state/registry.db with --dev-flows .) is
// left out of the copy, and only it: the flows beside it are committed.
// CommitFolder left out the folder's whole top-level entry holding the
// repository (all of flows/), without a word.
func TestCommitFolderLeavesOutANestedStateDirAlone(t *testing.T) {
	src := t.TempDir()
	for p, data := range map[string][]byte{
		"access.yaml":                   accessFile(acmeKey),
		"flows/acme/x.md":               flowtest.Marked("acme", "x", "one"),
		"flows/.state/registry.db":      []byte("SQLite format 3 (the dev registry)"),
		"flows/.state/queues/q/segment": []byte("queued messages"),
	} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repoDir := filepath.Join(src, "flows", ".state", "dev-repo")
	commit, _, err := gitsync.CommitFolder(repoDir, src)
	if err != nil {
		t.Fatalf("CommitFolder(%s inside %s): %v", repoDir, src, err)
	}
	got := strings.Fields(runGit(t, repoDir, "ls-tree", "-r", "--name-only", commit))
	if diff := cmp.Diff([]string{"access.yaml", "flows/acme/x.md"}, got); diff != "" {
		t.Errorf("files committed (-want +got):\n%s", diff)
	}
}
