package gitsync

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/registry"
)

// TestGitCompileAsBefore: git sync's compile judges hand-made
// commits (every kind of entry, the limits at and past their edge, the
// order of errors, objects the clone lacks) exactly as the walker of
// gitsync.go did before it moved to walker.go (the lines below are that
// walker's output for the same cases), but for a flows folder that is a
// file or a link, which is said as what it is (it was "no such folder").
func TestGitCompileAsBefore(t *testing.T) {
	got := compileCases(t)
	want := strings.Split(strings.Trim(compileGolden, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d cases, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("\n got %s\nwant %s", got[i], want[i])
		}
	}
}

const compileGolden = `
ok: flows=["flows/x.md"] keys=true problems=[] damage=<nil>
executable flow and empty files: flows=["flows/x.MD"] keys=true problems=[] damage=<nil>
no access.yaml: flows=[] keys=false problems=["access.yaml: the commit has no such file at the root of the repo"] damage=<nil>
access.yaml a link: flows=[] keys=false problems=["access.yaml: not a regular file"] damage=<nil>
access.yaml a folder: flows=[] keys=false problems=["access.yaml: not a regular file"] damage=<nil>
access.yaml a gitlink: flows=[] keys=false problems=["access.yaml: not a regular file"] damage=<nil>
access.yaml executable: flows=["flows/x.md"] keys=true problems=[] damage=<nil>
access.yaml big: flows=[] keys=false problems=["access.yaml: 3000 bytes, over the limit of 2048"] damage=<nil>
access.yaml broken: flows=["flows/x.md"] keys=false problems=["access.yaml:1: not valid YAML: did not find expected node content"] damage=<nil>
access.yaml deprecated mode: flows=["flows/x.md"] keys=true problems=[] damage=<nil>
no flows: flows=[] keys=false problems=["flows/: the commit has no such folder (the flows folder, --flows-dir; to withdraw every flow, keep the folder with a file that is not a flow, such as flows/.gitkeep)"] damage=<nil>
flows a file: flows=[] keys=false problems=["flows: is a file in the commit, not a folder (the flows folder, --flows-dir)"] damage=<nil>
flows a link: flows=[] keys=false problems=["flows: is a symbolic link in the commit, not a folder (the flows folder, --flows-dir)"] damage=<nil>
every bad kind, in order: flows=[] keys=false problems=["flows/..: a path that would escape flows/" "flows/.GIT: a .git entry: flows/ holds flows only" "flows/.git: a .git entry: flows/ holds flows only" "flows/a-link.md: a symbolic link: flows/ holds regular files only" "flows/b-sub: a submodule (gitlink): flows/ holds regular files only" "flows/d-big.txt: 3000 bytes, over the limit of 2048" "flows/e-big.md: 3000 bytes, over the limit of 2048" "\"flows/f\\x01ctl.md\": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only" "\"flows/g\\u200bfmt.md\": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only" "\"flows/h\\xffbad.md\": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only" "flows/i\\back.md: a path that would escape flows/" "flows/j/k.md: a symbolic link: flows/ holds regular files only"] damage=<nil>
64 levels: flows=["flows/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/x.md"] keys=true problems=[] damage=<nil>
65 levels: flows=[] keys=false problems=["flows/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d: folders nested deeper than 64 levels"] damage=<nil>
66 levels: flows=[] keys=false problems=["flows/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d: folders nested deeper than 64 levels"] damage=<nil>
max files exact: flows=["flows/a.md" "flows/b/c.md" "flows/d.md"] keys=true problems=[] damage=<nil>
max files over, problems after: flows=[] keys=false problems=["flows/: more than 3 files"] damage=<nil>
total bytes: flows=[] keys=false problems=["flows/: more than 300 bytes of Markdown in all (the limit of one commit)" "flows/d.md: a symbolic link: flows/ holds regular files only"] damage=<nil>
total bytes exact: flows=["flows/a.md" "flows/b.md"] keys=true problems=[] damage=<nil>
file size exact: flows=[] keys=false problems=["flows/b.md: 141 bytes, over the limit of 140"] damage=<nil>
two declare one flow: flows=["flows/a.md"] keys=true problems=["flows/b.md:3: flow acme/a is also declared in flows/a.md: one file per (tenant, flow)"] damage=<nil>
damage: md blob missing: flows=[] keys=false problems=[] damage=flows/b.md: reading it: object not found
damage: other blob missing: flows=[] keys=false problems=[] damage=flows/b.txt: reading it: object not found
damage: sub tree missing: flows=[] keys=false problems=[] damage=flows/b/: reading it: object not found
damage: flows tree missing: flows=[] keys=false problems=[] damage=flows/: reading it: object not found
damage: access.yaml missing: flows=[] keys=false problems=[] damage=access.yaml: reading it: object not found
damage: access.yaml missing and no flows: flows=[] keys=false problems=[] damage=access.yaml: reading it: object not found
damage: two missing, first wins: flows=[] keys=false problems=[] damage=flows/a.md: reading it: object not found
damage after total bytes exceeded is not read: flows=[] keys=false problems=[] damage=flows/d.txt: reading it: object not found
damage after max files is not read: flows=[] keys=false problems=["flows/: more than 1 files"] damage=<nil>
flows dir nested: flows=[] keys=false problems=["cfg/flows/l: a symbolic link: cfg/flows/ holds regular files only"] damage=<nil>
`

