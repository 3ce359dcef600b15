package gitsync_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// deployed makes env's first good commit (acme/x v1) and returns it.
func (e *env) deployed() string {
	e.t.Helper()
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c := e.src.commit("acme/x")
	e.mustApply(c, "published acme/x v1")
	return c
}

// recovers checks that a good commit after a refused one is applied (made
// with the git command line, which commits the index whatever the head's
// tree holds).
func (e *env) recovers() {
	e.t.Helper()
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	e.mustApply(e.src.gitCommit("a good commit"))
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Flow.Description() != "two" {
		e.t.Fatalf("after the good commit: %+v", lf)
	}
}

// paddedFlow is a valid flow file of exactly size bytes (prose after the
// last step pads it).
func paddedFlow(t testing.TB, tenant, name string, size int) []byte {
	t.Helper()
	src := flowtest.Marked(tenant, name, "padded")
	src = append(src, "\nNotes.\n"...)
	if len(src) > size {
		t.Fatalf("a flow cannot be as small as %d bytes", size)
	}
	line := bytes.Repeat([]byte("x"), 79)
	for len(src) < size {
		n := min(size-len(src), len(line)+1)
		src = append(src, line[:n-1]...)
		src = append(src, '\n')
	}
	return src
}

// A file over MaxFileBytes under the flows folder refuses the commit.
func TestLimitFileSize(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxFileBytes = 4096 })
	e.deployed()

	// At the limit: accepted.
	e.src.write("flows/acme/big.md", paddedFlow(t, "acme", "big", 4096))
	e.mustApply(e.src.commit("a flow of 4096 bytes"), "published acme/big v1", "unchanged acme/x v1")

	e.src.write("flows/acme/big.md", paddedFlow(t, "acme", "big", 4097))
	e.src.commit("a flow of 4097 bytes")
	e.mustRefuse("flows/acme/big.md: 4097 bytes, over the limit of 4096")

	// Markdown that is not a flow counts too.
	e.src.write("flows/acme/big.md", paddedFlow(t, "acme", "big", 4096))
	e.src.write("flows/notes/long.md", bytes.Repeat([]byte("prose\n"), 1000))
	e.src.commit("long prose")
	e.mustRefuse("flows/notes/long.md: 6000 bytes, over the limit of 4096")

	e.src.remove("flows/notes")
	e.src.write("access.yaml", append(accessFile(acmeKey), bytes.Repeat([]byte("# padding\n"), 500)...))
	e.src.commit("a long access.yaml")
	e.mustRefuse("access.yaml: " + strconv.Itoa(len(accessFile(acmeKey))+5000) + " bytes, over the limit of 4096")

	e.src.write("access.yaml", accessFile(acmeKey))
	e.recovers()
}

// A blob over the limit under the flows folder refuses the commit even
// when it is not Markdown: the cap is on every file of the folder.
func TestLimitFileSizeOfOtherFiles(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxFileBytes = 4096 })
	e.deployed()
	e.src.write("flows/acme/logo.png", bytes.Repeat([]byte{0x89}, 8192))
	e.src.commit("a large picture")
	// a file that is not read is still held to the cap
	// (DefaultMaxFileBytes: "a file under the flows folder"; RELIABILITY.md
	// E.22: a 2 MiB blob against a 1 MiB cap rejects the commit whole)
	e.mustRefuse("flows/acme/logo.png: 8192 bytes, over the limit of 4096")
}

// The real default: 1 MiB is accepted, one byte more is not.
func TestLimitFileSizeDefault(t *testing.T) {
	e := newEnv(t)
	e.deployed()
	if gitsync.DefaultMaxFileBytes != 1<<20 {
		t.Fatalf("DefaultMaxFileBytes = %d, want 1 MiB", gitsync.DefaultMaxFileBytes)
	}
	e.src.write("flows/acme/huge.md", paddedFlow(t, "acme", "huge", 1<<20))
	e.mustApply(e.src.commit("a flow of 1 MiB"), "published acme/huge v1", "unchanged acme/x v1")

	e.src.write("flows/acme/huge.md", paddedFlow(t, "acme", "huge", 1<<20+1))
	e.src.commit("a flow of 1 MiB + 1")
	e.mustRefuse("flows/acme/huge.md: 1048577 bytes, over the limit of 1048576")
	e.src.remove("flows/acme/huge.md")
	e.recovers()
}

