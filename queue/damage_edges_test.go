package queue_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
)

// flipLastByte damages the last frame of segment.log the way bit rot does:
// one byte of its payload changes, the frame stays whole and its CRC fails
// (damage, not a torn write: no sector of it is zeros).
func flipLastByte(t *testing.T, root string) {
	t.Helper()
	flipByteAt(t, root, fileSize(t, queueFile(root, "segment.log"))-1)
}

// TestDamagedLastFrameWithARetryLosesNoNewMessage: a message with a
// pending retry whose frame at the log's tail is damaged loses no message
// appended after the restart (queues-retries-dlq.md: "At-least-once. That
// is the whole guarantee"). A flipped bit is damage: recovery keeps the
// frame and the next message gets a new offset. A zeroed frame reads as a
// torn write and is cut: the next message takes its offset, and the worker
// takes it for the one waiting in the retry schedule only when the id
// matches too. Recovery cut both, and the worker, matching by offset
// alone, skipped the new message as already scheduled, then dropped the
// old retry: the message answered 202 never ran.
func TestDamagedLastFrameWithARetryLosesNoNewMessage(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, root string, frame int64)
		torn   bool // recovery cuts it, and the new message takes its offset
	}{
		{"a flipped bit, kept", func(t *testing.T, root string, _ int64) { flipLastByte(t, root) }, false},
		{"zeroed, cut as torn", func(t *testing.T, root string, frame int64) {
			path := queueFile(root, "segment.log")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			clear(b[frame:])
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// a retry that reads its message in the log, as older
			// versions scheduled it (one carrying its message has it
			// whatever the log holds)
			queue.RetriesInLog(t)
			root, clk := t.TempDir(), clocktest.New(wt0)
			q1 := openQ(t, root, clk, nil)
			rec := newRecorder(clk)
			slow := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Minute, BackoffFactor: 2, MaxDelay: time.Hour}
			first := put(t, q1, `{"order":"A-1","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
			w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				return queue.Verdict{Kind: queue.VerdictRetry, Policy: slow, Error: "HTTP 503"}
			})})
			rec.wait(t, 1)
			eventually(t, "the retry is scheduled", func() bool { rs, _ := q1.Retries(); return len(rs) == 1 })
			w1.Stop()
			q1.Close()

			// the frame of the message waiting for its retry is damaged on disk
			c.damage(t, root, first.Offset)
			q2, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q2.Close() })
			if len(damage) != 1 || damage[0].Torn != c.torn {
				t.Fatalf("recovery damage %+v, want the last frame, torn %v", damage, c.torn)
			}
			second := put(t, q2, `{"order":"B-2"}`) // answered 202
			if c.torn && second.Offset != first.Offset || !c.torn && second.Offset <= first.Offset {
				t.Fatalf("the new message is at %d, the damaged one at %d; want the same offset %v", second.Offset, first.Offset, c.torn)
			}
			logs := &jsonlogtest.Buffer{}
			rec2 := newRecorder(clk)
			n := clk.Calls()
			startWorker(t, q2, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), Handler: rec2.handler("w2", ack)})
			clk.WaitCalls(t, n+1)
			stepFor(t, clk, 2*time.Minute) // past the old retry's due time, and a few polls more
			if !slices.ContainsFunc(rec2.all(), func(d delivery) bool { return d.ID == second.ID }) {
				size, _ := q2.Size()
				t.Errorf("message %d (answered 202 after the restart) was never delivered; deliveries %v; queue_dropped %v; segment.log now %d bytes",
					second.ID, rec2.all(), logs.Events(t, "queue_dropped"), size)
			}
		})
	}
}

// TestReplayWhileAWorkerRunsPastADamagedLastFrame: nexus dlq replay opens
// the queue (recovering it) while a server's worker runs past a damaged
// last frame (a flipped bit in its record, or in its length field, past
// the end of the file though the record is all there); the replayed
// message is appended after that frame, ahead of the worker's cursor, and
// delivered within the poll interval (queues-retries-dlq.md, "Replaying").
// Recovery cut the frame, the replay landed behind the cursor, and the
// running worker never delivered it.
func TestReplayWhileAWorkerRunsPastADamagedLastFrame(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, root string, last queue.Message)
	}{
		{"a flipped bit in the record", func(t *testing.T, root string, _ queue.Message) { flipLastByte(t, root) }},
		// big-endian, byte 5: +65536, past the end of the file
		{"a flipped bit in the length", func(t *testing.T, root string, last queue.Message) { flipByteAt(t, root, last.Offset+5) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q1 := openQ(t, root, clk, nil)
			rec := newRecorder(clk)
			// a message waiting for a retry an hour away, one that reads it
			// in the log, keeps the log from being emptied meanwhile (as
			// traffic would)
			queue.RetriesInLog(t)
			slow := put(t, q1, `{"order":"slow"}`)
			dead := put(t, q1, `{"order":"dead"}`)
			big := put(t, q1, `{"order":"A-1","pad":"`+strings.Repeat("x", 400)+`"}`)
			hour := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Hour, BackoffFactor: 2, MaxDelay: 2 * time.Hour}
			startWorker(t, q1, queue.WorkerConfig{Clock: clk, Poll: 500 * time.Millisecond, Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				switch d.ID {
				case slow.ID:
					return queue.Verdict{Kind: queue.VerdictRetry, Policy: hour, Error: "HTTP 503"}
				case dead.ID:
					return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "HTTP 503"}
				}
				return ack(ctx, d)
			})})
			rec.wait(t, 3)
			clk.WaitCalls(t, 1) // idle

			c.damage(t, root, big) // bit rot in the last frame, already delivered

			// nexus dlq replay, in another process: Open, then Replay
			cli, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(damage) != 1 || damage[0].Torn {
				t.Fatalf("the CLI's Open found %+v, want the last frame reported as damage (not torn)", damage)
			}
			replayed, err := cli.Replay(dead.ID, "enqueue", "fresh-correlation")
			cli.Close()
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				clk.Step(t)
			}
			if !slices.ContainsFunc(rec.all(), func(d delivery) bool { return d.ID == replayed.ID }) {
				t.Errorf("the replayed message %d (at offset %d; the damaged frame at %d) was not delivered within 10 polls by the running worker; deliveries %v",
					replayed.ID, replayed.Offset, big.Offset, rec.all())
			}
		})
	}
}

// flipByteAt damages one byte of segment.log at off.
func flipByteAt(t *testing.T, root string, off int64) {
	t.Helper()
	path := queueFile(root, "segment.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedRetryIsNotCountedAsPending: a due retry whose message is not
// at its offset any more (its frame quarantined as damaged) is dropped, and
// the worker's state and counts say so: RetriesPending goes down and the
// delivery is counted as dropped. nexus_queue_retries_pending and the
// Queues page went on showing the retry that no longer existed.
func TestDroppedRetryIsNotCountedAsPending(t *testing.T) {
	// a retry that reads its message in the log, as older versions
	// scheduled it (one that carries it is delivered whatever the log holds)
	queue.RetriesInLog(t)
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	policy := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Minute, BackoffFactor: 2, MaxDelay: time.Hour}
	a := put(t, q1, `{"order":"A-1"}`)
	put(t, q1, `{"order":"B-2"}`)
	w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if d.ID == a.ID {
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "HTTP 503"}
		}
		return ack(ctx, d)
	})})
	rec.wait(t, 2)
	eventually(t, "the retry is scheduled", func() bool { rs, _ := q1.Retries(); return len(rs) == 1 })
	w1.Stop()
	q1.Close()

	// bit rot inside the first message's payload: a frame in the middle of
	// the log, quarantined (never delivered) at the next start
	flipByteAt(t, root, a.Offset+40)
	q2, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q2.Close() })
	if len(damage) != 1 || damage[0].Offset != a.Offset {
		t.Fatalf("damage %+v, want the first frame", damage)
	}
	logs := &jsonlogtest.Buffer{}
	n := clk.Calls()
	w2 := startWorker(t, q2, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), Handler: newRecorder(clk).handler("w2", ack)})
	clk.WaitCalls(t, n+1)
	stepFor(t, clk, 2*time.Minute)
	if len(logs.Events(t, "queue_dropped")) != 1 {
		t.Fatalf("queue_dropped %v, want the retry of message %d dropped", logs.Events(t, "queue_dropped"), a.ID)
	}
	// the line names the message and the attempt that was due, as every
	// line of a delivery does
	if ev := logs.Events(t, "queue_dropped")[0]; ev["msg_id"] != float64(a.ID) || ev["attempt"] != float64(2) {
		t.Errorf("queue_dropped = %v, want msg_id %d and attempt 2", ev, a.ID)
	}
	if rs := retries(t, q2); len(rs) != 0 {
		t.Fatalf("retry schedule on disk %+v, want it empty", rs)
	}
	if got := w2.State().RetriesPending; got != 0 {
		t.Errorf("RetriesPending = %d after the only retry was dropped (the schedule on disk is empty), want 0", got)
	}
}

// TestDamagedHeaderOfLastDeadLetterIsReported: a flipped bit in the header
// of dlq.log's last dead letter (its frame marker) is damage, reported by
// the listing and kept when the next dead letter is written after it. The
// frame, with no record to check, read as a torn tail: the listing said
// nothing and the next dead letter was written over it, a durable dead
// letter gone unsaid. A write cut short leaves zeros or a prefix of the
// frame, never a changed marker.
func TestDamagedHeaderOfLastDeadLetterIsReported(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	dl := func(id uint64) queue.DeadLetter {
		return queue.DeadLetter{ID: id, EnqueuedAt: wt0, FailedAt: wt0.Add(3 * time.Second), Attempts: 3,
			LastError: http503, Payload: []byte(`{"orderId":"A-` + string(rune('0'+id)) + `","total":42}`)}
	}
	if err := q.MoveToDLQ(dl(1)); err != nil {
		t.Fatal(err)
	}
	second := fileSize(t, queueFile(root, "dlq.log"))
	if err := q.MoveToDLQ(dl(2)); err != nil {
		t.Fatal(err)
	}
	end := fileSize(t, queueFile(root, "dlq.log"))
	path := queueFile(root, "dlq.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[second] ^= 0x01 // 'N' of the second frame's marker
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, damage, err := queue.ReadDeadLetters(root, wTenant, wFlow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(damage) != 1 {
		t.Errorf("nexus dlq list: %d dead letters and damage %+v; want dead letter 1 and the damaged dead letter 2 reported", len(got), damage)
	}
	if err := q.MoveToDLQ(dl(3)); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(after)) < end || string(after[second:end]) != string(b[second:end]) {
		t.Errorf("the next dead letter was written over the damaged one (dlq.log %d bytes, was %d): it leaves the disk unreported", len(after), end)
	}
}

// TestFailedSyncCutsTheFrames: frames whose fdatasync failed (EIO,
// RELIABILITY.md B.12; their callers answered 503) are cut from
// segment.log, so no reader delivers them. They stayed in the file: the
// running worker delivered such a message, failed it and saved its retry at
// its offset; a power cut then took the never-synced frame away, the next
// message (answered 202) landed at that offset, and the worker took it for
// the one waiting in the retry schedule and never delivered it.
func TestFailedSyncCutsTheFrames(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	hooks := &hookFS{}
	q1 := openQ(t, root, clk, hooks)
	rec := newRecorder(clk)
	first := put(t, q1, `{"order":"A-0"}`)
	startWorker(t, q1, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w1", ack)})
	rec.wait(t, 1)
	clk.WaitCalls(t, 1)
	synced := fileSize(t, queueFile(root, "segment.log"))

	hooks.failNextSync()
	if _, err := q1.Append(queue.NewMessage{Source: "enqueue", CorrelationID: "c-503", Payload: []byte(`{"order":"A-503"}`)}); err == nil {
		t.Fatal("the append whose fdatasync failed succeeded")
	}
	if size := fileSize(t, queueFile(root, "segment.log")); size != synced {
		t.Errorf("segment.log is %d bytes after the failed fdatasync, want %d: the frames not durable stay readable", size, synced)
	}
	clk.Step(t) // the worker's poll
	if got := rec.all(); len(got) != 1 || got[0].ID != first.ID {
		t.Errorf("deliveries %v, want message %d alone: the message answered 503 was delivered", got, first.ID)
	}
}

// TestDamagedLastFrameDrains: a damaged last frame, which recovery keeps,
// is passed by the worker's reader, so the checkpoint passes it and the log
// drains. The reader waited at it as at a write in progress: the log was
// never emptied, nor the queue of a withdrawn flow deleted.
func TestDamagedLastFrameDrains(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	put(t, q1, `{"order":"A-1"}`)
	put(t, q1, `{"order":"B-2","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	q1.Close()
	flipLastByte(t, root)

	q2, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q2.Close() })
	if len(damage) != 1 || damage[0].Torn {
		t.Fatalf("recovery damage %+v, want the damaged last frame", damage)
	}
	rec := newRecorder(clk)
	n := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: 500 * time.Millisecond, Handler: rec.handler("w", ack)})
	rec.wait(t, 1)
	clk.WaitCalls(t, n+1)
	stepFor(t, clk, time.Hour)
	if size, _ := q2.Size(); size != 0 {
		ckpt, _ := q2.Checkpoint()
		t.Errorf("after an hour of idle polls segment.log is %d bytes, checkpoint %d: every message was delivered, yet the kept damaged last frame keeps the queue from draining (and the janitor from deleting it) until another message is appended", size, ckpt)
	}
}

