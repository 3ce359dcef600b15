package queue_test

import (
	"os"
	"testing"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// TestDamagedCounterAfterADrainIssuesNoIDAgain: an id counter that does
// not verify reads as 1 and recovery raises it past the ids in the log;
// after a drain the log holds none, and ids started again at 1, though a
// pending dead letter kept its id (the new message's dead letter would be
// hidden behind it, a replay or discard of that id ambiguous) and a
// replayed one's mark the id of the message its replay appended. Recovery
// now raises a lost counter past those too, and reports it.
func TestDamagedCounterAfterADrainIssuesNoIDAgain(t *testing.T) {
	for _, c := range []struct {
		name   string
		replay bool
		issued uint64 // the highest id issued before the drain
	}{
		{"a dead letter pending", false, 3},
		{"a dead letter replayed", true, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q, _, err := queue.Open(root, wTenant, wFlow, queue.Options{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			var last queue.Message
			for _, p := range []string{"a", "b", "c"} {
				last = put(t, q, p)
			}
			if err := q.MoveToDLQ(queue.DeadLetter{ID: last.ID, EnqueuedAt: wt0, FailedAt: wt0, Attempts: 3, LastError: "x", Payload: []byte("c")}); err != nil {
				t.Fatal(err)
			}
			if c.replay {
				if m, err := q.Replay(last.ID, "replay", "cid-r"); err != nil || m.ID != c.issued {
					t.Fatalf("Replay = %d, %v; want id %d", m.ID, err, c.issued)
				}
			}
			drainAll(t, q)
			q.Close()
			// a flipped bit in the counter's one sector
			b, err := os.ReadFile(queueFile(root, "segment.log.seq"))
			if err != nil {
				t.Fatal(err)
			}
			b[6] ^= 1
			if err := os.WriteFile(queueFile(root, "segment.log.seq"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			q, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if len(damage) != 1 || damage[0].File != "segment.log.seq" || damage[0].Torn {
				t.Errorf("Open found %v, want the damaged counter", damage)
			}
			for _, p := range []string{"d", "e"} {
				if m := put(t, q, p); m.ID <= c.issued {
					t.Errorf("new message %s got id %d; ids up to %d were issued before the drain", p, m.ID, c.issued)
				}
			}
		})
	}
}
