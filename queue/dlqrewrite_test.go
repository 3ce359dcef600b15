package queue

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// heldRewriteFS is the OS with dlq.log's rewrite held: the first write to
// dlq.log.tmp says so on started, then waits for release.
type heldRewriteFS struct {
	OS
	started chan struct{}
	release chan struct{}
}

func newHeldRewriteFS(t *testing.T) *heldRewriteFS {
	h := &heldRewriteFS{started: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.let)
	return h
}

// let lets the held rewrite go on (once).
func (h *heldRewriteFS) let() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *heldRewriteFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := h.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != dlqFile+".tmp" {
		return f, err
	}
	return &heldFile{File: f, h: h}, nil
}

type heldFile struct {
	File
	h *heldRewriteFS
}

func (f *heldFile) WriteAt(p []byte, off int64) (int, error) {
	select {
	case <-f.h.started:
	default:
		close(f.h.started)
	}
	<-f.h.release
	return f.File.WriteAt(p, off)
}

// deadLetterIDs is the ids of q's pending dead letters.
func deadLetterIDs(t *testing.T, q *Queue) []uint64 {
	t.Helper()
	dl, damage, err := q.DeadLetters()
	if err != nil || len(damage) > 0 {
		t.Fatalf("DeadLetters: %v, damage %+v", err, damage)
	}
	var ids []uint64
	for _, d := range dl {
		ids = append(ids, d.ID)
	}
	return ids
}

// deadLettered moves a dead letter of each id to q's dlq.log.
func deadLettered(t *testing.T, q *Queue, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 3, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// compaction is what a CompactDLQ returned.
type compaction struct {
	applied []Marked
	err     error
}

// startHeldCompaction starts q.CompactDLQ and returns once its copy of
// dlq.log is held by h; its result comes on the channel once h lets it go.
func startHeldCompaction(t *testing.T, h *heldRewriteFS, q *Queue) <-chan compaction {
	t.Helper()
	done := make(chan compaction, 1)
	go func() {
		applied, _, err := q.CompactDLQ()
		done <- compaction{applied, err}
	}()
	select {
	case <-h.started:
	case r := <-done:
		t.Fatalf("CompactDLQ ended (%v) without rewriting dlq.log", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("CompactDLQ did not begin its rewrite within 10 s")
	}
	return done
}

// checkCompaction compares what a CompactDLQ applied and the dead letters
// pending after it with the ids wanted.
func checkCompaction(t *testing.T, q *Queue, what string, r compaction, applied, pending []uint64) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if diff := cmp.Diff(applied, markedIDs(r.applied)); diff != "" {
		t.Errorf("%s applied (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(pending, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after %s (-want +got):\n%s", what, diff)
	}
}

// compactNow runs q.CompactDLQ and returns what it returned.
func compactNow(q *Queue) compaction {
	applied, _, err := q.CompactDLQ()
	return compaction{applied, err}
}

// The rewrite of dlq.log (CompactDLQ, at the worker's idle moment) reads
// and writes the whole file, which an outage can grow to gigabytes. The
// doors' appends and the operators' marks do not wait for it: it holds the
// append lock to read the marks and to put the new file in place, not
// while it copies. A mark made meanwhile is kept for the next rewrite.
func TestCompactDLQLetsAppendsAndMarksThrough(t *testing.T) {
	root := t.TempDir()
	h := newHeldRewriteFS(t)
	q, _ := openQueue(t, root, Options{FS: h, LockWait: time.Minute})
	deadLettered(t, q, 1, 2, 3)
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	compacted := startHeldCompaction(t, h, q)

	during := make(chan error, 1)
	go func() {
		if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":2}`)}); err != nil {
			during <- err
			return
		}
		during <- q.Mark(2, MarkDiscarded)
	}()
	select {
	case err := <-during:
		if err != nil {
			t.Fatalf("an append and a mark during the rewrite: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an append or a mark waited 5 s for the rewrite of dlq.log")
	}

	h.let()
	// the mark made during the rewrite is kept: 2 stays hidden
	checkCompaction(t, q, "the held CompactDLQ", <-compacted, []uint64{1}, []uint64{3})
	checkCompaction(t, q, "the next CompactDLQ", compactNow(q), []uint64{2}, []uint64{3})
	if b := fileBytes(t, OS{}, root, ackedFile); len(b) != 0 {
		t.Errorf("dlq.log.acked holds %d bytes after both rewrites, want none", len(b))
	}
}

// A dead letter appended to dlq.log while it is rewritten (only the
// worker, which rewrites it, appends to it: another writer is a fault) is
// not lost: the rewrite is given up, and done at the next call.
func TestCompactDLQGivesUpWhenDLQLogGrows(t *testing.T) {
	root := t.TempDir()
	h := newHeldRewriteFS(t)
	q, _ := openQueue(t, root, Options{FS: h, LockWait: 2 * time.Second})
	deadLettered(t, q, 1, 2)
	if err := q.Mark(1, MarkReplayed); err != nil {
		t.Fatal(err)
	}
	compacted := startHeldCompaction(t, h, q)
	deadLettered(t, q, 3)
	h.let()
	if r := <-compacted; r.err == nil || !strings.Contains(r.err.Error(), "dlq.log changed") {
		t.Errorf("CompactDLQ with dlq.log grown meanwhile: %v, want it given up", r.err)
	}
	if diff := cmp.Diff([]uint64{2, 3}, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after the rewrite given up (-want +got):\n%s", diff)
	}
	checkCompaction(t, q, "the next CompactDLQ", compactNow(q), []uint64{1}, []uint64{2, 3})
}

func markedIDs(ms []Marked) []uint64 {
	var ids []uint64
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}
