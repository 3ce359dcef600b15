package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// limiterFixture is a Server with one echo flow (acme/echo) over a real
// registry: publish loads an access.yaml as a new commit, send runs the
// flow with a key and returns the status, buckets the token buckets held.
type limiterFixture struct {
	s       *Server
	publish func(accessYAML string)
	send    func(key string) int
}

func newLimiterFixture(t *testing.T) *limiterFixture {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, filepath.Join(t.TempDir(), "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	f, err := flow.Compile("flows/acme/echo.md", []byte("---\nflowmarkdown_version: \"0.1\"\nflow: echo\ntenant: acme\n---\n\n## Step: echo\n```ntd\n{{ $ }}\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	// the clock stands still: a bucket's tokens come back only when a
	// test says so
	now := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	fx := &limiterFixture{s: New(Config{Live: reg, Engine: engine.New(engine.Config{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }})}
	fx.publish = func(doc string) {
		t.Helper()
		keys, err := access.Parse("access.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Access: keys}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fx.send = func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/flows/acme/echo/run", strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		fx.s.Handler().ServeHTTP(w, r)
		return w.Code
	}
	return fx
}

// buckets calls f for each token bucket held and returns how many there are.
func (fx *limiterFixture) buckets(f func(*limiter)) int {
	n := 0
	fx.s.limiters.Range(func(_, v any) bool {
		n++
		f(v.(*limiter))
		return true
	})
	return n
}

// TestLimitersOnlyForAuthenticatedKeys: a token bucket is created only
// after a key is authenticated, so bogus keys cannot fill memory: 100,000
// distinct bogus keys (RELIABILITY F.25) leave no bucket.
func TestLimitersOnlyForAuthenticatedKeys(t *testing.T) {
	const bogus = 100_000
	fx := newLimiterFixture(t)
	fx.publish(fmt.Sprintf("keys:\n  - id: acme-limited\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: 5\n    burst: 5\n", access.HashKey("the-real-key")))
	send := fx.send
	count := func() int { return fx.buckets(func(*limiter) {}) }
	for i := 0; i < bogus; i++ {
		if code := send(fmt.Sprintf("bogus-key-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("bogus key %d: %d", i, code)
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d limiters after %d bogus keys, want 0", n, bogus)
	}
	if code := send("the-real-key"); code != http.StatusOK {
		t.Fatalf("the real key: %d", code)
	}
	for i := 0; i < 100; i++ {
		send(fmt.Sprintf("bogus-key-%d", i))
	}
	if n := count(); n != 1 {
		t.Errorf("%d limiters after one real key and 100 bogus ones, want 1", n)
	}
}

// TestLimiterStaleTimestamps replays RELIABILITY.md's sequence against one
// key's bucket: rate 1000/s and burst 100, a request every 0.5 ms for 10 s,
// 1 % of them stamped 1–10 ms in the past (a request whose clock was read
// before another's). At most burst + rate·T = 10,100 pass. The same
// sequence given to a bare x/time/rate limiter lets more through (stale
// stamps mint tokens), which shows the sequence does test the clamp.
func TestLimiterStaleTimestamps(t *testing.T) {
	const (
		ratePerSec = 1000
		burst      = 100
		span       = 10 * time.Second
		step       = 500 * time.Microsecond
		bound      = burst + ratePerSec*10
	)
	start := time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)
	rng := mrand.New(mrand.NewPCG(71360, 65508))
	var stamps []time.Time
	for at := time.Duration(0); at < span; at += step {
		ts := start.Add(at)
		if rng.IntN(100) == 0 {
			ts = ts.Add(-time.Duration(1+rng.IntN(10)) * time.Millisecond)
		}
		stamps = append(stamps, ts)
	}

	var i int
	s := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return stamps[i] }})
	key := &access.Key{Hash: access.HashKey("k"), Rate: ratePerSec, Burst: burst}
	allowed := 0
	for i = range stamps {
		if _, ok := s.allow(key); ok {
			allowed++
		}
	}
	if allowed > bound {
		t.Errorf("%d of %d requests allowed in %v, more than burst + rate·T = %d", allowed, len(stamps), span, bound)
	}
	if allowed < bound-burst {
		t.Errorf("%d allowed, want about rate·T = %d: the bucket refuses what it should take", allowed, bound-burst)
	}

	bare := rate.NewLimiter(ratePerSec, burst)
	bareAllowed := 0
	for _, ts := range stamps {
		if bare.AllowN(ts, 1) {
			bareAllowed++
		}
	}
	if bareAllowed <= bound {
		t.Errorf("a bare x/time/rate limiter allowed %d (within the bound %d): the sequence no longer shows stale stamps minting tokens, so it does not exercise the clamp", bareAllowed, bound)
	}
	t.Logf("allowed %d (bound %d); a bare x/time/rate limiter allowed %d", allowed, bound, bareAllowed)
}

// TestLimiterOneBucketPerKey: a key has one token bucket, which a new
// commit that changes its rate adjusts (once a bucket per rate and burst stayed
// beside the new one, so the map grew with every change for the life of
// the process): 50 commits that change one key's rate leave one bucket,
// of the last rate.
func TestLimiterOneBucketPerKey(t *testing.T) {
	fx := newLimiterFixture(t)
	sum := access.HashKey("the-real-key")
	const commits = 50
	for i := 1; i <= commits; i++ {
		fx.publish(fmt.Sprintf("keys:\n  - id: acme-limited\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: %d\n", sum, i))
		// the bucket keeps the tokens held across the change: spent
		// by the commits before, it may have none yet
		if code := fx.send("the-real-key"); code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("commit %d: %d", i, code)
		}
	}
	n := fx.buckets(func(l *limiter) {
		if l.rate != commits {
			t.Errorf("the bucket's rate is %v, want the last commit's %d", l.rate, commits)
		}
	})
	if n != 1 {
		t.Errorf("%d token buckets held after %d rate changes, want 1 (one per key used)", n, commits)
	}
}

