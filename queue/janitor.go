package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nexushq/nexus/lifecycle"
)

// sweepIdle deletes the files of every queue under root that this process
// has not opened, no process runs a worker for, and that holds nothing:
// no unprocessed message, no pending retry, no dead letter not yet
// replayed or discarded. The id counter (segment.log.seq) and the lock
// files stay, so that ids are never reissued; the next submission
// recreates the rest. A queue kept for its pending retries only, each of
// which carries its message, has its processed segment.log emptied.
func (m *Manager) sweepIdle() {
	names, err := QueueNames(m.cfg.Root, m.cfg.FS)
	if err != nil {
		m.cfg.Logger.Error("the queues could not be listed for housekeeping", "event", "housekeeping_failed", "error", err.Error())
		return
	}
	for _, n := range names {
		m.mu.Lock()
		_, open := m.queues[n]
		open = open || m.reopening[n] > 0 || m.opening[n] != nil
		closed := m.stopping
		m.mu.Unlock()
		if closed {
			return
		}
		if open {
			continue
		}
		deleted, err := deleteIdleQueueReporting(m.cfg.Root, n[0], n[1], m.fs(), m.damageLogger(n[0], n[1]))
		switch {
		case err != nil:
			m.cfg.Logger.Error("an idle queue could not be cleaned", "event", "housekeeping_failed", "tenant", n[0], "flow", n[1], "error", err.Error())
		case deleted:
			m.cfg.Logger.Info("an idle queue's files were deleted; its id counter is kept", "event", "queue_files_deleted", "tenant", n[0], "flow", n[1])
		}
	}
}

func (m *Manager) fs() FS {
	if m.cfg.FS == nil {
		return OS{}
	}
	return m.cfg.FS
}

// deleteIdleQueue deletes an idle queue's files, holding its worker lock
// (no worker anywhere) and its append lock (no append meanwhile). Either
// lock held elsewhere, it deletes nothing and returns false at once. A handle
// that was open elsewhere finds segment.log gone under the append lock and
// recreates it, or opens the one created since (see segmentAtPath).
func deleteIdleQueue(root, tenant, flow string, fsys FS) (bool, error) {
	return deleteIdleQueueReporting(root, tenant, flow, fsys, nil)
}

// deleteIdleQueueReporting is deleteIdleQueue, calling report (when not
// nil) with the damage it deletes: a checkpoint of an empty log that
// holds neither a checkpoint nor a drain marker, reported as the worker
// reports it as it starts (checkpointDamage) once the file is gone. A
// log that is not empty has such a checkpoint read as 0, short of its
// end, and the queue is kept for its worker.
func deleteIdleQueueReporting(root, tenant, flow string, fsys FS, report func(Damage)) (bool, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return false, err
	}
	wl := NewFileLock(filepath.Join(dir, workerLockFile))
	held, err := wl.TryLock()
	if err != nil || !held {
		return false, err
	}
	defer wl.Unlock()
	lf, err := openNoFollow(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return false, err
	}
	defer lf.Close()
	// tried, not waited for: the holder (nexus dlq in another process, an
	// appender paused) may keep it for long, and a shutdown waits for the
	// sweep; the queue is looked at again at the next pass
	switch err := flockRetry(lf, syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil
	case err != nil:
		return false, err
	}
	defer flockRetry(lf, syscall.LOCK_UN)

	q := &Queue{Tenant: tenant, Flow: flow, dir: dir, fs: fsys, lock: lf, onDamage: report}
	var size int64
	if info, err := fsys.Stat(q.path(segmentFile)); err == nil {
		size = info.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	b, err := readValueFile(fsys, q.path(ckptFile))
	if err != nil {
		return false, err
	}
	if size > 0 {
		// read as every reader reads it: a checkpoint past the end is 0,
		// a drain marker is where the messages appended since begin
		seg, err := fsys.OpenFile(q.path(segmentFile), os.O_RDONLY, 0)
		if err != nil {
			return false, err
		}
		ckpt, err := resolveCheckpoint(b, seg, size)
		seg.Close()
		if err != nil || ckpt < size {
			return false, err // unprocessed messages
		}
	}
	if rs, err := q.Retries(); err != nil || len(rs) > 0 {
		if err == nil && size > 0 && !slices.ContainsFunc(rs, func(r Retry) bool { return r.Message == nil }) {
			// kept for its retries, which carry their messages: the log,
			// all of it processed, is emptied as a drain empties it
			err = q.emptyIdleLog(size)
		}
		return false, err
	}
	// pending dead letters, damage (dead letters or marks, which only the
	// worker's rewrite drops, reporting it) and marks not yet applied (which the worker
	// logs as it applies them) all keep the queue for its worker
	dl, damage, err := q.deadLetters(false)
	if err != nil || len(dl) > 0 || slices.ContainsFunc(damage, func(d Damage) bool { return !d.Torn }) {
		return false, err
	}
	if marks, _, err := q.marks(); err != nil || len(marks) > 0 {
		return false, err
	}
	if size > 0 {
		// the counter durable and past the log's ids, then the drain
		// marked in the checkpoint (as Drain does): a janitor that dies
		// before the checkpoint is gone leaves one that tells the deleted
		// log's messages from those appended since to a log created again
		next, err := q.keepCounter(size)
		if err != nil {
			return false, err
		}
		if err := q.markDrain(next); err != nil {
			return false, err
		}
	}
	// the checkpoint of an empty log is not read by anyone before it goes:
	// one that does not verify is said, not deleted without a word
	_, ckptDamaged := checkpointDamage(b)
	removed := false
	for _, names := range [][]string{{segmentFile, retryFile, dlqFile, ackedFile}, {ckptFile}} {
		removedNow := false
		for _, name := range names {
			err := fsys.Remove(q.path(name))
			switch {
			case err == nil:
				removedNow = true
			case !errors.Is(err, fs.ErrNotExist):
				return removed || removedNow, err
			}
		}
		if removedNow {
			removed = true
			if err := fsys.SyncDir(dir); err != nil {
				return true, err
			}
		}
	}
	if ckptDamaged && report != nil { // the log was empty: see above
		d := valueDamage(ckptFile, "checkpoint", b, ckptMagic, drainMagic)
		d.Reason += "; " + segmentFile + " was empty, so nothing is delivered again, and the file was deleted with the idle queue's"
		report(d)
	}
	return removed, nil
}

