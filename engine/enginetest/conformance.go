package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
)

// DedupStoreConformance checks that a DedupStore keeps the contract of
// engine.DedupStore. newStore returns a new, empty store and a function
// that moves the store's clock forward; every case gets its own store.
func DedupStoreConformance(t *testing.T, newStore func(t *testing.T) (engine.DedupStore, func(time.Duration))) {
	const (
		lease = time.Minute
		ttl   = time.Hour
	)
	ctx := context.Background()

	// held is the last claim each store handed out for each key, which
	// commit and release name.
	var heldMu sync.Mutex
	held := map[engine.DedupStore]map[string]int64{}
	holding := func(s engine.DedupStore, tenant, flow, key string) int64 {
		heldMu.Lock()
		defer heldMu.Unlock()
		return held[s][tenant+"/"+flow+"/"+key]
	}
	// claim calls Claim and fails the test on an error.
	claim := func(t *testing.T, s engine.DedupStore, tenant, flow, key string, rerunFailed bool) ([]byte, bool) {
		t.Helper()
		answer, c, err := s.Claim(ctx, tenant, flow, key, rerunFailed, lease)
		if err != nil {
			t.Fatalf("Claim(%s, %s, %s): %v", tenant, flow, key, err)
		}
		if c != 0 && answer != nil {
			t.Fatalf("Claim(%s, %s, %s) claimed the key and returned the answer %q", tenant, flow, key, answer)
		}
		if c != 0 {
			heldMu.Lock()
			if held[s] == nil {
				held[s] = map[string]int64{}
			}
			held[s][tenant+"/"+flow+"/"+key] = c
			heldMu.Unlock()
		}
		return answer, c != 0
	}
	// want checks what Claim returns: "claimed", "busy", or "answer:BYTES".
	want := func(t *testing.T, s engine.DedupStore, tenant, flow, key string, rerunFailed bool, want string) {
		t.Helper()
		answer, claimed := claim(t, s, tenant, flow, key, rerunFailed)
		got := "busy"
		switch {
		case claimed:
			got = "claimed"
		case answer != nil:
			got = "answer:" + string(answer)
		}
		if got != want {
			t.Errorf("Claim(%s, %s, %s, rerunFailed=%v) = %s, want %s", tenant, flow, key, rerunFailed, got, want)
		}
	}
	commit := func(t *testing.T, s engine.DedupStore, tenant, flow, key string, answer []byte, failed bool, ttl time.Duration) {
		t.Helper()
		if err := s.Commit(ctx, tenant, flow, key, holding(s, tenant, flow, key), answer, failed, ttl); err != nil {
			t.Fatalf("Commit(%s, %s, %s): %v", tenant, flow, key, err)
		}
	}
	release := func(t *testing.T, s engine.DedupStore, tenant, flow, key string) {
		t.Helper()
		if err := s.Release(ctx, tenant, flow, key, holding(s, tenant, flow, key)); err != nil {
			t.Fatalf("Release(%s, %s, %s): %v", tenant, flow, key, err)
		}
	}

	cases := []struct {
		name string
		run  func(t *testing.T, s engine.DedupStore, advance func(time.Duration))
	}{
		{"FirstClaimClaims", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
		}},
		{"ClaimWhileClaimedIsBusy", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			want(t, s, "acme", "f", "k", false, "busy")
			want(t, s, "acme", "f", "k", true, "busy")
		}},
		{"CommitThenClaimAnswers", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			answer := []byte(`{"status":200,"body":"eyJvayI6dHJ1ZX0="}` + "\x00\xff")
			want(t, s, "acme", "f", "k", false, "claimed")
			commit(t, s, "acme", "f", "k", answer, false, ttl)
			for _, rerunFailed := range []bool{false, true, false} {
				got, claimed := claim(t, s, "acme", "f", "k", rerunFailed)
				if claimed || !bytes.Equal(got, answer) {
					t.Errorf("Claim after Commit (rerunFailed=%v) = %q, claimed %v; want the committed answer %q", rerunFailed, got, claimed, answer)
				}
			}
		}},
		{"EmptyAnswerIsAnAnswer", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			commit(t, s, "acme", "f", "k", []byte{}, false, ttl)
			got, claimed := claim(t, s, "acme", "f", "k", false)
			if claimed || got == nil || len(got) != 0 {
				t.Errorf("Claim after committing an empty answer = %q (nil %v), claimed %v; want an empty, non-nil answer", got, got == nil, claimed)
			}
		}},
		{"FailedCommitReruns", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			commit(t, s, "acme", "f", "k", []byte("failed"), true, ttl)
			want(t, s, "acme", "f", "k", false, "answer:failed")
			want(t, s, "acme", "f", "k", true, "claimed")
			want(t, s, "acme", "f", "k", true, "busy")
			commit(t, s, "acme", "f", "k", []byte("ok"), false, ttl)
			want(t, s, "acme", "f", "k", true, "answer:ok")
		}},
		{"ReleaseThenClaimClaims", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			release(t, s, "acme", "f", "k")
			want(t, s, "acme", "f", "k", false, "claimed")
			want(t, s, "acme", "f", "k", false, "busy")
		}},
		{"AnOverrunClaimCannotReleaseOrCommit", func(t *testing.T, s engine.DedupStore, advance func(time.Duration)) {
			// A claims and overruns its lease; B claims the key; A's release
			// and commit, which name A's claim, leave B's claim alone
			_, a, err := s.Claim(ctx, "acme", "f", "k", false, lease)
			if err != nil || a == 0 {
				t.Fatalf("A's Claim = %d, %v", a, err)
			}
			advance(lease + time.Second)
			_, b, err := s.Claim(ctx, "acme", "f", "k", false, lease)
			if err != nil || b == 0 || b == a {
				t.Fatalf("B's Claim = %d, %v (A's was %d)", b, err, a)
			}
			if err := s.Release(ctx, "acme", "f", "k", a); err != nil {
				t.Fatal(err)
			}
			want(t, s, "acme", "f", "k", false, "busy") // still B's
			if err := s.Commit(ctx, "acme", "f", "k", a, []byte("A"), false, ttl); err != nil {
				t.Fatal(err)
			}
			want(t, s, "acme", "f", "k", false, "busy") // A's answer was not recorded
			if err := s.Commit(ctx, "acme", "f", "k", b, []byte("B"), false, ttl); err != nil {
				t.Fatal(err)
			}
			want(t, s, "acme", "f", "k", false, "answer:B")
			if err := s.Release(ctx, "acme", "f", "k", b); err != nil {
				t.Fatal(err)
			}
			want(t, s, "acme", "f", "k", false, "answer:B") // a committed answer is not released
		}},
		{"ReleaseOfAnUnknownKey", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			release(t, s, "acme", "f", "never-claimed")
			want(t, s, "acme", "f", "never-claimed", false, "claimed")
		}},
		{"LeaseExpiry", func(t *testing.T, s engine.DedupStore, advance func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			advance(lease - time.Second)
			want(t, s, "acme", "f", "k", false, "busy")
			advance(2 * time.Second)
			want(t, s, "acme", "f", "k", false, "claimed") // the holder died
			want(t, s, "acme", "f", "k", false, "busy")    // with a new lease
			advance(lease - time.Second)
			want(t, s, "acme", "f", "k", false, "busy")
		}},
		{"TTLExpiry", func(t *testing.T, s engine.DedupStore, advance func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			commit(t, s, "acme", "f", "k", []byte("answer"), false, ttl)
			advance(ttl - time.Second)
			want(t, s, "acme", "f", "k", false, "answer:answer")
			advance(2 * time.Second)
			want(t, s, "acme", "f", "k", false, "claimed")
		}},
		{"TTLCountsFromCommit", func(t *testing.T, s engine.DedupStore, advance func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			advance(lease - time.Second) // a long execution
			commit(t, s, "acme", "f", "k", []byte("answer"), false, 10*time.Second)
			advance(5 * time.Second) // past the lease, within the ttl
			want(t, s, "acme", "f", "k", false, "answer:answer")
			advance(10 * time.Second)
			want(t, s, "acme", "f", "k", false, "claimed")
		}},
		{"Isolation", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			want(t, s, "acme", "f", "k", false, "claimed")
			commit(t, s, "acme", "f", "k", []byte("acme/f/k"), false, ttl)
			// Each differs from acme/f/k in one part, or splits the same
			// characters differently.
			others := [][3]string{
				{"globex", "f", "k"},
				{"acme", "g", "k"},
				{"acme", "f", "K"},
				{"acme", "f", "k2"},
				{"acmef", "", "k"},
				{"acm", "ef", "k"},
				{"acme", "fk", ""},
				{"acme", "f/k", "k"},
			}
			for _, o := range others {
				want(t, s, o[0], o[1], o[2], false, "claimed")
			}
			want(t, s, "acme", "f", "k", false, "answer:acme/f/k")
			for i, o := range others {
				commit(t, s, o[0], o[1], o[2], fmt.Appendf(nil, "other %d", i), i%2 == 0, ttl)
			}
			want(t, s, "acme", "f", "k", true, "answer:acme/f/k")
			for i, o := range others {
				want(t, s, o[0], o[1], o[2], false, fmt.Sprintf("answer:other %d", i))
			}
			release(t, s, "globex", "f", "k")
			want(t, s, "acme", "f", "k", false, "answer:acme/f/k")
		}},
		{"ConcurrentClaims", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			const n = 16
			var (
				wg              sync.WaitGroup
				mu              sync.Mutex
				claimed, busy   int
				answers, errors []string
			)
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					answer, c, err := s.Claim(ctx, "acme", "f", "k", false, lease)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						errors = append(errors, err.Error())
					case c != 0:
						claimed++
					case answer != nil:
						answers = append(answers, string(answer))
					default:
						busy++
					}
				})
			}
			close(start)
			wg.Wait()
			if claimed != 1 || busy != n-1 || len(answers) != 0 || len(errors) != 0 {
				t.Errorf("%d concurrent Claims: %d claimed, %d busy, answers %q, errors %q; want 1 claimed, %d busy", n, claimed, busy, answers, errors, n-1)
			}
		}},
		{"ConcurrentClaimsOfManyKeys", func(t *testing.T, s engine.DedupStore, _ func(time.Duration)) {
			const keys, per = 8, 4
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				counts = map[string]int{}
			)
			for k := range keys {
				for range per {
					wg.Go(func() {
						key := fmt.Sprintf("k%d", k)
						_, c, err := s.Claim(ctx, "acme", "f", key, false, lease)
						if err != nil {
							t.Errorf("Claim(%s): %v", key, err)
							return
						}
						if c != 0 {
							mu.Lock()
							counts[key]++
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			for k := range keys {
				if key := fmt.Sprintf("k%d", k); counts[key] != 1 {
					t.Errorf("key %s was claimed %d times, want once", key, counts[key])
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, advance := newStore(t)
			c.run(t, s, advance)
		})
	}
}
