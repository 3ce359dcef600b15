package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/queue"
)

// copyRecorder records each delivery with its correlation ID; "failing"
// fails for ever (an hour between attempts, 3 attempts), the others are
// acknowledged.
type copyRecorder struct {
	mu  sync.Mutex
	got []string // payload/correlation ID/attempt
}

func (r *copyRecorder) handle(ctx context.Context, d queue.Delivery) queue.Verdict {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s/%s/a%d", d.Payload, d.CorrelationID, d.Attempt))
	r.mu.Unlock()
	if string(d.Payload) == "failing" {
		return queue.Verdict{Kind: queue.VerdictRetry, Error: "503",
			Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Hour, BackoffFactor: 1, MaxDelay: time.Hour}}
	}
	return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
}

func (r *copyRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// A queue where a message keeps failing (its retry always pending) while
// others are appended and delivered has its segment.log emptied at the
// worker's idle moments: the retry carries its message. The retry is then
// delivered from its copy (payload and correlation ID), and dead-lettered
// with its payload after its last attempt. segment.log was emptied only
// when no retry was pending, so it grew for as long as the failures went
// on.
func TestSegmentDrainedWithRetryPending(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			root, clk := t.TempDir(), clocktest.New(wt0)
			q := openQ(t, root, clk, nil)
			rec := &copyRecorder{}
			cfg := queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Handler: queue.HandlerFunc(rec.handle)}
			put(t, q, "failing")
			for i := range 5 {
				put(t, q, fmt.Sprintf("m%d", i))
			}
			w := startWorker(t, q, cfg)
			clk.WaitCalls(t, 1)
			if got := len(rec.all()); got != 6 {
				t.Fatalf("%d deliveries before the worker waited, want 6", got)
			}
			stepFor(t, clk, 30*time.Second)
			if rs := retries(t, q); len(rs) != 1 {
				t.Fatalf("retries = %v, want the failing message's", rs)
			}
			if n := fileSize(t, queueFile(root, "segment.log")); n != 0 {
				t.Fatalf("segment.log holds %d bytes with the worker idle and a retry pending, want 0", n)
			}
			// more messages, delivered and drained in turn
			n := clk.Calls()
			put(t, q, "m5")
			w.Wake()
			clk.WaitCalls(t, n+1)
			stepFor(t, clk, 30*time.Second)
			if n := fileSize(t, queueFile(root, "segment.log")); n != 0 {
				t.Fatalf("segment.log holds %d bytes after m5, want 0", n)
			}
			if restart {
				w.Stop()
				q.Close()
				q = openQ(t, root, clk, nil)
				n := clk.Calls()
				w = startWorker(t, q, cfg)
				clk.WaitCalls(t, n+1)
			}
			n = clk.Calls()
			put(t, q, "m6")
			w.Wake()
			clk.WaitCalls(t, n+1)
			stepFor(t, clk, 2*time.Hour+time.Minute)
			want := []string{"failing/cid-failing/a1"}
			for i := range 7 {
				want = append(want, fmt.Sprintf("m%d/cid-m%d/a1", i, i))
			}
			want = append(want, "failing/cid-failing/a2", "failing/cid-failing/a3")
			if diff := cmp.Diff(want, rec.all()); diff != "" {
				t.Errorf("deliveries (-want +got):\n%s", diff)
			}
			dl := deadLetters(t, q)
			if len(dl) != 1 || string(dl[0].Payload) != "failing" || dl[0].Attempts != 3 {
				t.Errorf("dead letters = %+v, want failing's after 3 attempts", dl)
			}
			if rs := retries(t, q); len(rs) != 0 {
				t.Errorf("retries = %v, want none", rs)
			}
		})
	}
}

