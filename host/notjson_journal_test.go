package host_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/queue"
)

// A stored message that is not JSON (only a segment edited by hand holds
// one: every door stores a JSON document) is dead-lettered at once, and
// its delivery has a journal row as every other has: failed, 500 (the
// stored bytes are not what a door stored), the error its dead letter
// keeps. It had none: the journal did not show the delivery that
// dead-lettered it.
func TestStoredMessageNotJSONHasAJournalRow(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	// through the manager, which wakes the worker as the door does: the
	// queue's own Append woke none, and a worker that had found the queue
	// empty waited for a poll the fixture's clock never makes
	m, err := fx.queues.Append("acme", "echo", queue.NewMessage{Source: engine.DoorEnqueue, CorrelationID: "c-bin", Payload: []byte("\xff\xfe binary \x00")})
	if err != nil {
		t.Fatal(err)
	}
	got := fx.waitJournal(t, "acme", "echo", int64(m.ID))
	got.At = ""
	want := journalDoc{Door: "enqueue", Tenant: "acme", Flow: "echo", Version: 1, CorrelationID: "c-bin", MsgID: int64(m.ID),
		Attempt: 1, Outcome: "failed", Status: 500, Error: got.Error}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the journal row (-want +got):\n%s", diff)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dl, _, err := queue.ReadDeadLetters(fx.root, "acme", "echo", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(dl) == 1 {
			if dl[0].ID != m.ID || dl[0].LastError != got.Error || dl[0].Attempts != 1 {
				t.Errorf("the dead letter: %+v; want message %d, attempt 1, the journal's error %q", dl[0], m.ID, got.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letters: %+v, want the message's", dl)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if want := "the stored message is not a JSON document: "; len(got.Error) <= len(want) || got.Error[:len(want)] != want {
		t.Errorf("the journal's error %q, want it to say the stored message is not a JSON document, and why", got.Error)
	}
}
