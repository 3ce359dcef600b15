package gitsync

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCloneWriteError: a fetch's error from the clone's own file system
// (a file of the clone that cannot be made, a full or read-only disk) is
// told from the remote's, so that the round is a sync_error naming the
// clone rather than a sync_unreachable naming the remote (as it was, and
// an operator looked for the fault there). Seen: `open
// STATE/repo/objects/pack/tmp_pack_1480441352: operation not permitted`.
func TestCloneWriteError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "repo")
	s := &Syncer{cfg: Config{Dir: dir}}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel := &Syncer{cfg: Config{Dir: filepath.Join("st", "repo")}} // nexus serve --db st/registry.db
	if !rel.cloneWriteError(&fs.PathError{Op: "open", Path: filepath.Join(wd, "st", "repo", "objects", "pack", "tmp_pack_2"), Err: syscall.EPERM}) {
		t.Errorf("a clone given as a relative path: its own file's error is not told from the remote's")
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a pack the clone cannot make", &fs.PathError{Op: "open", Path: filepath.Join(dir, "objects", "pack", "tmp_pack_1"), Err: syscall.EPERM}, true},
		{"wrapped", fmt.Errorf("fetching: %w", &fs.PathError{Op: "write", Path: filepath.Join(dir, "refs", "remotes", "origin", "main"), Err: syscall.EIO}), true},
		{"a full disk", fmt.Errorf("writing: %w", syscall.ENOSPC), true},
		{"a read-only disk", syscall.EROFS, true},
		{"a local remote's file", &fs.PathError{Op: "open", Path: filepath.Join(filepath.Dir(dir), "..", "src", "objects", "x"), Err: syscall.EACCES}, false},
		{"a folder beside the clone", &fs.PathError{Op: "open", Path: dir + "-other/x", Err: syscall.EPERM}, false},
		{"a pack that cannot be renamed into place", &os.LinkError{Op: "rename", Old: filepath.Join(dir, "objects", "pack", "tmp_pack_3"), New: filepath.Join(dir, "objects", "pack", "pack-1.pack"), Err: syscall.EACCES}, true},
		{"a file of the clone that is missing (damage)", &fs.PathError{Op: "open", Path: filepath.Join(dir, "objects", "pack", "pack-1.idx"), Err: syscall.ENOENT}, false},
		{"the remote unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"the remote's answer", errors.New("repository not found"), false},
	} {
		if got := s.cloneWriteError(c.err); got != c.want {
			t.Errorf("%s: cloneWriteError(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