// ---- differential: git sync's compile on hand-made commits ----

type handRepo struct {
	t    *testing.T
	repo *git.Repository
}

func newHandRepo(t *testing.T) *handRepo {
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &handRepo{t, repo}
}

func (r *handRepo) blob(data []byte) plumbing.Hash {
	obj := r.repo.Storer.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, _ := obj.Writer()
	w.Write(data)
	w.Close()
	h, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

func (r *handRepo) tree(entries ...object.TreeEntry) plumbing.Hash {
	entries = slices.Clone(entries)
	sort.Sort(object.TreeEntrySorter(entries))
	obj := r.repo.Storer.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

func (r *handRepo) commit(root plumbing.Hash) *object.Commit {
	sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(0, 0)}
	c := &object.Commit{Author: sig, Committer: sig, Message: "m", TreeHash: root}
	obj := r.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	co, err := r.repo.CommitObject(h)
	if err != nil {
		r.t.Fatal(err)
	}
	return co
}

func treeEntry(name string, mode filemode.FileMode, h plumbing.Hash) object.TreeEntry {
	return object.TreeEntry{Name: name, Mode: mode, Hash: h}
}

var missingObject = plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")

const emptyAccess = "keys: []\n"

// compileCases builds the commits the old and the new walker must judge alike.
func compileCases(t *testing.T) []string {
	reg, err := registry.Open(context.Background(), filepath.Join(t.TempDir(), "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	type tc struct {
		name  string
		cfg   func(*Config)
		build func(r *handRepo) plumbing.Hash // the root tree
	}
	good := func(r *handRepo) object.TreeEntry {
		return treeEntry("access.yaml", filemode.Regular, r.blob([]byte(emptyAccess)))
	}
	flows := func(r *handRepo, es ...object.TreeEntry) object.TreeEntry {
		return treeEntry("flows", filemode.Dir, r.tree(es...))
	}
	md := func(r *handRepo, name, tenant, flowName string) object.TreeEntry {
		return treeEntry(name, filemode.Regular, r.blob(flowtest.Marked(tenant, flowName, "m")))
	}
	big := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	deep := func(r *handRepo, levels int) object.TreeEntry {
		e := md(r, "x.md", "acme", "deep")
		for i := 0; i < levels; i++ {
			e = treeEntry("d", filemode.Dir, r.tree(e))
		}
		return e
	}
	cases := []tc{
		{"ok", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "x.md", "acme", "x"), treeEntry("README.md", filemode.Regular, r.blob([]byte("# hi\n")))))
		}},
		{"executable flow and empty files", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, treeEntry("x.MD", filemode.Executable, r.blob(flowtest.Marked("acme", "x", "m"))),
				treeEntry("empty.md", filemode.Regular, r.blob(nil)), treeEntry("e.txt", filemode.Regular, r.blob(nil))))
		}},
		{"no access.yaml", nil, func(r *handRepo) plumbing.Hash { return r.tree(flows(r, md(r, "x.md", "acme", "x"))) }},
		{"access.yaml a link", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Symlink, r.blob([]byte("x"))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml a folder", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Dir, r.tree(md(r, "x.md", "acme", "x"))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml a gitlink", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Submodule, missingObject), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml executable", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Executable, r.blob([]byte(emptyAccess))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml big", func(c *Config) { c.MaxFileBytes = 2048 }, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Regular, r.blob(big(3000))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml broken", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Regular, r.blob([]byte("keys: [\n"))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"access.yaml deprecated mode", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Deprecated, r.blob([]byte(emptyAccess))), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"no flows", nil, func(r *handRepo) plumbing.Hash { return r.tree(good(r)) }},
		{"flows a file", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), treeEntry("flows", filemode.Regular, r.blob([]byte("x"))))
		}},
		{"flows a link", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), treeEntry("flows", filemode.Symlink, r.blob([]byte("x"))))
		}},
		{"every bad kind, in order", func(c *Config) { c.MaxFileBytes = 2048 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r,
				treeEntry("a-link.md", filemode.Symlink, r.blob([]byte("../x"))),
				treeEntry("b-sub", filemode.Submodule, missingObject),
				treeEntry("c-dep.md", filemode.Deprecated, r.blob([]byte("x"))),
				treeEntry("d-big.txt", filemode.Regular, r.blob(big(3000))),
				treeEntry("e-big.md", filemode.Executable, r.blob(big(3000))),
				treeEntry("f\x01ctl.md", filemode.Regular, r.blob([]byte("x"))),
				treeEntry("g\u200bfmt.md", filemode.Regular, r.blob([]byte("x"))),
				treeEntry("h\xffbad.md", filemode.Regular, r.blob([]byte("x"))),
				treeEntry("i\\back.md", filemode.Regular, r.blob([]byte("x"))),
				treeEntry(".GIT", filemode.Dir, r.tree(md(r, "x.md", "acme", "g"))),
				treeEntry(".git", filemode.Regular, r.blob([]byte("x"))),
				treeEntry("..", filemode.Dir, r.tree(md(r, "x.md", "acme", "g"))),
				treeEntry("j", filemode.Dir, r.tree(treeEntry("k.md", filemode.Symlink, r.blob([]byte("/etc/passwd"))))),
				md(r, "z.md", "acme", "z"),
			))
		}},
		{"64 levels", nil, func(r *handRepo) plumbing.Hash { return r.tree(good(r), flows(r, deep(r, 63))) }},
		{"65 levels", nil, func(r *handRepo) plumbing.Hash { return r.tree(good(r), flows(r, deep(r, 64))) }},
		{"66 levels", nil, func(r *handRepo) plumbing.Hash { return r.tree(good(r), flows(r, deep(r, 70))) }},
		{"max files exact", func(c *Config) { c.MaxFiles = 4 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), treeEntry("b", filemode.Dir, r.tree(md(r, "c.md", "acme", "c"))), md(r, "d.md", "acme", "d")))
		}},
		{"max files over, problems after", func(c *Config) { c.MaxFiles = 3 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), treeEntry("b", filemode.Dir, r.tree(md(r, "c.md", "acme", "c"), md(r, "c2.md", "acme", "c2"))), treeEntry("d.md", filemode.Symlink, r.blob([]byte("x"))), treeEntry("e\x01", filemode.Regular, r.blob(nil))))
		}},
		{"total bytes", func(c *Config) { c.MaxTotalBytes = 300 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), md(r, "b.md", "acme", "b"), md(r, "c.md", "acme", "c"), treeEntry("d.md", filemode.Symlink, r.blob([]byte("x"))), treeEntry("e.txt", filemode.Regular, r.blob(big(5000)))))
		}},
		{"total bytes exact", func(c *Config) { c.MaxTotalBytes = int64(2 * len(flowtest.Marked("acme", "a", "m"))) }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), md(r, "b.md", "acme", "b")))
		}},
		{"file size exact", func(c *Config) { c.MaxFileBytes = int64(len(flowtest.Marked("acme", "a", "m"))) }, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Regular, r.blob([]byte(emptyAccess))), flows(r, md(r, "a.md", "acme", "a"), treeEntry("b.md", filemode.Regular, r.blob(append(flowtest.Marked("acme", "b", "m"), '\n')))))
		}},
		{"two declare one flow", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), md(r, "b.md", "acme", "a")))
		}},
		{"damage: md blob missing", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, treeEntry("a-link", filemode.Symlink, r.blob([]byte("x"))), treeEntry("b.md", filemode.Regular, missingObject)))
		}},
		{"damage: other blob missing", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, treeEntry("a-link", filemode.Symlink, r.blob([]byte("x"))), treeEntry("b.txt", filemode.Regular, missingObject)))
		}},
		{"damage: sub tree missing", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, treeEntry("a-link", filemode.Symlink, r.blob([]byte("x"))), treeEntry("b", filemode.Dir, missingObject)))
		}},
		{"damage: flows tree missing", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), treeEntry("flows", filemode.Dir, missingObject))
		}},
		{"damage: access.yaml missing", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Regular, missingObject), flows(r, md(r, "x.md", "acme", "x")))
		}},
		{"damage: access.yaml missing and no flows", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(treeEntry("access.yaml", filemode.Regular, missingObject))
		}},
		{"damage: two missing, first wins", nil, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, treeEntry("a.md", filemode.Regular, missingObject), treeEntry("b", filemode.Dir, missingObject)))
		}},
		{"damage after total bytes exceeded is not read", func(c *Config) { c.MaxTotalBytes = 200 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), md(r, "b.md", "acme", "b"), treeEntry("c.md", filemode.Regular, missingObject), treeEntry("d.txt", filemode.Regular, missingObject)))
		}},
		{"damage after max files is not read", func(c *Config) { c.MaxFiles = 1 }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), flows(r, md(r, "a.md", "acme", "a"), treeEntry("b.md", filemode.Regular, missingObject)))
		}},
		{"flows dir nested", func(c *Config) { c.FlowsDir = "cfg/flows" }, func(r *handRepo) plumbing.Hash {
			return r.tree(good(r), treeEntry("cfg", filemode.Dir, r.tree(flows(r, md(r, "x.md", "acme", "x"), treeEntry("l", filemode.Symlink, r.blob([]byte("x")))))))
		}},
	}
	var out []string
	for _, c := range cases {
		r := newHandRepo(t)
		cfg := Config{Registry: reg, FlowsDir: "flows", MaxFileBytes: DefaultMaxFileBytes, MaxFiles: DefaultMaxFiles, MaxTotalBytes: DefaultMaxTotalBytes}
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		s := &Syncer{cfg: cfg}
		commit := r.commit(c.build(r))
		flows, keys, problems, damage := s.compile(r.repo, commit)
		var names []string
		for _, f := range flows {
			names = append(names, f.Path())
		}
		line := fmt.Sprintf("%s: flows=%q keys=%v problems=%q damage=%v", c.name, names, keys != nil, problems, damage)
		out = append(out, line)
	}
	return out
}

