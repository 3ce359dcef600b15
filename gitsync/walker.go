package gitsync

import (
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/nexushq/nexus/flow"
)

// The walker holds the rules a commit is read by: the limits, what the
// flows folder may hold, and the errors that refuse it. It reads a commit's
// tree (gitFolder, for Sync) or a folder on disk (diskFolder, for nexus
// validate and nexus deploy through DiskReader), so that both refuse the
// same things with the same words.

// folder is a folder the walker reads.
type folder interface {
	// list returns the folder's entries in the order they are read.
	list() ([]entry, error)
}

// entry is one entry of a folder.
type entry interface {
	name() string
	// kind is what the entry is; mode names a kindOther.
	kind() (k entryKind, mode string)
	// size is a regular file's size, found without reading it.
	size() (int64, error)
	// read reads a regular file within max bytes; over it, data is nil
	// and size says how large the file is.
	read(max int64) (data []byte, size int64, err error)
	// open opens a folder. One that holds more than max entries may be
	// refused as such without being read (errTooManyEntries).
	open(max int) (folder, error)
}

// maxNameBytes is the longest name of an entry of the flows folder:
// NAME_MAX of the usual file systems, so a commit holding a longer one
// could not be checked out (nor read by nexus validate).
const maxNameBytes = 255

// maxTreeEntryBytes is the most bytes an entry of the flows folder takes
// in its tree object: its mode (at most 6 octal digits), a space, its
// name, a NUL and its 20-byte hash. A tree larger than max times this
// holds more than max entries, or a name too long.
const maxTreeEntryBytes = 6 + 1 + maxNameBytes + 1 + 20

// errTooManyEntries is open's refusal of a folder whose tree is larger
// than max entries with names of up to maxNameBytes take.
var errTooManyEntries = errors.New("more entries than the limit on files leaves")

type entryKind int

const (
	kindRegular   entryKind = iota
	kindDir                 // a folder
	kindSymlink             // a symbolic link of a commit
	kindSubmodule           // a gitlink of a commit
	kindOnDisk              // a symbolic link or special file on disk
	kindOther               // any other mode of a commit
)

type walker struct {
	maxFileBytes  int64
	maxFiles      int
	maxTotalBytes int64
	root          string                        // the flows folder's path, where a problem of it is
	label         string                        // the flows folder as a problem's words name it
	join          func(dir, name string) string // a path of the folder dir
	fail          func(p string, err error)     // an entry that could not be read
	// seen, when set, says whether the entry at p was walked already (and
	// marks it): a folder on disk given twice, or inside another given,
	// is read once
	seen func(p string) bool

	files    int
	bytes    int64 // the Markdown read so far
	sources  []flow.Source
	problems []string
	// walked is where the problems of the walk in progress (from its
	// top folder) begin in problems: its limit on files goes there
	walked int
	damage error // the first object of the commit the clone could not read
}

func (w *walker) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// readFailed records an object of the commit that could not be read: the
// clone is damaged (the remote had the object, or the commit would not
// have reached the clone).
func (w *walker) readFailed(p string, err error) {
	if w.damage == nil {
		w.damage = fmt.Errorf("%s: reading it: %w", p, err)
	}
}

// file reads a regular file at the root of the repo (access.yaml), within
// the size limit; e is nil when there is no such entry.
func (w *walker) file(e entry, p string) []byte {
	if e == nil {
		w.problem("%s: the commit has no such file at the root of the repo", p)
		return nil
	}
	if k, _ := e.kind(); k != kindRegular {
		w.problem("%s: not a regular file", p)
		return nil
	}
	return w.blob(e, p)
}

// checkSize refuses a file over the size limit without reading it.
func (w *walker) checkSize(e entry, p string) {
	size, err := e.size()
	if err != nil {
		w.fail(p, err)
		return
	}
	if size > w.maxFileBytes {
		w.problem("%s: %d bytes, over the limit of %d", p, size, w.maxFileBytes)
	}
}

func (w *walker) blob(e entry, p string) []byte {
	data, size, err := e.read(w.maxFileBytes)
	if err != nil {
		w.fail(p, err)
		return nil
	}
	if data == nil && size > w.maxFileBytes {
		w.problem("%s: %d bytes, over the limit of %d", p, size, w.maxFileBytes)
		return nil
	}
	return data
}

// markdown reads a Markdown file of the flows folder, counting it
// against the commit's MaxTotalBytes: past it the commit is refused
// before more is read.
func (w *walker) markdown(e entry, p string) []byte {
	if w.bytes > w.maxTotalBytes {
		return nil // refused already
	}
	size, err := e.size()
	if err != nil {
		w.fail(p, err)
		return nil
	}
	if w.bytes += size; w.bytes > w.maxTotalBytes {
		w.problem("%s/: more than %d bytes of Markdown in all (the limit of one commit)", w.root, w.maxTotalBytes)
		return nil
	}
	data := w.blob(e, p)
	// what was read counts (a file on disk may have grown since its size
	// was taken)
	if w.bytes += int64(len(data)) - size; w.bytes > w.maxTotalBytes {
		w.problem("%s/: more than %d bytes of Markdown in all (the limit of one commit)", w.root, w.maxTotalBytes)
		return nil
	}
	return data
}

// tooMany records that the flows folder holds more than maxFiles
// entries: first among the walk's problems, since it refuses the folder
// whole and says why the others stop where they do.
func (w *walker) tooMany() {
	w.problems = slices.Insert(w.problems, w.walked, fmt.Sprintf("%s/: more than %d files", w.root, w.maxFiles))
}

