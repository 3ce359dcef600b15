package queue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The queue most tests use.
const (
	testTenant = "acme"
	testFlow   = "orders"
)

// epoch is the fake clocks' starting time.
var epoch = time.Date(2026, 8, 9, 14, 2, 11, 123456789, time.UTC)

// openQueue opens tenant/flow under root and closes it when the test ends.
func openQueue(t testing.TB, root string, opts Options) (*Queue, []Damage) {
	t.Helper()
	q, damage, err := Open(root, testTenant, testFlow, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q, damage
}

// memQueueRoot returns a memFS and a root for queues on it. The append lock
// is a real file (flock works on real files only), so the queue's folder
// also exists on disk, under a real temporary folder: Open cannot create it
// through the FS.
func memQueueRoot(t testing.TB) (*memFS, string) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, testTenant, testFlow), 0o755); err != nil {
		t.Fatal(err)
	}
	return newMemFS(root), root
}

// settledMemQueue is a memFS holding a queue that was opened once before,
// with every file in place and durable: the folder, segment.log, dlq.log
// and dlq.log.acked.
func settledMemQueue(t testing.TB) (*memFS, string) {
	t.Helper()
	m, root := memQueueRoot(t)
	settle(t, m, root)
	return m, root
}

// settledMemQueueAt is settledMemQueue on a new memFS over root, a folder
// memQueueRoot made (the queue's folder on disk, for the append lock): a
// test of many cases, each on a fresh memFS, makes one folder for them
// all.
func settledMemQueueAt(t testing.TB, root string) *memFS {
	t.Helper()
	m := newMemFS(root)
	settle(t, m, root)
	return m
}

// settle opens the queue on m under root once, creates its dead-letter
// files and makes everything durable.
func settle(t testing.TB, m *memFS, root string) {
	t.Helper()
	q, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	for _, name := range []string{dlqFile, ackedFile} {
		f, err := m.OpenFile(filepath.Join(root, testTenant, testFlow, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	m.SyncAll()
}

// payload is the JSON payload of the i-th message of a test: distinct for
// each i, size bytes long (at least 20).
func payload(i, size int) []byte {
	p := fmt.Appendf(make([]byte, 0, max(size, 32)), `{"n":%d,"pad":"`, i)
	// byte k is 'a'+(i+k)%26: runs of the alphabet, a copy each (a byte
	// at a time was a tenth of the crash tests' time under -race)
	for len(p) < size-2 {
		from := (i + len(p)) % 26
		p = append(p, alphabets[from:from+min(26, size-2-len(p))]...)
	}
	return append(p, `"}`...)
}

// alphabets is the alphabet twice: any 26 letters of it in a row follow
// one another in the alphabet, from z to a.
const alphabets = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"

// newMessage is the i-th message of a test.
func newMessage(i, size int) NewMessage {
	return NewMessage{Source: "enqueue", CorrelationID: fmt.Sprintf("corr-%d", i), Payload: payload(i, size)}
}

// readAll reads a queue's log from the start to io.EOF.
func readAll(t testing.TB, q *Queue) []Message {
	t.Helper()
	var out []Message
	for off := int64(0); ; {
		m, next, err := q.Read(off)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if next <= off {
			t.Fatalf("Read(%d) did not move on: next %d", off, next)
		}
		out = append(out, m)
		off = next
	}
}

// sameMessage reports how got differs from want, or "".
func sameMessage(got, want Message) string {
	switch {
	case got.ID != want.ID:
		return fmt.Sprintf("id %d, want %d", got.ID, want.ID)
	case got.Offset != want.Offset:
		return fmt.Sprintf("id %d: offset %d, want %d", got.ID, got.Offset, want.Offset)
	case !got.EnqueuedAt.Equal(want.EnqueuedAt):
		return fmt.Sprintf("id %d: enqueued at %v, want %v", got.ID, got.EnqueuedAt, want.EnqueuedAt)
	case got.Source != want.Source || got.CorrelationID != want.CorrelationID:
		return fmt.Sprintf("id %d: source %q correlation %q, want %q %q", got.ID, got.Source, got.CorrelationID, want.Source, want.CorrelationID)
	case !bytes.Equal(got.Payload, want.Payload):
		return fmt.Sprintf("id %d: payload %q, want %q", got.ID, got.Payload, want.Payload)
	}
	return ""
}

// checkMessages fails the test when got is not want, message for message.
func checkMessages(t testing.TB, got, want []Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("read %d messages, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if d := sameMessage(got[i], want[i]); d != "" {
			t.Errorf("message %d: %s", i, d)
		}
	}
}

// fileBytes reads a file of the queue tenant/flow under root on fsys.
func fileBytes(t testing.TB, fsys FS, root, name string) []byte {
	t.Helper()
	b, err := readFile(fsys, filepath.Join(root, testTenant, testFlow, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// figure is a test's count: ci in the suite, short with -short, and soak
// when NEXUS_SOAK is set (`just soak`: the reliability plan's nightly tier,
// docs/reliability.md).
func figure(ci, short, soak int) int {
	switch {
	case os.Getenv("NEXUS_SOAK") != "":
		return soak
	case testing.Short():
		return short
	}
	return ci
}

// readFile reads a whole file of fsys; a missing file is nil, no error.
func readFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, info.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

// readRecords returns the verified records of a file of the queue.
func (q *Queue) readRecords(name string) ([][]byte, []Damage, error) {
	var recs [][]byte
	damage, err := q.eachRecord(name, func(rec []byte) error {
		recs = append(recs, bytes.Clone(rec))
		return nil
	})
	return recs, damage, err
}

// appendProcessed appends n messages of size bytes to q and saves the
// checkpoint at the log's end, as a worker that processed them all
// would; it returns the last message.
func appendProcessed(t testing.TB, q *Queue, n, size int) Message {
	t.Helper()
	var last Message
	for i := range n {
		var err error
		if last, err = q.Append(newMessage(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	end, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(end); err != nil {
		t.Fatal(err)
	}
	return last
}
