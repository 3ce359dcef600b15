package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Presence is what a queue's files say of a message that may or may not
// have been appended: a cron tick whose last-tick record was written, by a
// process that may have gone before the append.
type Presence int

const (
	// Absent: it was never appended. The log holds every message issued
	// since it could have been, and none is it.
	Absent Presence = iota
	// Present: the log holds it.
	Present
	// Gone: the log does not hold it, but ids were issued since it could
	// have been and the log no longer holds their messages: processed and
	// drained, and it may have been one. An append that raised the id
	// counter and failed before its frame was written (a full disk, a kill
	// between the two) leaves the same files, so it reads as Gone too.
	Gone
)

// String names the presence for logs.
func (p Presence) String() string {
	switch p {
	case Absent:
		return "absent"
	case Present:
		return "present"
	default:
		return "gone"
	}
}

// NextID is a lower bound of the id tenant/flow's next message gets, read
// from its files without opening the queue (nothing is created or locked,
// and it works while other processes append): 1 for a queue that does not
// exist. A message appended after the call gets this id or a later one,
// since every append raises the counter before it writes its frames.
func (m *Manager) NextID(tenant, flow string) (uint64, error) {
	dir, err := Dir(m.cfg.Root, tenant, flow)
	if err != nil {
		return 0, err
	}
	return readNextID(m.fs(), dir)
}

// readNextID reads the id counter in dir (1 when there is none).
func readNextID(fsys FS, dir string) (uint64, error) {
	b, err := readValueFile(fsys, filepath.Join(dir, seqFile))
	if err != nil {
		return 0, err
	}
	return seqValue(b), nil
}

// Appended tells whether tenant/flow's log holds the message appended with
// the correlation ID cid, whose id, if it was appended, is at least from
// (a NextID read before the append). It reads the files without opening
// the queue, as NextID does. The id counter, the log's size and its first
// message are read under a shared lock on the queue's append lock file
// (when there is one), so that they agree, waited for as long as the
// manager's LockWait at most (then the error wraps ErrLockBusy: a process
// paused while it appends holds the lock as long as the pause lasts, and
// the caller, a standby cron scheduler taking a flow over, must not wait
// as long); the log is then scanned
// without the lock (a backlog takes a while, and appends would wait for
// it), and read again if its first message changed meanwhile (a drain
// emptied it in place, and frames appended after it would be read beside
// the old ones). A message cut from the log because its write or
// fdatasync failed was never acknowledged (its Append returned the
// error): it reads as Absent while the log holds the messages issued
// before it, and as Gone when the log is empty.
func (m *Manager) Appended(tenant, flow string, from uint64, cid string) (Presence, error) {
	dir, err := Dir(m.cfg.Root, tenant, flow)
	if err != nil {
		return Gone, err
	}
	for tries := 1; ; tries++ {
		p, err := appended(m.fs(), dir, from, cid, m.cfg.LockWait)
		if !errors.Is(err, errCountMoved) || tries == 5 {
			return p, err
		}
	}
}

// appended is one reading of Appended; errCountMoved when a drain emptied
// the log while it was scanned.
func appended(fsys FS, dir string, from uint64, cid string, wait time.Duration) (Presence, error) {
	next, f, size, first, err := logEnds(fsys, dir, wait)
	if err != nil {
		return Gone, err
	}
	if f == nil {
		return emptyLogPresence(next, from), nil
	}
	defer f.Close()
	found := false
	// each frame's CRC checked through a small buffer, and a message's
	// fields read from its first bytes (scanHeads): a message of 64 MiB
	// is read, not held
	_, err = scanHeads(f, segmentFile, 0, size, func(head []byte, _, _ int64) error {
		if len(head) < 18 || head[0] != kindMessage || binary.BigEndian.Uint64(head[1:9]) < from {
			return nil
		}
		var msg Message
		if _, err := decodeMessageHead(head[9:], &msg); err == nil && msg.CorrelationID == cid {
			found = true
			return errStopScan
		}
		return nil
	}, func(Damage) {})
	if again, aerr := firstMessageID(f, size); aerr != nil || again != first {
		return Gone, errCountMoved
	}
	switch {
	case found:
		return Present, nil
	case err != nil:
		return Gone, err
	case first != 0 && first <= from:
		// a drain empties the whole log, so a log whose first message was
		// issued at or before from holds every message issued since
		return Absent, nil
	}
	return emptyLogPresence(next, from), nil
}

// logEnds reads, under a shared lock on dir's append lock file when there
// is one (waited for as long as wait at most, a negative wait without
// limit), the id counter and segment.log's size and first message id, and
// returns the log open (nil when there is none).
func logEnds(fsys FS, dir string, wait time.Duration) (next uint64, f File, size int64, first uint64, err error) {
	if lock, err := fsys.OpenFile(filepath.Join(dir, lockFile), os.O_RDONLY, 0); err == nil {
		defer lock.Close()
		if lf, ok := lock.(interface{ Fd() uintptr }); ok {
			var err error
			if wait < 0 {
				err = flockFd(int(lf.Fd()), syscall.LOCK_SH)
			} else {
				err = flockFdWithin(int(lf.Fd()), syscall.LOCK_SH, wait, new(time.Time), nil, nil)
			}
			if err != nil {
				return 0, nil, 0, 0, fmt.Errorf("taking the append lock %s: %w", filepath.Join(dir, lockFile), err)
			}
			defer flockFd(int(lf.Fd()), syscall.LOCK_UN)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, nil, 0, 0, err
	}
	// the counter first: an append raises it before it writes its frames,
	// so a message the scan does not meet was issued below it
	if next, err = readNextID(fsys, dir); err != nil {
		return 0, nil, 0, 0, err
	}
	f, err = fsys.OpenFile(filepath.Join(dir, segmentFile), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return next, nil, 0, 0, nil
	}
	if err != nil {
		return 0, nil, 0, 0, err
	}
	if size, err = fileSize(f); err == nil {
		first, err = firstMessageID(f, size)
	}
	if err != nil {
		f.Close()
		return 0, nil, 0, 0, err
	}
	return next, f, size, first, nil
}

// flockFd is flock(2) on fd, tried again when a signal interrupts it.
func flockFd(fd, how int) error {
	for {
		if err := syscall.Flock(fd, how); err != syscall.EINTR {
			return err
		}
	}
}

// emptyLogPresence is the presence of a message not in a log that holds
// nothing issued at or before from: Absent if no id was issued since from,
// Gone otherwise.
func emptyLogPresence(next, from uint64) Presence {
	if next <= from {
		return Absent
	}
	return Gone
}
