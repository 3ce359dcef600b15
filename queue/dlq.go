package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/nexushq/nexus/naming"
)

// ErrNotPending is returned when an id is not a pending dead letter.
var ErrNotPending = errors.New("no pending dead letter")

// MoveToDLQ appends a dead letter to dlq.log and makes it durable.
func (q *Queue) MoveToDLQ(d DeadLetter) error {
	unlock, err := q.lockAppend()
	if err != nil {
		return err
	}
	defer unlock()
	return q.appendDurable(dlqFile, appendFrame(nil, appendDeadLetterRecord(nil, &d)))
}

// appendDurable appends frames to a file of the queue and syncs it. The
// caller holds the append lock.
func (q *Queue) appendDurable(name string, frames []byte) error {
	f, err := q.fs.OpenFile(q.path(name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return err
	}
	// a torn tail left by a crash is cut first, so that new frames follow
	// the last good one
	end, _, err := scan(f, name, 0, size, func([]byte, int64) error { return nil })
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(frames, end); err != nil {
		f.Truncate(end)
		return fmt.Errorf("queue %s/%s: writing %s: %w", q.Tenant, q.Flow, name, err)
	}
	if err := f.Truncate(end + int64(len(frames))); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("queue %s/%s: syncing %s: %w", q.Tenant, q.Flow, name, err)
	}
	if size == 0 {
		// possibly a new file: its folder entry must be durable too
		if err := q.fs.SyncDir(q.dir); err != nil {
			return fmt.Errorf("queue %s/%s: syncing the folder: %w", q.Tenant, q.Flow, err)
		}
	}
	return nil
}

// readRecords returns the verified records of a file of the queue.
func (q *Queue) readRecords(name string) ([][]byte, []Damage, error) {
	f, err := q.fs.OpenFile(q.path(name), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return nil, nil, err
	}
	var recs [][]byte
	_, damage, err := scan(f, name, 0, size, func(rec []byte, _ int64) error {
		recs = append(recs, rec)
		return nil
	})
	return recs, damage, err
}

// marks returns the ids marked in dlq.log.acked.
func (q *Queue) marks() (map[uint64]mark, error) {
	recs, _, err := q.readRecords(ackedFile)
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]mark, len(recs))
	for _, rec := range recs {
		if m, err := decodeMark(rec); err == nil {
			out[m.id] = m
		}
	}
	return out, nil
}