// ---- DiskReader ----

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sourcePaths(r *DiskReader) []string {
	var out []string
	for _, s := range r.Sources() {
		out = append(out, s.Path)
	}
	return out
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=a", "-c", "user.email=a@example.com", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestDiskNestedCheckoutIsAGitlink: a folder of flows/ holding a
// .git (a submodule's checkout, or a repo cloned inside the config repo)
// is committed by git as a gitlink, which git sync refuses ("a submodule
// (gitlink)"); DiskReader refuses it the same way. It left the .git out
// and read the folder's files as flows, so validate said ok and deploy
// published a folder whose commit git sync refuses.
func TestDiskNestedCheckoutIsAGitlink(t *testing.T) {
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{"access.yaml": "keys: []\n", "flows/README.md": "# flows\n"})
	sub := filepath.Join(repo, "flows", "vendor")
	writeTree(t, sub, map[string]string{"acme/x.md": string(flowtest.Marked("acme", "x", "m"))})
	gitIn(t, sub, "init", "-q")
	gitIn(t, sub, "add", "-A")
	gitIn(t, sub, "commit", "-q", "-m", "vendor")
	gitIn(t, repo, "init", "-q")
	gitIn(t, repo, "add", "-A")
	// what git commits: flows/vendor a gitlink (mode 160000)
	if ls := gitIn(t, repo, "ls-files", "-s", "flows/vendor"); !strings.HasPrefix(ls, "160000 ") {
		t.Fatalf("git add made %q of the nested checkout, not a gitlink", ls)
	}
	r := NewDiskReader()
	r.Folder(repo)
	want := filepath.Join(repo, "flows", "vendor")
	found := false
	for _, p := range r.Problems() {
		if strings.HasPrefix(p, want+": ") && strings.Contains(p, "submodule") {
			found = true
		}
	}
	if !found {
		t.Errorf("DiskReader of a config repo whose flows/vendor is a nested checkout: problems %q, sources %q; git sync refuses its commit with %q",
			r.Problems(), sourcePaths(r), "flows/vendor: a submodule (gitlink): flows/ holds regular files only")
	}
}

