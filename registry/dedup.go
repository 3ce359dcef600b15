package registry

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nexushq/nexus/lifecycle"
)

// DedupStore is the durable dedup store: it implements engine.DedupStore
// (structurally: the registry does not import the engine) over the dedup
// table, so every process sharing the registry sees one record per key.
type DedupStore struct{ r *Registry }

// Dedup returns the registry's dedup store.
func (r *Registry) Dedup() *DedupStore { return &DedupStore{r: r} }

// maxStoredKey is the longest key the dedup table keeps as it is; a longer
// one is kept as its digest (see storedKey).
const maxStoredKey = 256

// hashedKeyPrefix begins a key kept as its digest.
const hashedKeyPrefix = "sha256:"

// storedKey is key as the dedup table keeps it: as it is when it is at
// most maxStoredKey bytes, else "sha256:" and the hex of its SHA-256, so
// that a dedup_key rendered from a whole message does not put the message
// into the table's primary key once per row. A key that itself begins
// with the prefix is hashed too, so that no key as it is can stand for
// another's digest.
func storedKey(key string) string {
	if len(key) <= maxStoredKey && !strings.HasPrefix(key, hashedKeyPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKeyPrefix + hex.EncodeToString(sum[:])
}

// Claim takes key for one execution; see engine.DedupStore.
//
// The claimed column holds the claim: 0 for a committed answer, else the
// claim's random token, which Commit and Release must name.
func (d *DedupStore) Claim(ctx context.Context, tenant, flow, key string, rerunFailed bool, lease time.Duration) (answer []byte, claim int64, err error) {
	key = storedKey(key)
	err = d.r.write(ctx, func(tx *sql.Tx) error {
		// the time once the write lock is held: a claim that waited for
		// another process's write gets its whole lease from now
		now := d.r.now()
		var (
			held    int64
			failed  int
			ans     []byte
			expires int64
		)
		err := tx.QueryRowContext(ctx, `SELECT claimed, answer, failed, expires FROM dedup WHERE tenant = ? AND flow = ? AND key = ?`,
			tenant, flow, key).Scan(&held, &ans, &failed, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows),
			err == nil && expires <= unixMilli(now),
			err == nil && held == 0 && failed == 1 && rerunFailed:
			claim = rand.Int64N(math.MaxInt64) + 1
			_, err = tx.ExecContext(ctx, `INSERT INTO dedup (tenant, flow, key, claimed, answer, failed, expires) VALUES (?, ?, ?, ?, NULL, 0, ?)
				ON CONFLICT (tenant, flow, key) DO UPDATE SET claimed = excluded.claimed, answer = NULL, failed = 0, expires = excluded.expires`,
				tenant, flow, key, claim, expiryMilli(now.Add(lease)))
			if err != nil {
				claim = 0
			}
			return err
		case err != nil:
			return err
		case held != 0:
			return nil
		}
		answer = ans
		if answer == nil {
			answer = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return answer, claim, nil
}

// Commit records the answer of the execution holding key by claim (an
// UPDATE of its own row only); see engine.DedupStore.
func (d *DedupStore) Commit(ctx context.Context, tenant, flow, key string, claim int64, answer []byte, failed bool, ttl time.Duration) error {
	f := 0
	if failed {
		f = 1
	}
	if answer == nil {
		answer = []byte{}
	}
	if claim == 0 {
		return nil // no claim: nothing it may record
	}
	key = storedKey(key)
	return d.r.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE dedup SET claimed = 0, answer = ?, failed = ?, expires = ?
			WHERE tenant = ? AND flow = ? AND key = ? AND claimed = ?`,
			answer, f, expiryMilli(d.r.now().Add(ttl)), tenant, flow, key, claim)
		return err
	})
}

// Release gives key up without recording an answer; see engine.DedupStore.
func (d *DedupStore) Release(ctx context.Context, tenant, flow, key string, claim int64) error {
	if claim == 0 {
		return nil // 0 is a committed answer's, never released
	}
	key = storedKey(key)
	return d.r.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM dedup WHERE tenant = ? AND flow = ? AND key = ? AND claimed = ?`, tenant, flow, key, claim)
		return err
	})
}

// expiryMilli is an expiry time t as the dedup table keeps it: whole
// milliseconds rounded up, so that a lease or a record compared with the
// present in whole milliseconds (rounded down) lasts its whole time, never
// up to a millisecond less (a duplicate could claim a key still held, or
// run a key whose answer was still to be kept).
func expiryMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// PruneDedup deletes expired dedup records and returns how many.
func (r *Registry) PruneDedup(ctx context.Context) (int64, error) {
	return r.deleteInBatches(ctx, `DELETE FROM dedup WHERE rowid IN (SELECT rowid FROM dedup WHERE expires <= ? LIMIT ?)`, unixMilli(r.now()))
}

// DedupPruner deletes expired dedup records in the background.
type DedupPruner struct {
	Registry *Registry
	Interval time.Duration // 0 means one minute
	Logger   *slog.Logger  // nil means slog.Default()

	life lifecycle.Loop
}

// Start begins pruning and returns at once.
func (p *DedupPruner) Start() {
	interval := p.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	p.life.Start(func(ctx context.Context) {
		lifecycle.Every(ctx, interval, func() {
			if _, err := p.Registry.PruneDedup(ctx); err != nil && ctx.Err() == nil {
				log.Error("expired dedup records could not be deleted", "event", "dedup_prune_failed", "error", err.Error())
			}
		})
	})
}

// Stop ends the pruning and waits for it; safe twice and without Start.
func (p *DedupPruner) Stop() { p.life.Stop() }
