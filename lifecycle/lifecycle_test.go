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
