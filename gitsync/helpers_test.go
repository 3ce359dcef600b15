package gitsync_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// t0 is the start of the registries' fake clocks.
var t0 = time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)

// tickingClock returns a clock that moves one second at every reading, so
// that two writes of the registry never carry the same time.
func tickingClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return t0.Add(time.Duration(n.Add(1)) * time.Second) }
}

// author signs the commits made by the tests.
func author() *object.Signature {
	return &object.Signature{Name: "Config Author", Email: "config@example.com", When: time.Now()}
}

// srcRepo is the config repo the hosts fetch: a non-bare repository whose
// branch main is written by the tests.
type srcRepo struct {
	t    testing.TB
	dir  string
	repo *git.Repository
	wt   *git.Worktree
	// objects, when set, is where storeTree and storeBlob store (see
	// packed); otherwise they store in repo
	objects storer.EncodedObjectStorer
}

// objectStore is where storeTree and storeBlob store.
func (r *srcRepo) objectStore() storer.EncodedObjectStorer {
	if r.objects != nil {
		return r.objects
	}
	return r.repo.Storer
}

// packed calls build with the trees and blobs it stores kept in memory,
// then writes them to the repository as one pack: thousands of objects
// stored loose, a file each, took most of a test's time.
func (r *srcRepo) packed(build func()) {
	r.t.Helper()
	mem := memory.NewStorage()
	r.objects = mem
	build()
	r.objects = nil
	var hashes []plumbing.Hash
	for h := range mem.Objects {
		hashes = append(hashes, h)
	}
	pw, err := r.repo.Storer.(storer.PackfileWriter).PackfileWriter()
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := packfile.NewEncoder(pw, mem, false).Encode(hashes, 0); err != nil {
		r.t.Fatalf("packing %d objects: %v", len(hashes), err)
	}
	if err := pw.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// newSrcRepo creates an empty repository (branch main) in a fresh folder.
func newSrcRepo(t testing.TB) *srcRepo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.Main},
	})
	if err != nil {
		t.Fatalf("init %s: %v", dir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	return &srcRepo{t: t, dir: dir, repo: repo, wt: wt}
}

// write writes a file of the work tree (path with slashes).
func (r *srcRepo) write(path string, data []byte) {
	r.t.Helper()
	p := filepath.Join(r.dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// remove deletes a file or folder of the work tree.
func (r *srcRepo) remove(path string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.dir, filepath.FromSlash(path))); err != nil {
		r.t.Fatal(err)
	}
}

// commit records the whole work tree (new, changed and deleted files) as
// a commit of the current branch and returns its hash.
func (r *srcRepo) commit(msg string) string {
	r.t.Helper()
	if err := r.wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		r.t.Fatalf("git add: %v", err)
	}
	h, err := r.wt.Commit(msg, &git.CommitOptions{All: true, Author: author()})
	if err != nil {
		r.t.Fatalf("git commit %q: %v", msg, err)
	}
	return h.String()
}

// git runs the git command line in the work tree and returns its output.
func (r *srcRepo) git(args ...string) string {
	r.t.Helper()
	return runGit(r.t, r.dir, args...)
}

// gitCommit records the work tree with the git command line (for what
// go-git's work tree cannot stage: symbolic links, gitlinks).
func (r *srcRepo) gitCommit(msg string) string {
	r.t.Helper()
	r.git("add", "-A")
	r.git("commit", "-q", "-m", msg)
	return strings.TrimSpace(r.git("rev-parse", "HEAD"))
}

// head returns the commit the branch main points at.
func (r *srcRepo) head() string {
	r.t.Helper()
	ref, err := r.repo.Reference(plumbing.Main, true)
	if err != nil {
		r.t.Fatal(err)
	}
	return ref.Hash().String()
}

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=Config Author", "GIT_AUTHOR_EMAIL=config@example.com",
		"GIT_COMMITTER_NAME=Config Author", "GIT_COMMITTER_EMAIL=config@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// storeTree writes a tree object, its entries sorted as git sorts them,
