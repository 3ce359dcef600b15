package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// TestManagerReopenedTwiceKeepsItsBudgetSlot: a queue reopened after a
// failed write may fail again (the next append to the new handle) before
// the first reopening has finished; the second reopening, retrying while
// the queue cannot be opened, keeps the queue's slot of the budget (the
// first one's end once took the slot with it, and another flow's first
// use took it). The interleaving is a race: each round tries it again.
func TestManagerReopenedTwiceKeepsItsBudgetSlot(t *testing.T) {
	k := [2]string{testTenant, testFlow}
	for round := range 200 {
		mfs, root := memQueueRoot(t)
		clk := clocktest.New(epoch)
		m := NewManager(ManagerConfig{Root: root, FS: mfs, MaxWorkers: 1, Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict { return ackAll(d) }),
			Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
		q1, _, err := m.Queue(testTenant, testFlow)
		if err != nil {
			t.Fatal(err)
		}
		second := make(chan struct{})
		go func() { // the submission that finds the reopened handle poisoned again
			defer close(second)
			for {
				m.mu.Lock()
				e := m.queues[k]
				m.mu.Unlock()
				if e != nil && e.q != q1 {
					m.reopen(testTenant, testFlow, e.q, ErrPoisoned)
					// from now on the queue cannot be opened: the second
					// reopening retries after its pause
					mfs.Fail(opOpen, segmentFile, 1, syscall.EIO, true)
					return
				}
				runtime.Gosched()
			}
		}()
		m.reopen(testTenant, testFlow, q1, ErrPoisoned)
		<-second
		// the first reopening ends (it has only its wake-up left), the
		// second waits out its pause
		deadline := time.Now().Add(5 * time.Second)
		for {
			m.mu.Lock()
			n := m.reopening[k]
			m.mu.Unlock()
			if n <= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the first reopening did not end", round)
			}
			runtime.Gosched()
		}
		if err := m.Has(testTenant, "other"); !errors.Is(err, ErrBudget) {
			t.Fatalf("round %d: another flow's first use while %v is reopened a second time: %v, want ErrBudget (the slot is its)", round, k, err)
		}
		m.Stop()
	}
}

// TestManagerConcurrentStopWaitsForTheFirst: a second Stop called while
// the first is closing the queues returns only once the first has
// finished (it once found the open queues emptied and returned at once).
func TestManagerConcurrentStopWaitsForTheFirst(t *testing.T) {
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	closing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)
	var armed atomic.Bool
	mfs.before = func(op, name string) {
		if op == opClose && name == segPath && armed.Load() {
			once.Do(func() { close(closing) })
			<-release
		}
	}
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict { return ackAll(d) }),
		Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	q, _, err := m.Queue(testTenant, testFlow)
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, 1) // the worker is idle
	armed.Store(true)
	first := make(chan struct{})
	go func() { m.Stop(); close(first) }()
	<-closing // the first Stop is closing the queue
	second := make(chan struct{})
	go func() { m.Stop(); close(second) }()
	select {
	case <-second:
		t.Errorf("the second Stop returned while the first is still closing the queues (segment.log of %s/%s not closed yet)", q.Tenant, q.Flow)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-first
	<-second
}

