package queue

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The retry schedule, segment.log.retry, is a log of changes in frames (see
// the package documentation): a record sets a message's retry (its offset,
// the attempt that is due and when, and, written by this version, the
// message itself, so that the log may be emptied while it waits), or
// clears it. A change is one frame appended and one fdatasync, whatever
// the schedule holds; it was the whole schedule rewritten through
// WriteAtomic, which cost 28·n²/2 bytes and 2n fsyncs for n failed first
// attempts. The log is rewritten with the live
// entries only (WriteAtomic) when it grows past twice their size plus
// retryCompactSlack, and at the worker's idle housekeeping.

// Record kinds of the retry schedule.
const (
	kindRetrySet   = 4
	kindRetryClear = 5
	// kindRetryCopy sets a retry that carries its message: it is
	// delivered from the record, so segment.log may be emptied while it
	// waits (a retry set read its message at its offset in the log)
	kindRetryCopy = 6
)

// Sizes of the schedule's records.
const (
	retrySetRecord   = 29 // kind, id, offset, attempt, due
	retryClearRecord = 9  // kind, id
	retrySetFrame    = headerSize + retrySetRecord
	// retryCopyExtra is how much longer a retry carrying its message is
	// than the message's record in segment.log: its fields (29 bytes)
	// replace the message record's kind and id (9)
	retryCopyExtra = retrySetRecord - 9
	// retryCopyMin is the shortest such record: an empty source, no
	// correlation ID, no payload
	retryCopyMin = retrySetRecord + 8 + 1 + 2
)

// retryCompactSlack is how many bytes of changes the schedule's log may hold
// beyond twice its live entries before a change rewrites it; a variable so
// that tests can have it compact at every chance.
var retryCompactSlack int64 = 32 << 10

// Retry is one entry of the retry schedule.
type Retry struct {
	ID      uint64
	Offset  int64 // the message's frame in segment.log
	Attempt int   // the attempt that is due
	Due     time.Time
	// Message is the message the retry delivers, carried in the schedule
	// (its ID and Offset are the retry's), so that segment.log may be
	// emptied while the retry waits; nil for a retry that reads its
	// message at Offset in segment.log (set by an older version, or by
	// SaveRetries without it). SaveRetries writes it whole. Retries sets
	// it without its Payload (nil): a pending retry's payload stays in
	// segment.log.retry, read back when the retry is due, and is held in
	// no one's memory meanwhile.
	Message *Message
}

// size is the length of the frame that sets r.
func (r *Retry) size() int64 {
	if r.Message == nil {
		return retrySetFrame
	}
	m := r.Message
	return int64(headerSize + retrySetRecord + 8 + 1 + len(m.Source) + 2 + len(m.CorrelationID) + len(m.Payload))
}

// Retries returns the pending retry schedule, in the order its entries were
// last set. Any process may read it while the worker appends: a torn tail
// is a change being written or one a crash cut short, never acted upon,
// and is left out. A schedule that does not verify otherwise is an error
// (the queue's worker drops the retry it set, reporting it, as it starts).
func (q *Queue) Retries() ([]Retry, error) {
	rs, err := q.readRetries()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// the file shrank under the read: a starting worker cut its torn
		// tail (the one change made to a schedule in place); read again
		rs, err = q.readRetries()
	}
	return rs, err
}

// readRetries is one read of the retry schedule for Retries.
func (q *Queue) readRetries() ([]Retry, error) {
	f, size, err := q.openToRead(retryFile)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	s := newRetrySchedule(q.fs, q.path(retryFile))
	s.heads = true
	if _, _, _, err := s.load(f, size); err != nil {
		return nil, fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
	}
	return s.list(), nil
}

// SaveRetries replaces the retry schedule whole (WriteAtomic), as a
// compacted log: a Retry with its Message carries it (kind 6), one
// without reads its message at Offset (kind 4). The worker changes it one
// record at a time instead; this is for a queue no worker delivers.
func (q *Queue) SaveRetries(rs []Retry) error {
	return WriteAtomic(q.fs, q.path(retryFile), encodeRetryLog(rs))
}

