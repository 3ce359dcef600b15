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

// The rewrite of dlq.log (CompactDLQ, at the worker's idle moment) reads
// and writes the whole file, which an outage can grow to gigabytes. The
// doors' appends and the operators' marks do not wait for it: it holds the
// append lock to read the marks and to put the new file in place, not
// while it copies. A mark made meanwhile is kept for the next rewrite.
func TestCompactDLQLetsAppendsAndMarksThrough(t *testing.T) {
	root := t.TempDir()
	h := newHeldRewriteFS(t)
	q, _ := openQueue(t, root, Options{FS: h, LockWait: time.Minute})
	for id := uint64(1); id <= 3; id++ {
		if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 3, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}

	type result struct {
		applied []Marked
		err     error
	}
	compacted := make(chan result, 1)
	go func() {
		applied, _, err := q.CompactDLQ()
		compacted <- result{applied, err}
	}()
	select {
	case <-h.started:
	case r := <-compacted:
		t.Fatalf("CompactDLQ ended (%v) without rewriting dlq.log", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("CompactDLQ did not begin its rewrite within 10 s")
	}

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
	r := <-compacted
	if r.err != nil {
		t.Fatalf("CompactDLQ: %v", r.err)
	}
	if diff := cmp.Diff([]uint64{1}, markedIDs(r.applied)); diff != "" {
		t.Errorf("CompactDLQ applied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{3}, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after the rewrite, the mark made during it kept (-want +got):\n%s", diff)
	}
	applied, _, err := q.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{2}, markedIDs(applied)); diff != "" {
		t.Errorf("the next CompactDLQ applied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{3}, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after the next rewrite (-want +got):\n%s", diff)
	}
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
	for id := uint64(1); id <= 2; id++ {
		if err := q.MoveToDLQ(DeadLetter{ID: id, Attempts: 3, LastError: "boom", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Mark(1, MarkReplayed); err != nil {
		t.Fatal(err)
	}
	compacted := make(chan error, 1)
	go func() {
		_, _, err := q.CompactDLQ()
		compacted <- err
	}()
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatal("CompactDLQ did not begin its rewrite within 10 s")
	}
	if err := q.MoveToDLQ(DeadLetter{ID: 3, Attempts: 3, LastError: "boom", Payload: []byte(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	h.let()
	if err := <-compacted; err == nil || !strings.Contains(err.Error(), "dlq.log changed") {
		t.Errorf("CompactDLQ with dlq.log grown meanwhile: %v, want it given up", err)
	}
	if diff := cmp.Diff([]uint64{2, 3}, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after the rewrite given up (-want +got):\n%s", diff)
	}
	applied, _, err := q.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1}, markedIDs(applied)); diff != "" {
		t.Errorf("the next CompactDLQ applied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{2, 3}, deadLetterIDs(t, q)); diff != "" {
		t.Errorf("pending after the next rewrite (-want +got):\n%s", diff)
	}
}

func markedIDs(ms []Marked) []uint64 {
	var ids []uint64
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}
