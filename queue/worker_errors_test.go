package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
)

// The worker's errors: a failed read of a retry, a failed write of the
// retry schedule, a drain that fails midway. Each leaves every message
// delivered at least once.

// idRecorder records the ids and attempts a worker's handler saw.
type idRecorder struct {
	mu  sync.Mutex
	ids []uint64
	att []int
}

func (r *idRecorder) handler(decide func(d Delivery) Verdict) Handler {
	return HandlerFunc(func(_ context.Context, d Delivery) Verdict {
		r.mu.Lock()
		r.ids = append(r.ids, d.ID)
		r.att = append(r.att, d.Attempt)
		r.mu.Unlock()
		return decide(d)
	})
}

func (r *idRecorder) got() ([]uint64, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids), slices.Clone(r.att)
}

// delivered returns the ids of the deliveries so far, in order.
func (r *idRecorder) delivered() []uint64 {
	ids, _ := r.got()
	return ids
}

// attemptsOf returns the attempt numbers of the deliveries of message id so
// far, in order.
func (r *idRecorder) attemptsOf(id uint64) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for i, got := range r.ids {
		if got == id {
			out = append(out, r.att[i])
		}
	}
	return out
}

// ackAll acknowledges every delivery.
func ackAll(Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} }

// startQuietWorker starts a worker of q with handler h on clk, polling
// every 10 s, logging nowhere; it is stopped when the test ends.
func startQuietWorker(t *testing.T, q *Queue, clk *clocktest.Fake, h Handler) *Worker {
	t.Helper()
	w := NewWorker(q, WorkerConfig{Handler: h, Clock: clk, Poll: 10 * time.Second, StopGrace: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.Start()
	t.Cleanup(w.Stop)
	return w
}

// TestWorkerKeepsARetryItCouldNotRead: a scheduled retry whose read fails
// with an I/O error stays scheduled (the worker starts again after a
// pause) and is delivered; only a message that is not in the log any more
// is dropped.
func TestWorkerKeepsARetryItCouldNotRead(t *testing.T) {
	m, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{FS: m, Now: clk.Now})
	appendN(t, q, 0, 1)
	rec := &idRecorder{}
	policy := RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	startQuietWorker(t, q, clk, rec.handler(func(d Delivery) Verdict {
		if d.Attempt == 1 {
			return Verdict{Kind: VerdictRetry, Policy: policy, Error: "503"}
		}
		return ackAll(d)
	}))
	clk.WaitCalls(t, 1) // attempt 1 failed, the retry is scheduled, the worker waits
	if rs, err := q.Retries(); err != nil || len(rs) != 1 {
		t.Fatalf("Retries = %v, %v; want one", rs, err)
	}
	m.Fail(opRead, segmentFile, 1, syscall.EIO, false) // one transient read error
	for range 5 {
		clk.Step(t)
	}
	ids, att := rec.got()
	if len(ids) < 2 {
		rs, _ := q.Retries()
		t.Errorf("deliveries %v (attempts %v), want the retry (attempt 2) too: a transient read error dropped it; retries now %v, segment.log %d bytes",
			ids, att, rs, size(t, q))
	}
}

// TestWorkerStartsAgainAfterAnError: an error that ends a round of
// deliveries (here a failed write of the retry schedule) does not end the
// worker: the queue keeps taking messages, and the worker, started again
// after a pause, delivers them.
func TestWorkerStartsAgainAfterAnError(t *testing.T) {
	m, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{FS: m, Now: clk.Now})
	m.Fail(opSync, retryFile, 1, syscall.ENOSPC, false) // one failed schedule write (the fdatasync of its change)
	appendN(t, q, 0, 1)
	rec := &idRecorder{}
	policy := RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	w := startQuietWorker(t, q, clk, rec.handler(func(d Delivery) Verdict {
		if d.ID == 1 && d.Attempt == 1 {
			return Verdict{Kind: VerdictRetry, Policy: policy, Error: "503"}
		}
		return ackAll(d)
	}))
	// the first delivery, then the failed write of its retry: the
	// injected ENOSPC must fire, or this is a plain delivery test
	deadline := time.Now().Add(10 * time.Second)
	for ids, _ := rec.got(); len(ids) == 0 || !m.Fired(); ids, _ = rec.got() {
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %v, injected ENOSPC fired %v: want the first message delivered and its retry's schedule write failed",
				ids, m.Fired())
		}
		time.Sleep(time.Millisecond)
	}
	clk.WaitCalls(t, 1) // the worker, stopped on the error, waits on the clock
	// later submissions, after the fault has fired
	msgs := appendN(t, q, 1, 2)
	w.Wake()
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ids, _ := rec.got(); slices.Contains(ids, msgs[1].ID) {
			return
		}
		clk.Advance(time.Minute) // whatever the worker may wait for
		time.Sleep(5 * time.Millisecond)
	}
	ids, _ := rec.got()
	t.Errorf("deliveries %v: messages %d and %d, appended after one transient ENOSPC, were never delivered (the worker exited; Leading=%v)",
		ids, msgs[0].ID, msgs[1].ID, w.State().Leading)
}

