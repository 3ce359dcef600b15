package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/nexushq/nexus/registry"
)

// TestDedupPruneLetsClaimsIn: a prune of expired dedup records whose
// answers are large (an answer is a whole response body, up to the flow's
// max_body_bytes) lets a door's claim in another process take the write
// lock within a moment. Its batches were 5,000 rows whatever they held,
// and SQLite reads every page of a row it frees: a batch of these 32 KiB
// answers held the lock for 0.4 s (6 s under the race detector), one of 1
// MiB answers for longer than the busy timeout, when claims failed. (400
// answers of 256 KiB: one batch of the old prune, 2–3 s under the race
// detector.)
func TestDedupPruneLetsClaimsIn(t *testing.T) {
	path := dbPath(t)
	c := newClock()
	pruner := open(t, path, registry.Options{Now: c.Now})
	door := open(t, path, registry.Options{Now: c.Now}) // another process
	exec(t, sideDB(t, path), `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 400)
		INSERT INTO dedup (tenant, flow, key, claimed, answer, failed, expires)
		SELECT 'acme', 'f', 'old-' || i, 0, zeroblob(256 << 10), 0, ? FROM c`, t0.UnixMilli())
	c.Advance(time.Hour)
	ctx, stop := context.WithCancel(context.Background())
	pruned := make(chan int64, 1)
	go func() {
		n, err := pruner.PruneDedup(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("PruneDedup: %v", err)
		}
		pruned <- n
	}()
	var longest time.Duration
	for i := range 5 { // claims while the prune runs its batches
		time.Sleep(30 * time.Millisecond)
		start := time.Now()
		_, claim, err := door.Dedup().Claim(context.Background(), "acme", "f", "new-"+string(rune('a'+i)), false, time.Minute)
		if err != nil || claim == 0 {
			t.Fatalf("Claim during the prune = %d, %v", claim, err)
		}
		longest = max(longest, time.Since(start))
	}
	stop() // the rest of the prune is not this test's
	if n := <-pruned; n == 0 {
		t.Errorf("nothing was pruned while the claims waited")
	}
	// a batch holds the lock for about 50 ms; 1 s is slack for a loaded
	// machine and the race detector
	t.Logf("the longest claim waited %v", longest)
	if longest > time.Second {
		t.Errorf("a door's claim waited %v for the dedup prune, want under 1 s", longest)
	}
}