// swapFolder is a folder on disk that runs after once its listing is
// taken: what another process does between the listing and the reading.
type swapFolder struct {
	diskFolder
	after func()
}

func (s swapFolder) list() ([]entry, error) {
	es, err := s.diskFolder.list()
	s.after()
	return es, err
}

func walkSwapping(root string, after func()) *DiskReader {
	r := NewDiskReader()
	r.w.root, r.w.label = root, filepath.Base(root)
	r.w.walk(swapFolder{diskFolder{path: root}, after}, root, 1)
	return r
}

// TestDiskFolderSwappedForALinkAfterListing: a folder of the flows
// folder replaced by a symbolic link between its parent's listing and its
// own is not followed: the folder is opened O_NOFOLLOW. os.ReadDir
// followed it, and Markdown from outside the folder was read as its own.
func TestDiskFolderSwappedForALinkAfterListing(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	writeTree(t, root, map[string]string{"sub/ok.md": "# ok\n"})
	writeTree(t, outside, map[string]string{"secret.md": string(flowtest.Marked("acme", "planted", "m"))})
	r := walkSwapping(root, func() {
		os.RemoveAll(filepath.Join(root, "sub"))
		if err := os.Symlink(outside, filepath.Join(root, "sub")); err != nil {
			t.Fatal(err)
		}
	})
	if srcs := sourcePaths(r); slices.Contains(srcs, filepath.Join(root, "sub", "secret.md")) {
		t.Errorf("read %q through a link put in place of sub/ after the listing (problems %q): want it refused", srcs, r.Problems())
	}
}