// and returns its hash.
func (r *srcRepo) storeTree(entries []object.TreeEntry) plumbing.Hash {
	r.t.Helper()
	entries = slices.Clone(entries)
	sort.Sort(object.TreeEntrySorter(entries))
	tree := &object.Tree{Entries: entries}
	obj := r.objectStore().NewEncodedObject()
	if err := tree.Encode(obj); err != nil {
		r.t.Fatalf("encoding a tree: %v", err)
	}
	h, err := r.objectStore().SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// storeBlob writes a blob and returns its hash.
func (r *srcRepo) storeBlob(data []byte) plumbing.Hash {
	r.t.Helper()
	obj := r.objectStore().NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, err := obj.Writer()
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		r.t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.objectStore().SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// commitTree writes a commit of root whose parent is the head of main,
// and moves main to it, as a push of a hand-made commit would.
func (r *srcRepo) commitTree(root plumbing.Hash, msg string) string {
	r.t.Helper()
	c := &object.Commit{
		Author:       *author(),
		Committer:    *author(),
		Message:      msg,
		TreeHash:     root,
		ParentHashes: []plumbing.Hash{plumbing.NewHash(r.head())},
	}
	obj := r.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(plumbing.Main, h)); err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

// headTree returns the root tree of the head of main.
func (r *srcRepo) headTree() *object.Tree {
	r.t.Helper()
	c, err := r.repo.CommitObject(plumbing.NewHash(r.head()))
	if err != nil {
		r.t.Fatal(err)
	}
	tree, err := c.Tree()
	if err != nil {
		r.t.Fatal(err)
	}
	return tree
}

// withEntry returns the entries of t with e added (or replacing the entry
// of the same name).
func withEntry(t *object.Tree, e object.TreeEntry) []object.TreeEntry {
	var out []object.TreeEntry
	for _, old := range t.Entries {
		if old.Name != e.Name {
			out = append(out, old)
		}
	}
	return append(out, e)
}

// badFlowFile is acme/bad with an error at line 6.
const badFlowFile = `---
flowmarkdown_version: "0.1"
flow: bad
tenant: acme
description: broken
queue_max_attempts: 0
---

## Step: answer
` + "```ntd" + `
{"a": 1}
` + "```" + `
`

// badFlowError is the error of badFlowFile as flows/acme/bad.md.
const badFlowError = "flows/acme/bad.md:6: queue_max_attempts must be at least 1, not 0"

// key is an access key: its id, tenant and secret.
type key struct{ id, tenant, secret string }

// accessFile is an access.yaml granting each key every flow of its tenant.
func accessFile(keys ...key) []byte {
	if len(keys) == 0 {
		return []byte("keys: []\n")
	}
	src := "keys:\n"
	for _, k := range keys {
		src += access.Entry(k.id, k.tenant, []string{"*"}, 10, 20, access.HashKey(k.secret))
	}
	return []byte(src)
}

var acmeKey = key{"acme-main", "acme", "nxk_test_acme_0123456789abcdef0123"}

// env is one host: a registry and a Syncer following a source repo.
type env struct {
	t     testing.TB
	src   *srcRepo
	state string // the state directory
	reg   *registry.Registry
	logs  *jsonlogtest.Buffer
	cfg   gitsync.Config
	s     *gitsync.Syncer
}

// newEnv makes a source repo holding access.yaml and flows/README.md (no
// flow yet, nothing committed) and a Syncer following it; edit changes the
// Config before New.
func newEnv(t testing.TB, edit ...func(*gitsync.Config)) *env {
	t.Helper()
	e := &env{t: t, src: newSrcRepo(t), state: filepath.Join(t.TempDir(), "state"), logs: &jsonlogtest.Buffer{}}
	e.src.write("access.yaml", accessFile(acmeKey))
	e.src.write("flows/README.md", []byte("# Flows\n\nEvery flow of the host.\n"))
	e.reg = openRegistry(t, filepath.Join(e.state, "registry.db"))
	e.cfg = gitsync.Config{
		Repo:     e.src.dir,
		Dir:      filepath.Join(e.state, "repo"),
		Registry: e.reg,
		Logger:   e.logs.Logger(slog.LevelDebug),
	}
	for _, f := range edit {
		f(&e.cfg)
	}
	s, err := gitsync.New(e.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.s = s
	t.Cleanup(s.Stop)
	return e
}

func openRegistry(t testing.TB, path string) *registry.Registry {
	t.Helper()
	r, err := registry.Open(context.Background(), path, registry.Options{Now: tickingClock()})
	if err != nil {
		t.Fatalf("registry.Open(%s): %v", path, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// sync runs one Sync, failing the test on an error.
func (e *env) sync() gitsync.Result {
	e.t.Helper()
	res, err := e.s.Sync(context.Background())
	if err != nil {
		e.t.Fatalf("Sync: %v", err)
	}
	return res
}

// mustApply syncs and checks that commit was applied with changes.
func (e *env) mustApply(commit string, changes ...string) gitsync.Result {
	e.t.Helper()
	res := e.sync()
	if !res.Applied() || res.Commit != commit || res.Skipped != "" || len(res.Errors) > 0 {
		e.t.Fatalf("Sync = %+v, want commit %s applied", res, commit)
	}
	if changes != nil {
		if got := changeStrings(res.Changes); !slices.Equal(got, changes) {
			e.t.Fatalf("changes of %s:\n got %q\nwant %q", commit, got, changes)
		}
	}
	if st := e.status(); st.Commit != commit || st.LastError != nil {
		e.t.Fatalf("after applying %s: Status = %+v", commit, st)
	}
	return res
}

func (e *env) status() registry.Status {
	e.t.Helper()
	st, err := e.reg.Status(context.Background())
	if err != nil {
		e.t.Fatalf("Status: %v", err)
	}
	return st
}

func changeStrings(cs []registry.Change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// liveFlows summarises a live set: "tenant/flow vN description" per flow.
func liveFlows(ls *registry.LiveSet) []string {
	out := []string{}
	if ls == nil {
		return out
	}
	for _, lf := range ls.Flows() {
		desc := "<not compiled>"
		if lf.Flow != nil {
			desc = lf.Flow.Description()
		}
		out = append(out, fmt.Sprintf("%s/%s v%d %s", lf.Tenant, lf.Name, lf.Version, desc))
	}
	return out
}

// stored is what the registry holds, read afresh from the database through
// a second handle: the live flows, the generation and the commit.
func (e *env) stored() string {
	e.t.Helper()
	r, err := registry.Open(context.Background(), e.reg.Path(), registry.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Close()
	ls, err := r.Load(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := r.Status(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprintf("commit %s generation %d flows %q keys %d", st.Commit, st.Generation, liveFlows(ls), ls.Access().Len())
}

// mustRefuse syncs the head of the source repo, which must be refused with
// exactly wantErrs, leaving the deployment as it was.
func (e *env) mustRefuse(wantErrs ...string) gitsync.Result {
	e.t.Helper()
	commit := e.src.head()
	before, beforeLive, beforeStatus := e.stored(), liveFlows(e.reg.Live()), e.status()
	res := e.sync()
	if res.Applied() || res.Commit != commit || res.Skipped != "" || res.Changes != nil {
		e.t.Fatalf("Sync of %s = %+v, want it refused", commit, res)
	}
	if !slices.Equal(res.Errors, wantErrs) {
		e.t.Fatalf("errors of %s:\n got %q\nwant %q", commit, res.Errors, wantErrs)
	}
	st := e.status()
	if st.Commit != beforeStatus.Commit || st.Generation != beforeStatus.Generation || st.Flows != beforeStatus.Flows {
		e.t.Errorf("the refused commit moved the status: %+v, was %+v", st, beforeStatus)
	}
	if st.LastError == nil || st.LastError.Commit != commit || !slices.Equal(st.LastError.Errors, wantErrs) {
		e.t.Errorf("LastError = %+v, want commit %s with %q", st.LastError, commit, wantErrs)
	}
	if after := e.stored(); after != before {
		e.t.Errorf("the refused commit changed the registry:\n got %s\nwant %s", after, before)
	}
	if got := liveFlows(e.reg.Live()); !slices.Equal(got, beforeLive) {
		e.t.Errorf("the refused commit changed the live set: %q, was %q", got, beforeLive)
	}
	return res
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %v for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// treeEntry is a shorthand for a tree entry.
func treeEntry(name string, mode filemode.FileMode, h plumbing.Hash) object.TreeEntry {
	return object.TreeEntry{Name: name, Mode: mode, Hash: h}
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
