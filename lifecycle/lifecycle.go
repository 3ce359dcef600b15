// Package lifecycle owns the one Start/Stop of the host's background
// components (the sync loop, the live-set watcher, the journal writer, the
// dedup pruner, the cron scheduler, the queue workers, the queues'
// housekeeping): Start returns at once, Stop is synchronous, both may be
// called twice, and Stop without Start does nothing. Every is the body of
// the components that do one thing periodically.
package lifecycle

import (
	"context"
	"sync"
	"time"
)

// Loop runs at most one goroutine at a time. Its zero value is ready.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine, with a context that ends at Stop, and
// returns at once. It does nothing while a goroutine started by it runs
// or is being stopped, nor after run returned on its own (until Stop).
func (l *Loop) Start(run func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// Stop cancels the goroutine's context and waits until run returns; two
// Stops at once both wait. The Loop can be started again afterwards.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
	l.mu.Lock()
	if l.done == done {
		l.cancel, l.done = nil, nil
	}
	l.mu.Unlock()
}

// Every calls fn every interval until ctx ends, the first time one interval
// after it is called; it returns when ctx ends (never during a call of fn,
// and fn is not called once ctx has ended).
// It is the body of a Loop that does one thing periodically.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil { // both were ready: the end wins
				return
			}
			fn()
		}
	}
}