// More than MaxFiles entries under the flows folder (folders count)
// refuse the commit.
func TestLimitFileCount(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxFiles = 6 })
	e.deployed() // flows/README.md, flows/acme, flows/acme/x.md: 3 entries

	e.src.write("flows/acme/notes.txt", []byte("notes\n"))
	e.src.write("flows/more/y.md", flowtest.Marked("acme", "y", "one"))
	e.mustApply(e.src.commit("6 entries"), "unchanged acme/x v1", "published acme/y v1")

	e.src.write("flows/more/z.txt", []byte("one too many\n"))
	e.src.commit("7 entries")
	e.mustRefuse("flows/: more than 6 files")

	// Far more than the limit: still one error.
	e.src.remove("flows/more/z.txt")
	for i := range 50 {
		e.src.write("flows/many/f"+strconv.Itoa(i)+".txt", []byte("x\n"))
	}
	e.src.commit("56 entries")
	e.mustRefuse("flows/: more than 6 files")

	e.src.remove("flows/many")
	e.recovers()
}

// TestLimitFileCountCountsRefusedNames: an entry refused for its name
// counts against MaxFiles as any entry does, and a refused commit records
// at most MaxReportedErrors lines. A flows folder of 30,000 entries named
// "\x01NNNNNN.md" under MaxFiles 100 was refused with 30,000 errors, every
// one recorded in the registry and repeated by /status: the names were
// refused before they were counted. (Such a tree is now refused for its
// size before it is read: the 700 entries here fit in what 100 may take.)
func TestLimitFileCountCountsRefusedNames(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxFiles = 100 })
	commitFlowsFolder(e, 700, "\x01%06d.md", "700 badly named files")

	// the limit first, then the names walked before it, cut to
	// MaxReportedErrors lines
	want := []string{"flows/: more than 100 files"}
	for i := range gitsync.MaxReportedErrors - 2 {
		want = append(want, fmt.Sprintf(`"flows/\x01%06d.md": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only`, i))
	}
	want = append(want, "… and 2 more errors (nexus validate on a checkout of the commit lists them all)")
	res := e.sync()
	st := e.status()
	if st.LastError == nil {
		t.Fatalf("Sync = %d errors, and no refusal recorded", len(res.Errors))
	}
	if n, m := len(res.Errors), len(st.LastError.Errors); n > gitsync.MaxReportedErrors || m > gitsync.MaxReportedErrors {
		t.Fatalf("Sync returned %d errors and recorded %d, want at most %d", n, m, gitsync.MaxReportedErrors)
	}
	if diff := cmp.Diff(want, res.Errors); diff != "" {
		t.Errorf("the errors returned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, st.LastError.Errors); diff != "" {
		t.Errorf("the errors recorded (-want +got):\n%s", diff)
	}
	// the log line says how many errors there were in all
	lines := e.logs.Events(t, "sync_failed")
	if len(lines) != 1 || lines[0]["error_count"] != float64(101) || len(lines[0]["errors"].([]any)) != gitsync.MaxReportedErrors {
		t.Errorf("sync_failed lines: %v, want one with error_count 101 and %d errors", lines, gitsync.MaxReportedErrors)
	}
}