// openRetrySchedule reads the retry schedule for the queue's worker, as it
// starts (it holds worker.lock: no other process writes the file). A torn
// tail is cut (and synced) and returned as damage. Damage of any other kind
// (a frame that does not verify, in the middle or a whole last one, or a
// tail where no frame verifies) is returned too: the change it held is
// lost, a retry that no verified change sets is in the schedule's lost
// (takeLost) for the caller to report as dropped, and the file is
// rewritten with the entries that verified (WriteAtomic); a rewrite that
// fails is an error that names the damage. A schedule in the format of
// older versions (one record, magic "NXR1", rewritten whole at each
// change) is carried over: rewritten in the log format with WriteAtomic,
// so that a crash at any point leaves the old file or the new one,
// holding the same entries.
func (q *Queue) openRetrySchedule() (*retrySchedule, []Damage, error) {
	path := q.path(retryFile)
	_, err := q.fs.Stat(path)
	created := errors.Is(err, fs.ErrNotExist)
	if err != nil && !created {
		return nil, nil, err
	}
	f, err := q.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", retryFile, err)
	}
	defer f.Close()
	s := newRetrySchedule(q.fs, path)
	s.salvage = true
	fail := func(err error) (*retrySchedule, []Damage, error) { return nil, nil, err }
	if created {
		// its entry must survive a power cut, or the changes appended to
		// it would go with it
		if err := q.fs.SyncDir(q.dir); err != nil {
			return fail(fmt.Errorf("syncing the folder of %s: %w", retryFile, err))
		}
	}
	size, err := fileSize(f)
	if err != nil {
		return fail(err)
	}
	legacy, end, damage, err := s.load(f, size)
	if err != nil {
		return fail(fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err))
	}
	s.end = end
	switch {
	case legacy:
		if err := s.compact(); err != nil {
			return fail(fmt.Errorf("carrying %s over to the log format: %w", retryFile, err))
		}
	case slices.ContainsFunc(damage, func(d Damage) bool { return !d.Torn }):
		// damage the caller reports: the file is rewritten with the
		// entries that verified, so that it is reported once and every
		// reader reads the file again
		if err := s.compact(); err != nil {
			// the damage is said here, or not at all: the caller reports
			// what this returns
			var found []string
			for _, d := range damage {
				if !d.Torn {
					found = append(found, d.String())
				}
			}
			return fail(fmt.Errorf("rewriting %s without the damage found (%s): %w", retryFile, strings.Join(found, "; "), err))
		}
	case end < size:
		if err := f.Truncate(end); err != nil {
			return fail(fmt.Errorf("truncating %s: %w", retryFile, err))
		}
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("syncing %s: %w", retryFile, err))
		}
	}
	return s, damage, nil
}

// retrySchedule is the retry schedule in memory: the entries by message
// id, and a heap of them by due time (the earliest first; among equal
// times, the one set first), and for the worker where its next change
// goes in the file. The file is opened for each change, not held: a queue
// with a worker keeps FilesPerQueue-1 files open (see FilesPerQueue).
type retrySchedule struct {
	fs   FS
	path string
	end  int64 // where the next change goes: the end of the last good frame
	// rewrite is set after a write that failed (its bytes may be in the
	// file, or not; a rename may not be durable): the next change
	// rewrites the file whole rather than appending to it
	rewrite bool
	byID    map[uint64]*retryItem
	due     retryHeap
	seq     uint64 // the order of the sets
	live    int64  // the size of the frames that set the entries
	// uncarried counts the entries that read their message in
	// segment.log (kind 4): the log is emptied only when there are none
	uncarried int
	// heads has load keep a carried message's fields but its payload in
	// the entry's Message (Retries); the worker's schedule keeps where its
	// frame is only
	heads bool
	// salvage has load pass damage that is not a torn tail (the worker's
	// schedule, as it starts): the change a damaged frame held is lost,
	// and a retry no verified change sets goes to lost
	salvage bool
	// lost is the retries a compaction left out, their frame damaged, or
	// load found set by a damaged frame only, for the worker to report
	// and count as dropped (takeLost)
	lost []lostRetry
}