// TestWorkerAfterADrainThatFailedPastTheTruncation: Drain truncates the
// log and then fails (here the fdatasync after the truncation), and
// another process appends more than the worker's cursor before the worker
// looks. The worker takes its cursor from the checkpoint file (the drain
// marker), not from the log's size, so none of the messages appended since
// is skipped.
func TestWorkerAfterADrainThatFailedPastTheTruncation(t *testing.T) {
	m, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{FS: m, Now: clk.Now})
	other, _ := openQueue(t, root, Options{FS: m, Now: clk.Now}) // another process's handle
	appendN(t, q, 0, 3)                                          // same frame size as those below
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)

	var armed, truncated, appended atomic.Bool
	var late []Message
	var lateErr error
	armed.Store(true)
	m.before = func(op, name string) {
		if name != segPath || !armed.Load() {
			return
		}
		switch {
		case op == opTruncate && !truncated.Load():
			truncated.Store(true)
			m.Fail(opSync, segmentFile, 1, syscall.EIO, false) // the fdatasync after the truncation
		case op == opStat && truncated.Load() && m.Fired() && appended.CompareAndSwap(false, true):
			// the worker looks at the log's size after the failed drain;
			// another process has appended meanwhile
			for i := 3; i < 8; i++ {
				msg, err := other.Append(newMessage(i, 40))
				if err != nil {
					lateErr = err
					return
				}
				late = append(late, msg)
			}
		}
	}
	rec := &idRecorder{}
	startQuietWorker(t, q, clk, rec.handler(ackAll))
	clk.WaitCalls(t, 1)
	for range 4 {
		clk.Step(t)
	}
	if !appended.Load() {
		t.Fatal("the scenario did not happen: the drain did not fail after truncating")
	}
	if lateErr != nil {
		t.Fatal(lateErr)
	}
	ids, _ := rec.got()
	var missing []uint64
	for _, msg := range late {
		if !slices.Contains(ids, msg.ID) {
			missing = append(missing, msg.ID)
		}
	}
	if len(missing) > 0 {
		t.Errorf("deliveries %v: acknowledged messages %v were never delivered (segment.log is now %d bytes)", ids, missing, size(t, q))
	}
}

