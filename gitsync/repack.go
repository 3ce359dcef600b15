package gitsync

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// repack packs every object the clone's references reach into one new
// pack, then deletes the loose objects it holds and the other packs. It
// does what go-git's RepackObjects does, with a walk of its own: go-git's
// takes every tree entry that is not a regular file for a tree, so a
// symbolic link (a blob) or a submodule (a gitlink: a commit of another
// repository, which the clone does not hold) anywhere in the history made
// every repack fail, and the clone grew a pack a commit for ever. Here a
// symbolic link's blob is packed as any blob, and a gitlink is left out,
// as git does.
func repack(repo *git.Repository) error {
	pfw, ok := repo.Storer.(storer.PackfileWriter)
	if !ok {
		return errors.New("the clone's storage cannot write a pack")
	}
	pos, ok := repo.Storer.(storer.PackedObjectStorer)
	if !ok {
		return git.ErrPackedObjectsNotSupported
	}
	old, err := pos.ObjectPacks()
	if err != nil {
		return err
	}
	w := reachWalker{repo: repo, seen: map[plumbing.Hash]struct{}{}}
	if err := w.walkRefs(); err != nil {
		return err
	}
	objs := make([]plumbing.Hash, 0, len(w.seen))
	for h := range w.seen {
		objs = append(objs, h)
	}
	cfg, err := repo.Config()
	if err != nil {
		return err
	}
	nh, err := writePack(pfw, repo, objs, cfg.Pack.Window)
	if err != nil {
		return err
	}
	if los, ok := repo.Storer.(storer.LooseObjectStorer); ok {
		if err := los.ForEachObjectHash(func(h plumbing.Hash) error {
			if _, packed := w.seen[h]; packed {
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

// writePack encodes objs into a new pack of the clone and returns its
// hash.
func writePack(pfw storer.PackfileWriter, repo *git.Repository, objs []plumbing.Hash, window uint) (h plumbing.Hash, err error) {
	wc, err := pfw.PackfileWriter()
	if err != nil {
		return h, err
	}
	defer func() {
		if cerr := wc.Close(); err == nil {
			err = cerr
		}
	}()
	return packfile.NewEncoder(wc, repo.Storer, false).Encode(objs, window)
}

// reachWalker collects the objects a clone's references reach.
type reachWalker struct {
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