// TestManagerRetiresAStalledWorker: on a full disk, a submission whose
// append fails poisons the queue, and the Manager reopens it. It stopped
// the old worker, which was waiting for the dead letter of a message's last
// attempt: the new one made that attempt again from the state on disk, at
// every failed submission (a client retrying each second: a delivery a
// second, past queue_max_attempts). The old worker is now retired: it
// writes the dead letter once the disk has room, then lets the new one in.
func TestManagerRetiresAStalledWorker(t *testing.T) {
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	rec := &idRecorder{}
	policy := RetryPolicy{MaxAttempts: 2, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: rec.handler(func(d Delivery) Verdict {
		if string(d.Payload) == "bad" {
			return Verdict{Kind: VerdictRetry, Policy: policy, Error: "503"}
		}
		return ackAll(d)
	}), Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 10 * time.Second, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	bad, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("bad")})
	if err != nil {
		t.Fatal(err)
	}
	mfs.Fail(opWrite, dlqFile, 1, syscall.ENOSPC, true) // the disk is full
	attempts := func() []int { return rec.attemptsOf(bad.ID) }
	for deadline := time.Now().Add(10 * time.Second); len(attempts()) < 2 || !mfs.Fired(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("setup: attempts %v, dead-letter write failed %v", attempts(), mfs.Fired())
		}
		clk.Advance(time.Second)
	}
	// submissions while the disk is full: each append fails, poisoning
	// the queue (here its fdatasync); the disk stays full for longer than
	// the workers' stop grace (50 ms)
	for range 10 {
		mfs.Fail(opSync, segmentFile, 1, syscall.EIO, false)
		if _, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("more")}); err == nil {
			t.Fatal("setup: an append succeeded on the full disk")
		}
		for range 10 {
			clk.Advance(time.Second)
			time.Sleep(10 * time.Millisecond)
		}
	}
	mfs.Heal() // room again
	var next Message
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		clk.Advance(10 * time.Second)
		if next, err = m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("next")}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appends still fail once the disk has room: %v", err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if ids, _ := rec.got(); slices.Contains(ids, next.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the submission after the disk had room was never delivered")
		}
		clk.Advance(10 * time.Second)
	}
	if got := attempts(); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("attempts of the failing message %v, want [1 2]: its last attempt made again at failed submissions", got)
	}
	q, _, err := m.Queue(testTenant, testFlow)
	if err != nil {
		t.Fatal(err)
	}
	if p := pendingDeadLetters(t, q); !slices.Equal(p, []uint64{bad.ID}) {
		t.Errorf("pending dead letters %v, want [%d]", p, bad.ID)
	}
}

// TestManagerTakesSubmissionsWhileAWorkerWaits: a worker whose write may
// never work (the dead-letter file unwritable for good) does not keep its
// queue from taking submissions: a failed submission reopens the queue at
// once, its new worker standing by, while the old one, retired, goes on
// trying its write rather than leaving the attempt to be made again.
func TestManagerTakesSubmissionsWhileAWorkerWaits(t *testing.T) {
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	rec := &idRecorder{}
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: rec.handler(func(d Delivery) Verdict {
		if string(d.Payload) == "bad" {
			return Verdict{Kind: VerdictDeadLetter, Error: "corrupt"}
		}
		return ackAll(d)
	}), Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 10 * time.Second, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	mfs.Fail(opWrite, dlqFile, 1, syscall.EFBIG, true) // for good
	bad, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("bad")})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !mfs.Fired(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("setup: the dead letter's write never failed")
		}
	}
	mfs.Fail(opSync, segmentFile, 1, syscall.EIO, false)
	if _, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("x")}); err == nil {
		t.Fatal("setup: the append with a failing fdatasync succeeded")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("taken")}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("submissions still refused while the old worker waits for its write: %v", err)
		}
		clk.Advance(time.Second)
	}
	for range 20 { // the old worker's tries go on
		clk.Advance(30 * time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	if got := rec.attemptsOf(bad.ID); !slices.Equal(got, []int{1}) {
		t.Errorf("attempts of the message whose dead letter cannot be written: %v, want [1]", got)
	}
}

// TestManagerSpacesOutReopenings: a queue whose log keeps failing is
// reopened at once the first time, then 1 s, 2 s, 4 s … (up to 10 s) after
// the reopening before, rather than at every failed submission (a host
// under load on a full disk opened and verified the queue's files and
// started a worker a few hundred times a second). Meanwhile its
// submissions are refused with the failure, as ErrPoisoned, opening
// nothing. Once the disk heals, the next reopening takes submissions, and
// a later failure is reopened at once again.
func TestManagerSpacesOutReopenings(t *testing.T) {
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	var opens atomic.Int64 // of segment.log: one or more for each opening of the queue
	segPath := filepath.Join(root, testTenant, testFlow, segmentFile)
	mfs.before = func(op, name string) {
		if op == opOpen && name == segPath {
			opens.Add(1)
		}
	}
	rec := &idRecorder{}
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: rec.handler(ackAll), Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	submit := func(payload string) (Message, error) {
		return m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte(payload)})
	}
	refused := func(when string, n int) {
		t.Helper()
		for range n {
			if _, err := submit("during"); !errors.Is(err, ErrPoisoned) {
				t.Fatalf("%s: a submission on a failing disk: %v, want ErrPoisoned", when, err)
			}
		}
	}
	if _, err := submit("before"); err != nil {
		t.Fatal(err)
	}
	mfs.Fail(opSync, segmentFile, 1, syscall.EIO, true) // for good
	for i, gap := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		when := fmt.Sprintf("reopening %d, %s after the one before", i, gap)
		before := opens.Load()
		if i > 0 {
			clk.Advance(gap - time.Millisecond)
			refused(when+", 1 ms early", 50)
			if n := opens.Load(); n != before {
				t.Fatalf("%s: the queue was opened again 1 ms before its time (segment.log opened %d times)", when, n-before)
			}
			clk.Advance(time.Millisecond)
		}
		// the reopening due now happens (by a submission, or by the
		// manager's own retry woken by the clock), and the reopened queue
		// fails its first append
		for deadline := time.Now().Add(5 * time.Second); opens.Load() == before; time.Sleep(time.Millisecond) {
			refused(when, 1)
			if time.Now().After(deadline) {
				t.Fatalf("%s: the queue was not reopened", when)
			}
		}
		refused(when, 1)
		reopened := opens.Load()
		refused(when+", after it", 50)
		if n := opens.Load(); n != reopened {
			t.Fatalf("%s: 50 submissions after it opened the queue again (segment.log opened %d more times)", when, n-reopened)
		}
	}
	mfs.Heal()
	clk.Advance(10 * time.Second)
	var taken Message
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		msg, err := submit("after")
		if err == nil {
			taken = msg
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submissions still refused 10 s after the disk healed: %v", err)
		}
	}
	// the queue works for a while; a failure now is reopened at once
	clk.Advance(30 * time.Second)
	mfs.Fail(opWrite, segmentFile, 1, syscall.EIO, false) // (a write: the idle worker's drain syncs the log too)
	if _, err := submit("once"); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("the submission whose write fails: %v, want ErrPoisoned", err)
	}
	if _, err := submit("again"); err != nil {
		t.Fatalf("a queue that failed once after a quiet time was not reopened at once: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if ids, _ := rec.got(); slices.Contains(ids, taken.ID) {
			break
		}
		if time.Now().After(deadline) {
			ids, _ := rec.got()
			t.Fatalf("message %d, taken after the disk healed, was not delivered (delivered: %v)", taken.ID, ids)
		}
	}
}