// DeadLetters returns the pending dead letters (not marked), by id.
func (q *Queue) DeadLetters() ([]DeadLetter, []Damage, error) {
	recs, damage, err := q.readRecords(dlqFile)
	if err != nil {
		return nil, damage, err
	}
	marked, err := q.marks()
	if err != nil {
		return nil, damage, err
	}
	var out []DeadLetter
	for _, rec := range recs {
		d, err := decodeDeadLetter(rec)
		if err != nil {
			continue
		}
		if _, done := marked[d.ID]; !done {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, damage, nil
}

// Mark records that the pending dead letter id was replayed or discarded
// (MarkReplayed, MarkDiscarded): it no longer appears among the pending
// ones. An id that is not pending is ErrNotPending, and nothing is written.
func (q *Queue) Mark(id uint64, action byte) error {
	return q.addMark(mark{id: id, action: action})
}

// MarkReplayed is Mark(id, MarkReplayed) that also records the id of the
// message the replay appended, which the worker's dlq_replayed line names.
func (q *Queue) MarkReplayed(id, replayID uint64) error {
	return q.addMark(mark{id: id, action: MarkReplayed, replayID: replayID})
}

// Replay appends the pending dead letter id's payload to the queue as a
// new message (a new id, attempt 1, with source and correlationID) and
// marks the entry replayed, naming the new message. The append comes
// first: a crash between the two replays twice rather than losing the
// message. Replays through one handle are serialized, so a repeated
// request (a double click) replays once; an id that is not pending is
// ErrNotPending, and nothing is written. Another process replaying or
// discarding the same id at the same moment can still make the message
// appear twice, which at-least-once delivery allows.
func (q *Queue) Replay(id uint64, source, correlationID string) (Message, error) {
	q.replayMu.Lock()
	defer q.replayMu.Unlock()
	pending, _, err := q.DeadLetters()
	if err != nil {
		return Message{}, err
	}
	i := slices.IndexFunc(pending, func(d DeadLetter) bool { return d.ID == id })
	if i < 0 {
		return Message{}, ErrNotPending
	}
	m, err := q.Append(NewMessage{Source: source, CorrelationID: correlationID, Payload: pending[i].Payload})
	if err != nil {
		return Message{}, err
	}
	if err := q.MarkReplayed(id, m.ID); err != nil && !errors.Is(err, ErrNotPending) {
		// appended but not marked: the entry stays pending and a second
		// replay would deliver the payload twice; the caller says so
		return m, fmt.Errorf("queue %s/%s: the dead letter %d was replayed as message %d but could not be marked: %w", q.Tenant, q.Flow, id, m.ID, err)
	}
	return m, nil
}

func (q *Queue) addMark(m mark) error {
	unlock, err := q.lockAppend()
	if err != nil {
		return err
	}
	defer unlock()
	pending, _, err := q.DeadLetters()
	if err != nil {
		return err
	}
	found := false
	for _, d := range pending {
		found = found || d.ID == m.id
	}
	if !found {
		return ErrNotPending
	}
	m.at = q.now()
	return q.appendDurable(ackedFile, appendFrame(nil, appendMarkRecord(nil, m)))
}

// Marked is a dead letter replayed or discarded, as CompactDLQ applied it.
type Marked struct {
	ID       uint64    // the dead letter's id
	Action   byte      // MarkReplayed or MarkDiscarded
	At       time.Time // when it was marked
	ReplayID uint64    // the message a replay appended; 0 when not recorded
}

// CompactDLQ rewrites dlq.log without the marked entries and clears the
// marks, so that a discarded body leaves the disk. It returns the marks it
// applied, by id; it does nothing when no entry is marked.
func (q *Queue) CompactDLQ() ([]Marked, error) {
	unlock, err := q.lockAppend()
	if err != nil {
		return nil, err
	}
	defer unlock()
	marked, err := q.marks()
	if err != nil || len(marked) == 0 {
		return nil, err
	}
	recs, _, err := q.readRecords(dlqFile)
	if err != nil {
		return nil, err
	}
	var keep []byte
	for _, rec := range recs {
		if d, err := decodeDeadLetter(rec); err == nil {
			if _, done := marked[d.ID]; done {
				continue
			}
		}
		keep = appendFrame(keep, rec)
	}
	if err := WriteAtomic(q.fs, q.path(dlqFile), keep); err != nil {
		return nil, err
	}
	if err := WriteAtomic(q.fs, q.path(ackedFile), nil); err != nil {
		return nil, err
	}
	applied := make([]Marked, 0, len(marked))
	for _, m := range marked {
		applied = append(applied, Marked{ID: m.id, Action: m.action, At: m.at, ReplayID: m.replayID})
	}
	sort.Slice(applied, func(i, j int) bool { return applied[i].ID < applied[j].ID })
	return applied, nil
}

// ReadDeadLetters returns the pending dead letters of tenant/flow under
// root without opening the queue (nothing is created or locked): what
// nexus dlq list shows, also while servers run. A queue that does not
// exist has none.
func ReadDeadLetters(root, tenant, flow string, fsys FS) ([]DeadLetter, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		fsys = OS{}
	}
	q := &Queue{Tenant: tenant, Flow: flow, dir: dir, fs: fsys}
	dl, _, err := q.DeadLetters()
	return dl, err
}

// QueueNames lists the (tenant, flow) folders under root that follow the
// name rule, sorted.
func QueueNames(root string, fsys FS) ([][2]string, error) {
	if fsys == nil {
		fsys = OS{}
	}
	tenants, err := fsys.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, t := range tenants {
		if !t.IsDir() || !naming.Valid(t.Name()) {
			continue
		}
		flows, err := fsys.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range flows {
			if f.IsDir() && naming.Valid(f.Name()) {
				out = append(out, [2]string{t.Name(), f.Name()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out, nil
}