// A pending retry's message that does not verify when the worker reads it
// back from segment.log.retry (bit rot in its frame while the worker
// runs) is damage, reported as a reader reports it, and the retry is
// dropped as one whose message is gone from the log is: when it is due,
// or when a compaction of the file copies its frame first. The other
// retries are delivered.
func TestDamagedCarriedRetryIsDropped(t *testing.T) {
	for _, c := range []struct {
		name    string
		damaged int // which of the 4 retries (A1, A2, A3 due in a minute, B in an hour)
	}{
		{"read back when due", 0},
		{"copied by a compaction", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q := openQ(t, root, clk, nil)
			var ids []uint64
			for _, p := range []string{`{"order":"A-1"}`, `{"order":"A-2"}`, `{"order":"A-3"}`, `{"order":"B-1"}`} {
				ids = append(ids, put(t, q, p).ID)
			}
			logs := &jsonlogtest.Buffer{}
			rec := newRecorder(clk)
			w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Logger: logs.Logger(slog.LevelInfo), Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				if d.Attempt > 1 {
					return ack(ctx, d)
				}
				delay := time.Minute
				if d.ID == ids[3] {
					delay = time.Hour
				}
				return queue.Verdict{Kind: queue.VerdictRetry, Error: "HTTP 503", Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: delay, BackoffFactor: 1, MaxDelay: delay}}
			})})
			clk.WaitCalls(t, 1)
			// the four frames, set in the order of the first attempts, are
			// of one size: a bit of the damaged one's payload flipped
			path := queueFile(root, "segment.log.retry")
			b, err := os.ReadFile(path)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("segment.log.retry of %d bytes, %v", len(b), err)
			}
			frame := len(b) / 4
			at := c.damaged*frame + frame - 3
			b[at] ^= 0x01
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			stepFor(t, clk, 2*time.Minute)
			dropped := ids[c.damaged]
			damage := logs.Events(t, "queue_damage")
			if len(damage) != 1 || damage[0]["file"] != "segment.log.retry" || damage[0]["msg_id"] != float64(dropped) || damage[0]["offset"] != float64(c.damaged*frame) {
				t.Fatalf("queue_damage %v, want the frame of message %d at %d", damage, dropped, c.damaged*frame)
			}
			if ev := logs.Events(t, "queue_dropped"); len(ev) != 1 || ev[0]["msg_id"] != float64(dropped) || ev[0]["attempt"] != float64(2) {
				t.Fatalf("queue_dropped %v, want the retry of message %d", ev, dropped)
			}
			stepFor(t, clk, time.Hour)
			checkSecondAttempts(t, rec, ids, dropped)
			if rs := retries(t, q); len(rs) != 0 {
				t.Errorf("retries %+v, want none", rs)
			}
			if n := w.State().RetriesPending; n != 0 {
				t.Errorf("RetriesPending = %d, want 0", n)
			}
		})
	}
}

