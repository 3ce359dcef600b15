package queue

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
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
// whole log; Manager.Counts reads only what came after its last count of
// the queue. A queue that does not exist has none.
func ReadCounts(root, tenant, flow string, fsys FS) (Counts, error) {
	return readCountsFrom(&countCursor{}, root, tenant, flow, fsys)
}

// countCursor is where the last count of one queue's log ended, so that
// the next reads only what came after: the log only grows between drains,
// and its checkpoint only moves on, while a drain, which empties it,
// changes the header of its first frame (its CRC covers the first
// message's id, and ids are never issued twice), a header read as it is,
// so that a log whose first frame is damaged is not read whole at every
// count (every scrape of /metrics) for want of a first id. A
// batch cut from the end of the log (its write or fdatasync failed) after
// it was counted, and new frames written in its place, change the header
// of the last frame counted (its CRC covers the id), which the next count
// reads again.
type countCursor struct {
	mu sync.Mutex // held for a count
	at countState
}

// countState is a count up to some point of one log.
type countState struct {
	head      [headerSize]byte // the log's first bytes, its first frame's header, damaged or not
	headed    bool             // the log holds a whole header (nothing is kept otherwise)
	scanned   int64            // the log is counted up to this offset…
	total     int64            // …and holds these messages before it
	last      int64            // the offset of the last frame counted…
	tail      [headerSize]byte // …and its header
	ckpt      int64            // the checkpoint counted up to this offset…
	processed int64            // …with these messages before it
}

// readCountsFrom counts tenant/flow's messages from where cur ended, and
// moves cur on.
func readCountsFrom(cur *countCursor, root, tenant, flow string, fsys FS) (Counts, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return Counts{}, err
	}
	if fsys == nil {
		fsys = OS{}
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	// a drain may empty the log while it is read (no lock is taken), and
	// the scan then meets the end before the size it began with, or the
	// log's first message changes: the log is read again
	for tries := 1; ; tries++ {
		at, err := readCounts(fsys, dir, cur.at)
		if err == nil || tries == 5 {
			if err == nil {
				cur.at = at
			}
			return Counts{Total: at.total, Processed: at.processed}, err
		}
	}
}

// errCountMoved is a count during which the log was emptied.
var errCountMoved = errors.New("the log was emptied while it was counted")

// readCounts is one reading of readCountsFrom, from at.
func readCounts(fsys FS, dir string, at countState) (countState, error) {
	f, err := fsys.OpenFile(filepath.Join(dir, segmentFile), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return countState{}, nil
	}
	if err != nil {
		return countState{}, err
	}
	defer f.Close()
	// the checkpoint first: the log only grows until a drain, so the size
	// read after it is at least the checkpoint (read the other way round,
	// a worker moving on between the two reads made a checkpoint past the
	// size, taken for an old drain's: nothing processed)
	b, err := readValueFile(fsys, filepath.Join(dir, ckptFile))
	if err != nil {
		return countState{}, err
	}
	size, err := fileSize(f)
	if err != nil {
		return countState{}, err
	}
	ckpt, err := resolveCheckpoint(b, f, size)
	if err != nil {
		return countState{}, err
	}
	head, headed, err := logHead(f, size)
	if err != nil {
		return countState{}, err
	}
	moved := !headed || !at.headed || head != at.head || size < at.scanned || ckpt < at.ckpt
	if !moved && at.scanned > 0 {
		var h [headerSize]byte
		if _, err := f.ReadAt(h[:], at.last); err != nil || h != at.tail {
			moved = true
		}
	}
	if moved {
		at = countState{head: head, headed: headed} // another log since: counted from its start
	}
	end, last, tail, err := countMessages(f, at.scanned, size, &at.total)
	if err != nil {
		return countState{}, err
	}
	if end > at.scanned {
		at.scanned, at.last, at.tail = end, last, tail
	}
	// the processed messages: those before the checkpoint, of the frames
	// counted
	if to := min(ckpt, at.scanned); to > at.ckpt {
		if at.ckpt, _, _, err = countMessages(f, at.ckpt, to, &at.processed); err != nil {
			return countState{}, err
		}
	}
	if again, _, err := logHead(f, size); err != nil || again != head {
		return countState{}, errCountMoved
	}
	return at, nil
}

// logHead reads the first headerSize bytes of a log of size bytes, as
// they are: headed is false when the log is shorter.
func logHead(r io.ReaderAt, size int64) (head [headerSize]byte, headed bool, err error) {
	if size < headerSize {
		return head, false, nil
	}
	if _, err := r.ReadAt(head[:], 0); err != nil {
		return head, false, err
	}
	return head, true, nil
}

// countMessages adds to n the messages of the log from off to size, and
// returns where the last whole frame ends, where it begins and its header
// (the one the scan verified, not read again: a batch cut and replaced
// meanwhile would pass for the one counted). Each frame's CRC is checked
// through a small buffer (scanFrameHeads): a message of 64 MiB is read,
// not held, and only its kind is kept.
func countMessages(f io.ReaderAt, off, size int64, n *int64) (end, last int64, tail [headerSize]byte, err error) {
	end, err = scanFrameHeads(f, segmentFile, off, size, func(h *[headerSize]byte, head []byte, _, at int64) error {
		if len(head) > 0 && head[0] == kindMessage {
			*n++
		}
		last, tail = at, *h
		return nil
	}, func(Damage) {})
	return end, last, tail, err
}

// firstMessageID is the id of the first frame of a log of size bytes, if
// it is a whole message; 0 otherwise. The frame's CRC is checked through a
// small buffer (frameHeadAt): a first message of 64 MiB is read, not held.
func firstMessageID(r io.ReaderAt, size int64) (uint64, error) {
	var head [9]byte // the kind and the id
	var stream []byte
	if rest := size - headerSize - int64(len(head)); rest > 0 {
		stream = make([]byte, min(rest, crcStreamed))
	}
	rec, _, n, _, err := frameHeadAt(r, 0, size, nil, head[:], stream)
	if err != nil || n == 0 || len(rec) < 9 || rec[0] != kindMessage {
		return 0, err
	}
	return binary.BigEndian.Uint64(rec[1:9]), nil
}
