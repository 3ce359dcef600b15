package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"
)

// Sizes of the frame format (see the package documentation).
const (
	headerSize = 12
	// MaxRecord is the largest record a frame may hold: a payload must be
	// smaller.
	MaxRecord = 64 << 20
	// maxCorrelationID bounds a stored correlation ID.
	maxCorrelationID = 1024
	// maxFrameRecord is the largest record a reader takes: a retry that
	// carries its message (segment.log.retry) is retryCopyExtra bytes
	// longer than the message's own record, which is at most MaxRecord
	maxFrameRecord = MaxRecord + retryCopyExtra
)

var (
	frameMagic = [4]byte{'N', 'X', 'Q', '1'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Record kinds.
const (
	kindMessage    = 1
	kindDeadLetter = 2
	kindMark       = 3
)

// appendFrame appends a frame holding record to dst.
func appendFrame(dst, record []byte) []byte {
	dst, at := openFrame(dst)
	return closeFrame(append(dst, record...), at)
}

// frameCRC is the CRC-32C a frame's header holds: of the length field
// (bytes 4..8 of header) and the record.
func frameCRC(header, record []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, header[4:8]), castagnoli, record)
}

// openFrame reserves a frame's header at the end of dst, where closeFrame
// fills it in once the record has been appended after it: a record is
// encoded in place, without a copy.
func openFrame(dst []byte) ([]byte, int) {
	return append(dst, make([]byte, headerSize)...), len(dst)
}

// closeFrame writes the header of the frame that starts at at in dst and
// runs to dst's end.
func closeFrame(dst []byte, at int) []byte {
	h, record := dst[at:at+headerSize], dst[at+headerSize:]
	copy(h[:4], frameMagic[:])
	binary.BigEndian.PutUint32(h[4:8], uint32(len(record)))
	binary.BigEndian.PutUint32(h[8:12], frameCRC(h, record))
	return dst
}

// SourceReplay is the Source of a message a dead letter's replay appended
// (nexus dlq replay, the management API and UI). It is delivered as the
// enqueue door's; its first attempt runs again whatever failure its dedup
// key holds, because an operator who replays wants the flow run, under
// dedup_on_failure: absorb too.
const SourceReplay = "replay"

// Message is one message of a queue's log.
type Message struct {
	ID            uint64
	Offset        int64 // the frame's byte offset in segment.log
	EnqueuedAt    time.Time
	Source        string // the door: "enqueue", "cron", …, or SourceReplay
	CorrelationID string
	Payload       []byte
}

func appendMessageRecord(dst []byte, m *Message) []byte {
	dst = append(dst, kindMessage)
	dst = binary.BigEndian.AppendUint64(dst, m.ID)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.EnqueuedAt.UnixNano()))
	dst = append(dst, byte(len(m.Source)))
	dst = append(dst, m.Source...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.CorrelationID)))
	dst = append(dst, m.CorrelationID...)
	return append(dst, m.Payload...)
}

var errBadRecord = errors.New("malformed record")

func decodeMessage(rec []byte, offset int64) (Message, error) {
	m := Message{Offset: offset}
	if len(rec) < 18 || rec[0] != kindMessage {
		return m, errBadRecord
	}
	m.ID = binary.BigEndian.Uint64(rec[1:9])
	return m, decodeMessageFields(rec[9:], &m)
}

// decodeMessageFields reads the fields of a message record after its id
// (enqueued at, source, correlation ID, payload) from b into m: a message
// of segment.log, or one a retry carries.
func decodeMessageFields(b []byte, m *Message) error {
	payload, err := decodeMessageHead(b, m)
	if err != nil {
		return err
	}
	m.Payload = bytes.Clone(payload)
	return nil
}

// decodeMessageHead is decodeMessageFields without the payload, which it
// returns within b, not copied: a reader that does not keep it holds
// nothing of it.
func decodeMessageHead(b []byte, m *Message) (payload []byte, err error) {
	if len(b) < 9 {
		return nil, errBadRecord
	}
	m.EnqueuedAt = time.Unix(0, int64(binary.BigEndian.Uint64(b[0:8]))).UTC()
	s := int(b[8])
	rest := b[9:]
	if len(rest) < s+2 {
		return nil, errBadRecord
	}
	m.Source = string(rest[:s])
	rest = rest[s:]
	c := int(binary.BigEndian.Uint16(rest[:2]))
	rest = rest[2:]
	if len(rest) < c {
		return nil, errBadRecord
	}
	m.CorrelationID = string(rest[:c])
	return rest[c:], nil
}

