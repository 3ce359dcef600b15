package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"
)

// TestLocalPackReadStall: a read of a local pack fails as stalled only
// when it got nothing for the fetch's FetchTimeout. The timer is the
// test's: it fires as the read returns with the bytes written (before the
// read stops it, as a timer that fires just as a read succeeds does), or
// while the read still waits for a writer that writes nothing. A read
// that got its bytes as the timer fired failed the fetch as silent.
func TestLocalPackReadStall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		silent bool // nothing is written; the timer fires while the read waits
	}{
		{"timer fires as the read returns", false},
		{"timer fires on a silent read", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fetchWatch{idle: time.Hour}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, pw := newLocalPack(ctx, w)
			defer r.Close()
			armed := make(chan func(), 1)
			r.afterFunc = func(_ time.Duration, f func()) func() bool {
				if tc.silent {
					armed <- f // fired by the test
					return func() bool { return true }
				}
				// fired as the read stops it: too late to stop
				return func() bool { f(); return false }
			}
			if tc.silent {
				go func() { (<-armed)() }()
				n, err := r.Read(make([]byte, 16))
				if n != 0 || !errors.Is(err, errLocalStalled) || !w.timedOut.Load() {
					t.Errorf("silent read: %d bytes, %v, timed out %v; want 0 bytes, %v, timed out", n, err, w.timedOut.Load(), errLocalStalled)
				}
				pw.CloseWithError(nil)
				return
			}
			want := "PACK and the rest of it"
			go func() {
				_, err := io.WriteString(pw, want)
				pw.CloseWithError(err)
			}()
			got, err := io.ReadAll(r)
			if string(got) != want || err != nil || w.timedOut.Load() {
				t.Errorf("read %q, %v, timed out %v; want %q, no error, not timed out", got, err, w.timedOut.Load(), want)
			}
		})
	}
}

// history is a repo's objects in memory: commits that each change one of
// 100 files, in 10 folders of 10.
type history struct {
	st      *memory.Storage
	files   [10][10]plumbing.Hash
	dirs    [10]plumbing.Hash
	commits []plumbing.Hash
}

func newHistory() *history {
	h := &history{st: memory.NewStorage()}
	empty := h.put(plumbing.BlobObject, nil)
	for d := range h.dirs {
		for f := range h.files[d] {
			h.files[d][f] = empty
		}
	}
	return h
}

func (h *history) put(t plumbing.ObjectType, data []byte) plumbing.Hash {
	o := h.st.NewEncodedObject()
	o.SetType(t)
	w, _ := o.Writer()
	w.Write(data)
	w.Close()
	hash, _ := h.st.SetEncodedObject(o)
	return hash
}

func (h *history) encode(e interface {
	Encode(plumbing.EncodedObject) error
}) plumbing.Hash {
	o := h.st.NewEncodedObject()
	if err := e.Encode(o); err != nil {
		panic(err)
	}
	hash, _ := h.st.SetEncodedObject(o)
	return hash
}

// commit adds commit i, on parents (the last commit if none), and returns
// it and the objects it made: itself, its file, the file's folder and the
// root folder.
func (h *history) commit(i int, parents ...plumbing.Hash) (plumbing.Hash, []plumbing.Hash) {
	if len(parents) == 0 && len(h.commits) > 0 {
		parents = []plumbing.Hash{h.commits[len(h.commits)-1]}
	}
	d, f := i/10%10, i%10
	blob := h.put(plumbing.BlobObject, fmt.Appendf(nil, "change %d\n", i))
	h.files[d][f] = blob
	tree := func(name string, mode filemode.FileMode, hashes []plumbing.Hash) plumbing.Hash {
		t := &object.Tree{}
		for j, hash := range hashes {
			t.Entries = append(t.Entries, object.TreeEntry{Name: fmt.Sprint(name, j), Mode: mode, Hash: hash})
		}
		return h.encode(t)
	}
	h.dirs[d] = tree("f", filemode.Regular, h.files[d][:])
	root := tree("d", filemode.Dir, h.dirs[:])
	sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(int64(i), 0)}
	c := h.encode(&object.Commit{Author: sig, Committer: sig, Message: fmt.Sprint(i), TreeHash: root, ParentHashes: parents})
	h.commits = append(h.commits, c)
	return c, []plumbing.Hash{c, blob, h.dirs[d], root}
}

