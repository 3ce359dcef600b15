package registry_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nexushq/nexus/registry"
)

// TestPruneBatchIsNotShrunkByTheWaitForTheLock: a prune's batch is sized
// by the time it holds the write lock, not by its wait for another
// process's writes (here transactions holding the lock 60–100 ms, 5–20 ms
// apart: a busy host's writes, or a disk whose fsync is slow). Measured
// from before BEGIN IMMEDIATE, the wait made every batch "take" over
// 50 ms: the batch fell to one row, and the prune deleted a row per pause.
func TestPruneBatchIsNotShrunkByTheWaitForTheLock(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	side := sideDB(t, path)
	exec(t, side, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000)
		INSERT INTO journal (at, door, tenant, flow, version, correlation_id, msg_id, attempt, outcome, status, duration_us, error)
		SELECT i, 'run', 'acme', 'f', 1, 'c' || i, 0, 1, 'succeeded', 200, 5, '' FROM n`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other, err := side.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() { // the other process's writes
		for ctx.Err() == nil {
			if _, err := other.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
				continue
			}
			time.Sleep(time.Duration(60+rand.IntN(40)) * time.Millisecond)
			other.ExecContext(context.Background(), `COMMIT`)
			time.Sleep(time.Duration(5+rand.IntN(15)) * time.Millisecond)
		}
	}()
	pctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	start := time.Now()
	n, err := r.PruneJournal(pctx, t0)
	t.Logf("pruned %d of 2000 rows in %v: %v", n, time.Since(start).Round(time.Millisecond), err)
	if n != 2000 || err != nil {
		t.Errorf("PruneJournal beside another process's writes = %d, %v after %v; want all 2000 rows within 30 s", n, err, time.Since(start).Round(time.Second))
	}
}