// DeadLetter is a message moved to the dead-letter queue.
type DeadLetter struct {
	ID         uint64
	EnqueuedAt time.Time
	FailedAt   time.Time
	Attempts   int
	LastError  string
	Payload    []byte
}

// deadLetterFields is the size of a dead-letter record's fixed fields:
// kind, id, enqueued and failed times, attempts and the error's length.
const deadLetterFields = 33

func appendDeadLetterRecord(dst []byte, d *DeadLetter) []byte {
	dst = append(dst, kindDeadLetter)
	dst = binary.BigEndian.AppendUint64(dst, d.ID)
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.EnqueuedAt.UnixNano()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.FailedAt.UnixNano()))
	dst = binary.BigEndian.AppendUint32(dst, uint32(d.Attempts))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(d.LastError)))
	dst = append(dst, d.LastError...)
	return append(dst, d.Payload...)
}

// deadLetterPayload is where the payload of the dead-letter record rec
// begins, read from its header (no byte of the payload is read);
// errBadRecord when rec is not a dead letter whole to that point.
func deadLetterPayload(rec []byte) (int, error) {
	if len(rec) < 33 || rec[0] != kindDeadLetter {
		return 0, errBadRecord
	}
	at := 33 + int(binary.BigEndian.Uint32(rec[29:33]))
	if at > len(rec) {
		return 0, errBadRecord
	}
	return at, nil
}

func decodeDeadLetter(rec []byte) (DeadLetter, error) {
	var d DeadLetter
	if len(rec) < 33 || rec[0] != kindDeadLetter {
		return d, errBadRecord
	}
	d.ID = binary.BigEndian.Uint64(rec[1:9])
	d.EnqueuedAt = time.Unix(0, int64(binary.BigEndian.Uint64(rec[9:17]))).UTC()
	d.FailedAt = time.Unix(0, int64(binary.BigEndian.Uint64(rec[17:25]))).UTC()
	d.Attempts = int(binary.BigEndian.Uint32(rec[25:29]))
	e := int(binary.BigEndian.Uint32(rec[29:33]))
	if len(rec)-33 < e {
		return d, errBadRecord
	}
	d.LastError = string(rec[33 : 33+e])
	d.Payload = bytes.Clone(rec[33+e:])
	return d, nil
}

// Mark actions.
const (
	MarkReplayed  = 1
	MarkDiscarded = 2
)

type mark struct {
	id       uint64
	at       time.Time
	action   byte
	replayID uint64 // the message a replay appended; 0 when not recorded
}

func appendMarkRecord(dst []byte, m mark) []byte {
	dst = append(dst, kindMark)
	dst = binary.BigEndian.AppendUint64(dst, m.id)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.at.UnixNano()))
	dst = append(dst, m.action)
	if m.replayID != 0 {
		dst = binary.BigEndian.AppendUint64(dst, m.replayID)
	}
	return dst
}

func decodeMark(rec []byte) (mark, error) {
	if len(rec) != 18 && len(rec) != 26 || rec[0] != kindMark {
		return mark{}, errBadRecord
	}
	m := mark{
		id:     binary.BigEndian.Uint64(rec[1:9]),
		at:     time.Unix(0, int64(binary.BigEndian.Uint64(rec[9:17]))).UTC(),
		action: rec[17],
	}
	if len(rec) == 26 {
		m.replayID = binary.BigEndian.Uint64(rec[18:26])
	}
	return m, nil
}

// Damage is a part of a log that did not verify: a torn tail (truncated at
// open) or a quarantined frame (skipped, never delivered).
type Damage struct {
	File   string // segment.log, segment.log.retry, dlq.log, dlq.log.acked
	Offset int64
	Length int64
	// ID is the id the damaged frame's record holds (the 8 bytes after its
	// kind) when they are in the file, else 0: read from bytes whose CRC
	// failed, so the damage may be in it, and said as the frame holds it,
	// never as the message's (idText). Of a retry whose carried message
	// did not verify as it was read back, it is the retry's, which the
	// schedule verified.
	ID uint64
	// Torn is true for a torn tail: no frame verifies after it, and it is
	// a write a crash cut short (a frame incomplete, or a whole one with a
	// zeroed sector), which recovery truncates. A last frame that is whole
	// but damaged otherwise is damage like any other, Torn false.
	Torn   bool
	Reason string
}