// open opens the folder e at p if it holds no more entries than the
// limit on files leaves (a larger tree is not read); false when it was
// refused or could not be read, which is said.
func (w *walker) open(e entry, p string) (folder, bool) {
	sub, err := e.open(w.maxFiles - w.files)
	if errors.Is(err, errTooManyEntries) {
		w.files = w.maxFiles + 1
		w.tooMany()
		return nil, false
	}
	if err != nil {
		w.fail(p+"/", err)
		return nil, false
	}
	return sub, true
}

// walkFolder walks the folder e at p, the flows folder.
func (w *walker) walkFolder(e entry, p string) {
	w.walked = len(w.problems)
	if sub, ok := w.open(e, p); ok {
		w.walk(sub, p, 1)
	}
}

// walk collects the Markdown files under dir, refusing what the flows
// folder must not hold.
func (w *walker) walk(t folder, dir string, depth int) {
	if depth == 1 {
		w.walked = len(w.problems)
	}
	if depth > maxDepth {
		w.problem("%s: folders nested deeper than %d levels", dir, maxDepth)
		return
	}
	entries, err := t.list()
	if err != nil {
		w.fail(dir+"/", err)
		return
	}
	for _, e := range entries {
		name := e.name()
		p := w.join(dir, name)
		if w.seen != nil && w.seen(p) {
			continue
		}
		// every entry counts, a refused name too: a tree of 30,000
		// badly named entries made as many errors, all of them recorded
		// in the registry and repeated by /status
		w.files++
		if w.files > w.maxFiles {
			if w.files == w.maxFiles+1 {
				w.tooMany()
			}
			return
		}
		if len(name) > maxNameBytes {
			// quoted and cut: the name may be of any length
			w.problem("%s: a name of %d bytes, over the limit of %d", strconv.Quote(w.join(dir, name[:64]))+"…", len(name), maxNameBytes)
			continue
		}
		if !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) {
			// quoted: the name reaches terminals (nexus status) and logs
			w.problem("%s: a name with a control or format character, or not UTF-8: %s/ holds plainly named files only", strconv.Quote(p), w.label)
			continue
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") {
			w.problem("%s: a path that would escape %s/", p, w.label)
			continue
		}
		if strings.EqualFold(name, ".git") {
			w.problem("%s: a .git entry: %s/ holds flows only", p, w.label)
			continue
		}
		switch k, mode := e.kind(); k {
		case kindDir:
			sub, ok := w.open(e, p)
			if !ok {
				if w.files > w.maxFiles {
					return
				}
				continue
			}
			w.walk(sub, p, depth+1)
		case kindSymlink:
			w.problem("%s: a symbolic link: %s/ holds regular files only", p, w.label)
		case kindSubmodule:
			w.problem("%s: a submodule (gitlink): %s/ holds regular files only", p, w.label)
		case kindOnDisk:
			w.problem("%s: a symbolic link or special file: a folder of flows holds regular files only", p)
		case kindRegular:
			if !strings.EqualFold(path.Ext(name), ".md") {
				w.checkSize(e, p) // not read, but a commit with a huge file is refused all the same
				continue
			}
			if data := w.markdown(e, p); data != nil {
				w.sources = append(w.sources, flow.Source{Path: p, Data: data})
			}
		default:
			w.problem("%s: an entry of mode %s: %s/ holds regular files only", p, mode, w.label)
		}
	}
}

// gitFolder is a tree of a commit.
type gitFolder struct {
	repo *git.Repository
	t    *object.Tree
}

func (g gitFolder) list() ([]entry, error) {
	out := make([]entry, len(g.t.Entries))
	for i := range g.t.Entries {
		out[i] = gitEntry{g.repo, &g.t.Entries[i]}
	}
	return out, nil
}

// gitEntry is an entry of a commit's tree.
type gitEntry struct {
	repo *git.Repository
	e    *object.TreeEntry
}

func (g gitEntry) name() string { return g.e.Name }

func (g gitEntry) kind() (entryKind, string) {
	switch g.e.Mode {
	case filemode.Regular, filemode.Executable:
		return kindRegular, ""
	case filemode.Dir:
		return kindDir, ""
	case filemode.Symlink:
		return kindSymlink, ""
	case filemode.Submodule:
		return kindSubmodule, ""
	}
	return kindOther, g.e.Mode.String()
}

func (g gitEntry) size() (int64, error) { return g.repo.Storer.EncodedObjectSize(g.e.Hash) }

func (g gitEntry) read(max int64) ([]byte, int64, error) {
	b, err := g.repo.BlobObject(g.e.Hash)
	if err != nil {
		return nil, 0, err
	}
	if b.Size > max {
		return nil, b.Size, nil
	}
	r, err := b.Reader()
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, 0, err
	}
	return data, b.Size, nil
}

// open reads the tree, once its size (found without reading it) says it
// holds no more than max entries: decoding a tree takes about 500 bytes
// an entry (a tree of 400,000 entries, 200 MB).
func (g gitEntry) open(max int) (folder, error) {
	t, err := boundedTree(g.repo, g.e.Hash, int64(max)*maxTreeEntryBytes)
	if errors.As(err, new(*treeSize)) {
		return nil, errTooManyEntries
	}
	if err != nil {
		return nil, err
	}
	return gitFolder{g.repo, t}, nil
}

// treeSize is boundedTree's refusal of a tree over its limit.
type treeSize struct{ size, max int64 }

func (e *treeSize) Error() string {
	return fmt.Sprintf("a tree of %d bytes, over the limit of %d", e.size, e.max)
}

// boundedTree reads the tree h when its size, found without reading it,
// is at most max bytes, else fails with a *treeSize.
func boundedTree(repo *git.Repository, h plumbing.Hash, max int64) (*object.Tree, error) {
	size, err := repo.Storer.EncodedObjectSize(h)
	if err != nil {
		return nil, err
	}
	if size > max {
		return nil, &treeSize{size, max}
	}
	return repo.TreeObject(h)
}
