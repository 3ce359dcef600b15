package gitsync

import "context"

// PackWholeClone packs every object the references of the clone in dir
// reach into one pack, as a round does when its plan says so (repack).
func PackWholeClone(dir string) error {
	repo, err := openClone(dir)
	if err != nil {
		return err
	}
	return repack(context.Background(), repo)
}