// TestDiskFolderSwappedForAFifoAfterListing: a folder replaced by a
// named pipe between the listing and its reading does not block (os.ReadDir
// opens with O_DIRECTORY) and is refused (passes).
func TestDiskFolderSwappedForAFifoAfterListing(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"sub/ok.md": "# ok\n"})
	fifo := filepath.Join(root, "sub")
	done := make(chan *DiskReader, 1)
	go func() {
		done <- walkSwapping(root, func() {
			os.RemoveAll(fifo)
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				panic(err)
			}
		})
	}()
	select {
	case r := <-done:
		if len(r.Problems()) == 0 {
			t.Errorf("a pipe in place of sub/: no problem")
		}
	case <-time.After(3 * time.Second):
		// release the blocked open
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-done
		t.Errorf("the walk blocked on a named pipe put in place of a folder after the listing")
	}
}

// TestDiskFileSwappedAfterListing: a Markdown file replaced by a
// link or a named pipe after the listing is refused, not followed, and
// does not block (passes).
func TestDiskFileSwappedAfterListing(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"link", func(p string) error { return os.Symlink("/etc/hostname", p) }, "too many levels of symbolic links"},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{"x.md": "# x\n"})
			p := filepath.Join(root, "x.md")
			done := make(chan *DiskReader, 1)
			go func() {
				done <- walkSwapping(root, func() {
					os.Remove(p)
					if err := c.make(p); err != nil {
						panic(err)
					}
				})
			}()
			select {
			case r := <-done:
				if want := []string{p + ": " + c.want}; !slices.Equal(r.Problems(), want) || len(r.Sources()) != 0 {
					t.Errorf("problems %q sources %q, want %q", r.Problems(), sourcePaths(r), want)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("blocked")
			}
		})
	}
}