// A symbolic link under the flows folder refuses the commit, wherever it
// points.
func TestLimitSymlink(t *testing.T) {
	e := newEnv(t)
	e.deployed()
	for _, target := range []string{"../../access.yaml", "x.md", "/etc/passwd", "missing.md"} {
		link := filepath.Join(e.src.dir, "flows", "acme", "link.md")
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		e.src.gitCommit("a link to " + target)
		if ls := e.src.git("ls-tree", "HEAD", "flows/acme/link.md"); !strings.HasPrefix(ls, "120000 ") {
			t.Fatalf("the link was not committed as a symbolic link: %s", ls)
		}
		e.mustRefuse("flows/acme/link.md: a symbolic link: flows/ holds regular files only")
	}
	// A link as the flows folder itself, or as access.yaml.
	e.src.git("rm", "-q", "flows/acme/link.md")
	e.src.git("mv", "flows", "real")
	if err := os.Symlink("real", filepath.Join(e.src.dir, "flows")); err != nil {
		t.Fatal(err)
	}
	e.src.gitCommit("flows is a link")
	e.mustRefuse("flows: is a symbolic link in the commit, not a folder (the flows folder, --flows-dir)")

	e.src.remove("flows")
	e.src.git("mv", "real", "flows")
	e.src.git("mv", "access.yaml", "keys.yaml")
	if err := os.Symlink("keys.yaml", filepath.Join(e.src.dir, "access.yaml")); err != nil {
		t.Fatal(err)
	}
	e.src.gitCommit("access.yaml is a link")
	e.mustRefuse("access.yaml: not a regular file")
}

