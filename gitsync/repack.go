package gitsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// packWeight is one of the clone's packs and its size in bytes.
type packWeight struct {
	hash  plumbing.Hash
	bytes int64
}

// rollUpFactor is the ratio between the sizes of two packs the clone
// keeps side by side (git repack --geometric's factor).
const rollUpFactor = 2

// planRollUp chooses which packs to pack into one, as git repack
// --geometric=2 does, by their sizes in bytes: after it, every pack the
// clone keeps is at least twice the size of the next smaller one, and a
// pack is rewritten only once the packs smaller than it, the ones fetched
// since it was written, come to about half its size: each byte is
// rewritten about log2 times of the clone's size over its life, where
// packing the whole clone every MaxPacks fetches rewrote every object each
// time (5.8 s for a repo of 2,000 commits, in the sync round). Weighed by
// objects instead, a pack holding a few large files (a 100 MB binary
// outside the flows folder) weighed as little as a fetch of a few
// commits and was rewritten with them every MaxPacks fetches. When more
// than MaxPacks/2 packs would be kept, the smallest of them join the
// roll-up until MaxPacks/2 are (the roll-up among them), so that the
// clone's packs stay few. It returns the packs to roll up, smallest
// first; all of them when the whole clone is to be packed (repack), which
// also drops the objects a force-push left unreachable: when the roll-up
// reaches the largest pack or would take fewer than two packs.
func planRollUp(packs []packWeight) (rollUp []packWeight, whole bool) {
	packs = slices.SortedFunc(slices.Values(packs), func(a, b packWeight) int { return cmp.Compare(a.bytes, b.bytes) })
	if len(packs) < 3 {
		return packs, true
	}
	// the largest packs already in progression stay
	split := len(packs) - 1
	for ; split > 0; split-- {
		if packs[split].bytes < rollUpFactor*packs[split-1].bytes {
			break
		}
	}
	if split > 0 {
		split++ // the larger of the pair that broke the progression is rolled up too
	}
	// a kept pack smaller than twice the roll-up joins it, and so do the
	// smallest kept packs past MaxPacks/2
	var total int64
	for _, p := range packs[:split] {
		total += p.bytes
	}
	for split < len(packs) && (packs[split].bytes < rollUpFactor*total || len(packs)-split+1 > MaxPacks/2) {
		total += packs[split].bytes
		split++
	}
	if split < 2 || split >= len(packs) {
		return packs, true
	}
	return packs[:split], false
}

// packWeights reads the size of each of the clone's packs: that of its
// .pack file, without reading it.
func packWeights(fsys billy.Filesystem, packs []plumbing.Hash) ([]packWeight, error) {
	out := make([]packWeight, 0, len(packs))
	for _, h := range packs {
		fi, err := fsys.Stat(fsys.Join("objects", "pack", "pack-"+h.String()+".pack"))
		if err != nil {
			return nil, err
		}
		out = append(out, packWeight{hash: h, bytes: fi.Size()})
	}
	return out, nil
}

// readPackIndex reads the index of the clone's pack h.
func readPackIndex(fsys billy.Filesystem, h plumbing.Hash) (*idxfile.MemoryIndex, error) {
	name := fsys.Join("objects", "pack", "pack-"+h.String()+".idx")
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return idx, nil
}

// rollUpOrRepack packs the clone's packs: the small ones into one
// (planRollUp), or every object the references reach into one (repack),
// which needs no index read (a pack whose index is not read here is
// packed that way). It reports how many packs it took and whether it
// packed the whole clone. It stops when ctx ends (the round's, which Stop
// ends): a packing of the whole clone reads and writes every object of the
// history, seconds for a repo of some thousands of commits, and Stop
// waited for it. One that stops leaves the clone's packs as they were.
func rollUpOrRepack(ctx context.Context, repo *git.Repository) (packed int, whole bool, err error) {
	st, ok := repo.Storer.(*filesystem.Storage)
	if !ok {
		return 0, true, repack(ctx, repo)
	}
	hashes, err := st.ObjectPacks()
	if err != nil {
		return 0, false, err
	}
	weights, err := packWeights(st.Filesystem(), hashes)
	if err != nil {
		return len(hashes), true, repack(ctx, repo)
	}
	rollUp, whole := planRollUp(weights)
	if whole {
		return len(weights), true, repack(ctx, repo)
	}
	return len(rollUp), false, rollUpPacks(ctx, repo, st, rollUp)
}