// TestWorkerFullDiskDeliversNothingTwice: while the disk is full, a write
// of the queue's state that a delivery made necessary (the checkpoint
// past it, its dead letter) is tried again, deliveries waiting for it: no
// message is delivered again for it, and no attempt is made past
// queue_max_attempts. The worker used to stop on the error and start
// again from the state on disk after each pause: it delivered the whole
// backlog since its checkpoint again, and ran a message's last attempt
// again, at every start, for as long as the disk stayed full.
func TestWorkerFullDiskDeliversNothingTwice(t *testing.T) {
	for _, c := range []struct {
		name     string
		file     string // whose writes fail
		attempts int    // the handler fails each message this many times, then acknowledges it
	}{
		{"the checkpoint", ckptFile, 0},
		// the worker writes the checkpoint file it makes before it
		// delivers: its rewrites in place then need no room
		{"the checkpoint, its file not made yet", ckptFile + " (new)", 0},
		{"a dead letter", dlqFile, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, root := memQueueRoot(t)
			clk := clocktest.New(epoch)
			q, _ := openQueue(t, root, Options{FS: m, Now: clk.Now})
			file, fresh := strings.CutSuffix(c.file, " (new)")
			if file == ckptFile && !fresh {
				// a checkpoint file that holds its bytes: rewriting them
				// needs no room, so this is a disk whose writes all fail
				// (an I/O error rather than room)
				if err := q.SaveCheckpoint(0); err != nil {
					t.Fatal(err)
				}
			}
			appendN(t, q, 0, 5)
			m.Fail(opWrite, file, 1, syscall.ENOSPC, true)
			rec := &idRecorder{}
			policy := RetryPolicy{MaxAttempts: 2, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
			startQuietWorker(t, q, clk, rec.handler(func(d Delivery) Verdict {
				if d.ID == 3 && c.attempts > 0 {
					return Verdict{Kind: VerdictRetry, Policy: policy, Error: "503"}
				}
				return ackAll(d)
			}))
			// with room for the checkpoint, the five first deliveries need
			// no time: the clock stands still until they are made (moved
			// at once, it had 3's retry due before 4 was read, on a slow
			// machine)
			for deadline := time.Now().Add(10 * time.Second); c.attempts > 0; {
				if ids, _ := rec.got(); len(ids) >= 5 {
					break
				}
				if time.Now().After(deadline) {
					ids, _ := rec.got()
					t.Fatalf("deliveries %v in 10 s, want the five messages first", ids)
				}
				time.Sleep(time.Millisecond)
			}
			// ten minutes of a full disk, the worker's pauses included
			for range 200 {
				clk.WaitCalls(t, clk.Calls()) // at rest
				clk.Advance(3 * time.Second)
				time.Sleep(time.Millisecond)
			}
			if !m.Fired() {
				t.Fatal("setup: the injected ENOSPC never fired")
			}
			m.Heal()
			for range 50 {
				clk.Advance(30 * time.Second)
				time.Sleep(2 * time.Millisecond)
			}
			ids, atts := rec.got()
			want := []uint64{1, 2, 3, 4, 5}
			wantAtts := []int{1, 1, 1, 1, 1}
			if c.attempts > 0 {
				// 3 fails twice (its second attempt its last), then waits
				// for its dead letter while the others go on
				want, wantAtts = []uint64{1, 2, 3, 4, 5, 3}, []int{1, 1, 1, 1, 1, 2}
			}
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("deliveries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantAtts, atts); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if c.attempts > 0 {
				if p := pendingDeadLetters(t, q); !slices.Equal(p, []uint64{3}) {
					t.Errorf("pending dead letters %v, want [3] once the disk has room", p)
				}
			}
		})
	}
}

// TestPersistTriesOnceAtThePauseEnd: a wake-up during persist's first
// pause (Poll) has the write tried when Poll has passed, which is the
// pause's end: persist's own try is that try, not a second one at the
// same instant (two writes on a failing disk, two tries counted).
func TestPersistTriesOnceAtThePauseEnd(t *testing.T) {
	_, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{})
	clk := clocktest.New(epoch)
	w := NewWorker(q, WorkerConfig{Clock: clk, Poll: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var mu sync.Mutex
	var at []time.Duration
	write := func() error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, clk.Now().Sub(epoch))
		if len(at) <= 3 {
			return errors.New("the disk is full")
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- w.persist(context.Background(), write) }()
	clk.WaitDeadline(t, epoch.Add(10*time.Second)) // failed at 0 s
	clk.Advance(time.Second)
	w.Wake()
	time.Sleep(50 * time.Millisecond) // the wake-up taken at 1 s
	clk.AdvanceTo(epoch.Add(10 * time.Second))
	clk.WaitDeadline(t, epoch.Add(30*time.Second)) // failed at 10 s; the next pause: 20 s
	mu.Lock()
	got := slices.Clone(at)
	mu.Unlock()
	if !slices.Equal(got, []time.Duration{0, 10 * time.Second}) {
		t.Errorf("tries at %v, want one at 0 s and one at 10 s", got)
	}
	clk.AdvanceTo(epoch.Add(30 * time.Second))
	clk.WaitDeadline(t, epoch.Add(60*time.Second)) // failed at 30 s; the next pause: 30 s, the most
	clk.AdvanceTo(epoch.Add(60 * time.Second))
	if err := <-done; err != nil {
		t.Errorf("persist: %v", err)
	}
}
