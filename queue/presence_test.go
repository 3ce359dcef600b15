package queue_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// TestManagerAppended: whether a log holds a tick, from the tick's
// correlation ID and a lower bound of its id (the queue's next id before
// its append), through the states a log goes through: nothing yet, the
// tick appended or not, other messages appended, drains before and after.
// NextID is the lower bound a later append keeps to.
func TestManagerAppended(t *testing.T) {
	const tick = "tick-cid"
	cases := []struct {
		name string
		// steps on the log: "tick" or "other" appends a message with that
		// correlation ID, "drain" processes everything and drains
		steps    []string
		from     uint64
		want     queue.Presence
		wantNext uint64
	}{
		{name: "no queue", from: 1, want: queue.Absent, wantNext: 1},
		{name: "appended", steps: []string{"tick"}, from: 1, want: queue.Present, wantNext: 2},
		{name: "appended after another", steps: []string{"other", "tick", "other"}, from: 1, want: queue.Present, wantNext: 4},
		{name: "others since, not it", steps: []string{"other", "other"}, from: 1, want: queue.Absent, wantNext: 3},
		{name: "an earlier message holds the id, not it", steps: []string{"other", "other"}, from: 2, want: queue.Absent, wantNext: 3},
		{name: "appended, processed and drained", steps: []string{"tick", "drain"}, from: 1, want: queue.Gone, wantNext: 2},
		{name: "others since, drained", steps: []string{"other", "drain"}, from: 1, want: queue.Gone, wantNext: 2},
		{name: "drained before, nothing since", steps: []string{"other", "drain"}, from: 2, want: queue.Absent, wantNext: 2},
		{name: "drained before, another since", steps: []string{"other", "drain", "other"}, from: 2, want: queue.Absent, wantNext: 3},
		{name: "drained before, then it", steps: []string{"other", "drain", "tick"}, from: 2, want: queue.Present, wantNext: 3},
		{name: "drained before and after", steps: []string{"other", "drain", "tick", "drain", "other"}, from: 2, want: queue.Gone, wantNext: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(wt0)
			m, root := newManager(t, clk, queue.HandlerFunc(ack), 0, nil)
			var q *queue.Queue
			for _, step := range c.steps {
				if q == nil {
					q = openQueueAt(t, root, "acme", "nightly", clk)
				}
				if step == "drain" {
					drainAll(t, q)
					continue
				}
				cid := "other-cid"
				if step == "tick" {
					cid = tick
				}
				if _, err := q.Append(queue.NewMessage{Source: "cron", CorrelationID: cid, Payload: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := m.Appended("acme", "nightly", c.from, tick); err != nil || got != c.want {
				t.Errorf("Appended(from %d) = %v, %v; want %v", c.from, got, err, c.want)
			}
			if got, err := m.NextID("acme", "nightly"); err != nil || got != c.wantNext {
				t.Errorf("NextID = %d, %v; want %d", got, err, c.wantNext)
			}
		})
	}
	// a name the rule refuses is refused before anything is read
	m, _ := newManager(t, clocktest.New(wt0), queue.HandlerFunc(ack), 0, nil)
	if _, err := m.Appended("../x", "nightly", 1, tick); err == nil {
		t.Error("Appended(../x) = nil error")
	}
	if _, err := m.NextID("acme", "A"); err == nil {
		t.Error("NextID(acme/A) = nil error")
	}
}

// TestManagerAppendedAfterAFailedAppend: an append whose fdatasync failed
// raised the id counter and its frame was cut from the log. Its message
// was never acknowledged; it reads as Absent while the log holds the
// messages issued before it, and as Gone once the log holds none (the
// files then look as after a drain, which Appended cannot tell apart).
func TestManagerAppendedAfterAFailedAppend(t *testing.T) {
	for _, c := range []struct {
		name   string
		before bool // a message appended before the failed one
		want   queue.Presence
	}{
		{"after another message", true, queue.Absent},
		{"into an empty log", false, queue.Gone},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(wt0)
			m, root := newManager(t, clk, queue.HandlerFunc(ack), 0, nil)
			hooks := &hookFS{}
			q, _, err := queue.Open(root, "acme", "nightly", queue.Options{Now: clk.Now, FS: hooks})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if c.before {
				if _, err := q.Append(queue.NewMessage{Source: "cron", CorrelationID: "other", Payload: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			from, err := m.NextID("acme", "nightly")
			if err != nil {
				t.Fatal(err)
			}
			hooks.failNextSync()
			if _, err := q.Append(queue.NewMessage{Source: "cron", CorrelationID: "tick", Payload: []byte("{}")}); err == nil {
				t.Fatal("the append whose fdatasync failed succeeded")
			}
			if got, err := m.Appended("acme", "nightly", from, "tick"); err != nil || got != c.want {
				t.Errorf("Appended = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// TestManagerAppendedWaitsForTheAppendLock: Appended reads the log under
// the append lock, so that no drain or append changes it meanwhile.
func TestManagerAppendedWaitsForTheAppendLock(t *testing.T) {
	clk := clocktest.New(wt0)
	m, root := newManager(t, clk, queue.HandlerFunc(ack), 0, nil)
	q := openQueueAt(t, root, "acme", "nightly", clk)
	if _, err := q.Append(queue.NewMessage{Source: "cron", CorrelationID: "tick", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Open(filepath.Join(root, "acme", "nightly", "append.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan queue.Presence)
	go func() {
		p, _ := m.Appended("acme", "nightly", 1, "tick")
		done <- p
	}()
	select {
	case p := <-done:
		t.Fatalf("Appended = %v while another held the append lock", p)
	case <-time.After(100 * time.Millisecond):
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if p := <-done; p != queue.Present {
		t.Errorf("Appended = %v once the lock was let go, want present", p)
	}
}
