package queue

import (
	"errors"
	"io"
	"slices"
	"syscall"
	"testing"
	"time"
)

// faultRun is what one run of the fault scenario was told: which appends,
// dead letters and marks were acknowledged, and which messages the worker
// processed.
type faultRun struct {
	acked     []Message
	processed map[uint64]bool
	dead      map[uint64]bool // dead letters acknowledged
	marked    map[uint64]bool // marks acknowledged
}

// runFaultScenario goes through every durable write of a queue, as a worker
// and its callers would, going on after errors (a poisoned queue is
// reopened): appends, a retry schedule, dead letters and a mark, a
// checkpoint after processing everything, compaction, a drain, and more
// appends.
func runFaultScenario(m *memFS, root string) faultRun {
	r := faultRun{processed: map[uint64]bool{}, dead: map[uint64]bool{}, marked: map[uint64]bool{}}
	var q *Queue
	open := func() bool {
		for range 2 { // a fault that fires once fails the first try only
			var err error
			if q, _, err = Open(root, testTenant, testFlow, Options{FS: m}); err == nil {
				return true
			}
		}
		q = nil
		return false
	}
	if !open() {
		return r
	}
	defer func() {
		if q != nil {
			q.Close()
		}
	}()
	appendSome := func(from, n int) bool {
		for i := range n {
			msg, err := q.Append(newMessage(from+i, 40))
			if err == nil {
				r.acked = append(r.acked, msg)
				continue
			}
			q.Close() // poisoned: reopen, which verifies the log
			if !open() {
				return false
			}
		}
		return true
	}

	if !appendSome(0, 4) {
		return r
	}
	if len(r.acked) > 0 {
		q.SaveRetries([]Retry{{ID: r.acked[0].ID, Offset: r.acked[0].Offset, Attempt: 2, Due: epoch}})
	}
	for _, id := range []uint64{100, 101} {
		if q.MoveToDLQ(deadLetter(id)) == nil {
			r.dead[id] = true
		}
	}
	if q.Mark(100, MarkDiscarded) == nil {
		r.marked[100] = true
	}
	// the worker processes everything
	off := int64(0)
	for {
		msg, next, err := q.Read(off)
		if err != nil {
			break
		}
		r.processed[msg.ID] = true
		off = next
	}
	q.SaveCheckpoint(off)
	q.SaveRetries(nil)
	q.CompactDLQ()
	q.Drain()
	appendSome(4, 2)
	return r
}

// check cuts the power, reopens the queue and checks that it kept every
// acknowledgement.
func (r faultRun) check(t *testing.T, m *memFS, root string) {
	t.Helper()
	m.Crash()
	q, damage, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	defer q.Close()
	for _, d := range damage {
		if !d.Torn {
			t.Errorf("damage in the middle of the log: %v", d)
		}
	}
	got := map[uint64]Message{}
	for off := int64(0); ; {
		msg, next, err := q.Read(off)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[msg.ID] = msg
		off = next
	}
	maxID := uint64(0)
	for _, a := range r.acked {
		maxID = max(maxID, a.ID)
		if r.processed[a.ID] {
			continue
		}
		if d := sameMessage(got[a.ID], a); d != "" {
			t.Errorf("acknowledged message %d, not processed: %s", a.ID, d)
		}
	}
	if _, err := q.Retries(); err != nil {
		t.Errorf("the retry schedule after the crash: %v", err)
	}
	pending, _, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	for id := range r.dead {
		found := slices.ContainsFunc(pending, func(d DeadLetter) bool { return d.ID == id })
		if r.marked[id] && found {
			t.Errorf("dead letter %d is pending after its mark was acknowledged", id)
		}
		if !r.marked[id] && id != 100 && !found {
			t.Errorf("dead letter %d, acknowledged, is gone", id)
		}
	}
	next, err := q.Append(newMessage(999, 40))
	if err != nil {
		t.Fatal(err)
	}
	if next.ID <= maxID {
		t.Errorf("id %d issued again after the crash", next.ID)
	}
}

// TestFaultLoop fails operation k = 1, 2, … of the scenario until it runs
// through, once and from then on, then cuts the power (RELIABILITY B.10):
// every acknowledged append not yet processed, dead letter and mark is
// still there, and no id is issued twice. The queue's files exist and are
// durable beforehand; their creation is TestAppendCrashAfterCreate's and
// TestDeadLetterCrashAfterCreate's.
func TestFaultLoop(t *testing.T) {
	for _, forever := range []bool{false, true} {
		k := 1
		for ; ; k++ {
			m, root := settledMemQueue(t)
			m.Fail("", "", k, syscall.EIO, forever)
			start := time.Now()
			r := runFaultScenario(m, root)
			fired := m.Fired()
			r.check(t, m, root)
			if t.Failed() {
				t.Fatalf("operation %d failed (forever %v)", k, forever)
			}
			if !fired {
				break
			}
			if k > 2000 || time.Since(start) > 10*time.Second {
				t.Fatalf("the scenario does not end")
			}
		}
		t.Logf("forever=%v: the scenario runs %d operations", forever, k-1)
	}
}