// A gitlink (submodule) under the flows folder refuses the commit.
func TestLimitGitlink(t *testing.T) {
	e := newEnv(t)
	good := e.deployed()
	e.src.git("update-index", "--add", "--cacheinfo", "160000,"+good+",flows/sub")
	e.src.git("commit", "-q", "-m", "a gitlink")
	if ls := e.src.git("ls-tree", "HEAD", "flows/sub"); !strings.HasPrefix(ls, "160000 commit ") {
		t.Fatalf("the gitlink was not committed: %s", ls)
	}
	e.mustRefuse("flows/sub: a submodule (gitlink): flows/ holds regular files only")

	// A gitlink to a commit the repo does not hold.
	e.src.git("update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("ab", 20)+",flows/acme/ext")
	e.src.git("commit", "-q", "-m", "a gitlink to elsewhere")
	e.mustRefuse(
		"flows/acme/ext: a submodule (gitlink): flows/ holds regular files only",
		"flows/sub: a submodule (gitlink): flows/ holds regular files only",
	)
}

// Hostile tree entries, which git itself never writes, are refused: the
// commit is rejected whole and nothing is written outside the state
// directory.
func TestLimitHostileEntries(t *testing.T) {
	for _, tc := range []struct {
		test, name string
		mode       filemode.FileMode
		want       string
	}{
		{"dotdot folder", "..", filemode.Dir, "flows/..: a path that would escape flows/"},
		{"dotdot file", "..", filemode.Regular, "flows/..: a path that would escape flows/"},
		{"dot folder", ".", filemode.Dir, "flows/.: a path that would escape flows/"},
		{"slashes", "a/../../x.md", filemode.Regular, "flows/a/../../x.md: a path that would escape flows/"},
		{"backslashes", "..\\..\\x.md", filemode.Regular, "flows/..\\..\\x.md: a path that would escape flows/"},
		// quoted, never written raw to a terminal or a log
		{"a terminal escape", "\x1b]0;pwned\x07x.md", filemode.Regular, `"flows/\x1b]0;pwned\ax.md": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only`},
		{"not UTF-8", "x\xff.md", filemode.Regular, `"flows/x\xff.md": a name with a control or format character, or not UTF-8: flows/ holds plainly named files only`},
		// no file system could hold it; cut in the error
		{"a name over 255 bytes", strings.Repeat("n", 300) + ".md", filemode.Regular, `"flows/` + strings.Repeat("n", 64) + `"…: a name of 303 bytes, over the limit of 255`},
	} {
		t.Run(tc.test, func(t *testing.T) {
			e := newEnv(t)
			e.deployed()

			// The entry holds a flow, so that it would be published if it
			// were walked into or read.
			evil := e.src.storeBlob(flowtest.Marked("acme", "evil", "escaped"))
			target := evil
			if tc.mode == filemode.Dir {
				target = e.src.storeTree(withEntry(e.src.headTree(), treeEntry("evil.md", filemode.Regular, evil)))
			}
			root := e.src.headTree()
			flowsEntry, err := root.FindEntry("flows")
			if err != nil {
				t.Fatal(err)
			}
			flows, err := e.src.repo.TreeObject(flowsEntry.Hash)
			if err != nil {
				t.Fatal(err)
			}
			newFlows := e.src.storeTree(withEntry(flows, treeEntry(tc.name, tc.mode, target)))
			e.src.commitTree(e.src.storeTree(withEntry(root, treeEntry("flows", filemode.Dir, newFlows))), "a hostile entry")
			top := filepath.Dir(filepath.Dir(e.src.dir)) // the test's temporary folders
			outside := snapshot(t, top, e.state)
			e.mustRefuse(tc.want)
			if _, ok := e.reg.Live().Lookup("acme", "evil"); ok {
				t.Fatal("the flow behind the hostile entry is live")
			}
			if after := snapshot(t, top, e.state); !slices.Equal(after, outside) {
				t.Errorf("files outside the state directory changed:\n got %q\nwant %q", after, outside)
			}
			e.recovers()
		})
	}
}

// An entry named .git under the flows folder is refused like the other
// names git's own fsck rejects.
func TestLimitDotGitEntry(t *testing.T) {
	e := newEnv(t)
	e.deployed()
	root := e.src.headTree()
	flowsEntry, err := root.FindEntry("flows")
	if err != nil {
		t.Fatal(err)
	}
	flows, err := e.src.repo.TreeObject(flowsEntry.Hash)
	if err != nil {
		t.Fatal(err)
	}
	inner := e.src.storeTree(withEntry(emptyTree(), treeEntry("evil.md", filemode.Regular, e.src.storeBlob(flowtest.Marked("acme", "evil", "hidden")))))
	newFlows := e.src.storeTree(withEntry(flows, treeEntry(".git", filemode.Dir, inner)))
	commit := e.src.commitTree(e.src.storeTree(withEntry(root, treeEntry("flows", filemode.Dir, newFlows))), "a .git folder")
	res := e.sync()
	// an entry named .git under flows/ is refused, not walked like any
	// folder (RELIABILITY.md E.22 lists .git among the hostile entries
	// whose commit is rejected whole)
	if res.Applied() || len(res.Errors) == 0 || !strings.Contains(res.Errors[0], "flows/.git") {
		t.Errorf("Sync of %s = %+v, want it refused naming flows/.git", commit, res)
	}
}

// Folders nested deeper than 64 levels under the flows folder refuse the
// commit.
func TestLimitDepth(t *testing.T) {
	e := newEnv(t)
	e.deployed()
	deep := "flows" + strings.Repeat("/d", 63)
	e.src.write(deep+"/y.md", flowtest.Marked("acme", "y", "deep"))
	e.mustApply(e.src.commit("63 folders deep"), "unchanged acme/x v1", "published acme/y v1")

	e.src.remove(deep + "/y.md")
	e.src.write(deep+"/d/y.md", flowtest.Marked("acme", "y", "deeper"))
	e.src.commit("64 folders deep")
	e.mustRefuse(deep + "/d: folders nested deeper than 64 levels")

	// A tree 10,000 levels deep (RELIABILITY E.22), made by hand (each
	// level points at the one below): the walk stops at the limit.
	var h plumbing.Hash
	e.src.packed(func() {
		h = e.src.storeTree(withEntry(emptyTree(), treeEntry("y.md", filemode.Regular, e.src.storeBlob(flowtest.Marked("acme", "y", "abyss")))))
		for range 10000 {
			h = e.src.storeTree(withEntry(emptyTree(), treeEntry("d", filemode.Dir, h)))
		}
	})
	root := e.src.headTree()
	e.src.commitTree(e.src.storeTree(withEntry(root, treeEntry("flows", filemode.Dir, h))), "10,000 folders deep")
	e.mustRefuse("flows" + strings.Repeat("/d", 64) + ": folders nested deeper than 64 levels")
}

// snapshot lists every path under root except those under skip.
func snapshot(t testing.TB, root, skip string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func emptyTree() *object.Tree { return &object.Tree{} }

// TestLimitFileCountBeforeTheTreeIsRead: a flows folder whose tree is
// larger than MaxFiles entries could make is refused for its files
// without being read. A tree of 400,000 entries (a pack of under 1 MB)
// made every process's first round allocate 198 MB, decoding it whole,
// only to refuse it for "more than 100 files".
func TestLimitFileCountBeforeTheTreeIsRead(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxFiles = 100 })
	commitFlowsFolder(e, 400000, "%06d.md", "400,000 files")
	want := []string{"flows/: more than 100 files"}
	if res := e.sync(); !cmp.Equal(want, res.Errors) {
		t.Fatalf("errors of the first round: %q, want %q", res.Errors, want)
	}

	// a restart's round judges the head again, from the clone
	e.s.Stop()
	s, err := gitsync.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := s.Sync(context.Background())
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, res.Errors); diff != "" {
		t.Errorf("errors of the restart's round (-want +got):\n%s", diff)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("the restart's round allocated %d KB", alloc>>10)
	if alloc > 16<<20 {
		t.Errorf("the restart's round allocated %d MB, want under 16 MB", alloc>>20)
	}
}

