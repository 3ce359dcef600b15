package queue

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// TestCheckpointPassesADeadLetterAtOnce: a message dead-lettered at its
// first attempt (a corrupt artifact, queue_max_attempts: 1) while the queue
// stays busy has the checkpoint written past it before the next delivery.
// The checkpoint was written every CheckpointEvery messages or
// CheckpointAfter, so a process killed meanwhile ran the message once more
// at its next start, an attempt past its budget, and dead-lettered it
// again.
func TestCheckpointPassesADeadLetterAtOnce(t *testing.T) {
	root := t.TempDir()
	clk := clocktest.New(epoch) // CheckpointAfter never passes
	q, _ := openQueue(t, root, Options{Now: clk.Now})
	first, err := q.Append(newMessage(1, 40))
	if err != nil {
		t.Fatal(err)
	}
	second, err := q.Append(newMessage(2, 40))
	if err != nil {
		t.Fatal(err)
	}
	inSecond, release := make(chan struct{}), make(chan struct{})
	handler := HandlerFunc(func(_ context.Context, d Delivery) Verdict {
		if d.ID == first.ID {
			return Verdict{Kind: VerdictDeadLetter, Error: "corrupt artifact"}
		}
		close(inSecond)
		<-release
		return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
	})
	w := NewWorker(q, WorkerConfig{Handler: handler, Clock: clk, Logger: slog.New(slog.DiscardHandler), StopGrace: 50 * time.Millisecond})
	w.Start()
	defer w.Stop()
	defer close(release)
	select {
	case <-inSecond:
	case <-time.After(10 * time.Second):
		t.Fatal("the second message was not delivered within 10 s")
	}
	// the second delivery in flight: what a kill -9 now leaves
	if c, err := q.Checkpoint(); err != nil || c != second.Offset {
		t.Errorf("checkpoint %d (%v) while the message after the dead letter is delivered, want %d: a kill now runs dead-lettered message %d again",
			c, err, second.Offset, first.ID)
	}
}