// lostRetry is a retry whose carried message did not verify in the file
// (or, found by load, whose change did not: its ID only is known).
type lostRetry struct {
	Retry
	Damage
}

// retryItem is an entry of the schedule. A retry that carries its message
// holds where the frame that sets it is in the file (at, n bytes), not the
// message (Retry.Message is nil, or, for Retries, without its payload):
// the worker reads the frame back when the retry is due. frame is the
// frame of a set not yet written to the file (a write that failed), until
// a change writes it.
type retryItem struct {
	Retry
	seq   uint64
	index int // in the heap
	at, n int64
	frame []byte
}

// carries reports whether the entry carries its message (kind 6).
func (it *retryItem) carries() bool { return it.n > 0 || it.frame != nil }

// frameLen is the length of the frame that sets the entry.
func (it *retryItem) frameLen() int64 {
	switch {
	case it.frame != nil:
		return int64(len(it.frame))
	case it.n > 0:
		return it.n
	}
	return retrySetFrame
}

func newRetrySchedule(fsys FS, path string) *retrySchedule {
	return &retrySchedule{fs: fsys, path: path, byID: map[uint64]*retryItem{}}
}

// Len is how many retries are pending.
func (s *retrySchedule) Len() int { return len(s.byID) }

// first is the retry due first.
func (s *retrySchedule) first() (Retry, bool) {
	if len(s.due) == 0 {
		return Retry{}, false
	}
	return s.due[0].Retry, true
}

// has reports whether the message of id at offset waits in the schedule
// (an offset can hold another message after recovery cut a torn tail the
// schedule pointed into).
func (s *retrySchedule) has(id uint64, offset int64) bool {
	it, ok := s.byID[id]
	return ok && it.Offset == offset
}

// list is the entries in the order they were set; nil when there are none.
func (s *retrySchedule) list() []Retry {
	if len(s.byID) == 0 {
		return nil
	}
	items := slices.Clone(s.due)
	slices.SortFunc(items, func(a, b *retryItem) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Retry, len(items))
	for i, it := range items {
		out[i] = it.Retry
	}
	return out
}

// put sets r in memory: the entry of its message is replaced. A retry
// that carries its message has its frame at at (n bytes) in the file, or,
// not written yet, in frame.
func (s *retrySchedule) put(r Retry, at, n int64, frame []byte) *retryItem {
	s.seq++
	if it, ok := s.byID[r.ID]; ok {
		s.count(it, -1)
		it.Retry, it.seq, it.at, it.n, it.frame = r, s.seq, at, n, frame
		s.count(it, 1)
		heap.Fix(&s.due, it.index)
		return it
	}
	it := &retryItem{Retry: r, seq: s.seq, at: at, n: n, frame: frame}
	s.count(it, 1)
	s.byID[r.ID] = it
	heap.Push(&s.due, it)
	return it
}

// remove clears the entry of message id in memory.
func (s *retrySchedule) remove(id uint64) {
	if it, ok := s.byID[id]; ok {
		s.count(it, -1)
		heap.Remove(&s.due, it.index)
		delete(s.byID, id)
	}
}

// count adds (by 1) or takes away (by -1) it's share of live and uncarried.
func (s *retrySchedule) count(it *retryItem, by int) {
	s.live += int64(by) * it.frameLen()
	if !it.carries() {
		s.uncarried += by
	}
}

// carried reports whether every pending retry carries its message: none
// reads segment.log.
func (s *retrySchedule) carried() bool { return s.uncarried == 0 }

// heldPayload is how many payload bytes the schedule holds in memory: a
// frame not written yet counts whole.
func (s *retrySchedule) heldPayload() int {
	n := 0
	for _, it := range s.byID {
		n += len(it.frame)
		if it.Message != nil {
			n += len(it.Message.Payload)
		}
	}
	return n
}

// takeLost returns the retries compactions left out since it was last
// called, their frame damaged (see compact).
func (s *retrySchedule) takeLost() []lostRetry {
	lost := s.lost
	s.lost = nil
	return lost
}

