package queue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gofrs/flock"
)

// FS is the file-system seam of the queue: the few operations it uses.
// Production passes the OS straight through (OS); tests inject faults and
// simulate the loss of what was not synced.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	RemoveAll(path string) error
	MkdirAll(path string, perm fs.FileMode) error
	Stat(name string) (fs.FileInfo, error)
	// Lstat describes a file without following a symbolic link.
	Lstat(name string) (fs.FileInfo, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir makes the entries of a folder (created, renamed, removed
	// files) durable.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable (fdatasync).
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
}

// OS is the real file system.
type OS struct{}

// OpenFile opens a file of the OS. It never follows a symbolic link: a
// link where a queue's file should be is refused (ErrLink).
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := openNoFollow(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// ErrLink is wrapped by the error of a queue whose folder or file is a
// symbolic link. The state directory holds no links: one planted there
// (to another tenant's queue, outside the state directory, or to nothing)
// would make a queue read or write a file it does not own, so the queue
// refuses to open and nothing is written through the link. The folder the
// state directory itself is in (--db's folder and above) may be a link.
var ErrLink = errors.New("the state directory must hold no symbolic links")

// MakeDir makes the folder root/names[0]/names[1]/… of the state directory
// one level at a time, refusing a level that is a symbolic link (ErrLink)
// or not a folder: MkdirAll would follow a link and create folders inside
// its target. root itself is made with MkdirAll and may be or lie under a
// link. A nil fsys is the OS.
func MakeDir(fsys FS, root string, names ...string) error {
	if fsys == nil {
		fsys = OS{}
	}
	if err := fsys.MkdirAll(root, DirMode); err != nil {
		return err
	}
	dir := root
	for _, name := range names {
		dir = filepath.Join(dir, name)
		info, err := fsys.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			if err = fsys.MkdirAll(dir, DirMode); err == nil {
				info, err = fsys.Lstat(dir)
			}
		}
		switch {
		case err != nil:
			return err
		case info.Mode()&fs.ModeSymlink != 0:
			return linkError(dir)
		case !info.IsDir():
			return fmt.Errorf("%s is not a folder", dir)
		}
	}
	return nil
}

// The modes of the state directory's folders and files (queued payloads,
// the registry, the clone): its owner's alone, as etcd's data directory.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// NewFileLock returns a flock(2) lock on the file at path (created when
// missing) that refuses to open a symbolic link: the state directory's
// lock files (a queue's worker.lock, the scheduler's locks).
func NewFileLock(path string) *flock.Flock {
	return flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW))
}

// openNoFollow opens name with O_NOFOLLOW, naming a link in its error.
func openNoFollow(name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, linkError(name)
	}
	return f, err
}

// linkError names a symbolic link found where the state directory's
// folder or file should be.
func linkError(path string) error { return fmt.Errorf("%s is a symbolic link: %w", path, ErrLink) }

// Rename renames a file.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove removes a file.
func (OS) Remove(name string) error { return os.Remove(name) }

// RemoveAll removes a folder and its contents.
func (OS) RemoveAll(path string) error { return os.RemoveAll(path) }

// MkdirAll creates a folder and its parents.
func (OS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

// Stat describes a file.
func (OS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// Lstat describes a file, not following a symbolic link.
func (OS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

// ReadDir lists a folder.
func (OS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// SyncDir fsyncs a folder.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

type osFile struct{ *os.File }

// Sync is fdatasync: the data and what is needed to read it back.
func (f osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// WriteAtomic replaces name with data durably: a temporary file in the
// same folder is written and synced, renamed over name, and the folder is
// synced. On any error the temporary file is removed and name is left as
// it was. It is the one atomic write of the state directory: the queues'
// files and the scheduler's records use it. A nil fsys is the OS.
func WriteAtomic(fsys FS, name string, data []byte) error {
	return writeAtomic(fsys, name, func(f File) error {
		_, err := f.WriteAt(data, 0)
		return err
	})
}

// writeAtomic is WriteAtomic with the new contents written by write, in as
// many parts as it likes, so that a large file is not held in memory.
func writeAtomic(fsys FS, name string, write func(File) error) error {
	if fsys == nil {
		fsys = OS{}
	}
	tmp, err := writeTemp(fsys, name, write)
	if err != nil {
		return err
	}
	return putInPlace(fsys, tmp, name)
}

// writeTemp is writeAtomic's first half: it writes name's new contents to
// name+".tmp" and syncs them, and returns that path; on failure the file
// is removed. A caller that must hold a lock to replace name, and not to
// write its new contents, takes it for putInPlace only.
func writeTemp(fsys FS, name string, write func(File) error) (_ string, err error) {
	tmp := name + ".tmp" // not the result, which a failure sets to ""
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, FileMode)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			fsys.Remove(tmp)
		}
	}()
	if err = write(f); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("syncing %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	return tmp, nil
}

// putInPlace is writeAtomic's second half: it renames tmp, which
// writeTemp wrote, over name and makes the folder's entry durable; tmp is
// removed when the rename fails.
func putInPlace(fsys FS, tmp, name string) error {
	if err := fsys.Rename(tmp, name); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", name, err)
	}
	if err := fsys.SyncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("syncing the folder of %s: %w", name, err)
	}
	return nil
}

// valueSize is the size of a value file (segment.log.ckpt,
// segment.log.seq): see encodeValue.
const valueSize = 16

// readValueFile reads the value file name: its first valueSize bytes,
// nil when there is none. The file is rewritten in place, so bytes past
// the value (an editor's newline, a longer file copied over) stay there
// for good: they are not part of it. Reading them made the file never
// verify again (a checkpoint of 0 for good).
func readValueFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readValue(f)
}

// readValue reads the value at the start of f: its 16 bytes, fewer when f
// holds fewer.
func readValue(f io.ReaderAt) ([]byte, error) {
	b := make([]byte, valueSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}