// TestLimiterWithdrawnKey: the bucket of a key that a new access set no
// longer holds is deleted as the gate first sees that set (by a request
// with any key, or none), so the buckets are bounded by the live keys, not
// by every key ever committed (they were kept for the life of the
// process); a key added again starts with a full bucket. A key that stays
// keeps its bucket and the tokens it spent.
func TestLimiterWithdrawnKey(t *testing.T) {
	fx := newLimiterFixture(t)
	gone, kept := access.HashKey("the-gone-key"), access.HashKey("the-kept-key")
	entry := func(id string, sum [32]byte) string {
		return fmt.Sprintf("  - id: %s\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: 1\n    burst: 3\n", id, sum)
	}
	both := "keys:\n" + entry("acme-gone", gone) + entry("acme-kept", kept)
	// spend is 3 requests that pass and a 4th refused (the clock stands still)
	spend := func(key string) {
		t.Helper()
		for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
			if code := fx.send(key); code != want {
				t.Fatalf("%s, request %d: %d, want %d", key, i+1, code, want)
			}
		}
	}
	names := map[[32]byte]string{gone: "acme-gone", kept: "acme-kept"}
	held := func() []string { // the ids of the keys with a bucket, sorted
		var out []string
		fx.s.limiters.Range(func(k, _ any) bool {
			out = append(out, names[k.([32]byte)])
			return true
		})
		slices.Sort(out)
		return out
	}
	fx.publish(both)
	spend("the-gone-key")
	spend("the-kept-key")
	if diff := cmp.Diff([]string{"acme-gone", "acme-kept"}, held()); diff != "" {
		t.Fatalf("buckets after both keys were used (-want +got):\n%s", diff)
	}

	fx.publish("keys:\n" + entry("acme-kept", kept)) // acme-gone withdrawn
	if code := fx.send("no-such-key"); code != http.StatusUnauthorized {
		t.Fatalf("an unknown key: %d", code)
	}
	if diff := cmp.Diff([]string{"acme-kept"}, held()); diff != "" {
		t.Errorf("buckets after acme-gone was withdrawn and a request came (-want +got):\n%s", diff)
	}
	if code := fx.send("the-gone-key"); code != http.StatusUnauthorized {
		t.Errorf("the withdrawn key: %d, want 401", code)
	}
	if code := fx.send("the-kept-key"); code != http.StatusTooManyRequests {
		t.Errorf("the kept key, its bucket spent: %d, want 429", code)
	}

	fx.publish(both) // acme-gone added again: a full bucket
	spend("the-gone-key")
	if code := fx.send("the-kept-key"); code != http.StatusTooManyRequests {
		t.Errorf("the kept key, its bucket spent: %d, want 429", code)
	}
}