// emptyIdleLog empties the segment.log (size bytes, all of it processed)
// of a queue the janitor keeps for its retries, every one of which
// carries its message, in Drain's order: the counter durable and past the
// log's ids (its copy in append.lock), the drain marked in the
// checkpoint, the log truncated and synced, the checkpoint back to 0. A
// janitor that dies anywhere in between leaves a checkpoint that tells
// the emptied log's messages from those appended since; the retries are
// in their file, untouched. The caller holds the append lock and
// worker.lock.
func (q *Queue) emptyIdleLog(size int64) error {
	next, err := q.keepCounter(size)
	if err != nil {
		return err
	}
	if err := q.markDrain(next); err != nil {
		return err
	}
	seg, err := q.fs.OpenFile(q.path(segmentFile), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = seg.Truncate(0)
	if err == nil {
		err = seg.Sync()
	}
	if cerr := seg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("emptying %s: %w", segmentFile, err)
	}
	return q.SaveCheckpoint(0)
}

// keepCounter makes the id counter durable, and past the highest id in
// segment.log (size bytes), before the janitor deletes the log, and
// leaves its copy in append.lock (q.lock): appends rewrite the counter
// without fsync because recovery can raise it from the log, which is
// about to go. A counter that held bytes and did not verify is reported
// (q.onDamage) as recovery reports it. It returns the counter. The caller
// holds the append lock.
func (q *Queue) keepCounter(size int64) (uint64, error) {
	seg, err := q.fs.OpenFile(q.path(segmentFile), os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer seg.Close()
	maxID, _, _, err := scanIDs(seg, size)
	if err != nil {
		return 0, err
	}
	if q.seq, err = q.fs.OpenFile(q.path(seqFile), os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		return 0, err
	}
	defer q.seq.Close()
	raw, err := readValue(q.seq)
	if err != nil {
		return 0, err
	}
	next, verified := seqValue(raw), verifiesAsSeq(raw)
	if !verified {
		// lost: raised past the dead letters' ids too, as recovery does
		kept, err := q.highestKeptID()
		if err != nil {
			return 0, err
		}
		maxID = max(maxID, kept)
	}
	next = max(next, maxID+1)
	if err := q.writeSeq(next, true); err != nil {
		return 0, err
	}
	if !verified && len(raw) > 0 && q.onDamage != nil {
		// reported as recovery reports it: one that held bytes
		d := valueDamage(seqFile, "id counter", raw, seqMagic)
		d.Reason += fmt.Sprintf("; rebuilt as %d, past the ids of the log, the dead letters and the last drain, before the idle queue's log was deleted", next)
		q.onDamage(d)
	}
	// the log, the evidence of its ids, is about to go: the counter's
	// copy in append.lock takes its place
	return next, writeCounterCopy(q.lock, next)
}

// Start begins the housekeeping of idle queues (every SweepEvery) and
// returns at once.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	every := m.cfg.SweepEvery
	if every <= 0 {
		every = time.Minute
	}
	m.sweeper.Start(func(ctx context.Context) { lifecycle.Every(ctx, every, m.sweepIdle) })
}