// A retry schedule an older version wrote (a retry that reads its message
// at its offset in segment.log) is still read: the retry is delivered from
// the log, which is kept for it; scheduled again, it carries its message,
// and the log is emptied.
func TestRetryOfAnOlderVersionReadsTheLog(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	failing := put(t, q, "failing")
	put(t, q, "m0")
	size, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	if err := q.SaveRetries([]queue.Retry{{ID: failing.ID, Offset: failing.Offset, Attempt: 2, Due: wt0.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	rec := &copyRecorder{}
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Handler: queue.HandlerFunc(rec.handle)})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, 30*time.Second)
	if n := fileSize(t, queueFile(root, "segment.log")); n != size {
		t.Fatalf("segment.log holds %d bytes with a retry that reads it pending, want %d", n, size)
	}
	stepFor(t, clk, time.Minute)
	if diff := cmp.Diff([]string{"failing/cid-failing/a2"}, rec.all()); diff != "" {
		t.Fatalf("deliveries (-want +got):\n%s", diff)
	}
	rs := retries(t, q)
	if len(rs) != 1 || rs[0].Message == nil || rs[0].Message.CorrelationID != "cid-failing" || rs[0].Message.Payload != nil {
		t.Fatalf("retries = %+v, want failing's, carrying it (its payload not read)", rs)
	}
	if n := fileSize(t, queueFile(root, "segment.log")); n != 0 {
		t.Errorf("segment.log holds %d bytes once the retry carries its message, want 0", n)
	}
	stepFor(t, clk, time.Hour+time.Minute)
	if diff := cmp.Diff([]string{"failing/cid-failing/a2", "failing/cid-failing/a3"}, rec.all()); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if dl := deadLetters(t, q); len(dl) != 1 || string(dl[0].Payload) != "failing" || dl[0].Attempts != 3 {
		t.Errorf("dead letters = %+v, want failing's after 3 attempts", dl)
	}
}

// The worker's schedule holds where each pending retry's message is in
// segment.log.retry, not the message: 200 retries of 64 KiB payloads
// leave no payload in its memory, and each is delivered, payload and
// correlation ID, when due, read back from the file; after a compaction
// of the file as well (the first half done, the second half's frames
// moved). The worker held every pending retry's message, payload and
// all: gigabytes for a queue with many large messages waiting.
func TestPendingRetriesHoldNoPayload(t *testing.T) {
	const n = 200
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	pad := strings.Repeat("x", 64<<10)
	payload := func(i int) string { return fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, pad) }
	for i := range n {
		if _, err := q.Append(queue.NewMessage{Source: "enqueue", CorrelationID: fmt.Sprintf("cid-%d", i), Payload: []byte(payload(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]string{} // correlation ID: payload, of the second attempts
	handler := queue.HandlerFunc(func(_ context.Context, d queue.Delivery) queue.Verdict {
		if d.Attempt == 1 {
			var i int
			fmt.Sscanf(d.CorrelationID, "cid-%d", &i)
			delay := time.Hour // the first half due first, the second an hour later
			if i >= n/2 {
				delay = 2 * time.Hour
			}
			return queue.Verdict{Kind: queue.VerdictRetry, Error: "503",
				Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: delay, BackoffFactor: 1, MaxDelay: delay}}
		}
		mu.Lock()
		got[d.CorrelationID] = string(d.Payload)
		mu.Unlock()
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
	})
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: 10 * time.Second, Handler: handler})
	clk.WaitCalls(t, 1)
	if rs := retries(t, q); len(rs) != n {
		t.Fatalf("%d retries pending, want %d", len(rs), n)
	}
	if held := queue.HeldRetryPayload(w); held != 0 {
		t.Fatalf("the worker's schedule holds %d payload bytes with %d retries pending, want 0", held, n)
	}
	retryFile := queueFile(root, "segment.log.retry")
	before := fileSize(t, retryFile)
	want := func(from, to int) map[string]string {
		m := map[string]string{}
		for i := from; i < to; i++ {
			m[fmt.Sprintf("cid-%d", i)] = payload(i)
		}
		return m
	}
	check := func(what string, want map[string]string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("%s: %d retries delivered, want %d", what, len(got), len(want))
		}
		for cid, p := range want {
			if got[cid] != p {
				t.Fatalf("%s: retry %s delivered with a payload of %d bytes, want %d", what, cid, len(got[cid]), len(p))
			}
		}
	}
	stepFor(t, clk, time.Hour+time.Minute)
	check("the first half due", want(0, n/2))
	// the first half done, its sets and clears outweigh the live
	// entries: compacted at the idle moment, the second half's frames
	// moved to the start of the file
	if after := fileSize(t, retryFile); after >= before/2+before/10 {
		t.Fatalf("segment.log.retry holds %d bytes (%d before), want it compacted", after, before)
	}
	if held := queue.HeldRetryPayload(w); held != 0 {
		t.Fatalf("the worker's schedule holds %d payload bytes after the compaction, want 0", held)
	}
	stepFor(t, clk, time.Hour)
	check("all due", want(0, n))
	if rs := retries(t, q); len(rs) != 0 {
		t.Errorf("%d retries pending, want none", len(rs))
	}
}