// message reads back the message a due retry carries: the frame that
// sets it, verified as a reader verifies a frame, and decoded. It reports
// false for a retry that reads its message in segment.log (kind 4). A
// frame that does not verify, or holds another record, is damage: the
// retry's message is lost. An error is a file that could not be read.
func (s *retrySchedule) message(r Retry) (m Message, carried bool, damage *Damage, err error) {
	it, ok := s.byID[r.ID]
	if !ok || !it.carries() {
		return Message{}, false, nil, nil
	}
	rec := []byte(nil)
	reason := ""
	if it.frame != nil {
		rec = it.frame[headerSize:]
	} else {
		f, err := s.fs.OpenFile(s.path, os.O_RDONLY, 0)
		if err != nil {
			return Message{}, true, nil, fmt.Errorf("opening %s: %w", retryFile, err)
		}
		var n int64
		rec, n, reason, err = frameAt(f, it.at, it.at+it.n)
		f.Close()
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			reason = "the file ends before it"
		case err != nil:
			return Message{}, true, nil, fmt.Errorf("reading %s: %w", retryFile, err)
		case reason == "" && n != it.n:
			reason = fmt.Sprintf("a frame of %d bytes, where one of %d was written", n, it.n)
		}
	}
	if reason == "" && (len(rec) < retryCopyMin || rec[0] != kindRetryCopy || binary.BigEndian.Uint64(rec[1:9]) != r.ID) {
		reason = "another record than the retry's"
	}
	if reason == "" {
		m = Message{ID: r.ID, Offset: r.Offset}
		if decodeMessageFields(rec[retrySetRecord:], &m) != nil {
			reason = "a message that does not read"
		}
	}
	if reason != "" {
		return Message{}, true, &Damage{File: retryFile, Offset: it.at, Length: it.n, ID: r.ID, Reason: reason}, nil
	}
	return m, true, nil, nil
}

// liveBytes is the size of the log that holds the live entries only.
func (s *retrySchedule) liveBytes() int64 { return s.live }

// set schedules r, durably: the entry of its message is replaced. It may
// be called again with the same r after it failed.
//
// A retry that carries its message (r.Message) is held as where its frame
// is in the file once it is written: the message is not kept.
func (s *retrySchedule) set(r Retry) error {
	if r.Message != nil {
		frame := appendRetryFrame(make([]byte, 0, r.size()), r)
		r.Message = nil
		return s.append(frame, s.put(r, 0, 0, frame))
	}
	s.put(r, 0, 0, nil)
	var buf [headerSize + retrySetRecord]byte
	return s.append(appendRetryFrame(buf[:0], r), nil)
}

// clear takes message id's entry out of the schedule, durably. It may be
// called again after it failed.
func (s *retrySchedule) clear(id uint64) error {
	s.remove(id)
	var buf [headerSize + retryClearRecord]byte
	b, at := openFrame(buf[:0])
	return s.append(closeFrame(appendRetryClear(b, id), at), nil)
}

// drop takes message id's entry out of the schedule, its frame damaged,
// durably: the log is rewritten without it (compact), so that the damage
// goes with it and every reader reads the file again at once (a clear
// appended after it left the frame there until the next compaction, and
// Retries an error until then). It may be called again after it failed.
func (s *retrySchedule) drop(id uint64) error {
	s.remove(id)
	return s.compact()
}

// append writes a change's frame at the end of the log and syncs it; the
// change is in memory already. After a write that failed, the log is
// rewritten whole instead, with the change. A log grown past twice its
// live entries plus retryCompactSlack is compacted; a compaction that
// fails leaves the change durable, and has the next change rewrite the
// log. it is the entry a set carrying its message sets: where the frame
// went is recorded in it.
func (s *retrySchedule) append(frame []byte, it *retryItem) error {
	if s.rewrite {
		return s.compact()
	}
	f, err := s.fs.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		s.rewrite = true
		return fmt.Errorf("opening %s: %w", retryFile, err)
	}
	_, err = f.WriteAt(frame, s.end)
	if err != nil {
		err = fmt.Errorf("writing %s: %w", retryFile, err)
	} else if err = f.Sync(); err != nil {
		err = fmt.Errorf("syncing %s: %w", retryFile, err)
	}
	f.Close()
	if err != nil {
		s.rewrite = true
		return err
	}
	if it != nil {
		it.at, it.n, it.frame = s.end, int64(len(frame)), nil
	}
	s.end += int64(len(frame))
	if s.end > 2*s.liveBytes()+retryCompactSlack {
		s.compact() // on failure, s.rewrite is set
	}
	return nil
}