// TestLimiterNewBucketCostsNoPassOverTheKeys: a key's first bucket is made
// at the cost of one look-up in the live set, whatever the number of keys
// it holds. Each was made after a copy of every key (access.Set.Keys, its
// flows lists too), so the first requests of N keys made N² copies, under
// the mutex every first request takes.
func TestLimiterNewBucketCostsNoPassOverTheKeys(t *testing.T) {
	const keys = 2000
	fx := newLimiterFixture(t)
	var doc strings.Builder
	doc.WriteString("keys:\n")
	for i := range keys {
		fmt.Fprintf(&doc, "  - id: acme-%d\n    tenant: acme\n    sha256: %x\n    flows: [echo, other]\n    rate: 5\n    burst: 5\n", i, access.HashKey(fmt.Sprintf("key-%d", i)))
	}
	fx.publish(doc.String())
	if code := fx.send("key-0"); code != http.StatusOK { // the gate sees the set
		t.Fatalf("key-0: %d", code)
	}
	k, ok := fx.s.cfg.Live.Live().Access().Lookup("key-1")
	if !ok {
		t.Fatal("key-1 is not in the live set")
	}
	allocs := testing.AllocsPerRun(100, func() {
		fx.s.limiters.Delete(k.Hash) // a first request each time
		fx.s.addLimiter(k)
	})
	if allocs > 10 {
		t.Errorf("a key's first bucket made %v allocations with %d keys live, want a few whatever their number", allocs, keys)
	}
}

// TestLimiterRetryAfterCeiling: a 429's Retry-After is the wait for the
// next token, rounded up, at least 1 and at most MaxRetryAfter, whatever
// the key's rate: a rate of 1e-320 (which access.yaml takes) advertised a
// wait of centuries. The bucket itself still refuses until its token comes.
func TestLimiterRetryAfterCeiling(t *testing.T) {
	tests := []struct {
		rate string
		want string
	}{
		{"1e-320", "3600"},
		{"1e-9", "3600"},
		{"0.001", "1000"},
		{"1", "1"},
		{"100", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.rate, func(t *testing.T) {
			fx := newLimiterFixture(t)
			fx.publish(fmt.Sprintf("keys:\n  - id: acme-slow\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: %s\n    burst: 1\n", access.HashKey("the-slow-key"), tt.rate))
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/flows/acme/echo/run", strings.NewReader(`{}`))
				r.Header.Set("Authorization", "Bearer the-slow-key")
				w := httptest.NewRecorder()
				fx.s.Handler().ServeHTTP(w, r)
				return w
			}
			if w := send(); w.Code != http.StatusOK {
				t.Fatalf("first request: %d %s", w.Code, w.Body)
			}
			for i := 0; i < 2; i++ {
				w := send()
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("request %d after the burst: %d %s, want 429", i+2, w.Code, w.Body)
				}
				if got := w.Header().Values("Retry-After"); !slices.Equal(got, []string{tt.want}) {
					t.Errorf("rate %s: Retry-After = %q, want %q", tt.rate, got, tt.want)
				}
			}
		})
	}
}
