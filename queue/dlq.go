package queue

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/nexushq/nexus/naming"
)

// ErrNotPending is returned when an id is not a pending dead letter.
var ErrNotPending = errors.New("no pending dead letter")

// NotPendingError names a dead letter that is not pending, in the words
// nexus dlq and the management API both use; it is ErrNotPending.
type NotPendingError struct {
	Tenant, Flow string
	ID           uint64
}

func (e *NotPendingError) Error() string {
	return fmt.Sprintf("no pending dead letter id=%d tenant=%s flow=%s", e.ID, e.Tenant, e.Flow)
}

// Is makes errors.Is(err, ErrNotPending) true.
func (e *NotPendingError) Is(target error) bool { return target == ErrNotPending }

// MaxLastError is the longest last error a dead letter keeps, in bytes;
// a longer one is cut (at a character) and ends with "…".
const MaxLastError = 4096

// MoveToDLQ appends a dead letter to dlq.log and makes it durable. Its
// last error is cut to MaxLastError, and to what the frame leaves beside
// the payload, so that the record is always one a reader takes.
func (q *Queue) MoveToDLQ(d DeadLetter) error {
	if err := q.tooLargeForDLQ(d); err != nil {
		return err
	}
	d.LastError = cutText(d.LastError, min(MaxLastError, MaxRecord-deadLetterFields-len(d.Payload)))
	unlock, err := q.lockAppendBounded()
	if err != nil {
		return err
	}
	defer unlock()
	return q.appendDurable(dlqFile, appendFrame(nil, appendDeadLetterRecord(nil, &d)))
}

// tooLargeForDLQ is ErrTooLarge, said, when no frame can hold d as a dead
// letter: only a message an older nexus took (over MaxPayload) can be.
func (q *Queue) tooLargeForDLQ(d DeadLetter) error {
	if deadLetterFields+len(d.Payload) > MaxRecord {
		return fmt.Errorf("queue %s/%s: dead letter %d: %w (its payload of %d bytes leaves no room in a frame)", q.Tenant, q.Flow, d.ID, ErrTooLarge, len(d.Payload))
	}
	return nil
}

// cutText cuts s to at most n bytes, at a character boundary, ending it
// with "…" when it was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	mark := ellipsis
	if n < len(ellipsis) {
		mark = "" // no room for the mark: never more than n bytes
	}
	n = max(n-len(mark), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// fileTail is a file as appendDurable left it: its inode, size and
// modification time, which another process's write or a rewrite changes.
type fileTail struct {
	ino, size, mtime int64
}

// tailOf is f's fileTail; false when the FS does not tell its inode.
func tailOf(f File) (fileTail, bool) {
	info, err := f.Stat()
	if err != nil {
		return fileTail{}, false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Ino == 0 {
		return fileTail{}, false
	}
	return fileTail{ino: int64(st.Ino), size: info.Size(), mtime: info.ModTime().UnixNano()}, true
}

// appendDurable appends frames to a file of the queue and syncs it. The
// caller holds the append lock.
func (q *Queue) appendDurable(name string, frames []byte) error {
	f, err := q.fs.OpenFile(q.path(name), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, err)
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return err
	}
	var end int64
	if t, ok := tailOf(f); ok && t == q.tails[name] {
		// as this handle's last append left it, ending with a whole
		// frame: read again, every dead letter of an outage would read
		// all those before it, holding the lock the doors append under
		end = size
	} else {
		// a torn tail left by a crash is cut first, so that new frames
		// follow the last good one; a damaged last frame is kept, after
		// which they follow (it is reported, and left out when dlq.log is
		// rewritten); each frame's CRC is checked through a small buffer
		// (scanHeads): a dead letter of 64 MiB is read, not held
		var damage []Damage
		if end, err = scanHeads(f, name, 0, size, func([]byte, int64, int64) error { return nil }, func(d Damage) { damage = append(damage, d) }); err != nil {
			return err
		}
		end = nextAppend(end, size, damage)
	}
	delete(q.tails, name) // until this append is durable
	if _, err := f.WriteAt(frames, end); err != nil {
		f.Truncate(end)
		return fmt.Errorf("queue %s/%s: writing %s: %w", q.Tenant, q.Flow, name, err)
	}
	if err := f.Truncate(end + int64(len(frames))); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		// frames that are not durable must not count: cut them (best
		// effort), so that the record reads as it was, as after a failed
		// write
		f.Truncate(end)
		return fmt.Errorf("queue %s/%s: syncing %s: %w", q.Tenant, q.Flow, name, err)
	}
	if end == 0 {
		// possibly a new file (or one a process that died left with only
		// a torn frame, before its folder was synced): its folder entry
		// must be durable too
		if err := q.fs.SyncDir(q.dir); err != nil {
			// cut the frames too (best effort): the file left empty, the
			// next append syncs the folder again instead of taking a file
			// a power cut may lose for durable
			f.Truncate(end)
			return fmt.Errorf("queue %s/%s: syncing the folder: %w", q.Tenant, q.Flow, err)
		}
	}
	if t, ok := tailOf(f); ok {
		if q.tails == nil {
			q.tails = map[string]fileTail{}
		}
		q.tails[name] = t
	}
	return nil
}

// eachRecord calls fn with each verified record of a file of the queue, in
// file order, one in memory at a time (rec is fn's until it returns, as
// scanEach's), and returns the damage found. A missing file has none.
func (q *Queue) eachRecord(name string, fn func(rec []byte) error) ([]Damage, error) {
	var damage []Damage
	err := q.eachRecordDamage(name, fn, func(d Damage) { damage = append(damage, d) })
	return damage, err
}

// eachRecordDamage is eachRecord, calling damaged with each damage found
// instead of returning them.
func (q *Queue) eachRecordDamage(name string, fn func(rec []byte) error, damaged func(Damage)) error {
	f, size, err := q.openToRead(name)
	if f == nil || err != nil {
		return err
	}
	defer f.Close()
	_, err = scanEach(f, name, 0, size, func(rec []byte, _ int64) error { return fn(rec) }, damaged)
	return err
}

// eachHeadDamage is eachRecordDamage for a reader that needs each
// record's first bytes only: fn gets the first recordHead bytes of each
// verified record (head, fn's until it returns) and its length, each
// frame's CRC checked through a small buffer (scanHeads), so a frame of
// 64 MiB is read, not held.
func (q *Queue) eachHeadDamage(name string, fn func(head []byte, length int64) error, damaged func(Damage)) error {
	f, size, err := q.openToRead(name)
	if f == nil || err != nil {
		return err
	}
	defer f.Close()
	_, err = scanHeads(f, name, 0, size, func(head []byte, length, _ int64) error { return fn(head, length) }, damaged)
	return err
}

