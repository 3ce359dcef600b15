package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/lifecycle"
)

func TestLoop(t *testing.T) {
	var l lifecycle.Loop
	l.Stop() // without Start: nothing

	var runs, running atomic.Int32
	started := make(chan struct{}, 2)
	run := func(ctx context.Context) {
		runs.Add(1)
		running.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // Stop must wait for this
		running.Add(-1)
	}
	l.Start(run)
	l.Start(run) // already running: nothing
	<-started
	l.Stop()
	if n := running.Load(); n != 0 {
		t.Fatalf("Stop returned with %d goroutines still running", n)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("two Starts ran %d goroutines, want 1", n)
	}
	l.Stop() // twice: nothing

	l.Start(run) // started again after Stop
	<-started
	l.Stop()
	if n := runs.Load(); n != 2 || running.Load() != 0 {
		t.Errorf("after a restart: %d runs, %d running; want 2, 0", n, running.Load())
	}
}

// TestEvery: fn runs again and again, one call at a time, and Every
// returns once the context ends, not during a call.
func TestEvery(t *testing.T) {
	var calls, inside atomic.Int32
	third := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		lifecycle.Every(ctx, time.Millisecond, func() {
			if inside.Add(1) != 1 {
				t.Error("two calls of fn at once")
			}
			if calls.Add(1) == 3 {
				close(third)
				cancel()
				time.Sleep(10 * time.Millisecond) // Every must not return before this call ends
			}
			inside.Add(-1)
		})
	}()
	select {
	case <-third:
	case <-time.After(10 * time.Second):
		t.Fatalf("fn was called %d times in 10 s with an interval of 1 ms", calls.Load())
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if inside.Load() != 0 {
		t.Error("Every returned during a call of fn")
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("fn was called %d times; want 3, the last one cancelling", n)
	}
}
