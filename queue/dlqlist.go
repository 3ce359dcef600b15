package queue

import (
	"cmp"
	"encoding/binary"
	"io"
	"io/fs"
	"slices"
)

// DeadLetterList is the pending dead letters of a queue, by id, as one
// read of its files found them: their ids and where dlq.log holds them,
// 16 bytes a dead letter, not the dead letters. Each reads them again,
// one at a time, so that nexus dlq list of a queue of an outage (a
// million dead letters) holds a few megabytes, not a gigabyte.
type DeadLetterList struct {
	q     *Queue
	read  fs.FileInfo // the dlq.log read; nil when there was none
	items []listItem  // by id
}

// listItem is a dead letter of a DeadLetterList: its id and the offset of
// its frame in the dlq.log read.
type listItem struct {
	id  uint64
	off int64
}

// ListDeadLetters is ReadDeadLetters as a DeadLetterList: the pending dead
// letters of tenant/flow under root, without opening the queue (see
// Peek), and the damaged frames of dlq.log that valid frames follow (a
// torn tail left out).
func ListDeadLetters(root, tenant, flow string, fsys FS) (*DeadLetterList, []Damage, error) {
	q, err := Peek(root, tenant, flow, fsys)
	if err != nil {
		return nil, nil, err
	}
	l := &DeadLetterList{q: q}
	var damage []Damage
	// the ids and offsets only: each frame's CRC checked through a small
	// buffer (eachPendingHeads), a dead letter of 64 MiB read, not held
	l.read, err = q.eachPendingScan(func(head []byte, length, off int64, _ io.ReaderAt) error {
		if deadLetterWhole(head, length) { // one that decodes, as ReadDeadLetters lists
			l.items = append(l.items, listItem{binary.BigEndian.Uint64(head[1:9]), off})
		}
		return nil
	}, func(d Damage) {
		if !d.Torn {
			damage = append(damage, d)
		}
	})
	if err != nil {
		return nil, damage, err
	}
	slices.SortFunc(l.items, func(a, b listItem) int { return cmp.Compare(a.id, b.id) })
	return l, damage, nil
}

// Len is how many dead letters the list holds.
func (l *DeadLetterList) Len() int { return len(l.items) }

// Each calls fn with each dead letter of the list, by id, without its
// payload (as ReadDeadLetters returns it), read from dlq.log one at a time:
// from the file the list was read from, whose frames stay where they are
// while it grows; when the worker has rewritten it since (without the
// entries marked meanwhile), from the new file, where a dead letter no
// longer in it is passed over. It returns how many were passed over: Len
// counted them, and a listing that printed Len first says why fewer
// follow.
func (l *DeadLetterList) Each(fn func(DeadLetter) error) (gone int, err error) {
	if len(l.items) == 0 {
		return 0, nil
	}
	f, info, err := l.q.openToReadInfo(dlqFile)
	if err != nil {
		return 0, err
	}
	if f == nil {
		return len(l.items), nil // removed since: none of them is pending any more
	}
	defer f.Close()
	items := l.items
	if !sameFile(l.read, info) {
		if items, err = l.relocate(f, info.Size()); err != nil {
			return 0, err
		}
	}
	// through a window: the frames are read about in file order (ids are
	// dead-lettered about in order), and a dead letter's head is small
	r := &windowReader{r: f, size: info.Size()}
	var buf []byte
	for _, it := range items {
		if it.off < 0 {
			gone++
			continue
		}
		head, err := readDeadLetterHead(r, it.off, info.Size(), buf)
		if err != nil {
			return gone, err
		}
		if head == nil {
			gone++
			continue
		}
		buf = head[:0]
		d, err := decodeDeadLetter(head)
		if err != nil {
			gone++
			continue
		}
		d.Payload = nil
		if err := fn(d); err != nil {
			return gone, err
		}
	}
	return gone, nil
}

// relocate returns the list's items with their offsets in f, a dlq.log
// rewritten since the list was read (size bytes long): -1 for those no
// longer in it.
func (l *DeadLetterList) relocate(f File, size int64) ([]listItem, error) {
	items := slices.Clone(l.items)
	for i := range items {
		items[i].off = -1
	}
	// the ids only: each frame's CRC checked through a small buffer
	// (scanHeads), a dead letter of 64 MiB read, not held
	_, err := scanHeads(f, dlqFile, 0, size, func(head []byte, length, off int64) error {
		if length < deadLetterFields || head[0] != kindDeadLetter {
			return nil
		}
		id := binary.BigEndian.Uint64(head[1:9])
		if i, ok := slices.BinarySearchFunc(items, id, func(it listItem, id uint64) int { return cmp.Compare(it.id, id) }); ok && items[i].off < 0 {
			items[i].off = off // the first of an id, as eachPendingHeads takes
		}
		return nil
	}, func(Damage) {})
	return items, err
}

// readDeadLetterHead reads, into buf when it has room, the dead-letter
// record of the frame at off up to its payload, which a scan of the same
// file verified: its header, then the record's fixed fields, then its
// last error. It is nil when the frame is not a dead letter's whole.
func readDeadLetterHead(r *windowReader, off, size int64, buf []byte) ([]byte, error) {
	var h [headerSize]byte
	if off+headerSize > size {
		return nil, nil
	}
	if _, err := r.ReadAt(h[:], off); err != nil {
		return nil, err
	}
	length := int64(binary.BigEndian.Uint32(h[4:8]))
	if length < 33 || off+headerSize+length > size {
		return nil, nil
	}
	buf = slices.Grow(buf[:0], 33)[:33]
	if _, err := r.ReadAt(buf, off+headerSize); err != nil {
		return nil, err
	}
	n := 33 + int64(binary.BigEndian.Uint32(buf[29:33]))
	if buf[0] != kindDeadLetter || n > length {
		return nil, nil
	}
	buf = slices.Grow(buf, int(n)-len(buf))[:n]
	if _, err := r.ReadAt(buf[33:], off+headerSize+33); err != nil {
		return nil, err
	}
	return buf, nil
}
