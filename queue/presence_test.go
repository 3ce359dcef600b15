package queue_test

import (
	"testing"

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
					size, err := q.Size()
					if err != nil {
						t.Fatal(err)
					}
					if err := q.SaveCheckpoint(size); err != nil {
						t.Fatal(err)
					}
					if err := q.Drain(); err != nil {
						t.Fatal(err)
					}
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