// TestDiskLinksAndSpecialFiles: links anywhere (flows/ itself,
// access.yaml, a folder, a file of any extension), pipes and sockets are
// refused; a pipe does not block (passes).
func TestDiskLinksAndSpecialFiles(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"flows/acme/x.md": string(flowtest.Marked("acme", "x", "m")), "access.yaml": "keys: []\n"})

	repo := t.TempDir()
	writeTree(t, repo, map[string]string{"access.yaml": "keys: []\n"})
	os.Symlink(filepath.Join(outside, "flows"), filepath.Join(repo, "flows"))
	r := NewDiskReader()
	if _, cfg := r.Folder(repo); !cfg || len(r.Sources()) != 0 ||
		!slices.Equal(r.Problems(), []string{filepath.Join(repo, "flows") + ": not a folder: a config repo holds its flows in the folder flows/"}) {
		t.Errorf("flows/ a link: problems %q sources %q", r.Problems(), sourcePaths(r))
	}

	repo2 := t.TempDir()
	writeTree(t, repo2, map[string]string{"flows/README.md": "# f\n"})
	os.Symlink(filepath.Join(outside, "access.yaml"), filepath.Join(repo2, "access.yaml"))
	r = NewDiskReader()
	if data, cfg := r.Folder(repo2); !cfg || data != nil || !slices.Equal(r.Problems(), []string{filepath.Join(repo2, "access.yaml") + ": not a regular file"}) {
		t.Errorf("access.yaml a link: problems %q", r.Problems())
	}

	flows := t.TempDir()
	writeTree(t, flows, map[string]string{"ok.md": "# ok\n"})
	os.Symlink(filepath.Join(outside, "flows"), filepath.Join(flows, "dirlink"))
	os.Symlink("/etc/hostname", filepath.Join(flows, "logo.png"))
	syscall.Mkfifo(filepath.Join(flows, "pipe.md"), 0o644)
	done := make(chan *DiskReader, 1)
	go func() { r := NewDiskReader(); r.Folder(flows); done <- r }()
	select {
	case r := <-done:
		want := []string{
			filepath.Join(flows, "dirlink") + ": a symbolic link or special file: a folder of flows holds regular files only",
			filepath.Join(flows, "logo.png") + ": a symbolic link or special file: a folder of flows holds regular files only",
			filepath.Join(flows, "pipe.md") + ": a symbolic link or special file: a folder of flows holds regular files only",
		}
		if !slices.Equal(r.Problems(), want) || !slices.Equal(sourcePaths(r), []string{filepath.Join(flows, "ok.md")}) {
			t.Errorf("problems %q sources %q, want %q", r.Problems(), sourcePaths(r), want)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("blocked on a pipe")
	}
}