// A damaged frame of segment.log.retry that a worker finds as it starts
// is reported as one found while it runs is: queue_damage names the file
// and the frame's offset, the retry it set is dropped (queue_dropped), and
// every other retry is delivered. A frame the reader can pass (its CRC
// fails, its marker is gone with a frame after it) and a damaged tail (no
// frame verifies after it) are the same: the change is lost, reported,
// and the worker rewrites the file without it. The worker did not start:
// "segment.log.retry does not verify", at every start, for good, and
// nothing of the queue was delivered.
func TestDamagedRetryFoundAtStartIsDropped(t *testing.T) {
	for _, c := range []struct {
		name    string
		damaged int // which of the 4 frames
		marker  bool
	}{
		{"a frame in the middle fails its CRC", 1, false},
		{"the first frame has no marker", 0, true},
		{"the last frame fails its CRC", 3, false},
		{"the last frame has no marker", 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q := openQ(t, root, clk, nil)
			var ids []uint64
			for _, p := range []string{`{"order":"A-1"}`, `{"order":"A-2"}`, `{"order":"A-3"}`, `{"order":"A-4"}`} {
				ids = append(ids, put(t, q, p).ID)
			}
			rec := newRecorder(clk)
			handler := rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				if d.Attempt > 1 {
					return ack(ctx, d)
				}
				return queue.Verdict{Kind: queue.VerdictRetry, Error: "HTTP 503", Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Minute, BackoffFactor: 1, MaxDelay: time.Minute}}
			})
			w1 := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Handler: handler})
			eventually(t, "4 retries pending", func() bool { return w1.State().RetriesPending == 4 })
			w1.Stop()

			path := queueFile(root, "segment.log.retry")
			b, err := os.ReadFile(path)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("segment.log.retry of %d bytes, %v", len(b), err)
			}
			frame := len(b) / 4
			if c.marker {
				b[c.damaged*frame] = 'x'
			} else {
				b[c.damaged*frame+frame-3] ^= 0x01
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}

			logs := &jsonlogtest.Buffer{}
			w2 := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Logger: logs.Logger(slog.LevelInfo), Handler: handler})
			stepFor(t, clk, 2*time.Minute)
			if ev := logs.Events(t, "worker_failed"); len(ev) > 0 {
				t.Fatalf("worker_failed %v, want the worker delivering", ev)
			}
			dropped := ids[c.damaged]
			damage := logs.Events(t, "queue_damage")
			if len(damage) != 1 || damage[0]["file"] != "segment.log.retry" || damage[0]["offset"] != float64(c.damaged*frame) || damage[0]["msg_id"] != float64(dropped) {
				t.Fatalf("queue_damage %v, want the frame of message %d at %d", damage, dropped, c.damaged*frame)
			}
			if ev := logs.Events(t, "queue_dropped"); len(ev) != 1 || ev[0]["msg_id"] != float64(dropped) ||
				!strings.Contains(fmt.Sprint(ev[0]["msg"]), "its id as the damaged frame holds it") {
				t.Fatalf("queue_dropped %v, want the retry of message %d", ev, dropped)
			}
			eventually(t, "the other retries delivered", func() bool { return w2.State().RetriesPending == 0 })
			checkSecondAttempts(t, rec, ids, dropped)
			if rs := retries(t, q); len(rs) != 0 {
				t.Errorf("retries %+v, want none", rs)
			}
		})
	}
}

