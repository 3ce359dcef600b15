package registry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
	"github.com/nexushq/nexus/registry"
)

var _ engine.DedupStore = (*registry.DedupStore)(nil)

func TestDedupConformance(t *testing.T) {
	enginetest.DedupStoreConformance(t, func(t *testing.T) (engine.DedupStore, func(time.Duration)) {
		r, c := newRegistry(t)
		return r.Dedup(), func(d time.Duration) { c.Advance(d) }
	})
}

// TestDedupSharedByHandles: a key claimed through one handle is held for
// every handle of the file, and its answer is replayed through any of them.
func TestDedupSharedByHandles(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := dbPath(t)
	d1 := open(t, path, registry.Options{Now: c.Now}).Dedup()
	d2 := open(t, path, registry.Options{Now: c.Now}).Dedup()
	claim, err := claimOf(d1.Claim(ctx, "acme", "f", "k", false, time.Minute))
	if err != nil || claim == 0 {
		t.Fatalf("Claim through the first handle = %v, %v", claim, err)
	}
	if answer, claimed, err := d2.Claim(ctx, "acme", "f", "k", false, time.Minute); err != nil || claimed != 0 || answer != nil {
		t.Fatalf("Claim through the second handle = %q, %v, %v; want busy", answer, claimed, err)
	}
	if err := d1.Commit(ctx, "acme", "f", "k", claim, []byte("answer"), false, time.Hour); err != nil {
		t.Fatal(err)
	}
	if answer, claimed, err := d2.Claim(ctx, "acme", "f", "k", false, time.Minute); err != nil || claimed != 0 || string(answer) != "answer" {
		t.Fatalf("Claim through the second handle after Commit = %q, %v, %v; want the answer", answer, claimed, err)
	}
}

// TestPruneDedup deletes the records whose time is up (answers past their
// ttl, claims past their lease) and only those.
func TestPruneDedup(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	d := r.Dedup()
	claim := func(key string, lease time.Duration) int64 {
		t.Helper()
		_, claimed, err := d.Claim(ctx, "acme", "f", key, false, lease)
		if err != nil || claimed == 0 {
			t.Fatalf("Claim(%s) = %v, %v", key, claimed, err)
		}
		return claimed
	}
	commit := func(key string, ttl time.Duration) {
		t.Helper()
		c := claim(key, time.Minute)
		if err := d.Commit(ctx, "acme", "f", key, c, []byte(key), false, ttl); err != nil {
			t.Fatal(err)
		}
	}
	claim("lease-1m", time.Minute)
	claim("lease-2h", 2*time.Hour)
	commit("ttl-10m", 10*time.Minute)
	commit("ttl-30m", 30*time.Minute) // expires exactly when pruned: its time is up
	commit("ttl-1h", time.Hour)

	if n, err := r.PruneDedup(ctx); err != nil || n != 0 {
		t.Fatalf("PruneDedup with nothing expired = %d, %v; want 0", n, err)
	}
	c.Advance(30 * time.Minute)
	n, err := r.PruneDedup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("PruneDedup deleted %d records, want 3 (lease-1m, ttl-10m, ttl-30m)", n)
	}
	db := sideDB(t, r.Path())
	rows, err := db.Query(`SELECT key FROM dedup ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var left []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if diff := cmp.Diff([]string{"lease-2h", "ttl-1h"}, left); diff != "" {
		t.Errorf("records left (-want +got):\n%s", diff)
	}
	// What is left still works as before.
	if answer, claimed, err := d.Claim(ctx, "acme", "f", "ttl-1h", false, time.Minute); err != nil || claimed != 0 || string(answer) != "ttl-1h" {
		t.Errorf("Claim(ttl-1h) after pruning = %q, %v, %v; want its answer", answer, claimed, err)
	}
	if answer, claimed, err := d.Claim(ctx, "acme", "f", "lease-2h", false, time.Minute); err != nil || claimed != 0 || answer != nil {
		t.Errorf("Claim(lease-2h) after pruning = %q, %v, %v; want busy", answer, claimed, err)
	}
	if n, err := r.PruneDedup(ctx); err != nil || n != 0 {
		t.Errorf("PruneDedup again = %d, %v; want 0", n, err)
	}
}

// The prune deletes records by their own expiry: a key that expired for
// one tenant or flow stays for another that holds it longer.
func TestPruneDedupSameKeyElsewhere(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	d := r.Dedup()
	for _, k := range []struct {
		tenant, flow string
		ttl          time.Duration
	}{{"acme", "f", time.Minute}, {"globex", "f", time.Hour}, {"acme", "g", time.Hour}} {
		_, claimed, err := d.Claim(ctx, k.tenant, k.flow, "order-1", false, time.Minute)
		if err != nil || claimed == 0 {
			t.Fatalf("Claim(%s/%s) = %v, %v", k.tenant, k.flow, claimed, err)
		}
		if err := d.Commit(ctx, k.tenant, k.flow, "order-1", claimed, []byte(k.tenant+k.flow), false, k.ttl); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(2 * time.Minute)
	if n, err := r.PruneDedup(ctx); err != nil || n != 1 {
		t.Fatalf("PruneDedup = %d, %v; want 1 (acme/f's)", n, err)
	}
	for _, k := range [][2]string{{"globex", "f"}, {"acme", "g"}} {
		if _, claimed, err := d.Claim(ctx, k[0], k[1], "order-1", false, time.Minute); err != nil || claimed != 0 {
			t.Errorf("%s/%s's record after the prune: claimed anew %v, %v; want it kept", k[0], k[1], claimed, err)
		}
	}
}

func TestDedupPruner(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	d := r.Dedup()
	claims := map[string]int64{}
	for _, k := range []string{"a", "b"} {
		_, claimed, err := d.Claim(ctx, "acme", "f", k, false, time.Minute)
		if err != nil || claimed == 0 {
			t.Fatalf("Claim(%s) = %v, %v", k, claimed, err)
		}
		claims[k] = claimed
	}
	if err := d.Commit(ctx, "acme", "f", "b", claims["b"], []byte("b"), false, time.Hour); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute) // a's lease is up, b's answer is not

	(&registry.DedupPruner{Registry: r}).Stop() // Stop without Start
	p := &registry.DedupPruner{Registry: r, Interval: 10 * time.Millisecond, Logger: quietLogger()}
	p.Start()
	p.Start() // does nothing
	db := sideDB(t, r.Path())
	keys := func() []string {
		rows, err := db.Query(`SELECT key FROM dedup ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out = append(out, k)
		}
		return out
	}
	if took, ok := waitFor[struct{}](t, 2*time.Second, nil, func() bool { return cmp.Equal([]string{"b"}, keys()) }); !ok {
		t.Errorf("after %v the dedup table holds %v, want [b]", took, keys())
	}
	p.Stop()
	p.Stop()
}