// logAttrs are the attributes of a queue_damage line that say what d is.
func (d Damage) logAttrs() []any {
	return []any{"file", d.File, "offset", d.Offset, "length", d.Length, "msg_id", d.ID, "torn", d.Torn, "reason", d.Reason}
}

func (d Damage) String() string {
	what := "quarantined a damaged frame"
	switch {
	case d.File == ckptFile && d.Torn:
		what = "read a torn checkpoint as 0"
	case d.File == ckptFile:
		what = "read a damaged checkpoint as 0"
	case d.File == seqFile && d.Torn:
		what = "rebuilt a torn id counter"
	case d.File == seqFile:
		what = "rebuilt a damaged id counter"
	case d.Torn:
		what = "truncated a torn tail"
	}
	return fmt.Sprintf("%s: %s at offset %d (%d bytes%s): %s", d.File, what, d.Offset, d.Length, d.idText(), d.Reason)
}

// idText is how the texts of a damage found by a scan say its id: as the
// damaged frame holds it, which no CRC vouched for (a flipped bit in it
// names another message, or none); "" when no id was read.
func (d Damage) idText() string {
	if d.ID == 0 {
		return ""
	}
	return fmt.Sprintf(", id=%d as the damaged frame holds it", d.ID)
}

// DeadLetterText says what damage in a dead-letter file means for the
// listing, as nexus dlq list and the UI say it: a dead letter of dlq.log
// that cannot be read is not listed; a mark of dlq.log.acked that cannot
// be read is not applied, so the dead letter it marked is listed as
// pending.
func (d Damage) DeadLetterText() string {
	what := "a damaged dead letter at offset %d (%d bytes%s) is not listed"
	if d.File != dlqFile {
		what = "a damaged replay or discard mark at offset %d (%d bytes%s): the dead letter it marked is listed as pending"
	}
	return fmt.Sprintf("%s: "+what+": %s", d.File, d.Offset, d.Length, d.idText(), d.Reason)
}

// frameAt reads the frame at off of a file of the given size. It returns
// the record and the frame's total length, or why the frame does not
// verify. It never allocates more than the file holds.
func frameAt(r io.ReaderAt, off, size int64) (rec []byte, n int64, reason string, err error) {
	return frameAtBuf(r, off, size, nil)
}

// frameAtBuf is frameAt reading the record into buf when it has the
// capacity, into a new slice otherwise.
func frameAtBuf(r io.ReaderAt, off, size int64, buf []byte) (rec []byte, n int64, reason string, err error) {
	if size-off < headerSize {
		return nil, 0, "an incomplete frame header", nil
	}
	var h [headerSize]byte
	if _, err := r.ReadAt(h[:], off); err != nil {
		return nil, 0, "", err
	}
	if !bytes.Equal(h[:4], frameMagic[:]) {
		return nil, 0, "no frame marker", nil
	}
	length := int64(binary.BigEndian.Uint32(h[4:8]))
	if length > maxFrameRecord {
		return nil, 0, fmt.Sprintf("a length of %d bytes, over the limit", length), nil
	}
	if length > size-off-headerSize {
		return nil, 0, fmt.Sprintf("a length of %d bytes, past the end of the file", length), nil
	}
	if int64(cap(buf)) >= length {
		rec = buf[:length]
	} else {
		rec = make([]byte, length)
	}
	if _, err := r.ReadAt(rec, off+headerSize); err != nil {
		return nil, 0, "", err
	}
	if frameCRC(h[:], rec) != binary.BigEndian.Uint32(h[8:12]) {
		return rec, 0, "a CRC that does not match", nil
	}
	return rec, headerSize + length, "", nil
}

// Sizes of frameHeadAt's buffers: what it keeps of a record (enough for
// the header fields of every record kind: a dead letter's, its last error
// at MaxLastError, need the most, 33+4096 bytes; a retry that carries its
// message needs 29+9+255+2+1024), and the rest of the record is read
// through, a part at a time, to check its CRC.
const (
	recordHead  = deadLetterFields + MaxLastError
	crcStreamed = 64 << 10
)

