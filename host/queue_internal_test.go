package host

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/nexushq/nexus/queue"
)

// TestAppendFailure: the 503 of a failed append names the system's error,
// never the files the whole error names.
func TestAppendFailure(t *testing.T) {
	write := &fs.PathError{Op: "pwrite", Path: "/state/queues/acme/f/segment.log", Err: syscall.ENOSPC}
	sync := &fs.PathError{Op: "fdatasync", Path: "/state/queues/acme/f/segment.log", Err: syscall.EIO}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"disk full", fmt.Errorf("queue acme/f: writing segment.log: %w: %w", write, queue.ErrPoisoned),
			"its log could not be written: no space left on device"},
		{"failed fdatasync", fmt.Errorf("queue acme/f: syncing segment.log: %w: %w", sync, queue.ErrPoisoned),
			"its log could not be written: input/output error"},
		{"poisoned since", fmt.Errorf("queue acme/f: %w", fmt.Errorf("syncing segment.log: %w: %w", sync, queue.ErrPoisoned)),
			"its log could not be written: input/output error"},
		{"no system error", errors.New("queue acme/f: the queue is closed"),
			"its log could not be written (the host's log has the details)"},
	} {
		if got := appendFailure(tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
