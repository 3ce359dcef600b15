package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// Config.Branch names the branch followed; commits of other branches are
// not looked at.
func TestSyncFollowsTheConfiguredBranch(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.Branch = "release/config" })
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "on main"))
	e.src.gitCommit("main")

	// The branch does not exist yet: an error naming it, nothing recorded.
	_, err := e.s.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "release/config") {
		t.Fatalf("Sync of a missing branch: %v, want an error naming release/config", err)
	}
	if st := e.status(); st.Commit != "" || st.LastError != nil {
		t.Fatalf("Status = %+v after a missing branch", st)
	}

	e.src.git("checkout", "-q", "-b", "release/config")
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "on release"))
	c := e.src.gitCommit("release")
	e.mustApply(c, "published acme/x v1")
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Flow.Description() != "on release" {
		t.Fatalf("Lookup(acme, x) = %+v, want the release branch's flow", lf)
	}

	e.src.git("checkout", "-q", "main")
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "main again"))
	e.src.gitCommit("main moves")
	if res := e.sync(); res.Skipped != "up to date" || res.Commit != c {
		t.Fatalf("Sync after a commit on main = %+v, want %s up to date", res, c)
	}
}

// A force-pushed branch (history rewritten) is followed, back to an older
// commit too.
func TestSyncFollowsARewrittenBranch(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	a := e.src.gitCommit("one")
	e.mustApply(a, "published acme/x v1")
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	b := e.src.gitCommit("two")
	e.mustApply(b, "published acme/x v2")

	// b is dropped: main is rewritten from a (c is not a descendant of b).
	e.src.git("reset", "-q", "--hard", a)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "three"))
	e.src.write("flows/acme/y.md", flowtest.Marked("acme", "y", "one"))
	c := e.src.gitCommit("three, rewritten")
	e.mustApply(c, "published acme/x v3", "published acme/y v1")

	// Back to a, an ancestor of the live commit: applied as any other
	// commit (its flow is a new version: versions are never reused).
	e.src.git("reset", "-q", "--hard", a)
	e.mustApply(a, "published acme/x v4", "withdrawn acme/y v1")
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Flow.Description() != "one" {
		t.Fatalf("Lookup(acme, x) = %+v", lf)
	}
	if got := strings.TrimSpace(runGit(t, e.cfg.Dir, "rev-parse", "refs/remotes/origin/main")); got != a {
		t.Errorf("the clone's origin/main is %s, want %s", got, a)
	}
}

// A clone kept from an earlier Repo follows the new one.
func TestSyncFollowsAMovedRepo(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "old repo"))
	e.mustApply(e.src.commit("old"), "published acme/x v1")

	moved := newSrcRepo(t)
	moved.write("access.yaml", accessFile(acmeKey))
	moved.write("flows/acme/x.md", flowtest.Marked("acme", "x", "new repo"))
	c := moved.commit("new")
	cfg := e.cfg
	cfg.Repo = "file://" + moved.dir
	s, err := gitsync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	e.mustApply(c, "published acme/x v2")
	config, err := os.ReadFile(filepath.Join(e.cfg.Dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(config), "url = file://"+moved.dir) || strings.Contains(string(config), e.src.dir) {
		t.Errorf("the clone's origin was not replaced:\n%s", config)
	}
}

// New refuses branch names git refuses (a name must not let a ref escape
// the clone's refs folder, as refs/heads/../../config would).
func TestNewRefusesInvalidBranchNames(t *testing.T) {
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	dir := filepath.Join(t.TempDir(), "state", "repo")
	newWith := func(branch string) error {
		_, err := gitsync.New(gitsync.Config{Repo: "https://config.invalid/config.git", Dir: dir, Registry: reg, Branch: branch})
		return err
	}
	for _, b := range []string{"main", "release/config", "feature-1.2", "v2_x"} {
		if err := newWith(b); err != nil {
			t.Errorf("New(Branch %q): %v", b, err)
		}
	}
	for _, b := range []string{"../../config", "a/../../config", "..", "main/..", "x/../y"} {
		err := newWith(b)
		if err == nil {
			t.Errorf("New accepted the branch %q", b)
		} else if !strings.Contains(err.Error(), b) {
			t.Errorf("New(Branch %q): %v, want an error naming the branch", b, err)
		}
	}
	// Other names `git check-ref-format --branch` refuses.
	for _, b := range []string{"a b", "x.lock", ".hidden", "a//b", "a/", "-x", "a~1", "a^", "a:b", "a?", "a*", "a[", `a\b`, "a@{b", "a\tb"} {
		// refused by New, not at every fetch later (a check for ".." alone,
		// as once, let them through)
		if err := newWith(b); err == nil {
			t.Errorf("New accepted the branch %q, which git refuses", b)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("New created the clone %s", dir)
	}
}