// TestDiskFolderGivenThroughALink: the folder given (or a parent
// of it) may be a link: it is the operator's own path and is followed,
// while every link inside is refused (passes; noted as the intended
// reading).
func TestDiskFolderGivenThroughALink(t *testing.T) {
	real := t.TempDir()
	writeTree(t, real, map[string]string{"access.yaml": "keys: []\n", "flows/acme/x.md": string(flowtest.Marked("acme", "x", "m"))})
	link := filepath.Join(t.TempDir(), "repo")
	os.Symlink(real, link)
	r := NewDiskReader()
	if _, cfg := r.Folder(link); !cfg || len(r.Problems()) != 0 || !slices.Equal(sourcePaths(r), []string{filepath.Join(link, "flows", "acme", "x.md")}) {
		t.Errorf("problems %q sources %q", r.Problems(), sourcePaths(r))
	}
}

// TestDiskMarkdownGrowsAfterItsSize: the 64 MiB of Markdown in all
// counts what is read: a file that grows between its size and its read is
// counted at what was read (it was counted at its old size).
func TestDiskMarkdownGrowsAfterItsSize(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.md": "", "b.md": ""})
	r := NewDiskReader()
	r.w.maxTotalBytes = 100
	r.w.root, r.w.label = root, filepath.Base(root)
	r.w.walk(growFolder{diskFolder{path: root}}, root, 1)
	var total int
	for _, s := range r.Sources() {
		total += len(s.Data)
	}
	if total > 100 && len(r.Problems()) == 0 {
		t.Errorf("read %d bytes of Markdown with a limit of 100 in all, and no problem (counted %d)", total, r.MarkdownBytes())
	}
}

type growFolder struct{ diskFolder }

func (g growFolder) list() ([]entry, error) {
	es, err := g.diskFolder.list()
	for i, e := range es {
		es[i] = growEntry{e.(diskEntry)}
	}
	return es, err
}

type growEntry struct{ diskEntry }

func (g growEntry) read(max int64) ([]byte, int64, error) {
	os.WriteFile(g.path, bytes.Repeat([]byte("x"), 90), 0o644) // written between size and read
	return g.diskEntry.read(max)
}

// TestDiskDotGitLeftOutAnyCase: .git, .GIT, a .git file are left
// out at every level, as git commits none (passes).
func TestDiskDotGitLeftOutAnyCase(t *testing.T) {
	root := t.TempDir()
	bad := "---\nflowmarkdown_version: \"0.1\"\nflow: Bad\n---\n"
	writeTree(t, root, map[string]string{".git/x.md": bad, ".GIT/x.md": bad, "a/.Git": "gitdir: x", "a/ok.md": "# ok\n"})
	r := NewDiskReader()
	r.Folder(root)
	if len(r.Problems()) != 0 || !slices.Equal(sourcePaths(r), []string{filepath.Join(root, "a", "ok.md")}) {
		t.Errorf("problems %q sources %q", r.Problems(), sourcePaths(r))
	}
}

// TestDiskFolderTwiceCountsTwice: the same folder read twice (given
// twice, or a folder and one inside it) counts its Markdown once against
// the 64 MiB of one commit (it counted it twice).
func TestDiskFolderTwiceCountsTwice(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.md": "# a\n", "sub/b.md": "# b\n"})
	r := NewDiskReader()
	r.Folder(root)
	r.Folder(root)
	r.Folder(filepath.Join(root, "sub"))
	if got, want := r.MarkdownBytes(), int64(8); got != want {
		t.Errorf("MarkdownBytes after reading %s twice and its sub/ = %d, want %d (each file once)", root, got, want)
	}
}