// holdBad returns a handler, recording in rec, that acknowledges every
// message but one whose payload is "bad": it closes started when that
// one's delivery begins, holds it until release is closed, then
// dead-letters it. A message submitted meanwhile leaves its wake-up
// waiting in the worker's channel.
func holdBad(rec *idRecorder) (h Handler, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	return rec.handler(func(d Delivery) Verdict {
		if string(d.Payload) == "bad" {
			close(started)
			<-release
			return Verdict{Kind: VerdictDeadLetter, Error: "corrupt"}
		}
		return ackAll(d)
	}), started, release
}

// TestFailingWriteBacksOffDespiteAnEarlierWakeUp: a submission's wake-up
// that reached the worker while it was busy with the delivery before
// (buffered, its message read since) is answered by one try of a failed
// write, not by a try every Poll for as long as the write fails: the
// pauses still double (tries at 0, 10 and 30 s with Poll at 10 s). It was
// given back after each pause and taken again by the next one. The message
// of that submission is still delivered once the write goes through.
func TestFailingWriteBacksOffDespiteAnEarlierWakeUp(t *testing.T) {
	const poll = 10 * time.Second
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	var triesMu sync.Mutex
	var tries []time.Duration // when dlq.log was written, from epoch
	mfs.before = func(op, name string) {
		if op == opWrite && filepath.Base(name) == dlqFile {
			triesMu.Lock()
			if at := clk.Now().Sub(epoch); len(tries) == 0 || tries[len(tries)-1] != at {
				tries = append(tries, at)
			}
			triesMu.Unlock()
		}
	}
	rec := &idRecorder{}
	handler, started, release := holdBad(rec)
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: handler, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: poll, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	submit := func(payload string) Message {
		t.Helper()
		msg, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	mfs.Fail(opWrite, dlqFile, 1, syscall.EFBIG, true) // until healed
	submit("bad")
	<-started
	other := submit("other") // its wake-up waits in the channel: the worker is busy
	close(release)
	// failed at 0 s; the next try at 10 s, a wait begun again once the
	// wake-up is taken
	clk.WaitDeadlines(t, epoch.Add(poll), 2)
	clk.Advance(poll)
	clk.WaitDeadline(t, epoch.Add(3*poll)) // failed at 10 s; the next try at 30 s
	clk.AdvanceTo(epoch.Add(2 * poll))
	time.Sleep(100 * time.Millisecond) // a try at 20 s, were it due, is made now and fails
	mfs.Heal()
	clk.AdvanceTo(epoch.Add(3 * poll))
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(rec.delivered(), other.ID); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("message %d, submitted while the worker was busy, was not delivered once the write went through (delivered %v)", other.ID, rec.delivered())
		}
	}
	triesMu.Lock()
	defer triesMu.Unlock()
	if want := []time.Duration{0, poll, 3 * poll}; !slices.Equal(tries, want) {
		t.Errorf("the dead letter's write was tried at %v, want %v", tries, want)
	}
}

