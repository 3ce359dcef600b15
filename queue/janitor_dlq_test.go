package queue

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// TestJanitorAndTheDeadLetterFiles: what the housekeeping of idle queues
// (Manager.sweepIdle, no worker anywhere) does with a queue whose log is
// all processed, by what its dead-letter files hold. A queue whose dead
// letters were all discarded keeps its files: queues-retries-dlq.md says
// the body leaves the disk at the flow's next drain, the worker's, which
// logs dlq_discarded for each (and "a flow with no running worker never
// closes it"); the janitor deleting dlq.log would take the body without
// that line, as only a drain may. A damaged frame is evidence an operator
// may need (nexus dlq list names it; only the worker's rewrite drops it,
// logging queue_damage), and a pending dead letter is never deleted. A
// torn tail alone (a dead letter a crash cut short, never durable, so its
// message never left the log) holds nothing: that queue's files go.
func TestJanitorAndTheDeadLetterFiles(t *testing.T) {
	flip := func(t *testing.T, q *Queue, at int) { // a byte of dlq.log, bit rot
		t.Helper()
		path := filepath.Join(q.dir, dlqFile)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mark := func(t *testing.T, q *Queue, ids ...uint64) {
		t.Helper()
		for _, id := range ids {
			if err := q.Mark(id, MarkDiscarded); err != nil {
				t.Fatal(err)
			}
		}
	}
	frameLen := len(appendFrame(nil, appendDeadLetterRecord(nil, ptr(deadLetter(1)))))
	tests := []struct {
		flow  string
		setup func(t *testing.T, q *Queue)
		kept  bool
	}{
		{"all-discarded", func(t *testing.T, q *Queue) {
			moveToDLQ(t, q, 1, 2)
			mark(t, q, 1, 2)
		}, true},
		{"all-discarded-and-rewritten", func(t *testing.T, q *Queue) { // the worker's drain applied the marks
			moveToDLQ(t, q, 1, 2)
			mark(t, q, 1, 2)
			if _, _, err := q.CompactDLQ(); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"one-pending-one-discarded", func(t *testing.T, q *Queue) {
			moveToDLQ(t, q, 1, 2)
			mark(t, q, 1)
		}, true},
		{"a-damaged-frame-only", func(t *testing.T, q *Queue) {
			moveToDLQ(t, q, 1)
			flip(t, q, headerSize+12) // inside the record: whole, its checksum fails
		}, true},
		{"a-damaged-frame-the-rest-discarded", func(t *testing.T, q *Queue) {
			moveToDLQ(t, q, 1, 2)
			mark(t, q, 2)
			flip(t, q, headerSize+12) // the first, whose id is not marked
		}, true},
		{"a-torn-tail-only", func(t *testing.T, q *Queue) {
			frame := appendFrame(nil, appendDeadLetterRecord(nil, ptr(deadLetter(1))))
			if err := os.WriteFile(filepath.Join(q.dir, dlqFile), frame[:frameLen/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	root := t.TempDir()
	before := map[string]map[string][]byte{} // flow: file: bytes
	for _, tt := range tests {
		q, _, err := Open(root, testTenant, tt.flow, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		end, err := q.Size()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.SaveCheckpoint(end); err != nil { // processed
			t.Fatal(err)
		}
		tt.setup(t, q)
		q.Close()
		before[tt.flow] = map[string][]byte{}
		for _, name := range []string{dlqFile, ackedFile} {
			if b, err := os.ReadFile(filepath.Join(root, testTenant, tt.flow, name)); err == nil {
				before[tt.flow][name] = b
			}
		}
	}

	var logs jsonlogtest.Buffer
	clk := clocktest.New(epoch)
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Clock: clk, Now: clk.Now, Poll: time.Hour, Logger: logs.Logger(0)})
	defer m.Stop()
	m.sweepIdle()

	var wantDeleted, deleted []string
	for _, e := range logs.Events(t, "queue_files_deleted") {
		deleted = append(deleted, e["flow"].(string))
	}
	for _, tt := range tests {
		if !tt.kept {
			wantDeleted = append(wantDeleted, tt.flow)
		}
		t.Run(tt.flow, func(t *testing.T) {
			dir := filepath.Join(root, testTenant, tt.flow)
			_, err := os.Stat(filepath.Join(dir, segmentFile))
			if gone := errors.Is(err, fs.ErrNotExist); gone == tt.kept {
				t.Fatalf("segment.log gone: %v, want kept %v", gone, tt.kept)
			}
			for _, name := range []string{dlqFile, ackedFile} {
				b, err := os.ReadFile(filepath.Join(dir, name))
				want, had := before[tt.flow][name]
				switch {
				case !tt.kept && !errors.Is(err, fs.ErrNotExist):
					t.Errorf("%s survived the deletion (%v)", name, err)
				case tt.kept && had && (err != nil || !bytes.Equal(b, want)):
					t.Errorf("%s: %d bytes, %v; want the %d bytes it held", name, len(b), err, len(want))
				}
			}
			if _, err := os.Stat(filepath.Join(dir, seqFile)); err != nil {
				t.Errorf("the id counter: %v", err)
			}
		})
	}
	slices.Sort(wantDeleted) // the sweep goes by name
	if diff := cmp.Diff(wantDeleted, deleted); diff != "" {
		t.Errorf("queue_files_deleted, by flow (-want +got):\n%s", diff)
	}
}

// TestJanitorDeletesADiscardedQueueAfterItsDrain: a queue whose dead
// letters were all discarded is kept by the janitor until its worker runs
// (the next submission starts it): the worker's drain rewrites dlq.log
// without them, logging dlq_discarded for each; the next process's janitor
// then deletes the queue's files, its id counter kept.
func TestJanitorDeletesADiscardedQueueAfterItsDrain(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatal(err)
	}
	moveToDLQ(t, q, 1, 2)
	for _, id := range []uint64{1, 2} {
		if err := q.Mark(id, MarkDiscarded); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()

	var logs jsonlogtest.Buffer
	clk := clocktest.New(epoch)
	ack := HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck} })
	m := NewManager(ManagerConfig{Root: root, Handler: ack, Clock: clk, Now: clk.Now, Poll: time.Hour, Logger: logs.Logger(0), StopGrace: 50 * time.Millisecond})
	m.sweepIdle()
	if n := len(logs.Events(t, "queue_files_deleted")); n != 0 {
		t.Fatalf("the janitor deleted the queue whose discards no worker applied (%d lines)", n)
	}
	if _, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	// the worker delivers the message, then, idle, drains the log and
	// rewrites dlq.log: no clock step is needed for the first idle moment
	for deadline := time.Now().Add(10 * time.Second); len(logs.Events(t, "dlq_discarded")) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker applied %d discards within 10 s, want 2", len(logs.Events(t, "dlq_discarded")))
		}
	}
	m.Stop()
	if b, err := os.ReadFile(filepath.Join(root, testTenant, testFlow, dlqFile)); err != nil || len(b) != 0 {
		t.Fatalf("dlq.log after the worker's drain: %d bytes, %v; want empty", len(b), err)
	}

	var logs2 jsonlogtest.Buffer
	m2 := NewManager(ManagerConfig{Root: root, Handler: ack, Clock: clk, Now: clk.Now, Poll: time.Hour, Logger: logs2.Logger(0)})
	defer m2.Stop()
	m2.sweepIdle()
	if n := len(logs2.Events(t, "queue_files_deleted")); n != 1 {
		t.Fatalf("%d queue_files_deleted lines after the drain, want 1", n)
	}
	for _, name := range []string{segmentFile, dlqFile, ackedFile} {
		if _, err := os.Stat(filepath.Join(root, testTenant, testFlow, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want deleted", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, testTenant, testFlow, seqFile)); err != nil {
		t.Errorf("the id counter: %v", err)
	}
}