// tidy compacts the log at an idle moment when the changes it holds past
// the live entries are at least as large as they are (so that the bytes a
// compaction writes are paid for by those written since the last one), or
// after a write that failed.
func (s *retrySchedule) tidy() error {
	live := s.liveBytes()
	if !s.rewrite && (s.end == live || s.end-live < live) {
		return nil
	}
	return s.compact()
}

// compact rewrites the log with the live entries only, through
// WriteAtomic's steps (writeTemp, then the rename and the folder's sync).
// A retry that carries its message has its frame copied from the old file
// (read back and verified: one that does not verify is left out, and the
// retry goes to lost), one frame at a time, so that no more than one
// message is in memory; once the new file is renamed into place, each
// entry is recorded where its frame went. On failure the next change
// rewrites it again: the rename may have happened without being durable,
// and a change appended to the new file could then go with it.
func (s *retrySchedule) compact() error {
	s.rewrite = true
	items := slices.Clone(s.due)
	slices.SortFunc(items, func(a, b *retryItem) int { return cmp.Compare(a.seq, b.seq) })
	at := make([]int64, len(items)) // where each frame goes; -1: left out
	var lost []Damage
	var end int64
	tmp, err := writeTemp(s.fs, s.path, func(f File) error {
		var old File
		defer func() {
			if old != nil {
				old.Close()
			}
		}()
		var buf []byte
		for i, it := range items {
			frame := it.frame
			switch {
			case frame != nil:
			case it.n > 0:
				if old == nil {
					var err error
					if old, err = s.fs.OpenFile(s.path, os.O_RDONLY, 0); err != nil {
						return err
					}
				}
				rec, n, reason, err := frameAtBuf(old, it.at, it.at+it.n, buf)
				if cap(rec) > cap(buf) {
					buf = rec[:0]
				}
				switch {
				case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
					reason = "the file ends before it"
				case err != nil:
					return err
				case reason == "" && n != it.n:
					reason = fmt.Sprintf("a frame of %d bytes, where one of %d was written", n, it.n)
				case reason == "" && (len(rec) < retryCopyMin || rec[0] != kindRetryCopy || binary.BigEndian.Uint64(rec[1:9]) != it.ID):
					reason = "another record than the retry's"
				}
				if reason != "" {
					at[i] = -1
					lost = append(lost, Damage{File: retryFile, Offset: it.at, Length: it.n, ID: it.ID, Reason: reason})
					continue
				}
				// the header as it was read, verified: written back whole
				var h [headerSize]byte
				if _, err := old.ReadAt(h[:], it.at); err != nil {
					return err
				}
				if _, err := f.WriteAt(h[:], end); err != nil {
					return err
				}
				if _, err := f.WriteAt(rec, end+headerSize); err != nil {
					return err
				}
				at[i], end = end, end+n
				continue
			default:
				var b [retrySetFrame]byte
				frame = appendRetryFrame(b[:0], it.Retry)
			}
			if _, err := f.WriteAt(frame, end); err != nil {
				return err
			}
			at[i], end = end, end+int64(len(frame))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, s.path); err != nil {
		s.fs.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", s.path, err)
	}
	// the new file is the one at the path: its entries are where they went
	s.end = end
	j := 0
	for i, it := range items {
		if at[i] < 0 {
			s.remove(it.ID)
			s.lost = append(s.lost, lostRetry{Retry: it.Retry, Damage: lost[j]})
			j++
			continue
		}
		if it.carries() {
			s.count(it, -1)
			it.n, it.frame = it.frameLen(), nil
			it.at = at[i]
			s.count(it, 1)
		}
	}
	if err := s.fs.SyncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("syncing the folder of %s: %w", s.path, err)
	}
	s.rewrite = false
	return nil
}

// load reads a schedule file of size bytes into s: a log, whose changes
// are applied in order, or a schedule of the old format (legacy). It
// returns the end of the log's last good frame and the damage found. A
// torn tail (see scan) ends the log: the change it held was never acted
// upon (the worker waits for the fdatasync of each). Any other damage, in
// the middle or a whole last frame damaged after it was written, is an
// error, as a damaged schedule of the old format was: the change it held
// may be a retry whose message the checkpoint has passed, and skipping it
// would lose that message without a word. The worker's schedule
// (salvage) passes it instead: the damaged change is lost, and a retry no
// verified change sets after it goes to lost, for the worker to report.
func (s *retrySchedule) load(r io.ReaderAt, size int64) (legacy bool, end int64, damage []Damage, err error) {
	var head [4]byte
	if size >= 4 {
		if _, err := r.ReadAt(head[:], 0); err != nil {
			return false, 0, nil, err
		}
	}
	if head == retMagic {
		b := make([]byte, size)
		if _, err := r.ReadAt(b, 0); err != nil {
			return false, 0, nil, err
		}
		rs, err := decodeLegacyRetries(b)
		if err != nil {
			return false, 0, nil, err
		}
		for _, rt := range rs {
			s.put(rt, 0, 0, nil)
		}
		return true, size, nil, nil
	}
	// the ids of the damaged changes that no verified change after them
	// set or cleared: their retries are lost (salvage)
	unsure := map[uint64]Damage{}
	touch := func(id uint64) { delete(unsure, id) }
	// each record's CRC is checked through a small buffer: what is decoded
	// is in its first bytes (rec), even for a retry carrying 64 MiB
	end, err = scanHeads(r, retryFile, 0, size, func(rec []byte, length, off int64) error {
		if len(rec) >= 9 {
			touch(binary.BigEndian.Uint64(rec[1:9]))
		}
		switch {
		case length == 0:
			return fmt.Errorf("%s holds a record this version does not know at offset %d (an empty one)", retryFile, off)
		case length == retrySetRecord && rec[0] == kindRetrySet:
			s.put(Retry{
				ID:      binary.BigEndian.Uint64(rec[1:9]),
				Offset:  int64(binary.BigEndian.Uint64(rec[9:17])),
				Attempt: int(binary.BigEndian.Uint32(rec[17:21])),
				Due:     time.Unix(0, int64(binary.BigEndian.Uint64(rec[21:29]))).UTC(),
			}, 0, 0, nil)
		case length >= retryCopyMin && rec[0] == kindRetryCopy:
			r := Retry{
				ID:      binary.BigEndian.Uint64(rec[1:9]),
				Offset:  int64(binary.BigEndian.Uint64(rec[9:17])),
				Attempt: int(binary.BigEndian.Uint32(rec[17:21])),
				Due:     time.Unix(0, int64(binary.BigEndian.Uint64(rec[21:29]))).UTC(),
			}
			// the message's fields are checked; its payload is not kept
			m := Message{ID: r.ID, Offset: r.Offset}
			if _, err := decodeMessageHead(rec[retrySetRecord:], &m); err != nil {
				return fmt.Errorf("%s holds a retry whose message does not read at offset %d (id=%d)", retryFile, off, r.ID)
			}
			if s.heads {
				r.Message = &m
			}
			s.put(r, off, headerSize+length, nil)
		case length == retryClearRecord && rec[0] == kindRetryClear:
			s.remove(binary.BigEndian.Uint64(rec[1:9]))
		default:
			return fmt.Errorf("%s holds a record this version does not know at offset %d (kind %d, %d bytes)", retryFile, off, rec[0], length)
		}
		return nil
	}, func(d Damage) {
		damage = append(damage, d)
		if !d.Torn && d.ID != 0 {
			unsure[d.ID] = d
		}
	})
	if err != nil {
		return false, end, damage, err
	}
	if s.salvage {
		// the changes the damage held are lost: a retry that no verified
		// change sets is dropped (the worker reports it), the others stand
		for _, d := range damage {
			if u, ok := unsure[d.ID]; ok && !d.Torn && u.Offset == d.Offset {
				if _, set := s.byID[d.ID]; !set {
					s.lost = append(s.lost, lostRetry{Retry: Retry{ID: d.ID}, Damage: d})
				}
			}
		}
		return false, end, damage, nil
	}
	for _, d := range damage {
		if !d.Torn {
			return false, end, damage, fmt.Errorf("%s does not verify: a damaged frame at offset %d (%d bytes%s): %s; the retry it set is dropped, and reported, by the queue's worker (as it starts, or when the retry is due)",
				retryFile, d.Offset, d.Length, d.idText(), d.Reason)
		}
	}
	return false, end, damage, nil
}

// appendRetryFrame appends the frame that sets r: with its message when
// it carries it (kind 6), else its offset only (kind 4).
func appendRetryFrame(dst []byte, r Retry) []byte {
	dst, at := openFrame(dst)
	if r.Message != nil {
		return closeFrame(appendRetryCopy(dst, r), at)
	}
	return closeFrame(appendRetrySet(dst, r), at)
}

// appendRetryCopy appends the record of a retry that carries its message:
// the fields of a retry set, kind 6, then those of the message's record
// after its id, as segment.log holds them.
func appendRetryCopy(dst []byte, r Retry) []byte {
	m := r.Message
	dst = appendRetrySet(dst, r)
	dst[len(dst)-retrySetRecord] = kindRetryCopy
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.EnqueuedAt.UnixNano()))
	dst = append(dst, byte(len(m.Source)))
	dst = append(dst, m.Source...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.CorrelationID)))
	dst = append(dst, m.CorrelationID...)
	return append(dst, m.Payload...)
}