// frameHeadAt verifies the frame at off of a file of the given size as
// frameAt does, reading its record through stream (crcStreamed bytes at a
// time) to check its CRC rather than whole into memory. It returns the
// record's first bytes (up to len(head), in head), the record's length
// and the frame's; head is non-nil when the record is whole in the file,
// even when its CRC fails (as frameAt's record is), and length is -1
// otherwise. The frame's header is read into h (a new one when h is
// nil): the frame's, as it verified, when n > 0.
func frameHeadAt(r io.ReaderAt, off, size int64, h *[headerSize]byte, head, stream []byte) (rec []byte, length, n int64, reason string, err error) {
	if size-off < headerSize {
		return nil, -1, 0, "an incomplete frame header", nil
	}
	if h == nil {
		h = new([headerSize]byte)
	}
	if _, err := r.ReadAt(h[:], off); err != nil {
		return nil, -1, 0, "", err
	}
	if !bytes.Equal(h[:4], frameMagic[:]) {
		return nil, -1, 0, "no frame marker", nil
	}
	length = int64(binary.BigEndian.Uint32(h[4:8]))
	if length > maxFrameRecord {
		return nil, -1, 0, fmt.Sprintf("a length of %d bytes, over the limit", length), nil
	}
	if length > size-off-headerSize {
		return nil, -1, 0, fmt.Sprintf("a length of %d bytes, past the end of the file", length), nil
	}
	rec = head[:min(length, int64(len(head)))]
	if len(rec) > 0 {
		if _, err := r.ReadAt(rec, off+headerSize); err != nil {
			return nil, -1, 0, "", err
		}
	}
	crc := crc32.Update(crc32.Update(0, castagnoli, h[4:8]), castagnoli, rec)
	crc, err = crcThrough(r, off+headerSize+int64(len(rec)), length-int64(len(rec)), crc, stream)
	if err != nil {
		return nil, -1, 0, "", err
	}
	if crc != binary.BigEndian.Uint32(h[8:12]) {
		return rec, length, 0, "a CRC that does not match", nil
	}
	return rec, length, headerSize + length, "", nil
}

// crcThrough is crc updated with the n bytes of r at off, read through
// stream a part at a time: a check of a record of 64 MiB holds no more
// than stream. A read that ends at the end of the file may say io.EOF
// with all its bytes (io.ReaderAt allows it), which is no error.
func crcThrough(r io.ReaderAt, off, n int64, crc uint32, stream []byte) (uint32, error) {
	for pos := int64(0); pos < n; {
		part := stream[:min(n-pos, int64(len(stream)))]
		if k, err := r.ReadAt(part, off+pos); err != nil && (k < len(part) || !errors.Is(err, io.EOF)) {
			return crc, err
		}
		crc = crc32.Update(crc, castagnoli, part)
		pos += int64(len(part))
	}
	return crc, nil
}

// nextFrame finds the first offset after off where a frame verifies, or -1.
func nextFrame(r io.ReaderAt, off, size int64) (int64, error) {
	return nextFrameBuf(r, off, size, nil)
}

// nextFrameChunk is how much of a file nextFrame reads at a time, at most.
// It reads nextFrameFirst bytes first, then twice as many each time: the
// next frame is most often near (a damaged frame is one of many small
// ones), and a scan past thousands of damaged frames read 64 KiB for each.
const (
	nextFrameChunk = 64 << 10
	nextFrameFirst = 4 << 10
	// nextFrameBufSize is the size of nextFrameBuf's buffer: a chunk and
	// the 3 bytes after it, and a buffer to check a candidate's CRC
	nextFrameBufSize = nextFrameChunk + 3 + crcStreamed
)