// TestManagerSubmissionWakesAWaitingWrite: a worker waiting to write its
// queue's state on a full disk (a dead letter) tries again as soon as a
// submission to the queue goes through, which says the disk has room
// again, or once Poll has passed since its last try if that is later,
// rather than at the end of its pause (which grows to 30 s): the
// deliveries waited that long after the disk had room. Whether the worker
// is the queue's own or one retired when a failed submission made the
// Manager reopen the queue.
func TestManagerSubmissionWakesAWaitingWrite(t *testing.T) {
	const poll = 10 * time.Second
	for _, retired := range []bool{false, true} {
		for _, since := range []time.Duration{poll, poll / 2} { // since the last try, when the submission goes through
			t.Run(fmt.Sprintf("retired=%v/after=%s", retired, since), func(t *testing.T) {
				mfs, root := memQueueRoot(t)
				clk := clocktest.New(epoch)
				var logs jsonlogtest.Buffer
				rec := &idRecorder{}
				handler, started, release := holdBad(rec)
				m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: handler, Clock: clk, Logger: logs.Logger(slog.LevelInfo), Poll: poll, Now: clk.Now, StopGrace: 50 * time.Millisecond})
				t.Cleanup(m.Stop)
				submit := func(payload string) (Message, error) {
					return m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte(payload)})
				}
				mfs.Fail(opWrite, dlqFile, 1, syscall.EFBIG, true) // until healed
				bad, err := submit("bad")
				if err != nil {
					t.Fatal(err)
				}
				// A wake-up waits in the channel, whether or not the
				// worker read "bad" before it took the first one: the
				// worker is busy with "bad" when "other" goes through.
				<-started
				if _, err := submit("other"); err != nil {
					t.Fatal(err)
				}
				close(release)
				// failed at 0 s; the next try at 10 s, a wait begun
				// again once the wake-up is taken
				clk.WaitDeadlines(t, epoch.Add(poll), 2)
				clk.Advance(poll)
				clk.WaitDeadline(t, epoch.Add(3*poll)) // failed at 10 s; the next try at 30 s
				if retired {
					mfs.Fail(opWrite, segmentFile, 1, syscall.EIO, false)
					if _, err := submit("refused"); !errors.Is(err, ErrPoisoned) {
						t.Fatalf("setup: the submission whose write fails: %v, want ErrPoisoned", err)
					}
				}
				clk.Advance(since)
				mfs.Heal()
				var taken Message
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					if taken, err = submit("taken"); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("a submission once the disk has room: %v", err)
					}
				}
				// tried at once, or at 20 s (Poll after the last try),
				// 10 s before the pause ends
				if since < poll {
					clk.WaitDeadline(t, epoch.Add(2*poll)) // the wake-up taken at 15 s
				}
				clk.AdvanceTo(epoch.Add(2 * poll))
				for deadline := time.Now().Add(5 * time.Second); !slices.Contains(rec.delivered(), taken.ID); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the dead letter's write was not tried again at 20 s, after a submission went through at %s: "+
							"message %d taken then not delivered (delivered %v; %d worker_recovered lines)",
							since+poll, taken.ID, rec.delivered(), len(logs.Events(t, "worker_recovered")))
					}
				}
				q, err := m.Peek(testTenant, testFlow)
				if err != nil {
					t.Fatal(err)
				}
				if p := pendingDeadLetters(t, q); !slices.Equal(p, []uint64{bad.ID}) {
					t.Errorf("pending dead letters %v, want [%d]", p, bad.ID)
				}
				if got := rec.attemptsOf(bad.ID); !slices.Equal(got, []int{1}) {
					t.Errorf("attempts of the message whose dead letter waited for room: %v, want [1]", got)
				}
			})
		}
	}
}