// openToRead opens a file of the queue for reading, with its size; a
// missing file is a nil File and no error.
func (q *Queue) openToRead(name string) (File, int64, error) {
	f, info, err := q.openToReadInfo(name)
	if f == nil || err != nil {
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// openToReadInfo is openToRead with the open file's description (its
// size, and its identity for sameFile).
func (q *Queue) openToReadInfo(name string) (File, fs.FileInfo, error) {
	f, err := q.fs.OpenFile(q.path(name), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// marks returns the ids marked in dlq.log.acked, and the damage found in
// it. A damaged mark is not applied (its id may be the damaged part): the
// dead letter it marked reads as pending again, and the damage says so.
func (q *Queue) marks() (map[uint64]mark, []Damage, error) {
	var damage []Damage
	out, err := q.marksDamage(func(d Damage) { damage = append(damage, d) })
	return out, damage, err
}

// marksDamage is marks, calling damaged with each damage found in
// dlq.log.acked instead of returning them.
func (q *Queue) marksDamage(damaged func(Damage)) (map[uint64]mark, error) {
	out := map[uint64]mark{}
	// a mark is a few bytes: a frame larger than a head is none, and is
	// checked, not held
	if err := q.eachHeadDamage(ackedFile, func(head []byte, length int64) error {
		if length != int64(len(head)) {
			return nil
		}
		if m, err := decodeMark(head); err == nil {
			out[m.id] = m
		}
		return nil
	}, damaged); err != nil {
		return nil, err
	}
	return out, nil
}

// errStop ends a scan early; it is never returned.
var errStop = errors.New("stop")

// eachPendingHeads calls fn with each verified dead-letter record of
// dlq.log whose entry is pending (not marked), the first of each id, in
// file order. Each frame's CRC is checked through a small buffer
// (scanHeads), and fn gets the record's first recordHead bytes (head,
// fn's until it returns), its length, its offset in dlq.log and the file,
// to read more of it (deadLetterHead, deadLetterAt, pageEntry): a dlq.log
// of dead letters of 64 MiB is read holding some 100 KiB, not one of
// them, and a reader holds the payloads it reads, not those it passes
// over. fn may return errStop to end the scan. damaged is called with
// each damage found: dlq.log.acked's, then dlq.log's, among which a
// pending record that is no dead letter whole to its payload
// (undecodableDamage), before fn is called with it: it is pending all
// the same, counted and marked as the others are.
//
// A message can be dead-lettered twice. The worker saves its checkpoint
// every CheckpointEvery messages and its retry schedule after each
// attempt, so a process killed after MoveToDLQ but before either delivers
// the message again at the next start, and if it fails again it is
// appended to dlq.log again, with the same id. A dead letter keeps its
// message's id, which is unique in its queue: readers take the first
// entry of an id and pass over the others, a mark applies to all of them,
// and CompactDLQ keeps the first only.
func (q *Queue) eachPendingHeads(fn func(head []byte, length, off int64, f io.ReaderAt) error, damaged func(Damage)) error {
	_, err := q.eachPendingScan(fn, damaged)
	return err
}

// eachPendingScan is eachPendingHeads, returning the description of the
// dlq.log it read (nil when there is none).
func (q *Queue) eachPendingScan(fn func(head []byte, length, off int64, f io.ReaderAt) error, damaged func(Damage)) (fs.FileInfo, error) {
	// the marks first: a rewrite between the two reads then leaves marks
	// of entries gone, not entries unmarked. Their damage is reported only
	// beside a dlq.log (a marks file without one marks no dead letter
	// there is), so counted here and read again, one at a time, when there
	// is one: damage is rare, and a file damaged wholesale is not held
	markDamage := 0
	marked, err := q.marksDamage(func(Damage) { markDamage++ })
	if err != nil {
		return nil, err
	}
	f, info, err := q.openToReadInfo(dlqFile)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	if markDamage > 0 {
		if err := q.eachHeadDamage(ackedFile, func([]byte, int64) error { return nil }, damaged); err != nil {
			return nil, err
		}
	}
	seen := map[uint64]struct{}{}
	pending := func(rec []byte, length, off int64) error {
		// rec holds the first 33 bytes at least when length does
		if length < deadLetterFields || rec[0] != kindDeadLetter {
			return nil
		}
		id := binary.BigEndian.Uint64(rec[1:9])
		if _, done := marked[id]; done {
			return nil
		}
		if _, again := seen[id]; again {
			return nil // dead-lettered again after a crash: see above
		}
		seen[id] = struct{}{}
		if !deadLetterWhole(rec, length) {
			// its frame verifies, so it is pending (counted, and marked
			// by a discard of all), but no reader can list it: reported
			// as a damaged frame is, in file order
			damaged(undecodableDamage(rec, length, off))
		}
		return fn(rec, length, off, f)
	}
	_, err = scanHeads(f, dlqFile, 0, info.Size(), pending, damaged)
	if errors.Is(err, errStop) {
		err = nil
	}
	return info, err
}

// undecodableDamage is the damage a reader of dlq.log reports for the
// verified dead-letter record at off, of length bytes, whose first bytes
// are head, when it is no dead letter whole to its payload
// (deadLetterWhole false): its last error is said to run past its end.
// The frame verifies, so the id is the one written; a reader counts it
// pending and cannot list it.
func undecodableDamage(head []byte, length, off int64) Damage {
	return Damage{File: dlqFile, Offset: off, Length: headerSize + length, ID: binary.BigEndian.Uint64(head[1:9]),
		Reason: "record cannot be decoded: " + undecodableWhy(head, length)}
}

// undecodableWhy says what is wrong with a verified dead-letter record
// that is no dead letter whole to its payload (deadLetterWhole false).
func undecodableWhy(head []byte, length int64) string {
	return fmt.Sprintf("its last error of %d bytes runs past the end of the record (%d bytes)", binary.BigEndian.Uint32(head[29:33]), length)
}

// deadLetterHead is the verified dead-letter record at off in dlq.log (f),
// of length bytes, whose first bytes are head, up to its payload: within
// head when head holds it, else read from f (a last error longer than
// head leaves room for, which a version before MaxLastError could write).
// It is nil when the record is no dead letter whole to its payload.
func deadLetterHead(head []byte, length, off int64, f io.ReaderAt) ([]byte, error) {
	if len(head) < deadLetterFields || head[0] != kindDeadLetter {
		return nil, nil
	}
	at := deadLetterFields + int64(binary.BigEndian.Uint32(head[29:33]))
	switch {
	case at > length:
		return nil, nil
	case at <= int64(len(head)):
		return head[:at], nil
	}
	rec := make([]byte, at)
	if k, err := f.ReadAt(rec, off+headerSize); err != nil && (k < len(rec) || !errors.Is(err, io.EOF)) {
		return nil, err
	}
	return rec, nil
}

// deadLetterWhole reports whether the verified record of length bytes
// whose first bytes are head is a dead letter whole to its payload (its
// last error within it), as deadLetterPayload does of a whole record.
func deadLetterWhole(head []byte, length int64) bool {
	return len(head) >= deadLetterFields && head[0] == kindDeadLetter &&
		deadLetterFields+int64(binary.BigEndian.Uint32(head[29:33])) <= length
}

// deadLetterAt decodes the verified dead-letter record at off in dlq.log
// (f), of length bytes, whose first bytes are head, with its whole
// payload (none unless withPayload): its fields from head
// (deadLetterHead), its payload read from f straight into the slice
// returned, so that the record is not held twice and no other is held at
// all. The frame was verified by the scan that
// found it; dlq.log only grows (a rewrite replaces the file, not the
// frames of the one open), so its bytes are those that were checked. A
// record that is no dead letter whole to its payload is errBadRecord; any
// other error is f's.
func deadLetterAt(head []byte, length, off int64, f io.ReaderAt, withPayload bool) (DeadLetter, error) {
	rec, err := deadLetterHead(head, length, off, f)
	if err != nil {
		return DeadLetter{}, err
	}
	if rec == nil {
		return DeadLetter{}, errBadRecord
	}
	d, err := decodeDeadLetter(rec)
	if err != nil || !withPayload {
		d.Payload = nil
		return d, err
	}
	d.Payload = make([]byte, length-int64(len(rec)))
	if k, err := f.ReadAt(d.Payload, off+headerSize+int64(len(rec))); err != nil && (k < len(d.Payload) || !errors.Is(err, io.EOF)) {
		return DeadLetter{}, err
	}
	return d, nil
}

// DeadLetters returns the pending dead letters (not marked), by id, with
// their whole payloads, and the damage found in dlq.log. DeadLetterPage
// reads a bounded part.
func (q *Queue) DeadLetters() ([]DeadLetter, []Damage, error) {
	return q.deadLetters(true)
}

// deadLetters is DeadLetters, with the payloads left out unless
// withPayload.
func (q *Queue) deadLetters(withPayload bool) ([]DeadLetter, []Damage, error) {
	var out []DeadLetter
	var damage []Damage
	keep := func(d Damage) { damage = append(damage, d) }
	// each frame's CRC checked through a small buffer: a payload is
	// read straight into the dead letter returned, when it is, and
	// neither held nor copied otherwise
	err := q.eachPendingHeads(func(head []byte, length, off int64, f io.ReaderAt) error {
		d, err := deadLetterAt(head, length, off, f, withPayload)
		if errors.Is(err, errBadRecord) {
			return nil // not listed: reported as damage (eachPendingScan)
		}
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	}, keep)
	if err != nil {
		return nil, damage, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, damage, nil
}

// dlqStamp tells the contents of dlq.log and dlq.log.acked apart: their
// sizes, modification times and inodes (0 where the FS does not say).
// Between rewrites both files only grow; a rewrite replaces a file.
type dlqStamp struct {
	size, mtime, ino [2]int64
}

// changed is when the later of the two files last changed.
func (s dlqStamp) changed() time.Time {
	return time.Unix(0, max(s.mtime[0], s.mtime[1]))
}

// dlqStamp returns the files' stamp; false when it cannot be read.
func (q *Queue) dlqStamp() (dlqStamp, bool) {
	var s dlqStamp
	for i, name := range []string{dlqFile, ackedFile} {
		info, err := q.fs.Stat(q.path(name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, false
		}
		s.size[i], s.mtime[i] = info.Size(), info.ModTime().UnixNano()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			s.ino[i] = int64(st.Ino)
		}
	}
	return s, true
}

// DeadLetterCount counts the pending dead letters without keeping them.
func (q *Queue) DeadLetterCount() (int, error) {
	n, _, err := q.deadLetterCounts()
	return n, err
}

// deadLetterCounts counts the pending dead letters, and the damaged frames
// of the dead-letter files that valid ones follow: dead letters that
// cannot be read, which nexus dlq list reports (a torn tail is not one:
// it is being written, or a crash cut it short before it was durable).
//
// The damage is counted as it is read, not kept: a file damaged wholesale
// can hold millions of damaged frames. Each frame's CRC is checked through
// a small buffer (eachPendingHeads): a dead letter of 64 MiB is counted,
// not held.
func (q *Queue) deadLetterCounts() (pending, damaged int, err error) {
	err = q.eachPendingHeads(func([]byte, int64, int64, io.ReaderAt) error {
		pending++
		return nil
	}, func(d Damage) {
		if !d.Torn {
			damaged++
		}
	})
	return pending, damaged, err
}

// DeadLetter returns the pending dead letter id with its whole payload;
// ErrNotPending when id is not pending.
func (q *Queue) DeadLetter(id uint64) (DeadLetter, error) {
	var d DeadLetter
	found := false
	// each frame's CRC checked through a small buffer (eachPendingHeads):
	// of the dead letters before it, none is held
	err := q.eachPendingHeads(func(head []byte, length, off int64, f io.ReaderAt) error {
		if binary.BigEndian.Uint64(head[1:9]) != id {
			return nil
		}
		var err error
		if d, err = deadLetterAt(head, length, off, f, true); err == nil {
			found = true
			return errStop
		}
		if errors.Is(err, errBadRecord) {
			return nil
		}
		return err
	}, func(Damage) {})
	if err == nil && !found {
		err = ErrNotPending
	}
	return d, err
}

// DeadLetterPage is a page of the pending dead letters, by id.
type DeadLetterPage struct {
	Entries []PageEntry
	Total   int  // the pending dead letters in all
	More    bool // some come after the page's last entry
	// Next is the after of the page after this one, valid when More: the
	// highest id the page looked at, which is its last entry's unless
	// the page ends with dead letters that cannot be decoded (counted in
	// Total, left off Entries). A page may list none and have a Next.
	Next uint64
	// Prev is the after of the page before this one (the limit pending
	// dead letters before its first), valid when HasPrev: some come
	// before after. Last is the after of the last page, counted limit at
	// a time from the first, as pages followed by their next ones are.
	Prev, Last uint64
	HasPrev    bool
	// Damage is the first PageDamage of what ReadDeadLetters reports:
	// the damaged frames of dlq.log.acked, then dlq.log, in file order, a
	// torn tail (a write in progress) left out. DamageTotal counts them
	// all.
	Damage      []Damage
	DamageTotal int
}

// PageDamage is the most damaged frames a DeadLetterPage lists; the
// others are counted (DamageTotal), not kept. Damage comes in ones (a
// run of damaged frames is one), so more than a hundred is a file damaged
// wholesale (a disk error, a torn copy), where the first ones tell what
// happened and nexus dlq list names them all: listing a million at every
// page held them all in memory and made the answer as large.
const PageDamage = 100

// PageEntry is a dead letter of a page, its payload cut to the page's
// limit.
type PageEntry struct {
	DeadLetter
	PayloadSize int // the whole payload's length
}

// DeadLetterPage returns at most limit pending dead letters with an id
// above after, by id, each payload cut to maxPayload bytes. It is one read
// of the dead-letter files, so the page is the files at one moment (a
// dead letter discarded meanwhile does not shorten it), and keeps at most
// limit payloads in memory, whatever the size of dlq.log, and at most
// PageDamage damaged frames, however many it counts. Each frame's CRC is
// checked through a small buffer (eachPendingHeads), and of a dead letter
// on the page only its fields and the payload's first maxPayload bytes
// are read: a dead letter of 64 MiB is read, not held.
func (q *Queue) DeadLetterPage(after uint64, limit, maxPayload int) (DeadLetterPage, error) {
	var page DeadLetterPage
	limit, maxPayload = max(limit, 0), max(maxPayload, 0)
	var all []uint64 // every pending id: 8 bytes each
	// the page so far: the limit lowest ids above after, the highest on
	// top, so that a lower one read later takes its place
	var best pageHeap
	err := q.eachPendingHeads(func(head []byte, length, off int64, f io.ReaderAt) error {
		id := binary.BigEndian.Uint64(head[1:9])
		all = append(all, id)
		if id <= after || limit == 0 || (len(best) == limit && id > best[0].ID) {
			return nil
		}
		// a record that cannot be decoded keeps its place, and is left
		// off the page (it is counted, not listed)
		e, err := pageEntry(head, length, off, f, maxPayload)
		if err != nil && !errors.Is(err, errBadRecord) {
			return err // dlq.log could not be read
		}
		e.ID, e.bad = id, err != nil
		if len(best) < limit {
			heap.Push(&best, e)
		} else {
			best[0] = e
			heap.Fix(&best, 0)
		}
		return nil
	}, func(d Damage) {
		if d.Torn {
			return
		}
		if page.DamageTotal++; len(page.Damage) < PageDamage {
			page.Damage = append(page.Damage, d)
		}
	})
	if err != nil {
		return page, err
	}
	page.Total = len(all)
	slices.Sort(all)
	before := sort.Search(len(all), func(i int) bool { return all[i] > after }) // the ids up to after
	if before > 0 {
		page.HasPrev = true
		if start := before - limit; start > 0 {
			page.Prev = all[start-1]
		}
	}
	if limit > 0 && len(all) > limit {
		page.Last = all[(len(all)-1)/limit*limit-1]
	}
	if page.More = len(all)-before > limit; page.More {
		page.Next = all[before+limit-1]
	}
	for _, e := range best {
		if !e.bad {
			page.Entries = append(page.Entries, e.PageEntry)
		}
	}
	sort.Slice(page.Entries, func(i, j int) bool { return page.Entries[i].ID < page.Entries[j].ID })
	return page, nil
}

// pageEntry decodes the verified dead-letter record at off in dlq.log (f),
// of length bytes, whose first bytes are head, with its payload cut to
// maxPayload bytes: the bytes past head that it keeps are read from f,
// and no others. A record that is no dead letter is errBadRecord; any
// other error is f's.
func pageEntry(head []byte, length, off int64, f io.ReaderAt, maxPayload int) (pageSlot, error) {
	if !deadLetterWhole(head, length) {
		return pageSlot{}, errBadRecord
	}
	at := deadLetterFields + int64(binary.BigEndian.Uint32(head[29:33]))
	n := min(length, at+int64(maxPayload))
	rec := head[:min(n, int64(len(head)))]
	if n > int64(len(head)) {
		rec = make([]byte, n)
		if k, err := f.ReadAt(rec, off+headerSize); err != nil && (k < len(rec) || !errors.Is(err, io.EOF)) {
			return pageSlot{}, err
		}
	}
	d, err := decodeDeadLetter(rec)
	return pageSlot{PageEntry: PageEntry{DeadLetter: d, PayloadSize: int(length - at)}}, err
}

// pageSlot is an entry of the page being read; bad when its record could
// not be decoded.
type pageSlot struct {
	PageEntry
	bad bool
}

// pageHeap holds a page being read, the highest id on top.
type pageHeap []pageSlot

func (h pageHeap) Len() int           { return len(h) }
func (h pageHeap) Less(i, j int) bool { return h[i].ID > h[j].ID }
func (h pageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pageHeap) Push(x any)        { *h = append(*h, x.(pageSlot)) }
func (h *pageHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// PendingIDs returns the ids of the pending dead letters, sorted: one scan
// of dlq.log that decodes no record and keeps 8 bytes a dead letter (the
// DeadLetterPage keeps as much besides its page), each frame's CRC checked
// through a small buffer (eachPendingHeads): a dead letter of 64 MiB is
// read, not held.
func (q *Queue) PendingIDs() ([]uint64, error) {
	var ids []uint64
	if err := q.eachPendingHeads(func(head []byte, _, _ int64, _ io.ReaderAt) error {
		ids = append(ids, binary.BigEndian.Uint64(head[1:9]))
		return nil
	}, func(Damage) {}); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// Mark records that the pending dead letter id was replayed or discarded
// (MarkReplayed, MarkDiscarded): it no longer appears among the pending
// ones. An id that is not pending is ErrNotPending, and nothing is written.
// The check and the write hold the append lock, so a replay (which holds
// it too) and a mark of one id, in any processes, never both happen.
func (q *Queue) Mark(id uint64, action byte) error {
	return q.addMark(context.Background(), mark{id: id, action: action})
}

// MarkContext is Mark for a caller with a context of its own (an
// operator's request): when ctx has ended, or ends while the mark waits
// for the append lock, it returns at once having written nothing, with an
// error wrapping context.Cause(ctx).
func (q *Queue) MarkContext(ctx context.Context, id uint64, action byte) error {
	return q.addMark(ctx, mark{id: id, action: action})
}

// MarkReplayed is Mark(id, MarkReplayed) that also records the id of the
// message the replay appended, which the worker's dlq_replayed line names.
func (q *Queue) MarkReplayed(id, replayID uint64) error {
	return q.addMark(context.Background(), mark{id: id, action: MarkReplayed, replayID: replayID})
}

// lockForMark takes the append lock for a replay or a mark of dead letter
// id (what: "replayed" or "discarded"), giving up when ctx has ended or
// ends first (see lockAppendUntil); with a context that never ends it is
// lockAppendBounded. Once the lock is held, the caller's writes go on
// whatever ctx does: a replay appended and then not marked would be
// listed, and replayed, again.
func (q *Queue) lockForMark(ctx context.Context, id uint64, what string) (func(), error) {
	gaveUp := func() error { return notHandled(ctx, q.Tenant, q.Flow, id, what) }
	if ctx.Err() != nil {
		return nil, gaveUp()
	}
	unlock, err := q.lockAppendUntil(ctx.Done())
	if errors.Is(err, errGaveUp) {
		return nil, gaveUp()
	}
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// it ended as the lock was taken: nothing is written yet
		unlock()
		return nil, gaveUp()
	}
	return unlock, nil
}

// ErrNotMarked is wrapped by Replay when the message was appended but the
// entry could not be marked: the entry still looks pending, and replaying
// it again would deliver the payload twice.
var ErrNotMarked = errors.New("replayed but not marked, so still listed: discard rather than replay again")

// Replay appends the pending dead letter id's payload to the queue as a
// new message (a new id, attempt 1, with source and correlationID) and
// marks the entry replayed, naming the new message. The check, the append
// and the mark hold the append lock together: among all processes, one
// replay or discard of an id wins, and the others find it not pending
// (ErrNotPending, nothing written). The append comes before the mark, so
// a crash between them replays twice rather than losing the message; an
// error writing the mark after the append wraps ErrNotMarked and returns
// the appended message.
func (q *Queue) Replay(id uint64, source, correlationID string) (Message, error) {
	return q.ReplayContext(context.Background(), id, source, correlationID)
}

// ReplayContext is Replay for a caller with a context of its own (an
// operator's request): when ctx has ended, or ends while the replay waits
// for the append lock, it returns at once having written nothing, with an
// error wrapping context.Cause(ctx). Once it holds the lock, the append
// and the mark are made whatever ctx does.
func (q *Queue) ReplayContext(ctx context.Context, id uint64, source, correlationID string) (Message, error) {
	unlock, err := q.lockForMark(ctx, id, "replayed")
	if err != nil {
		return Message{}, err
	}
	defer unlock()
	d, err := q.DeadLetter(id)
	if err != nil {
		return Message{}, err
	}
	if err := q.tooLargeToReplay(d.ID, len(d.Payload)); err != nil {
		return Message{}, err
	}
	m, err := q.appendLocked(NewMessage{Source: source, CorrelationID: correlationID, Payload: d.Payload})
	if err != nil {
		return Message{}, err
	}
	if err := q.writeMark(mark{id: id, action: MarkReplayed, replayID: m.ID}); err != nil {
		return m, fmt.Errorf("queue %s/%s: the dead letter %d was replayed as message %d: %w: %w", q.Tenant, q.Flow, id, m.ID, ErrNotMarked, err)
	}
	return m, nil
}

// tooLargeToReplay is ErrTooLarge, said with the limit, for dead letter
// id when its payload's size is over MaxPayload (one an older nexus
// wrote: a dead-letter frame holds up to MaxRecord): no message may carry
// it, so it cannot be replayed, only discarded.
func (q *Queue) tooLargeToReplay(id uint64, size int) error {
	if size > MaxPayload {
		return fmt.Errorf("queue %s/%s: dead letter %d cannot be replayed: %w: its payload of %d bytes is over the limit of %d bytes a message may have",
			q.Tenant, q.Flow, id, ErrTooLarge, size, MaxPayload)
	}
	return nil
}

// Skipped is a pending dead letter ReplayPending left pending because it
// cannot be replayed: its payload is over MaxPayload (tooLargeToReplay),
// or its record cannot be decoded (it is reported as damage too; a
// discard takes it).
type Skipped struct {
	ID          uint64 // the dead letter's id
	PayloadSize int    // its payload's size in bytes; 0 when its record cannot be decoded
	// Err says why: one too large wraps ErrTooLarge and names the limit;
	// one that cannot be decoded names its offset and what is wrong
	Err error
}

// Replayed is a dead letter ReplayPending appended again.
type Replayed struct {
	ID      uint64  // the dead letter's id
	Message Message // the message appended
	// Unmarked: the message was appended but the dead letter's mark could
	// not be written (the error wraps ErrNotMarked), so it is still listed
	Unmarked bool
}

// ReplayPending replays the oldest pending dead letters whose ids are at
// most upTo (the newest pending when a run began: a replay dead-lettered
// again meanwhile has a newer id, and is not replayed twice by one run),
// as Replay does one, in one hold of the append lock: one read of the
// dead-letter files, the messages appended in one durable write, then
// their marks in one. It takes at most limit dead letters, and stops
// after the one that brings their payloads to maxBytes, so a caller
// replaying thousands calls it until it returns none, and the doors'
// appends get the lock between calls. An error writing the marks after
// the append wraps ErrNotMarked and returns the replays appended. A dead
// letter whose payload is over MaxPayload is not replayed: it stays
// pending, and is returned among the skipped ones (each call returns those
// its read came across, so a caller calling it again meets them again).
func (q *Queue) ReplayPending(upTo uint64, limit, maxBytes int, source string, correlationID func() string) ([]Replayed, []Skipped, error) {
	return q.replayPending(context.Background(), upTo, limit, maxBytes, source, correlationID)
}

// replayPending is ReplayPending giving up, having written nothing, when
// ctx ends while it waits for the append lock (lockForChunk).
func (q *Queue) replayPending(ctx context.Context, upTo uint64, limit, maxBytes int, source string, correlationID func() string) ([]Replayed, []Skipped, error) {
	unlock, err := q.lockForChunk(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	var batch []*appendReq
	var ids []uint64
	var skipped []Skipped
	size := 0
	// each frame's CRC checked through a small buffer (eachPendingHeads):
	// the payloads replayed are read, straight into their messages, and
	// none of the others (above upTo, too large) is held or copied
	if err := q.eachPendingHeads(func(head []byte, length, off int64, f io.ReaderAt) error {
		id := binary.BigEndian.Uint64(head[1:9])
		if id > upTo {
			return nil
		}
		if !deadLetterWhole(head, length) {
			// its record cannot be decoded: not replayed (it is
			// reported as damage), left pending for a discard, and
			// said, as one too large is
			skipped = append(skipped, Skipped{ID: id, Err: fmt.Errorf("queue %s/%s: dead letter %d cannot be replayed: its record at offset %d of %s cannot be decoded (%s): discard it",
				q.Tenant, q.Flow, id, off, dlqFile, undecodableWhy(head, length))})
			return nil
		}
		// the payload's size is read from the record's header: one that
		// cannot be replayed, met again by every call of a run, is not
		// read
		n := int(length - deadLetterFields - int64(binary.BigEndian.Uint32(head[29:33])))
		if err := q.tooLargeToReplay(id, n); err != nil {
			skipped = append(skipped, Skipped{ID: id, PayloadSize: n, Err: err})
			return nil
		}
		d, err := deadLetterAt(head, length, off, f, true)
		if errors.Is(err, errBadRecord) {
			return nil
		}
		if err != nil {
			return err
		}
		m := NewMessage{Source: source, CorrelationID: correlationID(), Payload: d.Payload}
		if err := q.checkSize(m); err != nil {
			return fmt.Errorf("dead letter %d: %w", d.ID, err)
		}
		batch, ids = append(batch, &appendReq{m: m, at: q.now()}), append(ids, d.ID)
		if size += len(d.Payload); len(batch) >= limit || size >= maxBytes {
			return errStop
		}
		return nil
	}, func(Damage) {}); err != nil {
		return nil, nil, err
	}
	if len(batch) == 0 {
		return nil, skipped, nil
	}
	q.mu.Lock()
	poisoned := q.poisoned
	q.mu.Unlock()
	if poisoned != nil {
		return nil, nil, fmt.Errorf("queue %s/%s: %w", q.Tenant, q.Flow, poisoned)
	}
	if err := q.writeLocked(batch); err != nil {
		return nil, nil, err
	}
	out := make([]Replayed, len(batch))
	var marks []byte
	now := q.now()
	for i, r := range batch {
		out[i] = Replayed{ID: ids[i], Message: r.res}
		marks = appendFrame(marks, appendMarkRecord(nil, mark{id: ids[i], action: MarkReplayed, replayID: r.res.ID, at: now}))
	}
	if err := q.appendDurable(ackedFile, marks); err != nil {
		for i := range out {
			out[i].Unmarked = true
		}
		return out, skipped, fmt.Errorf("queue %s/%s: %d dead letters were replayed (%d to %d): %w: %w", q.Tenant, q.Flow, len(out), ids[0], ids[len(ids)-1], ErrNotMarked, err)
	}
	return out, skipped, nil
}

// The chunks of ReplayAll and MarkAll: the append lock is let go between
// two, for the doors' appends, and a chunk's payloads are held together.
const (
	allChunk      = 256
	allChunkBytes = 16 << 20
)

// ReplayAll replays every pending dead letter whose id is at most upTo
// (the newest pending when the caller listed them), oldest first, in
// chunks (ReplayPending), calling each for every replay made; it returns
// how many it made. One dead-lettered again meanwhile (a newer id) is not
// replayed again. One that cannot be replayed (its payload is over
// MaxPayload, or its record cannot be decoded) is left pending, and skip, when not nil, is called once for
// it; the others are replayed all the same.
func (q *Queue) ReplayAll(upTo uint64, source string, correlationID func() string, each func(Replayed), skip func(Skipped)) (int, error) {
	return q.ReplayAllContext(context.Background(), upTo, source, correlationID, each, skip)
}

// ReplayAllContext is ReplayAll for a caller with a context of its own (an
// operator's request): when ctx has ended, it stops before the next chunk
// (a chunk begun is made whole), or as the chunk waits for the append
// lock (having written nothing of it), and returns how many it made, with
// an error that says so and wraps context.Cause(ctx). ReplayAll took no
// context: a run whose request had ended went on to the last chunk, and a
// chunk waited LockWait for the lock whatever ctx said.
func (q *Queue) ReplayAllContext(ctx context.Context, upTo uint64, source string, correlationID func() string, each func(Replayed), skip func(Skipped)) (int, error) {
	n := 0
	told := map[uint64]bool{}
	for {
		if ctx.Err() != nil {
			return n, q.allGivenUp(ctx, n, "replayed")
		}
		got, skipped, err := q.replayPending(ctx, upTo, allChunk, allChunkBytes, source, correlationID)
		if errors.Is(err, errGaveUp) {
			return n, q.allGivenUp(ctx, n, "replayed")
		}
		for _, s := range skipped {
			if !told[s.ID] && skip != nil {
				skip(s)
			}
			told[s.ID] = true
		}
		for _, r := range got {
			each(r) // those of a chunk whose marks failed too: they were appended
		}
		n += len(got)
		if err != nil || len(got) == 0 {
			return n, err
		}
	}
}

// MarkAll marks every pending dead letter whose id is at most upTo with
// action, oldest first, in chunks (MarkPending), calling each for every
// id marked; it returns how many it marked.
func (q *Queue) MarkAll(upTo uint64, action byte, each func(uint64)) (int, error) {
	return q.MarkAllContext(context.Background(), upTo, action, each)
}

// MarkAllContext is MarkAll for a caller with a context of its own: when
// ctx has ended, it stops before the next chunk and returns how many it
// marked, with an error that says so and wraps context.Cause(ctx), as
// ReplayAllContext does.
func (q *Queue) MarkAllContext(ctx context.Context, upTo uint64, action byte, each func(uint64)) (int, error) {
	n := 0
	what := "discarded"
	if action == MarkReplayed {
		what = "marked replayed"
	}
	for {
		if ctx.Err() != nil {
			return n, q.allGivenUp(ctx, n, what)
		}
		got, err := q.markPending(ctx, upTo, allChunk, action)
		if errors.Is(err, errGaveUp) {
			return n, q.allGivenUp(ctx, n, what)
		}
		for _, id := range got {
			each(id)
		}
		n += len(got)
		if err != nil || len(got) == 0 {
			return n, err
		}
	}
}

// lockForChunk takes the append lock for a chunk of ReplayAllContext or
// MarkAllContext, giving up, having taken neither lock, when ctx ends
// first (see lockAppendUntil), or ended as it was taken: the error then
// wraps errGaveUp, and the run says how many it did (allGivenUp). With a
// context that never ends it is lockAppendBounded. Once the lock is held,
// the chunk's writes go on whatever ctx does (see lockForMark).
func (q *Queue) lockForChunk(ctx context.Context) (func(), error) {
	unlock, err := q.lockAppendUntil(ctx.Done())
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		unlock()
		return nil, fmt.Errorf("taking the append lock %s: %w", q.lockPath, errGaveUp)
	}
	return unlock, nil
}

// allGivenUp is the error of a run of ReplayAllContext or MarkAllContext
// given up between two chunks, n dead letters done (what), as ctx ended.
func (q *Queue) allGivenUp(ctx context.Context, n int, what string) error {
	if n == 0 {
		return notHandled(ctx, q.Tenant, q.Flow, 0, what)
	}
	return fmt.Errorf("queue %s/%s: %d dead letters were %s, then the rest were left pending: %w", q.Tenant, q.Flow, n, what, context.Cause(ctx))
}

// MarkPending marks the oldest pending dead letters whose ids are at most
// upTo with action (MarkDiscarded), at most limit of them, in one hold of
// the append lock: one read, one durable append of the marks. It returns
// the ids marked; a caller marking thousands calls it until it returns
// none.
func (q *Queue) MarkPending(upTo uint64, limit int, action byte) ([]uint64, error) {
	return q.markPending(context.Background(), upTo, limit, action)
}

// markPending is MarkPending giving up, having written nothing, when ctx
// ends while it waits for the append lock (lockForChunk).
func (q *Queue) markPending(ctx context.Context, upTo uint64, limit int, action byte) ([]uint64, error) {
	unlock, err := q.lockForChunk(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var ids []uint64
	// the ids only: each frame's CRC checked through a small buffer
	// (eachPendingHeads), a dead letter of 64 MiB read, not held
	if err := q.eachPendingHeads(func(head []byte, _, _ int64, _ io.ReaderAt) error {
		if id := binary.BigEndian.Uint64(head[1:9]); id <= upTo {
			if ids = append(ids, id); len(ids) >= limit {
				return errStop
			}
		}
		return nil
	}, func(Damage) {}); err != nil || len(ids) == 0 {
		return nil, err
	}
	var marks []byte
	now := q.now()
	for _, id := range ids {
		marks = appendFrame(marks, appendMarkRecord(nil, mark{id: id, action: action, at: now}))
	}
	if err := q.appendDurable(ackedFile, marks); err != nil {
		return nil, err
	}
	return ids, nil
}

func (q *Queue) addMark(ctx context.Context, m mark) error {
	what := "discarded"
	if m.action == MarkReplayed {
		what = "marked replayed"
	}
	unlock, err := q.lockForMark(ctx, m.id, what)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := q.DeadLetter(m.id); err != nil {
		return err
	}
	return q.writeMark(m)
}

// writeMark appends a mark to dlq.log.acked, durably. The caller holds the
// append lock and has checked the id is pending.
func (q *Queue) writeMark(m mark) error {
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
// applied, by id, and the damaged frames of dlq.log.acked and dlq.log it
// left out (which no reader could use: the caller reports them, as they
// leave the disk); it does nothing when dlq.log.acked holds neither a mark
// nor damage, and then, when the file is missing or empty (as a rewrite
// leaves it), it takes no lock and opens nothing: its worker calls it at
// every idle moment.
//
// The caller is the queue's worker, the one appender of dlq.log (the
// holder of worker.lock, dead-lettering between its idle moments). The
// append lock is held to read the marks and to put the new dlq.log in
// place, not while the file, which an outage can grow to gigabytes, is
// copied: the doors' appends and the operators' replays and discards go
// on meanwhile, and a mark made meanwhile stays in dlq.log.acked for the
// next call. A dlq.log that changed during the copy (a fault: another
// appender) is left as it is, and the rewrite given up with an error.
func (q *Queue) CompactDLQ() ([]Marked, []Damage, error) {
	if !q.mayHoldMarks() {
		return nil, nil, nil
	}
	unlock, err := q.lockAppendBounded()
	if err != nil {
		return nil, nil, err
	}
	marked, markDamage, err := q.marks()
	unlock()
	if err != nil || len(marked) == 0 && len(markDamage) == 0 {
		return nil, nil, err
	}
	// the checkpoint durable first: the worker writes it in place without
	// fsync, and once the marks are gone, a power cut that took it back
	// before a marked dead letter's message would deliver that message
	// again and dead-letter it again, with no mark left to hide it (a
	// discarded dead letter pending again, a replayed one replayable
	// twice). The worker calls this at an idle moment, its checkpoint
	// written past every message it dead-lettered.
	if err := q.syncCheckpoint(); err != nil {
		return nil, nil, err
	}
	tmp, read, damage, err := q.writeKeptDeadLetters(marked)
	if err != nil {
		return nil, nil, err
	}
	if unlock, err = q.lockAppendBounded(); err != nil {
		q.fs.Remove(tmp)
		return nil, nil, err
	}
	defer unlock()
	if err := q.checkUnchanged(dlqFile, read); err != nil {
		q.fs.Remove(tmp)
		return nil, nil, err
	}
	if err := putInPlace(q.fs, tmp, q.path(dlqFile)); err != nil {
		return nil, nil, err
	}
	// the marks go once the entries they mark have: in the other order, a
	// crash between the two would leave marked entries pending again.
	// Those made since they were read (for entries the new file keeps)
	// stay, with what damage the file has grown since, which is reported
	later, laterDamage, err := q.marksSince(marked, markDamage)
	if err != nil {
		return nil, nil, err
	}
	if err := WriteAtomic(q.fs, q.path(ackedFile), later); err != nil {
		return nil, nil, err
	}
	damage = slices.Concat(markDamage, laterDamage, damage)
	applied := make([]Marked, 0, len(marked))
	for _, m := range marked {
		applied = append(applied, Marked{ID: m.id, Action: m.action, At: m.at, ReplayID: m.replayID})
	}
	sort.Slice(applied, func(i, j int) bool { return applied[i].ID < applied[j].ID })
	return applied, damage, nil
}

// writeKeptDeadLetters writes the new dlq.log to a temporary file (see
// writeTemp): the entries of dlq.log that marked does not mark, the first
// of each id (one whose record cannot be decoded among them), and frames
// that are no dead letters as they are. It
// returns the temporary file's path, the description of dlq.log it read
// (to check that it did not change before the new one replaces it; nil
// when there is none), and the damage it left out. dlq.log is read and the
// new file written a buffer at a time: the rewrite holds the buffer and
// the scan's, not a record, nor the file (a dead-letter queue can hold
// gigabytes, of dead letters of 64 MiB).
func (q *Queue) writeKeptDeadLetters(marked map[uint64]mark) (tmp string, read fs.FileInfo, damage []Damage, err error) {
	src, read, err := q.openToReadInfo(dlqFile)
	if err != nil {
		return "", nil, nil, err
	}
	if src != nil {
		defer src.Close()
	}
	tmp, err = writeTemp(q.fs, q.path(dlqFile), func(f File) error {
		if src == nil {
			return nil
		}
		// no larger than the file: most are small
		w := frameWriter{f: f, buf: make([]byte, 0, min(frameWriterBuf, read.Size())+headerSize+recordHead)}
		seen := map[uint64]struct{}{}
		// each frame's CRC checked through a small buffer (scanFrameHeads),
		// a kept one copied through the write buffer: a dead letter of
		// 64 MiB is read and written, not held
		if _, err := scanFrameHeads(src, dlqFile, 0, read.Size(), func(h *[headerSize]byte, head []byte, length, off int64) error {
			// a dead letter, pending or marked, as eachPendingScan takes
			// it: one whose record cannot be decoded too, so that a
			// discard of it takes it off the disk
			if length >= deadLetterFields && head[0] == kindDeadLetter {
				id := binary.BigEndian.Uint64(head[1:9])
				if _, done := marked[id]; done {
					return nil
				}
				if _, again := seen[id]; again {
					return nil // dead-lettered again after a crash (see eachPendingHeads)
				}
				seen[id] = struct{}{}
			}
			return w.copyFrame(h, head, src, off, length)
		}, func(d Damage) { damage = append(damage, d) }); err != nil {
			return err
		}
		return w.flush()
	})
	return tmp, read, damage, err
}

// checkUnchanged fails when the queue's file name is no longer the file
// read described, at the size it had (read nil: no file), so that a
// rewrite from what was read would lose what came since. The caller holds
// the append lock.
func (q *Queue) checkUnchanged(name string, read fs.FileInfo) error {
	now, err := q.fs.Stat(q.path(name))
	if errors.Is(err, os.ErrNotExist) {
		now, err = nil, nil
	}
	if err != nil {
		return err
	}
	if (read == nil) != (now == nil) || read != nil && (!sameFile(read, now) || now.Size() != read.Size()) {
		return fmt.Errorf("queue %s/%s: %s changed while it was rewritten (another process appended to it or replaced it): left as it is, rewritten later", q.Tenant, q.Flow, name)
	}
	return nil
}

// marksSince reads dlq.log.acked again and returns the frames of its
// marks of ids applied does not hold: made after applied and reported
// were read. The
// caller holds the append lock. (A mark is only made for a pending dead
// letter, so an id marked once is not marked again.) Damage found at
// another offset than reported's is new: a marking process that died
// midway since.
func (q *Queue) marksSince(applied map[uint64]mark, reported []Damage) (frames []byte, damage []Damage, err error) {
	// a mark is a few bytes: a frame larger than a head is none, and is
	// checked through a small buffer (eachHeadDamage), not held
	err = q.eachHeadDamage(ackedFile, func(head []byte, length int64) error {
		if length != int64(len(head)) {
			return nil
		}
		if m, err := decodeMark(head); err == nil {
			if _, done := applied[m.id]; !done {
				frames = appendFrame(frames, head)
			}
		}
		return nil
	}, func(d Damage) {
		if !slices.ContainsFunc(reported, func(r Damage) bool { return r.Offset == d.Offset }) {
			damage = append(damage, d)
		}
	})
	return frames, damage, err
}

// mayHoldMarks reports whether dlq.log.acked may hold a mark or damage:
// false when a stat finds no file at its path, or an empty regular file;
// true otherwise (a stat that fails leaves the answer to CompactDLQ's
// reading, which reports the error). A mark appended after the stat
// waits for the next call, as one appended after the lock's release
// would.
func (q *Queue) mayHoldMarks() bool {
	info, err := q.fs.Stat(q.ackedPath)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	return err != nil || !info.Mode().IsRegular() || info.Size() > 0
}

// frameWriter writes frames one after another from the start of a file,
// through buf, made with room for a frame's header and head past what it
// fills (up to frameWriterBuf bytes).
type frameWriter struct {
	f   File
	off int64
	buf []byte
}

const frameWriterBuf = 1 << 20

// copyFrame writes the verified frame at off of r, whose header is h and
// whose record is length bytes, head its first ones: through the buffer,
// a part at a time, so that a record of 64 MiB is copied, not held.
func (w *frameWriter) copyFrame(h *[headerSize]byte, head []byte, r io.ReaderAt, off, length int64) error {
	full := max(cap(w.buf)-headerSize-recordHead, 1)
	w.buf = append(append(w.buf, h[:]...), head...)
	for pos := int64(len(head)); pos < length; {
		if len(w.buf) >= full {
			if err := w.flush(); err != nil {
				return err
			}
		}
		k := len(w.buf)
		n := int(min(length-pos, int64(full-k)))
		w.buf = w.buf[:k+n]
		if m, err := r.ReadAt(w.buf[k:], off+headerSize+pos); err != nil && (m < n || !errors.Is(err, io.EOF)) {
			return err
		}
		pos += int64(n)
	}
	if len(w.buf) >= full {
		return w.flush()
	}
	return nil
}

// flush writes what the buffer holds.
func (w *frameWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.f.WriteAt(w.buf, w.off)
	w.off += int64(n)
	w.buf = w.buf[:0]
	return err
}

// Peek returns a handle on the files of tenant/flow's queue under root
// that opens nothing: it only reads (DeadLetters, DeadLetterCount,
// DeadLetter, DeadLetterPage, Retries), which works while servers run and
// creates nothing; a queue that does not exist reads as empty. It fails
// only for a name the rule refuses. A nil fsys is the OS.
func Peek(root, tenant, flow string, fsys FS) (*Queue, error) {
	dir, err := Dir(root, tenant, flow)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		fsys = OS{}
	}
	return &Queue{Tenant: tenant, Flow: flow, dir: dir, fs: fsys}, nil
}

// ReadDeadLetters returns the pending dead letters of tenant/flow under
// root, by id and without their payloads, without opening the queue (see
// Peek), also while servers run; a large dlq.log costs reading, and the
// dead letters' memory (ListDeadLetters holds 16 bytes a dead letter, as
// nexus dlq list reads them). A queue that does not exist has none.
//
// It also returns the damaged frames of dlq.log that valid frames follow:
// dead letters that cannot be read, so are not listed; a dead letter whose
// frame verifies but whose record cannot be decoded is one too
// (undecodableDamage), in file order among them. A torn tail is left
// out: it is a dead letter a running server is writing, or one a crash cut
// short, which was never durable, so never left the queue.
func ReadDeadLetters(root, tenant, flow string, fsys FS) ([]DeadLetter, []Damage, error) {
	q, err := Peek(root, tenant, flow, fsys)
	if err != nil {
		return nil, nil, err
	}
	dl, damage, err := q.deadLetters(false)
	return dl, slices.DeleteFunc(damage, func(d Damage) bool { return d.Torn }), err
}

// QueueNames lists the (tenant, flow) folders under root that follow the
// name rule, sorted.
func QueueNames(root string, fsys FS) ([][2]string, error) {
	names, _, err := QueueFolders(root, fsys)
	return names, err
}

// QueueFolders is QueueNames, and the folders under root (tenant or
// tenant/flow, sorted) left out because their names break the rule: no
// queue of this nexus is there, but one made by hand, or by a build older
// than the rule, may hold dead letters that nexus dlq list should not
// pass over in silence.
func QueueFolders(root string, fsys FS) ([][2]string, []string, error) {
	if fsys == nil {
		fsys = OS{}
	}
	tenants, err := fsys.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out [][2]string
	var skipped []string
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		if !naming.Valid(t.Name()) {
			skipped = append(skipped, t.Name())
			continue
		}
		flows, err := fsys.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return nil, nil, err
		}
		for _, f := range flows {
			switch {
			case !f.IsDir():
			case naming.Valid(f.Name()):
				out = append(out, [2]string{t.Name(), f.Name()})
			default:
				skipped = append(skipped, t.Name()+"/"+f.Name())
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	slices.Sort(skipped)
	return out, skipped, nil
}