// readCounter counts the objects read from its storage.
type readCounter struct {
	storer.EncodedObjectStorer
	reads atomic.Int64
}

func (c *readCounter) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	c.reads.Add(1)
	return c.EncodedObjectStorer.EncodedObject(t, h)
}

// packedObjects returns the objects of pack, sorted.
func packedObjects(t *testing.T, pack []byte) []plumbing.Hash {
	t.Helper()
	st := memory.NewStorage()
	if err := packfile.UpdateObjectStorage(st, bytes.NewReader(pack)); err != nil {
		t.Fatalf("the pack does not read: %v", err)
	}
	var got []plumbing.Hash
	for h := range st.Objects {
		got = append(got, h)
	}
	slices.SortFunc(got, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
	return got
}

// TestLocalPackOfALongHistory: the pack of a fetch of a local repo
// whose clone has a long history (2000 commits) holds exactly the new
// objects, and is found reading little more than the history's commits:
// not every tree and file of it, twice, before the first byte (which a
// long history could make last FetchTimeout).
func TestLocalPackOfALongHistory(t *testing.T) {
	const commits = 2000
	h := newHistory()
	for i := range commits {
		h.commit(i)
	}
	have := h.commits[commits-1]
	files, dirs := h.files, h.dirs
	for n, tc := range []struct {
		name    string
		parents []plumbing.Hash
	}{
		{"a commit on top", nil},
		{"a merge of an old commit", []plumbing.Hash{have, h.commits[commits/2]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, made := h.commit(commits+1+n*7, tc.parents...)
			slices.SortFunc(made, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
			st := &readCounter{EncodedObjectStorer: h.st}
			var pack bytes.Buffer
			if err := writeLocalPack(context.Background(), &pack, st, []plumbing.Hash{want}, []plumbing.Hash{have}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(made, packedObjects(t, pack.Bytes())); diff != "" {
				t.Errorf("the pack's objects (-want +got):\n%s", diff)
			}
			if reads, most := st.reads.Load(), int64(len(h.commits)+50); reads > most {
				t.Errorf("the pack of %d new objects over %d commits read %d objects, want at most %d", len(made), len(h.commits), reads, most)
			}
			h.commits, h.files, h.dirs = h.commits[:commits], files, dirs // the next case's on have
		})
	}
}

// BenchmarkLocalPackOfALongHistory: the pack of one commit fetched on
// top of 2000.
func BenchmarkLocalPackOfALongHistory(b *testing.B) {
	h := newHistory()
	for i := range 2000 {
		h.commit(i)
	}
	have := h.commits[len(h.commits)-1]
	want, _ := h.commit(2000)
	for b.Loop() {
		if err := writeLocalPack(context.Background(), io.Discard, h.st, []plumbing.Hash{want}, []plumbing.Hash{have}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLocalPackObjectsLeavesItsArguments: finding a pack's objects leaves
// the wants and haves it is given as they were (the wants are go-git's
// request's, written in the background while the fetch holds it); its
// walks pushed the parents they found into the arrays holding them,
// overwriting their callers' entries.
func TestLocalPackObjectsLeavesItsArguments(t *testing.T) {
	h := newHistory()
	for i := range 100 { // every folder made
		h.commit(i)
	}
	wants := []plumbing.Hash{h.commits[99], h.commits[98]}
	haves := []plumbing.Hash{h.commits[97]}
	wantsBefore, havesBefore := slices.Clone(wants), slices.Clone(haves)
	if _, err := localPackObjects(h.st, wants, haves); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantsBefore, wants); diff != "" {
		t.Errorf("wants (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(havesBefore, haves); diff != "" {
		t.Errorf("haves (-before +after):\n%s", diff)
	}
}
