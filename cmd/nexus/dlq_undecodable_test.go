package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/queue"
)

// undecodeDeadLetter rewrites the frame of dead letter 2 in the dlq.log of
// dir (dead letters 1 to 3 of deadLetterQueue) so that it verifies but its
// record cannot be decoded: its last error is said to run past the
// record's end. It returns the frame's offset and record length.
func undecodeDeadLetter(t *testing.T, dir string) (off, length int) {
	t.Helper()
	path := filepath.Join(dir, "dlq.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off = len(deadLetterFrame(testDeadLetter(1)))
	length = int(binary.BigEndian.Uint32(b[off+4 : off+8]))
	rec := b[off+12 : off+12+length]
	binary.BigEndian.PutUint32(rec[29:33], uint32(length))
	table := crc32.MakeTable(crc32.Castagnoli)
	binary.BigEndian.PutUint32(b[off+8:off+12], crc32.Update(crc32.Checksum(b[off+4:off+8], table), table, rec))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return off, length
}

// TestDLQListReportsAnUndecodableDeadLetter: a dead letter whose frame
// verifies but whose record cannot be decoded is not listed, and nexus dlq
// list says so on stderr as it says a damaged frame, naming its offset and
// id; the listing of the others is as ever. It was left out in silence.
func TestDLQListReportsAnUndecodableDeadLetter(t *testing.T) {
	state := t.TempDir()
	q, dir := deadLetterQueue(t, state, 3)
	q.Close()
	off, length := undecodeDeadLetter(t, dir)
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
	if code != exitOK || !strings.HasPrefix(stdout.String(), "DLQ: 2 pending message(s)\n") || strings.Contains(stdout.String(), "id=2 ") {
		t.Errorf("exit %d, stdout:\n%s\nwant exit 0 and dead letters 1 and 3", code, stdout.String())
	}
	want := fmt.Sprintf("nexus dlq list: acme/orders: dlq.log: a damaged dead letter at offset %d (%d bytes, id=2 as the damaged frame holds it) is not listed: record cannot be decoded: its last error of %d bytes runs past the end of the record (%d bytes)\n",
		off, 12+length, length, length)
	if stderr.String() != want {
		t.Errorf("stderr:\n%q\nwant\n%q", stderr.String(), want)
	}
}

// TestDLQReplayAllLeavesAnUndecodableDeadLetter: nexus dlq replay --all
// replays the other dead letters and leaves one whose record cannot be
// decoded pending, with a line on stderr saying why and that it can be
// discarded, and exits 1; it was passed over in silence, the command
// saying nothing of the dead letter it had counted.
func TestDLQReplayAllLeavesAnUndecodableDeadLetter(t *testing.T) {
	state := t.TempDir()
	db := filepath.Join(state, "registry.db")
	deployOrders(t, db)
	q, dir := deadLetterQueue(t, state, 3)
	q.Close()
	off, length := undecodeDeadLetter(t, dir)
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "replay", "--tenant", "acme", "--flow", "orders", "--all", "--db", db}, &stdout, &stderr)
	wantErr := fmt.Sprintf("nexus dlq replay: left pending: queue acme/orders: dead letter 2 cannot be replayed: its record at offset %d of dlq.log cannot be decoded (its last error of %d bytes runs past the end of the record (%d bytes)): discard it\n",
		off, length, length)
	if want := "replayed  id=1 tenant=acme flow=orders\nreplayed  id=3 tenant=acme flow=orders\n"; code != exitError || stdout.String() != want || stderr.String() != wantErr {
		t.Errorf("replay --all: exit %d, stdout %q, stderr %q; want exit 1, %q and %q", code, stdout.String(), stderr.String(), want, wantErr)
	}
	ids, err := peekPending(t, state)
	if err != nil || len(ids) != 1 || ids[0] != 2 {
		t.Errorf("pending after replay --all: %v, %v; want 2 alone", ids, err)
	}

	// discard --all takes it with the others: its frame verifies, so its
	// id is the one written
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"dlq", "discard", "--tenant", "acme", "--flow", "orders", "--all", "--db", db}, &stdout, &stderr)
	if code != exitOK || !strings.HasPrefix(stdout.String(), "discarded id=2 tenant=acme flow=orders\n") || stderr.Len() != 0 {
		t.Errorf("discard --all: exit %d, stdout %q, stderr %q; want exit 0 and dead letter 2 discarded", code, stdout.String(), stderr.String())
	}
	if ids, err := peekPending(t, state); err != nil || len(ids) != 0 {
		t.Errorf("pending after discard --all: %v, %v; want none", ids, err)
	}
}

// peekPending is the pending ids of acme/orders under state.
func peekPending(t *testing.T, state string) ([]uint64, error) {
	t.Helper()
	q, err := queue.Peek(filepath.Join(state, "queues"), "acme", "orders", nil)
	if err != nil {
		return nil, err
	}
	return q.PendingIDs()
}