// A damaged retry the running worker drops, read back when due, leaves
// segment.log.retry readable at once: the worker rewrites the file
// without the damaged frame as it drops it, as it does when it finds one
// as it starts. Retries (the Queues page, the janitor) answered an error
// naming the frame until the next compaction, which, with most of the
// file still live, could be long in coming.
func TestDroppedDamagedRetryLeavesTheScheduleReadable(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	var ids []uint64
	for _, p := range []string{`{"order":"A-1"}`, `{"order":"B-1"}`, `{"order":"B-2"}`, `{"order":"B-3"}`} {
		ids = append(ids, put(t, q, p).ID)
	}
	logs := &jsonlogtest.Buffer{}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Logger: logs.Logger(slog.LevelInfo), Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
		delay := time.Hour
		if d.ID == ids[0] {
			delay = time.Minute
		}
		return queue.Verdict{Kind: queue.VerdictRetry, Error: "HTTP 503", Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: delay, BackoffFactor: 1, MaxDelay: delay}}
	})})
	clk.WaitCalls(t, 1)
	if n := w.State().RetriesPending; n != 4 {
		t.Fatalf("RetriesPending = %d, want 4", n)
	}
	// the first of the four frames (of one size), due first, damaged
	path := queueFile(root, "segment.log.retry")
	b, err := os.ReadFile(path)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("segment.log.retry of %d bytes, %v", len(b), err)
	}
	b[len(b)/4-3] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stepFor(t, clk, 2*time.Minute)
	eventually(t, "the damaged retry dropped", func() bool { return w.State().RetriesPending == 3 })
	if ev := logs.Events(t, "queue_dropped"); len(ev) != 1 || ev[0]["msg_id"] != float64(ids[0]) {
		t.Fatalf("queue_dropped %v, want the retry of message %d", ev, ids[0])
	}
	rs, err := q.Retries()
	if err != nil {
		t.Fatalf("Retries after the drop: %v", err)
	}
	var got []uint64
	for _, r := range rs {
		got = append(got, r.ID)
	}
	slices.Sort(got)
	if diff := cmp.Diff(ids[1:], got); diff != "" {
		t.Errorf("retries (-want +got):\n%s", diff)
	}
	if ev := logs.Events(t, "queue_damage"); len(ev) != 1 {
		t.Errorf("queue_damage %v, want the one frame, once", ev)
	}
}

// checkSecondAttempts checks that every message of ids but dropped was
// delivered a second time, and dropped was not.
func checkSecondAttempts(t *testing.T, rec *recorder, ids []uint64, dropped uint64) {
	t.Helper()
	var want, got []string
	for _, id := range ids {
		if id != dropped {
			want = append(want, fmt.Sprintf("w:%d/a2", id))
		}
	}
	for _, d := range rec.all() {
		if d.Attempt == 2 {
			got = append(got, fmt.Sprintf("w:%d/a2", d.ID))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("second attempts (-want +got):\n%s", diff)
	}
}
