package queue

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// countFS passes every operation to the OS and counts, for the files whose
// name starts with prefix (a name and its .tmp), the bytes written and the
// syncs (fdatasync of the files, fsync of their folder after a rename).
type countFS struct {
	OS
	prefix string

	mu             sync.Mutex
	written, syncs int64
	renames        int64
}

func (c *countFS) counted(name string) bool { return strings.HasPrefix(filepath.Base(name), c.prefix) }

func (c *countFS) add(written, syncs int64) {
	c.mu.Lock()
	c.written += written
	c.syncs += syncs
	c.mu.Unlock()
}

func (c *countFS) totals() (written, syncs, renames int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written, c.syncs, c.renames
}

func (c *countFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.OS.OpenFile(name, flag, perm)
	if err != nil || !c.counted(name) {
		return f, err
	}
	return countFile{f, c}, nil
}

func (c *countFS) Rename(oldpath, newpath string) error {
	if c.counted(newpath) {
		c.mu.Lock()
		c.renames++
		c.mu.Unlock()
	}
	return c.OS.Rename(oldpath, newpath)
}

type countFile struct {
	File
	c *countFS
}

func (f countFile) WriteAt(p []byte, off int64) (int, error) {
	f.c.add(int64(len(p)), 0)
	return f.File.WriteAt(p, off)
}

func (f countFile) Sync() error {
	f.c.add(0, 1)
	return f.File.Sync()
}

// TestRetryScheduleCostIsLinear: a downstream that is down while a backlog
// of n messages is delivered fails n first attempts, each scheduling a
// retry. Each change to the schedule must cost O(1) bytes and one sync:
// the schedule was rewritten whole at each change, 28·n²/2 bytes and 2n
// fsyncs (13.7 MiB for n = 1,000; 140 GB for 100,000).
func TestRetryScheduleCostIsLinear(t *testing.T) {
	const n = 1000
	root := t.TempDir()
	cfs := &countFS{prefix: retryFile}
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{FS: cfs, Now: clk.Now, GatherWait: -1})
	for i := range n {
		if _, err := q.Append(newMessage(i, 24)); err != nil {
			t.Fatal(err)
		}
	}
	down := RetryPolicy{MaxAttempts: 5, InitialDelay: time.Hour, BackoffFactor: 2, MaxDelay: time.Hour}
	w := NewWorker(q, WorkerConfig{Clock: clk, Logger: quietLog, Poll: time.Hour, StopGrace: 50 * time.Millisecond,
		Handler: HandlerFunc(func(context.Context, Delivery) Verdict {
			return Verdict{Kind: VerdictRetry, Policy: down, Error: "HTTP 503"}
		})})
	w.Start()
	defer w.Stop()
	deadline := time.Now().Add(60 * time.Second)
	for w.State().RetriesPending < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d retries scheduled, want %d", w.State().RetriesPending, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	written, syncs, renames := cfs.totals()
	rs, err := q.Retries()
	if err != nil || len(rs) != n {
		t.Fatalf("the schedule on disk: %d retries, %v; want %d", len(rs), err, n)
	}
	// a change is one record of at most 64 bytes; compactions are
	// amortised over the changes they follow
	if limit := int64(64*n + 64<<10); written > limit {
		t.Errorf("%d failed first attempts wrote %d bytes (%.1f MiB) to the schedule, want at most %d (linear)", n, written, float64(written)/(1<<20), limit)
	}
	if limit := int64(n + 8); syncs > limit {
		t.Errorf("%d failed first attempts synced the schedule %d times, want at most %d", n, syncs, limit)
	}
	t.Logf("%d failed first attempts: %d bytes written to the schedule (%.1f per change), %d syncs, %d renames", n, written, float64(written)/n, syncs, renames)
}
