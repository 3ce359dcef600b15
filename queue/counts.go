package queue

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Counts is what a queue's segment.log holds now. A drain empties the log,
// so both drop to zero then: they are not the queue's history (the
// journal is), only what the log still carries.
type Counts struct {
	Total     int64 // messages in the log
	Processed int64 // of them, those before the checkpoint
}

// ReadCounts counts the messages of tenant/flow's log under root without
// opening the queue: nothing is created or locked, and it works while
// servers run (a frame still being written reads as the end). It reads the
// whole log, so it is for the management UI and the CLI, not a hot path.
// A queue that does not exist has none.
func ReadCounts(root, tenant, flow string, fsys FS) (Counts, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return Counts{}, err
	}
	if fsys == nil {
		fsys = OS{}
	}
	// a drain may empty the log while it is read (no lock is taken), and
	// the scan then meets the end before the size it began with: the log
	// is read again
	for tries := 1; ; tries++ {
		c, err := readCounts(fsys, dir)
		if err == nil || tries == 5 {
			return c, err
		}
	}
}

// readCounts is one reading of ReadCounts.
func readCounts(fsys FS, dir string) (Counts, error) {
	f, err := fsys.OpenFile(filepath.Join(dir, segmentFile), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Counts{}, nil
	}
	if err != nil {
		return Counts{}, err
	}
	defer f.Close()
	// the checkpoint first: the log only grows until a drain, so the size
	// read after it is at least the checkpoint (read the other way round,
	// a worker moving on between the two reads made a checkpoint past the
	// size, taken for an old drain's: nothing processed)
	b, err := readFile(fsys, filepath.Join(dir, ckptFile))
	if err != nil {
		return Counts{}, err
	}
	size, err := fileSize(f)
	if err != nil {
		return Counts{}, err
	}
	ckpt, err := resolveCheckpoint(b, f, size)
	if err != nil {
		return Counts{}, err
	}
	var c Counts
	_, _, err = scan(f, segmentFile, 0, size, func(rec []byte, off int64) error {
		if len(rec) > 0 && rec[0] == kindMessage {
			c.Total++
			if off < ckpt {
				c.Processed++
			}
		}
		return nil
	})
	return c, err
}
