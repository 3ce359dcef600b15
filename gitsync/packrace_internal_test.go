package gitsync

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// churn commits n changes to src: flows added in new folders, changed and
// removed, each commit fetched into the bare clone as a pack of its own.
func churn(t *testing.T, src, clone string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		folder := filepath.Join(src, "flows", fmt.Sprintf("t%d", i%7))
		if err := os.MkdirAll(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(folder, fmt.Sprintf("f%d.md", i)), fmt.Appendf(nil, "%sflow %d\n%s", strings.Repeat("the same text in every flow\n", 20), i, strings.Repeat("x", i%50)), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			os.Remove(filepath.Join(src, "flows", fmt.Sprintf("t%d", (i-3)%7), fmt.Sprintf("f%d.md", i-3)))
		}
		if err := os.WriteFile(filepath.Join(src, "access.yaml"), fmt.Appendf(nil, "keys: # %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
		gitIn(t, src, "add", "-A")
		gitIn(t, src, "commit", "-q", "-m", fmt.Sprint(i))
		gitIn(t, clone, "fetch", "-q", src, "+main:main")
		gitIn(t, clone, "repack", "-d", "-q") // its new objects in a pack
	}
}

// overlapProbe is the clone's storage, counting the reads of objects in
// progress at once; each read is held a moment, so that reads from two
// goroutines meet.
type overlapProbe struct {
	storer.EncodedObjectStorer
	mu       sync.Mutex
	in, most int
	searched int // EncodedObject's reads, the delta search's
}

func (p *overlapProbe) enter(hold time.Duration) {
	p.mu.Lock()
	p.in++
	p.most = max(p.most, p.in)
	p.mu.Unlock()
	time.Sleep(hold)
}

func (p *overlapProbe) leave() {
	p.mu.Lock()
	p.in--
	p.mu.Unlock()
}

// EncodedObject is the storage's, held 5 ms: the delta search reads
// through it from both goroutines.
func (p *overlapProbe) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	p.enter(5 * time.Millisecond)
	defer p.leave()
	p.mu.Lock()
	p.searched++
	p.mu.Unlock()
	return p.EncodedObjectStorer.EncodedObject(t, h)
}

// DeltaObject is the storage's (read for every object before the delta
// search, from one goroutine).
func (p *overlapProbe) DeltaObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	p.enter(0)
	defer p.leave()
	return p.EncodedObjectStorer.(storer.DeltaObjectStorer).DeltaObject(t, h)
}

// TestPackingReadsOneObjectAtATime: go-git's pack encoder looks for deltas
// among the trees and among the blobs in two goroutines at once, and both
// read from the clone's storage the objects a pack holds as deltas. That
// storage keeps its packs open (openPacks) and reads each through one
// reader, which two goroutines must not share: a packing of a clone that
// had been packed before (its packs holding deltas of trees and of
// blobs) read one pack from both at once, and nexus serve died of a panic
// in go-git's pack reader (slice bounds out of range in
// bufio.Reader.Read), after a quarter of an hour of a config repo taking
// a commit every two seconds (here, without the fix, the packing also
// failed with "object not found": a read got another's bytes). writePack
// lets one read at a time reach the storage.
func TestPackingReadsOneObjectAtATime(t *testing.T) {
	src, clone := newSourceAndClone(t)

	// the clone's first packing, by writePack
	churn(t, src, clone, 3, 10)
	packAll(t, clone, nil)
	// more fetches, and a packing of them all: its objects are read
	// from the packs, as deltas
	churn(t, src, clone, 100, 10)
	probe := packAll(t, clone, func(st storer.EncodedObjectStorer) *overlapProbe {
		return &overlapProbe{EncodedObjectStorer: st}
	})
	if probe.searched == 0 {
		t.Fatal("the delta search read no object from the clone: the test no longer shows anything")
	}
	if probe.most > 1 {
		t.Errorf("the packing read %d objects of the clone at once (the delta search read %d); one at a time is safe", probe.most, probe.searched)
	}
	gitIn(t, clone, "fsck", "--no-dangling")
}

// packAll packs every object of the clone's packs into one with
// writePack, reading them through the storage probe makes (nil: the
// clone's own), and deletes the packs it packed.
func packAll(t *testing.T, clone string, probe func(storer.EncodedObjectStorer) *overlapProbe) *overlapProbe {
	t.Helper()
	st := cloneStorage(clone)
	defer st.Close()
	packs, err := st.ObjectPacks()
	if err != nil {
		t.Fatal(err)
	}
	var objs []plumbing.Hash
	for _, p := range packs {
		idx, err := readPackIndex(st.Filesystem(), p)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := idx.Entries()
		if err != nil {
			t.Fatal(err)
		}
		for {
			e, err := entries.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, e.Hash)
		}
		entries.Close()
	}
	var p *overlapProbe
	var from storer.EncodedObjectStorer = st
	if probe != nil {
		p = probe(st)
		from = p
	}
	packed, err := writePack(context.Background(), st, from, objs, 10)
	if err != nil {
		t.Fatalf("packing %d objects of %d packs: %v", len(objs), len(packs), err)
	}
	for _, h := range packs {
		if h != packed {
			if err := st.DeleteOldObjectPackAndIndex(h, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// newSourceAndClone makes a source repo (branch main) and a bare clone
// for churn, neither packing on its own (gc.auto 0).
func newSourceAndClone(t *testing.T) (src, clone string) {
	t.Helper()
	src = filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, src, "init", "-q", "-b", "main")
	gitIn(t, src, "config", "gc.auto", "0")
	clone = filepath.Join(t.TempDir(), "clone")
	gitIn(t, filepath.Dir(clone), "init", "-q", "--bare", clone)
	gitIn(t, clone, "config", "gc.auto", "0")
	return src, clone
}
