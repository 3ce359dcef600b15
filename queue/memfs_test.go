package queue

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// memFS is an in-memory FS that knows what a power cut keeps: for each file
// its contents as of its last Sync, for each folder its entries as of its
// last SyncDir. Crash drops everything else. Fail makes the k-th operation
// of a kind fail, once or from then on.
//
// Paths are absolute; the base folder given to newMemFS and its parents
// exist and are durable from the start.
type memFS struct {
	mu     sync.Mutex
	root   *memNode
	count  map[string]int // operations started, by kind
	faults []*memFault

	// before, when set, is called before each operation, outside the lock,
	// with its kind and path: a test can block an operation there. Set it
	// before the FS is shared.
	before func(op, name string)
	// syncDelay is slept by each Sync, outside the lock.
	syncDelay time.Duration
}

// Operation kinds, as counted and as named by faults.
const (
	opOpen     = "OpenFile"
	opRead     = "ReadAt"
	opWrite    = "WriteAt"
	opSync     = "Sync"
	opTruncate = "Truncate"
	opRename   = "Rename"
	opRemove   = "Remove"
	opMkdir    = "MkdirAll"
	opSyncDir  = "SyncDir"
	opStat     = "Stat"
	opReadDir  = "ReadDir"
	opClose    = "Close"
)

var _ FS = (*memFS)(nil)

type memNode struct {
	dir              bool
	entries, durable map[string]*memNode // a folder's entries: now, and as of its last SyncDir
	data, synced     []byte              // a file's contents: now, and as of its last Sync
}

func newMemDir() *memNode {
	return &memNode{dir: true, entries: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// memFault makes operations fail: the nth one matching op and name, and with
// forever every one after it too.
type memFault struct {
	op      string // "" matches every kind
	name    string // base name of the file; "" matches every file
	nth     int    // from 1
	forever bool
	err     error
	seen    int
}

func newMemFS(base string) *memFS {
	m := &memFS{root: newMemDir(), count: map[string]int{}}
	n := m.root
	for _, c := range pathParts(base) {
		child := newMemDir()
		n.entries[c], n.durable[c] = child, child
		n = child
	}
	return m
}

func pathParts(name string) []string {
	name = filepath.Clean(name)
	if name == "/" {
		return nil
	}
	return strings.Split(strings.TrimPrefix(name, "/"), "/")
}

// Fail makes the nth operation of kind op (every kind for "") on a file
// named name (any file for "") fail with err; with forever, every later one
// fails too. Counting starts now.
func (m *memFS) Fail(op, name string, nth int, err error, forever bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, &memFault{op: op, name: name, nth: nth, forever: forever, err: err})
}

// Heal ends every injected fault: the disk has room again.
func (m *memFS) Heal() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
}

// Fired reports whether an injected fault has made an operation fail.
func (m *memFS) Fired() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.faults, func(f *memFault) bool { return f.seen >= f.nth })
}

// Count is the number of operations of a kind started so far.
func (m *memFS) Count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count[op]
}

// Crash simulates a power cut and the reboot after it: every file is back
// to its synced contents, every folder to its synced entries, and the
// faults are cleared. Files opened before it are not to be used after it.
func (m *memFS) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
	var reset func(n *memNode)
	reset = func(n *memNode) {
		if !n.dir {
			n.data = slices.Clone(n.synced)
			return
		}
		n.entries = maps.Clone(n.durable)
		for _, c := range n.entries {
			reset(c)
		}
	}
	reset(m.root)
}

// SyncAll makes everything durable, as a clean shutdown would.
func (m *memFS) SyncAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sync func(n *memNode)
	sync = func(n *memNode) {
		if !n.dir {
			n.synced = slices.Clone(n.data)
			return
		}
		n.durable = maps.Clone(n.entries)
		for _, c := range n.entries {
			sync(c)
		}
	}
	sync(m.root)
}