// TestLimitOuterTrees: the trees read outside the flows folder (the
// repo's root, the folders on the path of --flows-dir) are read within a
// size of their own, 1 MiB: larger, the commit is refused without them
// being read. Their entries are not counted, and a root of 400,000
// entries took 200 MB to decode.
func TestLimitOuterTrees(t *testing.T) {
	many := func(e *env, n int) []object.TreeEntry {
		blob := e.src.storeBlob([]byte("x"))
		entries := make([]object.TreeEntry, n)
		for i := range entries {
			entries[i] = treeEntry(fmt.Sprintf("%06d.txt", i), filemode.Regular, blob)
		}
		return entries
	}
	const n = 40000 // 38 bytes each: 1,520,000 bytes
	for _, tc := range []struct {
		name, flowsDir string
		tree           func(e *env) plumbing.Hash // the commit's root
		want           []string
	}{
		{
			name: "the root", flowsDir: "flows",
			tree: func(e *env) plumbing.Hash {
				return e.src.storeTree(append(many(e, n), e.src.headTree().Entries...))
			},
			want: []string{"the repo's root folder holds more entries than git sync reads (a tree of 1520071 bytes, over the limit of 1048576)"},
		},
		{
			name: "a folder on the path of the flows folder", flowsDir: "config/flows",
			tree: func(e *env) plumbing.Hash {
				root := e.src.headTree()
				flows, err := root.FindEntry("flows")
				if err != nil {
					t.Fatal(err)
				}
				config := e.src.storeTree(append(many(e, n), treeEntry("flows", filemode.Dir, flows.Hash)))
				return e.src.storeTree(withEntry(root, treeEntry("config", filemode.Dir, config)))
			},
			want: []string{"config/: holds more entries than git sync reads on the path of the flows folder (a tree of 1520032 bytes, over the limit of 1048576)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *gitsync.Config) { c.FlowsDir = tc.flowsDir })
			e.src.commit("base")
			e.src.commitTree(tc.tree(e), "a large tree")
			res := e.sync()
			if diff := cmp.Diff(tc.want, res.Errors); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// commitFlowsFolder commits, after a base commit, a flows folder of n
// one-byte files named by format (with the file's number).
func commitFlowsFolder(e *env, n int, format, message string) {
	e.src.commit("base")
	blob := e.src.storeBlob([]byte("x"))
	entries := make([]object.TreeEntry, n)
	for i := range entries {
		entries[i] = treeEntry(fmt.Sprintf(format, i), filemode.Regular, blob)
	}
	flows := e.src.storeTree(entries)
	e.src.commitTree(e.src.storeTree(withEntry(e.src.headTree(), treeEntry("flows", filemode.Dir, flows))), message)
}
