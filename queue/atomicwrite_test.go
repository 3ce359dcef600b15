package queue

import (
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// A WriteAtomic that fails (the disk full as the new contents are
// written, or as they are synced) leaves the file as it was and no
// temporary file beside it: a dlq.log.tmp of gigabytes left on a full
// disk would keep it full.
func TestWriteAtomicFailureLeavesNoTemporaryFile(t *testing.T) {
	for _, op := range []string{opWrite, opSync} {
		t.Run(op, func(t *testing.T) {
			m := newMemFS("/")
			if err := m.MkdirAll("/d", 0o755); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join("/d", "file")
			if err := WriteAtomic(m, name, []byte("before")); err != nil {
				t.Fatal(err)
			}
			m.Fail(op, "file.tmp", 1, syscall.ENOSPC, false)
			if err := WriteAtomic(m, name, []byte("after")); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("WriteAtomic with the %s failing: %v, want ENOSPC", op, err)
			}
			if b, err := readFile(m, name); err != nil || string(b) != "before" {
				t.Errorf("the file after a failed WriteAtomic: %q, %v; want %q", b, err, "before")
			}
			if _, err := m.Stat(name + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the temporary file after a failed WriteAtomic: %v, want none", err)
			}
		})
	}
}
