package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// An AppendContext waiting for the append lock, held by another process,
// gives up when its context ends, well before LockWait, with the
// context's error and having written nothing: whether it leads its batch
// alone or with a plain append in it (which goes on waiting, and is
// written once the lock is let go), waits in the batch a plain append
// leads, or waits behind one. The plain append goes through once the lock
// is let go, and the queue is not poisoned.
func TestAppendContextGivesUpWaitingForTheLock(t *testing.T) {
	type placing int
	const (
		alone         placing = iota // it leads a batch of its own
		leadingOther                 // it leads a batch with a plain append in it
		inOthersBatch                // a plain append leads its batch
		behindOther                  // it waits behind a plain append's batch
	)
	for _, tc := range []struct {
		name  string
		place placing
	}{
		{"leading alone", alone},
		{"leading a plain append", leadingOther},
		{"in a plain append's batch", inOthersBatch},
		{"behind a plain append's batch", behindOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			gather := time.Duration(-1)
			if tc.place == leadingOther || tc.place == inOthersBatch {
				gather = 10 * time.Second // the leader waits for a batch of 2
			}
			q, _ := openQueue(t, root, Options{LockWait: 5 * time.Second, GatherWait: gather})
			if _, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			q.mu.Lock()
			q.lastBatch = 2
			q.mu.Unlock()
			release := holdAppendLock(t, root)
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					q.mu.Lock()
					ok := cond()
					q.mu.Unlock()
					if ok {
						return
					}
					if time.Now().After(deadline) {
						t.Fatal(what)
					}
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			type result struct {
				err  error
				took time.Duration
			}
			bound := make(chan result, 1)
			appendBound := func() {
				start := time.Now()
				_, err := q.AppendContext(ctx, NewMessage{Source: "enqueue", Payload: []byte(`{"n":3}`)})
				bound <- result{err, time.Since(start)}
			}
			plain := make(chan error, 1)
			appendPlain := func() {
				_, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":2}`)})
				plain <- err
			}
			switch tc.place {
			case alone:
				go appendBound()
			case leadingOther:
				go appendBound()
				waitFor("AppendContext did not gather", func() bool { return q.gathered != nil })
				go appendPlain()
			case inOthersBatch:
				go appendPlain()
				waitFor("the plain append did not gather", func() bool { return q.gathered != nil })
				go appendBound()
			case behindOther:
				go appendPlain()
				waitFor("the plain append did not take its batch", func() bool { return q.leading && len(q.pending) == 0 && q.lastBatch == 1 })
				go appendBound()
			}
			var res result
			select {
			case res = <-bound:
			case <-time.After(10 * time.Second):
				t.Fatal("AppendContext still waits 10 s on")
			}
			if !errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, ErrPoisoned) || errors.Is(res.err, ErrLockBusy) {
				t.Errorf("AppendContext with the lock held elsewhere: %v, want the context's error", res.err)
			}
			if res.took > time.Second {
				t.Errorf("AppendContext with a 50 ms deadline returned after %v, want well before LockWait (5 s)", res.took)
			}

			if tc.place == alone {
				// again: the wait given up holds this process's append
				// mutex, and the next gives up waiting for it
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := q.AppendContext(ctx, NewMessage{Source: "enqueue", Payload: []byte(`{"n":5}`)})
				if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
					t.Errorf("AppendContext behind a wait given up: %v after %v, want the context's error well before LockWait", err, took)
				}
			}

			release()
			want := []string{`{"n":1}`, `{"n":4}`}
			if tc.place != alone {
				if err := <-plain; err != nil {
					t.Errorf("the plain append: %v", err)
				}
				want = []string{`{"n":1}`, `{"n":2}`, `{"n":4}`}
			}
			q.mu.Lock()
			q.lastBatch = 1 // no gathering for the last append
			q.mu.Unlock()
			m, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":4}`)})
			if err != nil {
				t.Fatalf("Append after the lock was let go: %v", err)
			}
			var got []string
			for _, m := range readAll(t, q) {
				got = append(got, string(m.Payload))
			}
			if !slices.Equal(got, want) {
				t.Errorf("the log holds %q, want %q: the given-up append wrote nothing", got, want)
			}
			if m.ID != uint64(len(want)) {
				t.Errorf("the next append got id %d, want %d", m.ID, len(want))
			}
		})
	}
}

// Appends and AppendContexts whose contexts end at random moments, while
// another process takes and lets go the append lock over and over: the
// log holds exactly the messages whose append succeeded, and none of
// those given up; no append is left waiting.
func TestAppendContextGivenUpAtRandom(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{LockWait: 5 * time.Second})
	f, err := os.OpenFile(filepath.Join(root, testTenant, testFlow, lockFile), os.O_RDWR, FileMode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
			time.Sleep(3 * time.Millisecond)
			syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			time.Sleep(time.Millisecond)
		}
	}()

	const n = 200
	type result struct {
		payload string
		err     error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			m := NewMessage{Source: "enqueue", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			var err error
			if i%2 == 0 {
				_, err = q.Append(m)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%20)*time.Millisecond)
				_, err = q.AppendContext(ctx, m)
				cancel()
			}
			results <- result{string(m.Payload), err}
		}()
	}
	var ok []string
	for range n {
		select {
		case r := <-results:
			switch {
			case r.err == nil:
				ok = append(ok, r.payload)
			case !errors.Is(r.err, context.DeadlineExceeded):
				t.Errorf("append of %s: %v", r.payload, r.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("appends still wait 20 s on")
		}
	}
	close(stop)
	<-toggled
	var got []string
	for _, m := range readAll(t, q) {
		got = append(got, string(m.Payload))
	}
	slices.Sort(ok)
	slices.Sort(got)
	if !slices.Equal(got, ok) {
		t.Errorf("the log holds %d messages, %d appends succeeded:\nlog %q\nsucceeded %q", len(got), len(ok), got, ok)
	}
	t.Logf("%d of %d appends succeeded", len(ok), n)
	if len(ok) < n/2 {
		t.Errorf("%d appends succeeded, want at least the %d plain ones", len(ok), n/2)
	}
}
