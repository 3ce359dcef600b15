package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// seedLogs are logs to start fuzzing from: valid ones and damaged ones.
func seedLogs() [][]byte {
	var valid []byte
	for i := range 4 {
		m := Message{ID: uint64(i + 1), EnqueuedAt: epoch, Source: "enqueue", CorrelationID: "c", Payload: payload(i, 30+20*i)}
		valid = appendFrame(valid, appendMessageRecord(nil, &m))
	}
	flipped := slices.Clone(valid)
	flipped[len(valid)/2] ^= 4
	lying := slices.Clone(valid)
	binary.BigEndian.PutUint32(lying[4:], 1<<31)
	dead := appendFrame(valid[:len(valid):len(valid)], appendDeadLetterRecord(nil, ptr(deadLetter(9))))
	return [][]byte{
		nil,
		valid,
		valid[:len(valid)-7],
		flipped,
		lying,
		dead,
		append(slices.Clone(valid), make([]byte, 600)...),
		[]byte("NXQ1"),
		bytes.Repeat([]byte("NXQ1\x00\x00\x00\x10"), 8),
	}
}

// FuzzRecover opens arbitrary bytes as segment.log: Open does not fail or
// panic, every message Read returns comes from a frame that verifies, a
// second Open finds no torn tail and changes nothing, and appends work.
func FuzzRecover(f *testing.F) {
	for _, seg := range seedLogs() {
		f.Add(seg)
	}
	root := f.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	f.Fuzz(func(t *testing.T, seg []byte) {
		m := newMemFS(root)
		m.MkdirAll(dir, 0o755)
		file, _ := m.OpenFile(filepath.Join(dir, segmentFile), os.O_RDWR|os.O_CREATE, 0o644)
		file.WriteAt(seg, 0)
		file.Close()

		q, damage, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		size, _ := q.Size()
		recovered := fileBytes(t, m, root, segmentFile)
		if !bytes.Equal(recovered, seg[:size]) {
			t.Fatalf("recovery did more than cut the log at %d", size)
		}
		for off := int64(0); ; {
			msg, next, err := q.Read(off)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			// the frame, checked by hand
			at := msg.Offset
			if at < off || at+headerSize > size || !bytes.Equal(recovered[at:at+4], []byte("NXQ1")) {
				t.Fatalf("Read(%d) returned a message at %d with no frame", off, at)
			}
			n := int64(binary.BigEndian.Uint32(recovered[at+4:]))
			if at+headerSize+n != next || next > size {
				t.Fatalf("Read(%d): frame at %d of %d bytes, next %d", off, at, n, next)
			}
			crc := crc32.Update(crc32.Checksum(recovered[at+4:at+8], table), table, recovered[at+headerSize:next])
			if crc != binary.BigEndian.Uint32(recovered[at+8:]) {
				t.Fatalf("Read(%d) delivered a frame at %d whose CRC does not verify", off, at)
			}
			if want, err := decodeMessage(recovered[at+headerSize:next], at); err != nil || sameMessage(msg, want) != "" {
				t.Fatalf("Read(%d) = %+v, the frame holds %+v (%v)", off, msg, want, err)
			}
			off = next
		}
		q.Close()

		q, again, err := Open(root, testTenant, testFlow, Options{FS: m})
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		defer q.Close()
		if s, _ := q.Size(); s != size {
			t.Fatalf("second Open changed the size from %d to %d", size, s)
		}
		var first []Damage
		for _, d := range damage {
			if !d.Torn {
				first = append(first, Damage{Offset: d.Offset, Length: d.Length})
			}
		}
		var second []Damage
		for _, d := range again {
			if d.Torn {
				t.Fatalf("second Open found a torn tail: %v", d)
			}
			second = append(second, Damage{Offset: d.Offset, Length: d.Length})
		}
		if !slices.Equal(first, second) {
			t.Fatalf("second Open reported %v, the first %v", again, damage)
		}

		added, err := q.Append(newMessage(1, 30))
		if err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
		if got, _, err := q.Read(added.Offset); err != nil || sameMessage(got, added) != "" {
			t.Fatalf("the appended message reads back as %+v, %v", got, err)
		}
	})
}