// nextFrameBuf is nextFrame reading into buf, when it holds
// nextFrameBufSize bytes, else into a buffer of its own: a scan past many
// damaged frames reuses one. The file is searched nextFrameChunk+3 bytes
// at a time, and each candidate's CRC checked through the rest of buf
// (crcStreamed bytes, as frameHeadAt does): a candidate whose record is
// 64 MiB, valid or damaged, is not read into memory.
func nextFrameBuf(r io.ReaderAt, off, size int64, buf []byte) (int64, error) {
	if len(buf) < nextFrameBufSize {
		buf = make([]byte, nextFrameBufSize)
	}
	buf, stream := buf[:nextFrameChunk+3], buf[nextFrameChunk+3:nextFrameBufSize]
	chunk := int64(nextFrameFirst)
	for pos := off + 1; pos < size; pos, chunk = pos+chunk, min(2*chunk, nextFrameChunk) {
		// 3 bytes more than the chunk: a marker that begins in its last 3
		// is seen whole
		n, err := r.ReadAt(buf[:min(chunk+3, size-pos)], pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		for i := 0; i+4 <= n; {
			j := bytes.Index(buf[i:n], frameMagic[:])
			if j < 0 {
				break
			}
			cand := pos + int64(i+j)
			if _, _, fn, _, err := frameHeadAt(r, cand, size, nil, nil, stream); err != nil {
				return -1, err
			} else if fn > 0 {
				return cand, nil
			}
			i += j + 1
		}
	}
	return -1, nil
}

// scanEach walks the frames of a file from off, calling fn for each
// verified record and damaged with each damage it finds, in file order (a
// reader that keeps only some holds no more, whatever the file holds): a
// torn tail (nothing verifies up to the end) ends the scan at its start; a
// damaged frame followed by a valid one is skipped. It returns the end of
// the last verified frame. The frames are read readAhead bytes at a time
// (two reads a frame took a system call each: 0.3 s for a log of 200,000
// messages), and each record into one buffer, the largest so far: rec is
// fn's until fn returns, and a caller that keeps it copies it (a new
// record for each frame allocated as much as the file held: 1.2 GB for a
// dlq.log of 1,200 dead letters of 1 MiB). A reader that needs a record's
// first bytes only scans with scanHeads, which holds no whole record.
func scanEach(r io.ReaderAt, file string, off, size int64, fn func(rec []byte, off int64) error, damaged func(Damage)) (end int64, err error) {
	window := &windowReader{r: r, size: size}
	var searchBuf []byte // nextFrame's, made at the first damage
	var recBuf []byte    // the records', the largest so far
	for off < size {
		rec, n, reason, err := frameAtBuf(window, off, size, recBuf)
		if err != nil {
			return off, err
		}
		if cap(rec) > cap(recBuf) {
			recBuf = rec[:0]
		}
		if n > 0 {
			if err := fn(rec, off); err != nil {
				return off, err
			}
			off += n
			continue
		}
		whole := int64(-1)
		if rec != nil {
			whole = int64(len(rec))
		}
		d, next, err := frameDamage(window, r, file, off, size, reason, whole, &searchBuf)
		if err != nil {
			return off, err
		}
		damaged(d)
		if next < 0 {
			return off, nil
		}
		off = next
	}
	return off, nil
}

// scanHeads is scanEach for a reader that needs each record's first
// bytes only: each frame's CRC is checked through a fixed buffer
// (frameHeadAt), and fn gets the record's first recordHead bytes at most
// (head, fn's until it returns) and its length. A scan of a file of
// records of 64 MiB holds some 100 KiB, not one record.
func scanHeads(r io.ReaderAt, file string, off, size int64, fn func(head []byte, length, off int64) error, damaged func(Damage)) (end int64, err error) {
	return scanFrameHeads(r, file, off, size, func(_ *[headerSize]byte, head []byte, length, off int64) error {
		return fn(head, length, off)
	}, damaged)
}

// scanFrameHeads is scanHeads calling fn with each verified frame's
// header too (h, fn's until it returns), as it was read and verified.
func scanFrameHeads(r io.ReaderAt, file string, off, size int64, fn func(h *[headerSize]byte, head []byte, length, off int64) error, damaged func(Damage)) (end int64, err error) {
	window := &windowReader{r: r, size: size}
	var searchBuf []byte // nextFrame's, made at the first damage
	head := make([]byte, recordHead)
	var h [headerSize]byte
	var stream []byte // made for the first record longer than head
	for off < size {
		if stream == nil && size-off > headerSize+recordHead {
			stream = make([]byte, crcStreamed)
		}
		rec, length, n, reason, err := frameHeadAt(window, off, size, &h, head, stream)
		if err != nil {
			return off, err
		}
		if n > 0 {
			if err := fn(&h, rec, length, off); err != nil {
				return off, err
			}
			off += n
			continue
		}
		d, next, err := frameDamage(window, r, file, off, size, reason, length, &searchBuf)
		if err != nil {
			return off, err
		}
		damaged(d)
		if next < 0 {
			return off, nil
		}
		off = next
	}
	return off, nil
}

// frameDamage is the damage a scan finds at off, where the frame does not
// verify (reason; whole is the length of its record when it is whole in
// the file, else -1), and where the scan goes on: the next frame that
// verifies, or -1 when none does (a tail, torn or damaged, to the end).
// window is the scan's reader of the file r; *searchBuf is the search's
// buffer, made at the first call.
func frameDamage(window, r io.ReaderAt, file string, off, size int64, reason string, whole int64, searchBuf *[]byte) (Damage, int64, error) {
	d := Damage{File: file, Offset: off, Reason: reason}
	// the id where it is readable: the 8 bytes after the kind byte
	// (read before the search, from the window that holds the frame)
	var id [8]byte
	if off+headerSize+9 <= size {
		if _, err := window.ReadAt(id[:], off+headerSize+1); err == nil {
			d.ID = binary.BigEndian.Uint64(id[:])
		}
	}
	if *searchBuf == nil {
		*searchBuf = make([]byte, nextFrameBufSize)
	}
	// through the window too: the search's first reads are small, and
	// the frames after a damaged one are most often in the window
	// already, read once for the search and the scan
	next, err := nextFrameBuf(window, off, size, *searchBuf)
	if err != nil {
		return d, -1, err
	}
	if next < 0 {
		d.Length = size - off
		if d.Torn, err = tailTorn(r, off, size, whole); err != nil {
			return d, -1, err
		}
		return d, -1, nil
	}
	d.Length = next - off
	return d, next, nil
}

// tailTorn reports whether the tail of a file from off to size, where no
// frame verifies, is a write a crash cut short; whole is the length of
// the record of the frame at off when it is whole in the file but fails
// its checksum, else -1.
func tailTorn(r io.ReaderAt, off, size int64, whole int64) (bool, error) {
	if whole >= 0 {
		// whole: torn only if a sector's part of it is zeros
		return tornWrite(r, off, headerSize+whole)
	}
	return tornTail(r, off, size)
}

// tornTail reports whether the bytes from off to size, where no whole
// frame is, are a write a crash cut short: zeros (the file's size reached
// past its data), or a frame's header, whole or a prefix of it, whose
// record did not all arrive. A header that is not ours (a flipped marker),
// whose length is over the limit, or whose record is all there but for a
// damaged length (the checksum verifies with the length the file holds)
// is damage: a write cut short leaves what was written, not other bytes.
func tornTail(r io.ReaderAt, off, size int64) (bool, error) {
	n := min(size-off, headerSize)
	var h [headerSize]byte
	if _, err := r.ReadAt(h[:n], off); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if !bytes.Equal(h[:min(n, 4)], frameMagic[:min(n, 4)]) {
		// not our header: torn only as zeros, all the way
		zero := make([]byte, 64<<10)
		buf := make([]byte, len(zero))
		for pos := off; pos < size; pos += int64(len(buf)) {
			k := min(int64(len(buf)), size-pos)
			if _, err := r.ReadAt(buf[:k], pos); err != nil && !errors.Is(err, io.EOF) {
				return false, err
			}
			if !bytes.Equal(buf[:k], zero[:k]) {
				return false, nil
			}
		}
		return true, nil
	}
	if n < headerSize {
		return true, nil // a header cut short
	}
	if int64(binary.BigEndian.Uint32(h[4:8])) > maxFrameRecord {
		return false, nil // no length this log writes
	}
	// a length past the end: torn, a record that did not all arrive,
	// unless the rest of the file is the whole record and only the length
	// is damaged (its checksum verifies with the length the file has),
	// read through a buffer (crcThrough), not into memory whole
	rest := size - off - headerSize
	binary.BigEndian.PutUint32(h[4:8], uint32(rest))
	crc, err := crcThrough(r, off+headerSize, rest, crc32.Update(0, castagnoli, h[4:8]), make([]byte, min(rest, crcStreamed)))
	if errors.Is(err, io.EOF) {
		// the file cut short meanwhile: the record did not all arrive
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return crc != binary.BigEndian.Uint32(h[8:12]), nil
}

// nextAppend is where the next frame goes in a file of size bytes whose
// scan ended at end with damage: after a damaged last frame, which is
// kept (reported, and quarantined once a frame follows it), so that the
// offsets of a file never go back under a reader; at the start of a torn
// tail, which is cut.
func nextAppend(end, size int64, damage []Damage) int64 {
	if n := len(damage); n > 0 && !damage[n-1].Torn && damage[n-1].Offset+damage[n-1].Length == size {
		return size
	}
	return end
}

// sectorSize is the unit a disk writes whole, or not at all.
const sectorSize = 512

// tornWrite reports whether the frame of n bytes at off, whole in the file
// but failing its checksum, is a write a crash cut short rather than
// damage done after it was written. As etcd's WAL decides: a write cut
// short leaves the frame's part in some sector zeroed (the file's size
// reached the end of the write before all its data did), while damage (a
// flipped bit, a garbled block) leaves none. The parts are the frame's
// bytes in each 512-byte sector of the file, so the first and the last
// may be short: a frame whose own last bytes past a boundary are zeros
// cannot be told from a torn one (etcd's rule has the same limit). The
// frame is at the end of the file. It is read crcStreamed bytes at a
// time, whole sectors each (but the first and the last), not into memory
// whole.
func tornWrite(r io.ReaderAt, off, n int64) (bool, error) {
	// whole sectors, one more than a small frame spans at most
	buf := make([]byte, min(crcStreamed, (n/sectorSize+2)*sectorSize))
	for pos := off; pos < off+n; {
		// to a sector boundary (crcStreamed is a multiple of sectorSize)
		// or the frame's end
		part := buf[:min(pos/sectorSize*sectorSize+int64(len(buf)), off+n)-pos]
		if k, err := r.ReadAt(part, pos); err != nil && (k < len(part) || !errors.Is(err, io.EOF)) {
			return false, err
		}
		for start := pos; start < pos+int64(len(part)); {
			end := min((start/sectorSize+1)*sectorSize, pos+int64(len(part)))
			if !slices.ContainsFunc(part[start-pos:end-pos], func(b byte) bool { return b != 0 }) {
				return true, nil
			}
			start = end
		}
		pos += int64(len(part))
	}
	return false, nil
}

// frameIn verifies the frame at the start of b and returns its record and
// the frame's length; ok is false when b does not hold a whole frame that
// verifies.
func frameIn(b []byte) (rec []byte, n int, ok bool) {
	if len(b) < headerSize || [4]byte(b[:4]) != frameMagic {
		return nil, 0, false
	}
	length := int64(binary.BigEndian.Uint32(b[4:8]))
	if length > maxFrameRecord || length > int64(len(b)-headerSize) {
		return nil, 0, false
	}
	rec = b[headerSize : headerSize+length]
	if frameCRC(b, rec) != binary.BigEndian.Uint32(b[8:12]) {
		return nil, 0, false
	}
	return rec, headerSize + int(length), true
}

// windowReader serves a forward scan's small reads, up to size, from a
// window of the file read ahead; a read it cannot serve that way (larger
// than half the window, past size, or a window that could not be read
// whole, as when the file was cut short meanwhile) goes to the file as it
// is, with the file's own result. What the window serves is what the file
// held when the window was read: a scan of a log another process empties
// meanwhile reads what it held, or fails at the next window, never a mix
// within one window.
type windowReader struct {
	r     io.ReaderAt
	size  int64
	buf   []byte
	start int64 // the file offset of data[0]
	data  []byte
}

func (w *windowReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= w.start && off+int64(len(p)) <= w.start+int64(len(w.data)) {
		return copy(p, w.data[off-w.start:]), nil
	}
	if len(p) > readAhead/2 || off+int64(len(p)) > w.size {
		return w.r.ReadAt(p, off)
	}
	// no larger than what is left: most files scanned are small
	n := min(readAhead, w.size-off)
	if int64(len(w.buf)) < n {
		w.buf = make([]byte, n)
	}
	w.data = nil
	if _, err := w.r.ReadAt(w.buf[:n], off); err != nil {
		return w.r.ReadAt(p, off)
	}
	w.start, w.data = off, w.buf[:n]
	return copy(p, w.data), nil
}
