package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/nexushq/nexus/queue"
)

// deadLetterFrame is dlq.log's frame of d, as MoveToDLQ writes it (checked
// against it by TestDLQListHoldsIDsNotDeadLetters).
func deadLetterFrame(d queue.DeadLetter) []byte {
	rec := []byte{2} // a dead letter's kind
	rec = binary.BigEndian.AppendUint64(rec, d.ID)
	rec = binary.BigEndian.AppendUint64(rec, uint64(d.EnqueuedAt.UnixNano()))
	rec = binary.BigEndian.AppendUint64(rec, uint64(d.FailedAt.UnixNano()))
	rec = binary.BigEndian.AppendUint32(rec, uint32(d.Attempts))
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(d.LastError)))
	rec = append(append(rec, d.LastError...), d.Payload...)
	frame := append([]byte("NXQ1"), binary.BigEndian.AppendUint32(nil, uint32(len(rec)))...)
	table := crc32.MakeTable(crc32.Castagnoli)
	sum := crc32.Update(crc32.Checksum(frame[4:8], table), table, rec)
	return append(binary.BigEndian.AppendUint32(frame, sum), rec...)
}

// writeDeadLetters writes the dlq.log of acme/orders in a new state
// directory, in one go: n dead letters, the ith of them testDeadLetter(id(i)).
// It returns the state directory.
func writeDeadLetters(t *testing.T, n int, id func(i int) uint64) string {
	t.Helper()
	state := t.TempDir()
	dir := filepath.Join(state, "queues", "acme", "orders")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var file []byte
	for i := range n {
		file = append(file, deadLetterFrame(testDeadLetter(id(i)))...)
	}
	if err := os.WriteFile(filepath.Join(dir, "dlq.log"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	return state
}

// TestDLQListHoldsIDsNotDeadLetters: nexus dlq list of a queue of an
// outage holds each dead letter's id and offset (16 bytes) while it
// prints them, a thousand at a time, by id, each once; it held every
// dead letter and the whole listing before writing it: 1.3 KB a dead
// letter, 290 MB for 200,000 (a million: more than a gigabyte).
func TestDLQListHoldsIDsNotDeadLetters(t *testing.T) {
	if want := deadLetterBytes(t, 2); !bytes.Equal(append(deadLetterFrame(testDeadLetter(1)), deadLetterFrame(testDeadLetter(2))...), want) {
		t.Fatal("deadLetterFrame does not write what MoveToDLQ writes")
	}
	const n = 100000
	// not in id order: the listing sorts them
	state := writeDeadLetters(t, n, func(i int) uint64 { return uint64(i*7919%n + 1) })

	before := liveHeap()
	var stdout firstWriteHeap
	var stderr bytes.Buffer
	if code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus dlq list: exit %d: %s", code, stderr.String())
	}
	grew := int64(stdout.live) - int64(before)
	t.Logf("the live heap at the first write: %d KiB more than before the command", grew>>10)
	if grew > 6<<20 {
		t.Errorf("nexus dlq list of %d dead letters held %d MiB at its first write, want a few (16 bytes a dead letter)", n, grew>>20)
	}
	out := stdout.String()
	if header := fmt.Sprintf("DLQ: %d pending message(s)\n", n); !bytes.HasPrefix([]byte(out), []byte(header)) {
		t.Fatalf("output begins %.60q, want %q", out, header)
	}
	ids := regexp.MustCompile(`(?m)^  id=(\d+) tenant=acme flow=orders$`).FindAllStringSubmatch(out, -1)
	if len(ids) != n {
		t.Fatalf("%d dead letters listed, want %d", len(ids), n)
	}
	for i, m := range ids {
		if id, _ := strconv.Atoi(m[1]); id != i+1 {
			t.Fatalf("dead letter %d listed is id=%d, want id=%d (by id, each once)", i+1, id, i+1)
		}
	}
}

// TestDLQDiscardOneReadsIDs: nexus dlq discard (or replay) of one dead
// letter checks it is pending from the queue's pending ids (8 bytes a
// dead letter), not from every dead letter decoded: 127 MB to discard one
// of 241,000.
func TestDLQDiscardOneReadsIDs(t *testing.T) {
	const n = 100000
	state := writeDeadLetters(t, n, func(i int) uint64 { return uint64(i + 1) })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "discard", "--tenant", "acme", "--flow", "orders", "--id", "50000", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
	runtime.ReadMemStats(&after)
	if code != exitOK || !bytes.HasPrefix(stdout.Bytes(), []byte("discarded id=50000 tenant=acme flow=orders\n")) {
		t.Fatalf("nexus dlq discard: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("discarding one of %d dead letters allocated %d MiB", n, allocated>>20)
	if allocated > 32<<20 {
		t.Errorf("discarding one of %d dead letters allocated %d MiB, want at most 32 (their ids, not the dead letters)", n, allocated>>20)
	}
}

// onFirstWrite is a stdout that runs its hook once, at its first write.
type onFirstWrite struct {
	bytes.Buffer
	hook func()
}

func (w *onFirstWrite) Write(p []byte) (int, error) {
	if w.hook != nil {
		w.hook()
		w.hook = nil
	}
	return w.Buffer.Write(p)
}

// TestDLQListSaysWhatWentWhilePrinting: a dead letter that nexus dlq list
// counted, and that is discarded and rewritten out of dlq.log before it
// is printed, is not printed, and stderr says so, naming the queue;
// the total of the first line was left unexplained.
func TestDLQListSaysWhatWentWhilePrinting(t *testing.T) {
	state := t.TempDir()
	// acme/a: a first write's worth of dead letters, printed first
	a, _ := deadLetterQueueOf(t, state, "a", dlqListLines)
	a.Close()
	b, _ := deadLetterQueue(t, state, 3) // acme/orders, after acme/a
	defer b.Close()
	stdout := &onFirstWrite{hook: func() {
		// while acme/a is printed: acme/orders' id 2 discarded and rewritten away
		if err := b.Mark(2, queue.MarkDiscarded); err != nil {
			t.Error(err)
		}
		if _, _, err := b.CompactDLQ(); err != nil {
			t.Error(err)
		}
	}}
	var stderr bytes.Buffer
	if code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, stdout, &stderr); code != exitOK {
		t.Fatalf("nexus dlq list: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if header := fmt.Sprintf("DLQ: %d pending message(s)\n", dlqListLines+3); !bytes.HasPrefix([]byte(out), []byte(header)) {
		t.Fatalf("output begins %.60q, want %q", out, header)
	}
	got := regexp.MustCompile(`(?m)^  id=(\d+) tenant=acme flow=orders$`).FindAllStringSubmatch(out, -1)
	if len(got) != 2 || got[0][1] != "1" || got[1][1] != "3" {
		t.Errorf("acme/orders listed %v, want ids 1 and 3", got)
	}
	want := "nexus dlq list: acme/orders: 1 dead letter counted above was replayed or discarded, and rewritten out of dlq.log, before it was printed\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}
