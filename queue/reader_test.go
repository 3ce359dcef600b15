package queue

import (
	"testing"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestLogReaderLetsItsBufferGoWhenTheLogIsEmptied: the worker's read-ahead
// buffer (64 KiB) is let go when the log is emptied, so an idle queue's
// worker, which lives as long as the process, holds none; reading again
// takes one anew.
func TestLogReaderLetsItsBufferGoWhenTheLogIsEmptied(t *testing.T) {
	m, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{FS: m, Now: clk.Now})
	msgs := appendN(t, q, 0, 2)
	r := newLogReader(q)
	if got, _, err := r.Read(0); err != nil || got.ID != msgs[0].ID {
		t.Fatalf("Read(0) = %d, %v; want message %d", got.ID, err, msgs[0].ID)
	}
	if len(r.buf) != readAhead {
		t.Fatalf("setup: a buffer of %d bytes after a read, want %d", len(r.buf), readAhead)
	}
	r.reset()
	if r.buf != nil || r.data != nil {
		t.Errorf("after reset the reader holds %d bytes of buffer", cap(r.buf))
	}
	if got, _, err := r.Read(msgs[1].Offset); err != nil || got.ID != msgs[1].ID {
		t.Errorf("Read after reset = %d, %v; want message %d", got.ID, err, msgs[1].ID)
	}
}