// claimOf keeps Claim's claim and error.
func claimOf(_ []byte, claim int64, err error) (int64, error) { return claim, err }

// TestClaimLeaseCountsFromTheClaim: a claim's lease (the flow's
// timeout_ms and 5 s) runs from when the key is taken, not from before the
// claim waited for another process's write (up to BusyTimeout): a claim
// that waited 8 s was once stored with its 6 s lease spent, and a
// duplicate arriving at once claimed the key too.
func TestClaimLeaseCountsFromTheClaim(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := dbPath(t)
	first := open(t, path, registry.Options{Now: c.Now}).Dedup()
	second := open(t, path, registry.Options{Now: c.Now}).Dedup()
	release := lockAsAnotherProcess(t, path)

	const lease = 6 * time.Second // a flow of timeout_ms 1000
	type result struct {
		claim int64
		err   error
	}
	done := make(chan result, 1)
	go func() {
		_, claim, err := first.Claim(ctx, "acme", "f", "order-1", false, lease)
		done <- result{claim, err}
	}()
	time.Sleep(300 * time.Millisecond) // Claim waits for the lock
	c.Advance(8 * time.Second)         // the other process's write took 8 s
	release()
	res := <-done
	if res.err != nil || res.claim == 0 {
		t.Fatalf("first Claim = %d, %v; want the key", res.claim, res.err)
	}
	// the first delivery now runs for up to its timeout; a duplicate
	// arriving at once must wait for it
	if answer, claim, err := second.Claim(ctx, "acme", "f", "order-1", false, lease); err != nil || claim != 0 || answer != nil {
		t.Errorf("a duplicate's Claim right after the first took the key = %q, %d, %v; want busy (the first's %v lease has just begun)", answer, claim, err, lease)
	}
}

