package queue

// Processes sharing one state directory. Two handles opened separately on
// one folder stand for two processes: their flock(2) locks are taken
// through different open files, so they conflict as between processes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
)

// quietLog is a logger that drops everything.
var quietLog = slog.New(slog.DiscardHandler)

// deliveryLog records the deliveries of handlers, by message id.
type deliveryLog struct {
	mu  sync.Mutex
	got []string // worker:id/attempt@since
	ids map[string][]uint64
	ch  chan struct{}
}

func newDeliveryLog() *deliveryLog {
	return &deliveryLog{ids: map[string][]uint64{}, ch: make(chan struct{}, 1000)}
}

func (r *deliveryLog) add(worker string, d Delivery, since time.Duration) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s:%d/a%d@%v", worker, d.ID, d.Attempt, since))
	r.ids[worker] = append(r.ids[worker], d.ID)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *deliveryLog) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *deliveryLog) of(worker string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids[worker])
}

func openFolder(t *testing.T, root string, opts Options) *Queue {
	t.Helper()
	q, _, err := Open(root, testTenant, testFlow, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestOpenWriteBackAfterTheWorkerStops: Open's recover reads the
// checkpoint under the append lock, then tries worker.lock, and writes back
// what it resolved when it gets it. The worker's last checkpoint write (at
// its stop) needs no append lock: a worker that stops between the read and
// the TryLock has written and synced its final checkpoint, released the
// lock, and Open then writes its stale reading over it (0 for a read torn
// by that very write). The checkpoint goes back for good: after a restart
// every processed message was delivered again (and once dlq.log was
// compacted, their dead letters came back as pending). Open now reads the
// file again once it holds worker.lock.
func TestOpenWriteBackAfterTheWorkerStops(t *testing.T) {
	m, root := settledMemQueue(t)
	clk := clocktest.New(epoch)
	q := openFolder(t, root, Options{FS: m, Now: clk.Now})
	var msgs []Message
	for i := range 3 {
		msg, err := q.Append(newMessage(i, 40))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	end, _ := q.Size()
	inLast := make(chan struct{})
	handler := HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
		if d.ID == msgs[2].ID {
			close(inLast)
			<-ctx.Done() // a slow delivery, done when the stop's grace ends
		}
		return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
	})
	w := NewWorker(q, WorkerConfig{Handler: handler, Clock: clk, Logger: quietLog, Poll: time.Hour, StopGrace: time.Millisecond, CheckpointEvery: 1})
	w.Start()
	defer w.Stop()
	<-inLast
	if c, _ := q.Checkpoint(); c != msgs[2].Offset {
		t.Fatalf("setup: checkpoint %d, want %d", c, msgs[2].Offset)
	}

	// another process's Open reads the checkpoint while the worker's final
	// write is in flight (torn: read as 0); the worker then finishes its
	// stop (writes end, syncs, releases worker.lock) before Open's TryLock
	tfs := &tornReadFS{memFS: m}
	torn := append(encodeValue(ckptMagic, uint64(end))[:12:12], encodeValue(ckptMagic, uint64(msgs[2].Offset))[12:]...)
	tfs.torn.Store(&torn)
	tfs.after = w.Stop
	other, _, err := Open(root, testTenant, testFlow, Options{FS: tfs, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if tfs.torn.Load() != nil {
		t.Fatal("setup: Open did not read the checkpoint")
	}
	m.Crash() // even a clean stop's synced value is lost
	q2, _, err := Open(root, testTenant, testFlow, Options{FS: m})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if c, _ := q2.Checkpoint(); c != end {
		t.Errorf("the stopped worker processed the whole log (checkpoint %d, synced at its stop), but the checkpoint is %d: "+
			"another process's Open read it before the stop and wrote its stale reading back after the worker released worker.lock; "+
			"messages %d..%d are delivered again", end, c, msgs[0].ID, msgs[2].ID)
	}
}

// TestPastEndCheckpointDoesNotOutliveAWorker: a checkpoint past the end of
// the log (an older version's drain, or a power cut that kept the
// checkpoint and lost the tail it passed) reads as 0 and must be written
// back before the log grows past it. Open writes it back only when it gets
// worker.lock; the janitor of another process holds that lock while it
// waits for the append lock Open holds, so Open leaves the file. The
// worker elected next resolves it to 0 but writes nothing while its cursor
// equals what it read: a first delivery cut short by a stop leaves the
// stale value in the file while other processes append past it, and the
// process taking over then read it as a plain checkpoint and skipped every
// message before it, never delivered. The worker now writes back, at its
// start, whatever the file holds that is not a plain checkpoint.
func TestPastEndCheckpointDoesNotOutliveAWorker(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	q0 := openFolder(t, root, Options{})
	first, err := q0.Append(newMessage(0, 40))
	if err != nil {
		t.Fatal(err)
	}
	q0.Close()
	const past = 1000 // bytes: past the end of the one message
	if err := os.WriteFile(filepath.Join(dir, ckptFile), encodeValue(ckptMagic, past), 0o600); err != nil {
		t.Fatal(err)
	}

	// process 1 opens the queue while process 2's janitor holds worker.lock
	// (deleteIdleQueue: TryLock, then the append lock)
	janitor := NewFileLock(filepath.Join(dir, workerLockFile))
	if ok, err := janitor.TryLock(); !ok || err != nil {
		t.Fatalf("janitor's lock: %v %v", ok, err)
	}
	clk1 := clocktest.New(epoch)
	q1 := openFolder(t, root, Options{Now: clk1.Now})
	janitor.Unlock() // the janitor finds messages unprocessed: it leaves
	if c, _ := q1.Checkpoint(); c != 0 {
		t.Fatalf("setup: the past-end checkpoint reads %d, want 0", c)
	}

	rec := newDeliveryLog()
	started := make(chan struct{}, 1)
	w1 := NewWorker(q1, WorkerConfig{Clock: clk1, Logger: quietLog, Poll: time.Hour, StopGrace: time.Millisecond,
		Handler: HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
			rec.add("one", d, 0)
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done() // a slow backend; the stop's grace cuts it short
			return Verdict{Kind: VerdictInterrupted, Error: ctx.Err().Error()}
		})})
	w1.Start()
	defer w1.Stop()
	<-started

	// process 2 takes submissions meanwhile: the log grows past the stale value
	clk2 := clocktest.New(epoch)
	q2 := openFolder(t, root, Options{Now: clk2.Now})
	want := []uint64{first.ID}
	for i := 1; ; i++ {
		msg, err := q2.Append(newMessage(i, 40))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, msg.ID)
		if size, _ := q2.Size(); size > past+200 {
			break
		}
	}
	w1.Stop() // process 1 shuts down during its first delivery

	w2 := NewWorker(q2, WorkerConfig{Clock: clk2, Logger: quietLog, Poll: time.Hour,
		Handler: HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
			rec.add("two", d, 0)
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})})
	w2.Start()
	defer w2.Stop()
	clk2.WaitCalls(t, 1) // idle: everything it would deliver is delivered
	got := rec.of("two")
	var missing []uint64
	for _, id := range want {
		if !slices.Contains(got, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the process that took over delivered %v; never delivered: %v (skipped: the stale past-end checkpoint %d was left in the file by Open, which could not take worker.lock, and by the worker, which wrote nothing while its cursor stayed at the 0 it resolved)",
			got, missing, past)
	}
}