// begin runs the before hook, then takes the lock and counts the
// operation; it returns the injected error, if any. The caller unlocks.
func (m *memFS) begin(op, name string) error {
	if m.before != nil {
		m.before(op, name)
	}
	m.mu.Lock()
	m.count[op]++
	for _, f := range m.faults {
		if f.op != "" && f.op != op || f.name != "" && f.name != filepath.Base(name) {
			continue
		}
		f.seen++
		if f.seen == f.nth || f.forever && f.seen > f.nth {
			return &fs.PathError{Op: op, Path: name, Err: f.err}
		}
	}
	return nil
}

// lookup finds the folder holding name, and the node of name (nil when
// missing).
func (m *memFS) lookup(name string) (parent *memNode, base string, n *memNode, err error) {
	parts := pathParts(name)
	if len(parts) == 0 {
		return nil, "", m.root, nil
	}
	parent = m.root
	for _, c := range parts[:len(parts)-1] {
		next := parent.entries[c]
		if next == nil {
			return nil, "", nil, syscall.ENOENT
		}
		if !next.dir {
			return nil, "", nil, syscall.ENOTDIR
		}
		parent = next
	}
	base = parts[len(parts)-1]
	return parent, base, parent.entries[base], nil
}

func (m *memFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	err := m.begin(opOpen, name)
	defer m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	parent, base, n, err := m.lookup(name)
	switch {
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	case n == nil && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	case n == nil:
		n = &memNode{}
		parent.entries[base] = n
	case n.dir:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	if flag&os.O_TRUNC != 0 {
		n.data = nil
	}
	return &memFile{fs: m, n: n, name: name, writable: flag&(os.O_WRONLY|os.O_RDWR) != 0}, nil
}

func (m *memFS) Rename(oldpath, newpath string) error {
	err := m.begin(opRename, oldpath)
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	op, ob, n, err := m.lookup(oldpath)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	np, nb, target, err := m.lookup(newpath)
	if err == nil && target != nil && target.dir {
		err = syscall.EISDIR
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	delete(op.entries, ob)
	np.entries[nb] = n
	return nil
}

func (m *memFS) Remove(name string) error {
	err := m.begin(opRemove, name)
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	parent, base, n, err := m.lookup(name)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err == nil && n.dir && len(n.entries) > 0 {
		err = syscall.ENOTEMPTY
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	delete(parent.entries, base)
	return nil
}

func (m *memFS) RemoveAll(name string) error {
	err := m.begin(opRemove, name)
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	if parent, base, n, err := m.lookup(name); err == nil && n != nil {
		delete(parent.entries, base)
	}
	return nil
}

func (m *memFS) MkdirAll(name string, perm fs.FileMode) error {
	err := m.begin(opMkdir, name)
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	n := m.root
	for _, c := range pathParts(name) {
		next := n.entries[c]
		if next == nil {
			next = newMemDir()
			n.entries[c] = next
		}
		if !next.dir {
			return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
		}
		n = next
	}
	return nil
}

func (m *memFS) Stat(name string) (fs.FileInfo, error) {
	err := m.begin(opStat, name)
	defer m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	_, _, n, err := m.lookup(name)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return memInfo{name: filepath.Base(name), n: n, size: int64(len(n.data))}, nil
}

// Lstat is Stat: memFS has no symbolic links.
func (m *memFS) Lstat(name string) (fs.FileInfo, error) { return m.Stat(name) }

func (m *memFS) ReadDir(name string) ([]fs.DirEntry, error) {
	err := m.begin(opReadDir, name)
	defer m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	_, _, n, err := m.lookup(name)
	if err == nil && (n == nil || !n.dir) {
		err = syscall.ENOENT
	}
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	var out []fs.DirEntry
	for _, c := range slices.Sorted(maps.Keys(n.entries)) {
		e := n.entries[c]
		out = append(out, fs.FileInfoToDirEntry(memInfo{name: c, n: e, size: int64(len(e.data))}))
	}
	return out, nil
}

func (m *memFS) SyncDir(dir string) error {
	err := m.begin(opSyncDir, dir)
	defer m.mu.Unlock()
	if err != nil {
		return err
	}
	_, _, n, err := m.lookup(dir)
	if err == nil && (n == nil || !n.dir) {
		err = syscall.ENOENT
	}
	if err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	n.durable = maps.Clone(n.entries)
	return nil
}

// memFile is an open file of a memFS.
type memFile struct {
	fs       *memFS
	n        *memNode
	name     string
	writable bool
	closed   bool // guarded by fs.mu
}

func (f *memFile) check(op string) error {
	if err := f.fs.begin(op, f.name); err != nil {
		return err
	}
	if f.closed {
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	err := f.check(opRead)
	defer f.fs.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 { // as os.File: no error for an empty read, even at the end
		return 0, nil
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes p at off. An injected failure writes the first half of p
// first, as a full disk would.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	err := f.check(opWrite)
	defer f.fs.mu.Unlock()
	if err == nil && !f.writable {
		err = &fs.PathError{Op: opWrite, Path: f.name, Err: syscall.EBADF}
	}
	n := len(p)
	if err != nil {
		n /= 2
	}
	if end := off + int64(n); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], p[:n])
	return n, err
}

func (f *memFile) Close() error {
	err := f.check(opClose)
	defer f.fs.mu.Unlock()
	f.closed = true
	return err
}

func (f *memFile) Sync() error {
	if f.fs.syncDelay > 0 {
		time.Sleep(f.fs.syncDelay)
	}
	err := f.check(opSync)
	defer f.fs.mu.Unlock()
	if err != nil {
		return err
	}
	f.n.synced = slices.Clone(f.n.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	err := f.check(opTruncate)
	defer f.fs.mu.Unlock()
	if err != nil {
		return err
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	err := f.check(opStat)
	defer f.fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return memInfo{name: filepath.Base(f.name), n: f.n, size: int64(len(f.n.data))}, nil
}

type memInfo struct {
	name string
	n    *memNode
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.n.dir }
func (i memInfo) Sys() any           { return i.n } // the node: a file's identity
func (i memInfo) Mode() fs.FileMode {
	if i.n.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

// TestMemFS checks the model the crash tests rely on.
func TestMemFS(t *testing.T) {
	m := newMemFS("/base")
	write := func(name, data string) File {
		f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
		return f
	}
	read := func(name string) string {
		b, err := readFile(m, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// data synced, entry not: the file is gone after a crash
	write("/base/a", "a1").Sync()
	m.Crash()
	if _, err := m.Stat("/base/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an entry never made durable survived a crash: %v", err)
	}

	// entry durable, data written after the last Sync: the synced data
	f := write("/base/a", "a1")
	f.Sync()
	m.SyncDir("/base")
	f.WriteAt([]byte("a2"), 0)
	if got := read("/base/a"); got != "a2" {
		t.Errorf("before the crash: %q, want a2", got)
	}
	m.Crash()
	if got := read("/base/a"); got != "a1" {
		t.Errorf("after the crash: %q, want the synced a1", got)
	}

	// a rename is durable only after SyncDir of the folder
	write("/base/a.tmp", "b").Sync()
	m.Rename("/base/a.tmp", "/base/a")
	m.Crash()
	if got := read("/base/a"); got != "a1" {
		t.Errorf("a rename without SyncDir survived a crash: %q", got)
	}
	write("/base/a.tmp", "b").Sync()
	m.Rename("/base/a.tmp", "/base/a")
	m.SyncDir("/base")
	m.Crash()
	if got := read("/base/a"); got != "b" {
		t.Errorf("a rename followed by SyncDir: %q, want b", got)
	}

	// faults: the second Sync fails once; a failed WriteAt writes half
	m.Fail(opSync, "a", 2, syscall.EIO, false)
	f = write("/base/a", "c")
	for i, want := range []bool{false, true, false} {
		if err := f.Sync(); (err != nil) != want || want && !errors.Is(err, syscall.EIO) {
			t.Errorf("Sync %d: %v, want failure %v", i+1, err, want)
		}
	}
	m.Fail(opWrite, "", 1, syscall.ENOSPC, true)
	for range 2 {
		if n, err := f.WriteAt([]byte("wxyz"), 0); n != 2 || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("a failing WriteAt: %d, %v; want 2 bytes and ENOSPC", n, err)
		}
	}
}
