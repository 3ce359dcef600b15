package gitsync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// A SkippedEntry is an entry of a folder CommitFolder does not copy: a
// symbolic link (wherever it leads) or a special file.
type SkippedEntry struct {
	Path   string // slash-separated, relative to the folder
	Reason string // what it is, and where it leads: one line
	Advice string // what to do with it for the folder to be served whole: one phrase
}

// CommitFolder makes the git repository at repoDir hold exactly the files of
// srcDir, committing on branch main when anything changed, and returns the
// head commit. It creates the repository on first use. srcDir may be a
// symbolic link to the folder; the links inside it, and its special
// files, are not copied: it returns them, for the caller to say so (a
// config repo's flows/ holds regular files only, and the sync refuses a
// commit with a link there: following one would serve in development what
// the same folder pushed to a repo is refused for). The development mode
// uses it to serve a folder through the same git sync as production. When
// repoDir lies inside srcDir (nexus serve --dev --dev-flows . keeps its
// state in ./.nexus-dev), the folder holding it is left out, and only it:
// the repository never copies itself, nor the state around it.
func CommitFolder(repoDir, srcDir string) (head string, skipped []SkippedEntry, err error) {
	// the folder given may be a symbolic link (to a checkout): the walk
	// starts at the folder it leads to, which it would not follow
	absSrc, err := filepath.EvalSymlinks(srcDir)
	if err == nil {
		absSrc, err = filepath.Abs(absSrc)
	}
	if err != nil {
		return "", nil, fmt.Errorf("copying %s: %w", srcDir, err)
	}
	repo, err := git.PlainOpen(repoDir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		// the folder is the owner's alone, as the state directory around
		// it (go-git would make it 0755); what it copies in, too
		if err := os.MkdirAll(repoDir, 0o700); err != nil {
			return "", nil, err
		}
		repo, err = git.PlainInitWithOptions(repoDir, &git.PlainInitOptions{
			InitOptions: git.InitOptions{DefaultBranch: "refs/heads/main"},
		})
	}
	if err != nil {
		return "", nil, fmt.Errorf("repository %s: %w", repoDir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", nil, fmt.Errorf("repository %s: %w", repoDir, err)
	}
	// where the repository is, its links resolved as the folder's are:
	// the folder holding it is left out of the copy
	absRepo, err := filepath.EvalSymlinks(repoDir)
	if err == nil {
		absRepo, err = filepath.Abs(absRepo)
	}
	if err != nil {
		return "", nil, fmt.Errorf("repository %s: %w", repoDir, err)
	}
	entries, err := os.ReadDir(repoDir)
	if err != nil {
		return "", nil, err
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			if err := os.RemoveAll(filepath.Join(repoDir, e.Name())); err != nil {
				return "", nil, err
			}
		}
	}
	err = filepath.WalkDir(absSrc, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(absSrc, p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if p != absSrc && (p == absRepo || p == filepath.Dir(absRepo)) {
				return filepath.SkipDir // the repository being written, or the state around it
			}
			return os.MkdirAll(filepath.Join(repoDir, rel), 0o700)
		}
		if !d.Type().IsRegular() {
			reason, advice := notCopied(absSrc, p, d.Type())
			skipped = append(skipped, SkippedEntry{Path: filepath.ToSlash(rel), Reason: reason, Advice: advice})
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(repoDir, rel), data, 0o600)
	})
	if err != nil {
		return "", nil, fmt.Errorf("copying %s: %w", srcDir, err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return "", nil, fmt.Errorf("repository %s: %w", repoDir, err)
	}
	status, err := wt.Status()
	if err != nil {
		return "", nil, fmt.Errorf("repository %s: %w", repoDir, err)
	}
	if status.IsClean() {
		if ref, err := repo.Head(); err == nil {
			return ref.Hash().String(), skipped, nil
		}
	}
	hash, err := wt.Commit("flows from "+srcDir, &git.CommitOptions{
		AllowEmptyCommits: true,
		Author:            &object.Signature{Name: "nexus", Email: "nexus@localhost", When: time.Now()},
	})
	if err != nil {
		return "", nil, fmt.Errorf("committing in %s: %w", repoDir, err)
	}
	return hash.String(), skipped, nil
}

// notCopied says what the entry p of the folder src, of type typ, is: a
// symbolic link and where it leads (inside the folder, outside it, or
// nowhere), or a special file; and what to do with it: a link to a file
// or a folder, copy it in; a link leading nowhere, remove it or copy in
// its file; a link to the folder or a folder holding it, remove it; a
// special file (a FIFO, a socket, a device), remove it or move it out.
func notCopied(src, p string, typ fs.FileMode) (reason, advice string) {
	if typ&fs.ModeSymlink == 0 {
		what := "a special file"
		switch {
		case typ&fs.ModeNamedPipe != 0:
			what = "a named pipe (FIFO)"
		case typ&fs.ModeSocket != 0:
			what = "a socket"
		case typ&fs.ModeDevice != 0:
			what = "a device"
		}
		return what + ", not a regular file", "remove it or move it out of the folder"
	}
	target, err := os.Readlink(p)
	if err != nil {
		return fmt.Sprintf("a symbolic link that cannot be read: %v", pathError(err)), "remove it"
	}
	to, err := filepath.EvalSymlinks(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("a symbolic link to %s, which does not exist", target), "remove it, or copy in the file it was meant to lead to"
	case err != nil:
		return fmt.Sprintf("a symbolic link to %s, which cannot be followed: %v", target, pathError(err)), "remove it"
	}
	what, advice := "the file", "copy the file in"
	if info, err := os.Stat(to); err == nil && info.IsDir() {
		what, advice = "the folder", "copy the folder in"
	}
	rel, err := filepath.Rel(src, to)
	switch {
	case rel == ".":
		// named as a path it would be "the folder ."
		return "a symbolic link to the top of the folder", "remove it"
	case err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)):
		if up, err := filepath.Rel(to, src); err == nil && up != ".." && !strings.HasPrefix(up, ".."+string(filepath.Separator)) {
			// copied in, the folder would hold itself
			advice = "remove it: it leads to a folder holding this one"
		}
		return fmt.Sprintf("a symbolic link to %s, outside the folder", to), advice
	}
	return fmt.Sprintf("a symbolic link to %s %s", what, filepath.ToSlash(rel)), advice
}

// pathError is err without the path a *fs.PathError repeats.
func pathError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