// TestTakeoverKeepsRetriesAndDeadLetters: the leader's process stops
// with a retry scheduled and a dead letter waiting; the standby (another
// process's handle) takes over within a poll, fires the retry at its due
// time with its attempt number, delivers nothing again, and keeps the dead
// letter.
func TestTakeoverKeepsRetriesAndDeadLetters(t *testing.T) {
	root := t.TempDir()
	clk := clocktest.New(epoch)
	q1 := openFolder(t, root, Options{Now: clk.Now})
	q2 := openFolder(t, root, Options{Now: clk.Now})
	var msgs []Message
	for i := range 4 {
		msg, err := q1.Append(newMessage(i, 40))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	policy := RetryPolicy{MaxAttempts: 4, InitialDelay: 10 * time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	rec := newDeliveryLog()
	decide := func(worker string) Handler {
		return HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
			rec.add(worker, d, clk.Now().Sub(epoch))
			switch {
			case d.ID == msgs[1].ID && d.Attempt < 3:
				return Verdict{Kind: VerdictRetry, Policy: policy, Error: "HTTP 503"}
			case d.ID == msgs[2].ID:
				return Verdict{Kind: VerdictDeadLetter, Error: "bad"}
			}
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})
	}
	const poll = time.Second
	w1 := NewWorker(q1, WorkerConfig{Handler: decide("one"), Clock: clk, Logger: quietLog, Poll: poll})
	w1.Start()
	defer w1.Stop()
	clk.WaitCalls(t, 1) // the leader is idle, the retry waiting
	w2 := NewWorker(q2, WorkerConfig{Handler: decide("two"), Clock: clk, Logger: quietLog, Poll: poll})
	w2.Start()
	defer w2.Stop()
	clk.WaitCalls(t, 2) // the standby waits for its next try
	if w2.State().Leading {
		t.Fatal("two leaders")
	}
	w1.Stop()
	n := clk.Calls()
	clk.Advance(poll) // the standby's try; the stopped leader's wait fires for no one
	clk.WaitCalls(t, n+1)
	// step the clock until the retry's two further attempts are made
	for i := 0; len(rec.of("two")) < 2; i++ {
		if i == 100 {
			t.Fatalf("no takeover: %v", rec.all())
		}
		clk.StepEarliest(t)
	}
	want := []string{
		fmt.Sprintf("one:%d/a1@0s", msgs[0].ID), fmt.Sprintf("one:%d/a1@0s", msgs[1].ID),
		fmt.Sprintf("one:%d/a1@0s", msgs[2].ID), fmt.Sprintf("one:%d/a1@0s", msgs[3].ID),
		fmt.Sprintf("two:%d/a2@10s", msgs[1].ID), fmt.Sprintf("two:%d/a3@30s", msgs[1].ID),
	}
	if got := rec.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries:\n got  %v\n want %v", got, want)
	}
	dl, _, err := q2.DeadLetters()
	if err != nil || len(dl) != 1 || dl[0].ID != msgs[2].ID {
		t.Errorf("dead letters after the takeover: %v %v, want message %d once", dl, err, msgs[2].ID)
	}
}