// rollUpPacks packs the objects of the packs rollUp and the clone's loose
// objects into one new pack, then deletes them. Every object they held
// is still in the clone: the packs it keeps are untouched.
func rollUpPacks(ctx context.Context, repo *git.Repository, st *filesystem.Storage, rollUp []packWeight) error {
	seen := map[plumbing.Hash]struct{}{}
	for _, p := range rollUp {
		idx, err := readPackIndex(st.Filesystem(), p.hash)
		if err != nil {
			return err
		}
		entries, err := idx.Entries()
		if err != nil {
			return err
		}
		for {
			e, err := entries.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				entries.Close()
				return err
			}
			seen[e.Hash] = struct{}{}
		}
		entries.Close()
	}
	if err := st.ForEachObjectHash(func(h plumbing.Hash) error {
		seen[h] = struct{}{}
		return nil
	}); err != nil {
		return err
	}
	old := make([]plumbing.Hash, 0, len(rollUp))
	for _, p := range rollUp {
		old = append(old, p.hash)
	}
	return replacePacks(ctx, repo, seen, old)
}

// repack packs every object the clone's references reach into one new
// pack, then deletes the loose objects it holds and the other packs. It
// does what go-git's RepackObjects does, with a walk of its own: go-git's
// takes every tree entry that is not a regular file for a tree, so a
// symbolic link (a blob) or a submodule (a gitlink: a commit of another
// repository, which the clone does not hold) anywhere in the history made
// every repack fail, and the clone grew a pack a commit for ever. Here a
// symbolic link's blob is packed as any blob, and a gitlink is left out,
// as git does.
func repack(ctx context.Context, repo *git.Repository) error {
	pos, ok := repo.Storer.(storer.PackedObjectStorer)
	if !ok {
		return git.ErrPackedObjectsNotSupported
	}
	old, err := pos.ObjectPacks()
	if err != nil {
		return err
	}
	w := reachWalker{ctx: ctx, repo: repo, seen: map[plumbing.Hash]struct{}{}}
	if err := w.walkRefs(); err != nil {
		return err
	}
	return replacePacks(ctx, repo, w.seen, old)
}

