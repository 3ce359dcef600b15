package queue

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLostCounterWithAnEmptyRecordInTheDeadLetters: a dead letter's
// payload is the caller's bytes; when its frame in dlq.log is damaged, the
// scan resyncs on the next frame marker that verifies, which may be one
// inside that payload: a whole frame of length 0. With the id counter lost
// too, recovery's look for the highest id kept read its first byte and
// Open panicked.
func TestLostCounterWithAnEmptyRecordInTheDeadLetters(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	m, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	fake := appendFrame(nil, nil) // "NXQ1", length 0, a CRC that verifies
	payload := append(append([]byte(`{"x":"`), fake...), `"}`...)
	if err := q.MoveToDLQ(DeadLetter{ID: m.ID, EnqueuedAt: epoch, FailedAt: epoch, Attempts: 1, LastError: "x", Payload: payload}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	dir := filepath.Join(root, testTenant, testFlow)
	// one flipped bit in the dead letter's frame CRC, one in the counter
	flip := func(name string, off int64) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b[off] ^= 1
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	flip(dlqFile, 8)
	flip(seqFile, 6)

	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		if q, _, err := Open(root, testTenant, testFlow, Options{}); err == nil {
			q.Close()
		}
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("Open panicked: %v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open hung")
	}
}
