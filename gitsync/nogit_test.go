package gitsync_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
			runGit(t, e.cfg.Dir, "fsck", "--strict", "--no-dangling") // the clone has all it needs

			// b dropped and pruned: the clone still has it, and says so
			os.Setenv("PATH", gitPath)
			e.src.git("reset", "-q", "--hard", a)
			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "three"))
			c := e.src.commit("three, rewritten")
			e.src.git("reflog", "expire", "--expire=now", "--all")
			e.src.git("gc", "-q", "--prune=now")
			withoutGit(func() { e.mustApply(c, "published acme/x v3", "withdrawn acme/y v1") })
			runGit(t, e.cfg.Dir, "fsck", "--strict", "--no-dangling")

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

// TestLocalRepoThatStalls: a local repo whose files stop answering (a
// hung disk or network file system: here a loose object made a named
// pipe, whose open blocks) costs one FetchTimeout, or ends as soon as the
// round's context does, on a host without git (go-git reads the repo
// itself) and on one with git (git-upload-pack over pipes, no connection
// of the fetch's, watched as a connection is). The round, and the sync
// lock, were held until the file answered, up to the 30-minute cap of a
// fetch.
func TestLocalRepoThatStalls(t *testing.T) {
	for _, host := range []struct {
		name  string
		noGit bool
	}{{"without git", true}, {"with git", false}} {
		for _, tc := range []struct {
			name    string
			timeout time.Duration
			cancel  bool   // the round's context is cancelled 300ms in
			want    string // in the error
		}{
			{"FetchTimeout", 300 * time.Millisecond, false, "no answer within 300ms"},
			{"cancelled", time.Hour, true, "context canceled"},
		} {
			t.Run(host.name+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t, func(c *gitsync.Config) { c.FetchTimeout = tc.timeout })
				e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
				e.src.gitCommit("one")
				stallObject(t, e.src.dir, strings.TrimSpace(e.src.git("rev-parse", "HEAD:flows/acme/x.md")))
				if host.noGit {
					t.Setenv("PATH", t.TempDir())
				}
				if err := syncStalled(t, e, tc.cancel); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Sync of a local repo whose object never opens: %v, want an error with %q", err, tc.want)
				}
			})
		}
	}
}

// TestLocalRepoWithoutGitStreamsThePack: on a host without git, the pack
// of a local repo is written as it is read, an object at a time: the
// first fetch of a repo of 48 loose files of 512 KB does not hold them
// all. go-git's upload-pack read every object to look for deltas before
// writing the first byte, and held them: the peak heap grew by the
// repo's size.
func TestLocalRepoWithoutGitStreamsThePack(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and syncs 24 MB")
	}
	const files, size = 48, 512 << 10
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	for i := range files {
		b := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(i)}).Read(b)
		e.src.write(fmt.Sprintf("tools/f%02d.bin", i), b)
	}
	a := e.src.gitCommit("one")
	gitPath := os.Getenv("PATH")
	t.Setenv("PATH", t.TempDir())
	m := measure(func() { e.mustApply(a, "published acme/x v1") })
	t.Logf("first fetch: %v", m)
	if grew := m.peak - m.base; grew > files*size/2 {
		t.Errorf("the first fetch of %d MB of loose files grew the heap by %d MB: %v", files*size>>20, grew>>20, m)
	}
	os.Setenv("PATH", gitPath)
	runGit(t, e.cfg.Dir, "fsck", "--no-dangling")
}

// TestLocalRepoWithoutGitWhoseHaveStalls: on a host without git, a fetch
// of a local repo whose file of a commit the clone already has stops
// answering (the commit the clone offers: here its loose object made a
// named pipe, whose open blocks) costs one FetchTimeout, as a stalled
// object of the pack does. The commits offered were looked up in the repo
// before the pack's reader, and its timeout, existed: the round, and the
// sync lock, were held until the file answered.
func TestLocalRepoWithoutGitWhoseHaveStalls(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.FetchTimeout = 300 * time.Millisecond })
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	a := e.src.gitCommit("one")
	e.mustApply(a, "published acme/x v1")
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	e.src.gitCommit("two")
	stallObject(t, e.src.dir, a)
	t.Setenv("PATH", t.TempDir())
	done := make(chan error, 1)
	go func() {
		_, err := e.s.Sync(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if want := "no answer within 300ms"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Sync of a local repo whose offered commit never opens: %v, want an error with %q", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Sync of a local repo whose offered commit never opens was still running after 5 s (FetchTimeout 300ms)")
	}
}

// TestLocalRepoWithoutGitWhoseReferencesStall: on a host without git, a
// fetch of a local repo whose configuration or references stop answering
// as the repo is opened or its references read (here the file made a
// named pipe, whose open blocks) costs one FetchTimeout, or ends as soon
// as the round's context does, as a stalled object of the pack does. The
// repo was opened and its references read outside both: the round, and
// the sync lock, were held until the file answered.
func TestLocalRepoWithoutGitWhoseReferencesStall(t *testing.T) {
	for _, tc := range []struct {
		file    string // in .git, made a named pipe
		timeout time.Duration
		cancel  bool   // the round's context is cancelled 300ms in
		want    string // in the error
	}{
		{"config", 300 * time.Millisecond, false, "no answer within 300ms"},
		{"packed-refs", 300 * time.Millisecond, false, "no answer within 300ms"},
		{"packed-refs", time.Hour, true, "context canceled"},
	} {
		t.Run(fmt.Sprintf("%s cancel %v", tc.file, tc.cancel), func(t *testing.T) {
			e := newEnv(t, func(c *gitsync.Config) { c.FetchTimeout = tc.timeout })
			e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
			e.src.gitCommit("one")
			stallFile(t, filepath.Join(e.src.dir, ".git", tc.file))
			t.Setenv("PATH", t.TempDir())
			if err := syncStalled(t, e, tc.cancel); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Sync of a local repo whose %s never opens: %v, want an error with %q", tc.file, err, tc.want)
			}
		})
	}
}

// syncStalled runs a round of e's sync over a repo whose files stall,
// its context cancelled 300 ms in when cancel is set, and returns its
// error; it fails the test if the round is still running after 5 s.
func syncStalled(t *testing.T, e *env, cancel bool) error {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if cancel {
		time.AfterFunc(300*time.Millisecond, stop)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.s.Sync(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the sync round was still running after 5 s")
		return nil
	}
}

// stallObject makes the loose object hash of the repo in dir a named pipe,
// so that opening it blocks until something opens its other end: a hung
// disk or network file system. The cleanup lets the blocked open through
// (it reads nothing) before the syncer stops.
func stallObject(t *testing.T, dir, hash string) {
	t.Helper()
	stallFile(t, filepath.Join(dir, ".git", "objects", hash[:2], hash[2:]))
}

// stallFile makes the file obj a named pipe (whether it was there or
// not), so that opening it blocks, as stallObject does.
func stallFile(t *testing.T, obj string) {
	t.Helper()
	if err := os.Remove(obj); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(obj, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(obj, os.O_RDWR, 0); err == nil {
			time.Sleep(50 * time.Millisecond)
			f.Close()
		}
	})
}