func appendRetrySet(dst []byte, r Retry) []byte {
	dst = append(dst, kindRetrySet)
	dst = binary.BigEndian.AppendUint64(dst, r.ID)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.Attempt))
	return binary.BigEndian.AppendUint64(dst, uint64(r.Due.UnixNano()))
}

func appendRetryClear(dst []byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, kindRetryClear), id)
}

// encodeRetryLog is the log that sets rs, in order.
func encodeRetryLog(rs []Retry) []byte {
	var n int64
	for i := range rs {
		n += rs[i].size()
	}
	b := make([]byte, 0, n)
	for _, r := range rs {
		b = appendRetryFrame(b, r)
	}
	return b
}

// decodeLegacyRetries reads a schedule of the format older versions wrote:
// magic "NXR1", a count n (4 bytes), n entries of id (8), offset (8),
// attempt (4) and due time (8, Unix nanoseconds), then the CRC-32C of
// everything before it (4 bytes).
func decodeLegacyRetries(b []byte) ([]Retry, error) {
	bad := fmt.Errorf("%s (the format of older versions) does not verify", retryFile)
	if len(b) < 12 || [4]byte(b[:4]) != retMagic || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, bad
	}
	n := int(binary.BigEndian.Uint32(b[4:8]))
	body := b[8 : len(b)-4]
	if len(body) != n*28 {
		return nil, bad
	}
	out := make([]Retry, n)
	for i := range out {
		e := body[i*28:]
		out[i] = Retry{
			ID:      binary.BigEndian.Uint64(e[0:8]),
			Offset:  int64(binary.BigEndian.Uint64(e[8:16])),
			Attempt: int(binary.BigEndian.Uint32(e[16:20])),
			Due:     time.Unix(0, int64(binary.BigEndian.Uint64(e[20:28]))).UTC(),
		}
	}
	return out, nil
}

// retryHeap orders the schedule's entries by due time, then by the order
// they were set (container/heap).
type retryHeap []*retryItem

func (h retryHeap) Len() int { return len(h) }
func (h retryHeap) Less(i, j int) bool {
	if c := h[i].Due.Compare(h[j].Due); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h retryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *retryHeap) Push(x any) {
	it := x.(*retryItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *retryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
