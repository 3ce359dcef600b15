package gitsync

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/nexushq/nexus/flow"
)

// DiskReader reads folders on disk as Sync reads a commit, within the
// default limits (DefaultMaxFileBytes, DefaultMaxFiles, DefaultMaxTotalBytes,
// the Markdown of every folder it reads counting as one commit's): what it
// refuses, a commit holding the same files would be refused for, with the
// same errors, naming the files by their paths on disk. nexus validate and
// nexus deploy read folders with it, so that a folder they pass is one git
// sync takes. A .git entry is left out, as git never commits one.
type DiskReader struct {
	w walker
}

// NewDiskReader returns a DiskReader that has read nothing.
func NewDiskReader() *DiskReader {
	seen := map[string]bool{}
	r := &DiskReader{w: walker{
		maxFileBytes: DefaultMaxFileBytes, maxFiles: DefaultMaxFiles, maxTotalBytes: DefaultMaxTotalBytes,
		join: func(dir, name string) string { return filepath.Join(dir, name) },
		// by absolute path: the same folder given as flows and /abs/flows
		seen: func(p string) bool {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
			was := seen[p]
			seen[p] = true
			return was
		},
	}}
	r.w.fail = func(p string, err error) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // p names it
		}
		r.w.problem("%s: %v", p, err)
	}
	return r
}

// Folder reads the folder dir. A config repo (a folder holding
// access.yaml) is read as a commit is: its access.yaml and its flows
// folder, flows/; Folder returns access.yaml's content (nil when it is
// refused) and configRepo true. Any other folder is read as the flows
// folder of a commit.
func (r *DiskReader) Folder(dir string) (accessYAML []byte, configRepo bool) {
	r.w.files = 0 // MaxFiles bounds each flows folder
	accessPath := filepath.Join(dir, "access.yaml")
	// whatever it is (a folder, a link: refused as sync refuses them)
	if info, err := os.Lstat(accessPath); err == nil {
		accessYAML = r.w.file(diskEntry{accessPath, fs.FileInfoToDirEntry(info)}, accessPath)
		flows := filepath.Join(dir, "flows")
		r.w.root, r.w.label = flows, "flows"
		switch info, err := os.Lstat(flows); {
		case err != nil:
			r.w.fail(flows, err)
		case !info.IsDir():
			r.w.problem("%s: not a folder: a config repo holds its flows in the folder flows/", flows)
		default:
			r.w.walk(diskFolder{path: flows}, flows, 1)
		}
		return accessYAML, true
	}
	dir = filepath.Clean(dir)
	r.w.root, r.w.label = dir, filepath.Base(dir)
	r.w.walk(diskFolder{path: dir}, dir, 1)
	return nil, false
}

// Sources are the Markdown files read, in the order read.
func (r *DiskReader) Sources() []flow.Source { return r.w.sources }

// Problems are what refuses the folders read, one line each.
func (r *DiskReader) Problems() []string { return r.w.problems }

// MarkdownBytes is how much Markdown the folders read hold, counted
// against DefaultMaxTotalBytes.
func (r *DiskReader) MarkdownBytes() int64 { return r.w.bytes }

// diskFolder is a folder on disk, by its path. A folder found in another
// (nofollow) is opened without following a symbolic link put in its place
// since its parent was listed; the folder given may be one.
type diskFolder struct {
	path     string
	nofollow bool
}

func (d diskFolder) list() ([]entry, error) {
	flags := os.O_RDONLY | syscall.O_DIRECTORY
	if d.nofollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(d.path, flags, 0)
	if err != nil {
		return nil, err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := make([]entry, 0, len(entries))
	for _, e := range entries {
		if strings.EqualFold(e.Name(), ".git") {
			continue // the checkout's own (or a nested one's): never in a commit
		}
		out = append(out, diskEntry{filepath.Join(d.path, e.Name()), e})
	}
	return out, nil
}

// diskEntry is an entry of a folder on disk; a symbolic link is not
// followed.
type diskEntry struct {
	path string
	d    fs.DirEntry
}

func (e diskEntry) name() string { return e.d.Name() }

func (e diskEntry) kind() (entryKind, string) {
	switch {
	case e.d.IsDir():
		if _, err := os.Lstat(filepath.Join(e.path, ".git")); err == nil {
			// a checkout of its own, which git commits as a submodule
			return kindSubmodule, ""
		}
		return kindDir, ""
	case e.d.Type().IsRegular():
		return kindRegular, ""
	}
	return kindOnDisk, ""
}

func (e diskEntry) size() (int64, error) {
	info, err := e.d.Info()
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

func (e diskEntry) read(max int64) ([]byte, int64, error) {
	// O_NOFOLLOW: a link put in the file's place since the folder was
	// listed is refused; O_NONBLOCK: a named pipe opens at once (and is
	// then refused) instead of waiting for a writer
	f, err := os.OpenFile(e.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !info.Mode().IsRegular() {
		return nil, 0, errors.New("not a regular file")
	}
	if info.Size() > max {
		return nil, info.Size(), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(data)) > max {
		return nil, int64(len(data)), nil // grew since
	}
	return data, int64(len(data)), nil
}

func (e diskEntry) open(int) (folder, error) { return diskFolder{path: e.path, nofollow: true}, nil }