// TestLeaseHoldsToItsLastMicrosecond: a dedup claim's lease holds to its
// end: a duplicate arriving a fraction of a millisecond before it gets no
// claim of its own. Expiry times were kept in whole milliseconds rounded
// down, so a lease ended up to a millisecond early and both ran.
func TestLeaseHoldsToItsLastMicrosecond(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(t0.Add(700 * time.Microsecond)) // a real clock is never on a whole millisecond
	path := filepath.Join(t.TempDir(), "state", "registry.db")
	first := open(t, path, registry.Options{Now: c.Now}).Dedup()
	second := open(t, path, registry.Options{Now: c.Now}).Dedup()

	const lease = 6 * time.Second
	if _, claim, err := first.Claim(ctx, "acme", "f", "order-1", false, lease); err != nil || claim == 0 {
		t.Fatalf("first Claim = %d, %v; want the key", claim, err)
	}
	// 0.2 ms before the first's lease runs out: it still holds the key
	c.Advance(lease - 200*time.Microsecond)
	if answer, claim, err := second.Claim(ctx, "acme", "f", "order-1", false, lease); err != nil || claim != 0 || answer != nil {
		t.Errorf("a duplicate's Claim %v before the first's lease ends = %q, %d, %v; want busy (no claim: the first still holds the key, so both would run)",
			200*time.Microsecond, answer, claim, err)
	}
}

// TestCommittedAnswerKeptForItsWholeTTL: a recorded answer is kept for its
// whole dedup_ttl_ms (flow-file.md: "how long a committed key is
// remembered"); rounded down, it was forgotten up to a millisecond early
// and a duplicate ran the flow again.
func TestCommittedAnswerKeptForItsWholeTTL(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(t0.Add(700 * time.Microsecond))
	r := open(t, filepath.Join(t.TempDir(), "state", "registry.db"), registry.Options{Now: c.Now})
	d := r.Dedup()
	_, claim, err := d.Claim(ctx, "acme", "f", "order-1", false, time.Minute)
	if err != nil || claim == 0 {
		t.Fatalf("Claim = %d, %v", claim, err)
	}
	const ttl = time.Hour
	if err := d.Commit(ctx, "acme", "f", "order-1", claim, []byte(`{"status":200}`), false, ttl); err != nil {
		t.Fatal(err)
	}
	c.Advance(ttl - 200*time.Microsecond) // still within the TTL
	answer, again, err := d.Claim(ctx, "acme", "f", "order-1", false, time.Minute)
	if err != nil || again != 0 || string(answer) != `{"status":200}` {
		t.Errorf("Claim %v before the TTL ends = %q, %d, %v; want the recorded answer (the key is remembered for the whole TTL)",
			200*time.Microsecond, answer, again, err)
	}
}

// TestDedupLongKeysKeptAsDigests: a key longer than 256 bytes (a dedup_key
// rendered from a whole message) is kept as its SHA-256, and works as any
// key: its answer is replayed, a key that differs in its last byte is
// another key, and a short key spelling a long key's digest is another key
// too. Keys up to 256 bytes are kept as they are.
func TestDedupLongKeysKeptAsDigests(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := dbPath(t)
	d := open(t, path, registry.Options{Now: c.Now}).Dedup()
	long := strings.Repeat("order-", 20_000) // 120 kB
	sum := sha256.Sum256([]byte(long))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	short := strings.Repeat("k", 256)

	for _, key := range []string{long, short} {
		claim, err := claimOf(d.Claim(ctx, "acme", "f", key, false, time.Minute))
		if err != nil || claim == 0 {
			t.Fatalf("Claim(%d bytes) = %v, %v", len(key), claim, err)
		}
		if err := d.Commit(ctx, "acme", "f", key, claim, []byte(key[:8]), false, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, key string
		want      []byte // the replayed answer, or nil when the key is new
	}{
		{"the long key again", long, []byte("order-or")},
		{"the 256-byte key again", short, []byte("kkkkkkkk")},
		{"the long key with its last byte changed", long[:len(long)-1] + "!", nil},
		{"the long key's digest as a key", digest, nil},
	} {
		answer, claim, err := d.Claim(ctx, "acme", "f", c.key, false, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.want == nil && (claim == 0 || answer != nil) {
			t.Errorf("%s: Claim = %q, %v; want a new claim", c.name, answer, claim)
		}
		if c.want != nil && (claim != 0 || string(answer) != string(c.want)) {
			t.Errorf("%s: Claim = %q, %v; want the answer %q replayed", c.name, answer, claim, c.want)
		}
	}

	keys := column[string](t, sideDB(t, path), `SELECT key FROM dedup ORDER BY key`)
	for i, k := range keys {
		if len(k) > 256 {
			t.Errorf("dedup row %d keeps a %d-byte key, want at most 256", i, len(k))
		}
	}
	if !slices.Contains(keys, digest) || !slices.Contains(keys, short) || len(keys) != 4 {
		t.Errorf("dedup keys = %.80q; want 4, among them the long key's digest and the 256-byte key as it is", keys)
	}
}