// replacePacks encodes objs into a new pack of the clone, then deletes
// the loose objects among objs and the packs old (but the new one, should
// it be one of them): everything old held that is in objs is still in
// the clone.
func replacePacks(ctx context.Context, repo *git.Repository, objs map[plumbing.Hash]struct{}, old []plumbing.Hash) error {
	pfw, ok := repo.Storer.(storer.PackfileWriter)
	if !ok {
		return errors.New("the clone's storage cannot write a pack")
	}
	pos, ok := repo.Storer.(storer.PackedObjectStorer)
	if !ok {
		return git.ErrPackedObjectsNotSupported
	}
	cfg, err := repo.Config()
	if err != nil {
		return err
	}
	nh, err := writePack(ctx, pfw, repo.Storer, slices.Collect(maps.Keys(objs)), cfg.Pack.Window)
	if err != nil {
		return err
	}
	if los, ok := repo.Storer.(storer.LooseObjectStorer); ok {
		if err := los.ForEachObjectHash(func(h plumbing.Hash) error {
			if _, packed := objs[h]; packed {
				return los.DeleteLooseObject(h)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, h := range old {
		if h == nh {
			continue
		}
		if err := pos.DeleteOldObjectPackAndIndex(h, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// writePack encodes objs, read from the clone's storage from, into a new
// pack of the clone and returns its hash. It stops at its next read of an
// object once ctx ends: the encoder reads the objects (and looks for
// deltas among them) before it writes one, so the pack it began is still
// empty, and go-git removes it.
func writePack(ctx context.Context, pfw storer.PackfileWriter, from storer.EncodedObjectStorer, objs []plumbing.Hash, window uint) (h plumbing.Hash, err error) {
	if err := ctx.Err(); err != nil {
		return h, err
	}
	wc, err := pfw.PackfileWriter()
	if err != nil {
		return h, err
	}
	defer func() {
		if cerr := wc.Close(); err == nil {
			err = cerr
		}
	}()
	return packfile.NewEncoder(wc, &oneReadAtATime{ctx: ctx, from: from}, false).Encode(objs, window)
}

// oneReadAtATime is the clone's storage for go-git's pack encoder, which
// looks for deltas among the trees and among the blobs in two goroutines
// at once, both reading objects from the storage. The clone's storage
// keeps its packs open (openPacks) and reads each through one reader and
// one map of open packs, neither safe for two goroutines: a packing read
// one pack from both and the process died of a panic in go-git's pack
// reader. It lets one read at a time through; the deltas are still
// computed in both goroutines. Once ctx ends, every read fails with its
// error, which ends the encoding.
type oneReadAtATime struct {
	mu   sync.Mutex
	ctx  context.Context
	from storer.EncodedObjectStorer
}

// NewEncodedObject is from's.
func (o *oneReadAtATime) NewEncodedObject() plumbing.EncodedObject {
	return o.from.NewEncodedObject()
}

// SetEncodedObject is from's, one call at a time.
func (o *oneReadAtATime) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from.SetEncodedObject(obj)
}

// EncodedObject is from's, one call at a time, until ctx ends.
func (o *oneReadAtATime) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.ctx.Err(); err != nil {
		return nil, err
	}
	return o.from.EncodedObject(t, h)
}

// DeltaObject is from's, one call at a time until ctx ends; a storage that keeps no
// deltas answers its EncodedObject.
func (o *oneReadAtATime) DeltaObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.ctx.Err(); err != nil {
		return nil, err
	}
	if d, ok := o.from.(storer.DeltaObjectStorer); ok {
		return d.DeltaObject(t, h)
	}
	return o.from.EncodedObject(t, h)
}

// IterEncodedObjects is from's, one call at a time.
func (o *oneReadAtATime) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from.IterEncodedObjects(t)
}

// HasEncodedObject is from's, one call at a time.
func (o *oneReadAtATime) HasEncodedObject(h plumbing.Hash) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from.HasEncodedObject(h)
}

// EncodedObjectSize is from's, one call at a time.
func (o *oneReadAtATime) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from.EncodedObjectSize(h)
}

// AddAlternate is from's, one call at a time.
func (o *oneReadAtATime) AddAlternate(remote string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from.AddAlternate(remote)
}

// reachWalker collects the objects a clone's references reach.
type reachWalker struct {
	ctx  context.Context // the walk stops when it ends
	repo *git.Repository
	seen map[plumbing.Hash]struct{}
	// shallow are the commits whose parents the clone does not hold
	shallow map[plumbing.Hash]bool
}

func (w *reachWalker) walkRefs() error {
	if hs, err := w.repo.Storer.Shallow(); err == nil && len(hs) > 0 {
		w.shallow = map[plumbing.Hash]bool{}
		for _, h := range hs {
			w.shallow[h] = true
		}
	}
	refs, err := w.repo.Storer.IterReferences()
	if err != nil {
		return err
	}
	defer refs.Close()
	return refs.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() != plumbing.HashReference {
			return nil
		}
		return w.walk(ref.Hash())
	})
}

// walk adds hash and what it reaches. It walks the history iteratively
// (a long history is a long chain of parents) and each tree recursively
// (trees are as deep as the repo's folders).
func (w *reachWalker) walk(hash plumbing.Hash) error {
	stack := []plumbing.Hash{hash}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := w.seen[h]; ok {
			continue
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		obj, err := object.GetObject(w.repo.Storer, h)
		if err != nil {
			return fmt.Errorf("reading object %s: %w", h, err)
		}
		w.seen[h] = struct{}{}
		switch obj := obj.(type) {
		case *object.Commit:
			if err := w.walkTree(obj.TreeHash); err != nil {
				return err
			}
			if !w.shallow[h] {
				stack = append(stack, obj.ParentHashes...)
			}
		case *object.Tag:
			stack = append(stack, obj.Target)
		case *object.Tree:
			delete(w.seen, h)
			if err := w.walkTree(h); err != nil {
				return err
			}
		case *object.Blob:
		default:
			return fmt.Errorf("object %s: unexpected type %s", h, obj.Type())
		}
	}
	return nil
}

// walkTree adds the tree hash and every tree and blob under it; a
// submodule's gitlink names a commit of another repository and is left
// out.
func (w *reachWalker) walkTree(hash plumbing.Hash) error {
	if _, ok := w.seen[hash]; ok {
		return nil
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	tree, err := object.GetTree(w.repo.Storer, hash)
	if err != nil {
		return fmt.Errorf("reading tree %s: %w", hash, err)
	}
	w.seen[hash] = struct{}{}
	for _, e := range tree.Entries {
		switch e.Mode {
		case filemode.Submodule:
		case filemode.Dir:
			if err := w.walkTree(e.Hash); err != nil {
				return err
			}
		default: // files of any mode and symbolic links: blobs
			w.seen[e.Hash] = struct{}{}
		}
	}
	return nil
}
