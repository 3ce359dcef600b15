package enginetest_test

import (
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

func TestDedupConformance(t *testing.T) {
	enginetest.DedupStoreConformance(t, func(t *testing.T) (engine.DedupStore, func(time.Duration)) {
		c := clocktest.New(time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC))
		return &enginetest.Dedup{Now: c.Now}, func(d time.Duration) { c.Advance(d) }
	})
}
