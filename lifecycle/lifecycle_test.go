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

// Two Stops at once both wait for the goroutine; a Start while a Stop
// waits does nothing, so one goroutine of a Loop runs at most.
func TestLoopConcurrentStops(t *testing.T) {
	var l lifecycle.Loop
	var running, most atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	run := func(ctx context.Context) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- struct{}{}
		<-ctx.Done()
		<-release // the run outlasts its cancellation
		running.Add(-1)
	}
	l.Start(run)
	<-started
	firstStop := make(chan struct{})
	go func() { l.Stop(); close(firstStop) }()
	secondStop := make(chan struct{})
	go func() {
		time.Sleep(10 * time.Millisecond) // the first Stop is waiting
		l.Start(run)                      // during the Stop: nothing
		l.Stop()
		close(secondStop)
	}()
	select {
	case <-secondStop:
		t.Fatal("a second Stop returned while the goroutine still ran")
	case <-firstStop:
		t.Fatal("Stop returned while the goroutine still ran")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-firstStop
	<-secondStop
	if n := running.Load(); n != 0 || most.Load() != 1 {
		t.Errorf("after both Stops: %d running, at most %d at once; want 0 and 1", n, most.Load())
	}
	l.Start(run) // stopped: it starts again
	<-started
	if n := running.Load(); n != 1 {
		t.Errorf("a Start after the Stops: %d running", n)
	}
	l.Stop()
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
