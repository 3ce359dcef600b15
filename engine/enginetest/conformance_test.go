package enginetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// fakeClock is a clock tests move by hand; safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestDedupConformance(t *testing.T) {
	enginetest.DedupStoreConformance(t, func(t *testing.T) (engine.DedupStore, func(time.Duration)) {
		c := &fakeClock{t: time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)}
		return &enginetest.Dedup{Now: c.Now}, c.Advance
	})
}
