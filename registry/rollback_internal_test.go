package registry

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// A write whose rollback fails too is reported on one line that is the
// write's error: errors.Join made two lines of it, and a sync_error or
// /status carried both.
func TestWithRollbackIsOneLine(t *testing.T) {
	write := &fs.PathError{Op: "write", Path: "registry.db", Err: errors.New("no space left on device")}
	rb := errors.New("disk I/O error")

	got := withRollback(write, rb)
	if strings.Contains(got.Error(), "\n") {
		t.Errorf("error %q is more than one line", got)
	}
	if want := "write registry.db: no space left on device (and undoing the write failed: disk I/O error)"; got.Error() != want {
		t.Errorf("error %q, want %q", got, want)
	}
	if !errors.Is(got, write) {
		t.Errorf("errors.Is(%v, the write's error) is false", got)
	}
	if withRollback(write, nil) != error(write) {
		t.Errorf("a rollback that succeeded changed the write's error")
	}
}
