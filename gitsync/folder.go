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

// CommitFolder makes the git repository at repoDir hold exactly the files of
// srcDir, committing on branch main when anything changed, and returns the
// head commit. It creates the repository on first use. srcDir may be a
// symbolic link to the folder; links inside it are not copied. The development mode
// uses it to serve a folder through the same git sync as production. When
// repoDir lies inside srcDir (nexus serve --dev --dev-flows . keeps its
// state in ./.nexus-dev), the folder of srcDir holding it is left out: the
// repository never copies itself, nor the state around it.
func CommitFolder(repoDir, srcDir string) (string, error) {
	// the folder given may be a symbolic link (to a checkout): the walk
	// starts at the folder it leads to, which it would not follow
	absSrc, err := filepath.EvalSymlinks(srcDir)
	if err == nil {
		absSrc, err = filepath.Abs(absSrc)
	}
	if err != nil {
		return "", fmt.Errorf("copying %s: %w", srcDir, err)
	}
	repo, err := git.PlainOpen(repoDir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		// the folder is the owner's alone, as the state directory around
		// it (go-git would make it 0755); what it copies in, too
		if err := os.MkdirAll(repoDir, 0o700); err != nil {
			return "", err
		}
		repo, err = git.PlainInitWithOptions(repoDir, &git.PlainInitOptions{
			InitOptions: git.InitOptions{DefaultBranch: "refs/heads/main"},
		})
	}
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", repoDir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", repoDir, err)
	}
	// where the repository is, its links resolved as the folder's are:
	// the folder holding it is left out of the copy
	absRepo, err := filepath.EvalSymlinks(repoDir)
	if err == nil {
		absRepo, err = filepath.Abs(absRepo)
	}
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", repoDir, err)
	}
	entries, err := os.ReadDir(repoDir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			if err := os.RemoveAll(filepath.Join(repoDir, e.Name())); err != nil {
				return "", err
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
			if inside, err := filepath.Rel(p, absRepo); p != absSrc && err == nil && inside != ".." && !strings.HasPrefix(inside, ".."+string(filepath.Separator)) {
				return filepath.SkipDir // holds the repository being written
			}
			return os.MkdirAll(filepath.Join(repoDir, rel), 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(repoDir, rel), data, 0o600)
	})
	if err != nil {
		return "", fmt.Errorf("copying %s: %w", srcDir, err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return "", fmt.Errorf("repository %s: %w", repoDir, err)
	}
	status, err := wt.Status()
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", repoDir, err)
	}
	if status.IsClean() {
		if head, err := repo.Head(); err == nil {
			return head.Hash().String(), nil
		}
	}
	hash, err := wt.Commit("flows from "+srcDir, &git.CommitOptions{
		AllowEmptyCommits: true,
		Author:            &object.Signature{Name: "nexus", Email: "nexus@localhost", When: time.Now()},
	})
	if err != nil {
		return "", fmt.Errorf("committing in %s: %w", repoDir, err)
	}
	return hash.String(), nil
}