// TestJanitorDrainAndAppendsAcrossProcesses: processes append through
// handles opened once (a server) and anew (the CLI replays), a worker
// stand-in takes worker.lock in rounds, processes what is there and drains,
// and a janitor deletes the idle queue's files between the rounds. Every
// acknowledged message is processed, none twice by ids, and no id is
// issued twice.
func TestJanitorDrainAndAppendsAcrossProcesses(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, testTenant, testFlow)
	server := openFolder(t, root, Options{})
	worker := openFolder(t, root, Options{})
	var mu sync.Mutex
	acked := map[uint64]int{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	const n = 300
	wg.Go(func() {
		for i := range n {
			msg, err := server.Append(newMessage(i, 40))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked[msg.ID]++
			mu.Unlock()
		}
	})
	wg.Go(func() {
		for i := range 30 { // the CLI: a handle of its own each time
			q, _, err := Open(root, testTenant, testFlow, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			msg, err := q.Append(newMessage(1000+i, 40))
			q.Close()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked[msg.ID]++
			mu.Unlock()
		}
	})
	go func() { wg.Wait(); close(done) }()

	processed := map[uint64]int{}
	round := func() {
		wl := NewFileLock(filepath.Join(dir, workerLockFile))
		if ok, err := wl.TryLock(); err != nil || !ok {
			return // the janitor holds it
		}
		defer wl.Unlock()
		if err := worker.useSegmentAtPath(); err != nil {
			t.Error(err)
			return
		}
		off, err := worker.Checkpoint()
		if err != nil {
			t.Error(err)
			return
		}
		for {
			msg, next, err := worker.Read(off)
			if errors.Is(err, io.EOF) {
				off = max(off, next)
				break
			}
			if err != nil {
				t.Error(err)
				return
			}
			processed[msg.ID]++
			off = next
		}
		if err := worker.SaveCheckpoint(off); err != nil {
			t.Error(err)
			return
		}
		if err := worker.Drain(); err != nil && !errors.Is(err, ErrNotDrained) {
			t.Error(err)
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		round()
		if _, err := deleteIdleQueue(root, testTenant, testFlow, OS{}); err != nil {
			t.Error(err)
		}
		round()
	}
	round()
	if t.Failed() {
		return
	}
	for id, k := range acked {
		if k > 1 {
			t.Errorf("id %d issued %d times", id, k)
		}
		if processed[id] == 0 {
			t.Errorf("acknowledged message %d never processed", id)
		}
	}
	for id, k := range processed {
		if k > 1 {
			t.Errorf("message %d processed %d times (a checkpoint went back)", id, k)
		}
	}
	if len(acked) != n+30 {
		t.Errorf("%d ids acknowledged, want %d", len(acked), n+30)
	}
}

// TestCompactionWhileTheCLIMarks: the worker's process compacts
// dlq.log again and again while CLI processes (a handle each) replay and
// discard dead letters and list them: no mark is lost (a marked dead
// letter never comes back), no unmarked dead letter disappears, a listing
// never shows one twice, and each dead letter is replayed at most once.
func TestCompactionWhileTheCLIMarks(t *testing.T) {
	root := t.TempDir()
	worker := openFolder(t, root, Options{})
	const n = 60
	for id := uint64(1); id <= n; id++ {
		if err := worker.MoveToDLQ(deadLetter(1000 + id)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	marked := map[uint64]bool{}
	replays := map[uint64]int{}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // the worker's idle housekeeping
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := worker.CompactDLQ(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	bg.Go(func() { // nexus dlq list
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			before := make(map[uint64]bool, len(marked))
			for id := range marked {
				before[id] = true
			}
			mu.Unlock()
			dl, _, err := ReadDeadLetters(root, testTenant, testFlow, nil)
			if err != nil {
				t.Error(err)
				return
			}
			seen := map[uint64]bool{}
			for _, d := range dl {
				if seen[d.ID] {
					t.Errorf("dead letter %d listed twice", d.ID)
				}
				seen[d.ID] = true
				if before[d.ID] {
					t.Errorf("dead letter %d listed after its mark was acknowledged", d.ID)
				}
			}
		}
	})
	var cli sync.WaitGroup
	for g := range 3 {
		cli.Go(func() {
			for id := uint64(1001); id <= 1000+n; id++ {
				if id%5 == 0 || (id+uint64(g))%7 == 0 {
					continue // left pending
				}
				q, _, err := Open(root, testTenant, testFlow, Options{})
				if err != nil {
					t.Error(err)
					return
				}
				if id%2 == 0 {
					err = q.Mark(id, MarkDiscarded)
				} else {
					_, err = q.Replay(id, "enqueue", "c")
				}
				q.Close()
				switch {
				case err == nil:
					mu.Lock()
					marked[id] = true
					if id%2 == 1 {
						replays[id]++
					}
					mu.Unlock()
				case !errors.Is(err, ErrNotPending):
					t.Error(err)
					return
				}
			}
		})
	}
	cli.Wait()
	close(stop)
	bg.Wait()
	if _, _, err := worker.CompactDLQ(); err != nil {
		t.Fatal(err)
	}
	dl, _, err := worker.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	pending := map[uint64]bool{}
	for _, d := range dl {
		pending[d.ID] = true
	}
	for id := uint64(1001); id <= 1000+n; id++ {
		if marked[id] == pending[id] {
			t.Errorf("dead letter %d: marked %v, pending %v", id, marked[id], pending[id])
		}
		if replays[id] > 1 {
			t.Errorf("dead letter %d replayed %d times", id, replays[id])
		}
	}
	if got, want := len(readAll(t, worker)), len(replays); got != want {
		t.Errorf("the log holds %d replayed messages, want %d", got, want)
	}
}
