package registry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

func TestLiveBeforeLoad(t *testing.T) {
	r, _ := newRegistry(t)
	if ls := r.Live(); ls != nil {
		t.Fatalf("Live() before Load = %v, want nil", summary(ls))
	}
	swapped, err := r.Refresh(context.Background())
	if err != nil || !swapped {
		t.Fatalf("the first Refresh = %v, %v; want true, nil", swapped, err)
	}
	ls := r.Live()
	if ls == nil || len(ls.Flows()) != 0 || ls.Generation() != 0 {
		t.Fatalf("the live set of an empty registry: %+v", ls)
	}
	if _, ok := ls.Lookup("acme", "x"); ok {
		t.Error("Lookup found a flow in an empty registry")
	}
	swapped, err = r.Refresh(context.Background())
	if err != nil || swapped {
		t.Errorf("Refresh with nothing published = %v, %v; want false, nil", swapped, err)
	}
	if r.Live() != ls {
		t.Error("Refresh with nothing published replaced the live set")
	}
}

func TestLiveFlowFields(t *testing.T) {
	r, c := newRegistry(t)
	c.Advance(1234567 * time.Microsecond) // the registry keeps milliseconds
	f := compileAt(t, "flows/acme/orders/intake.md", "acme", "order-intake", "1")
	publish(t, r, registry.Publication{Flows: []*flow.Flow{f}, Commit: "4f1c0de"})
	ls := load(t, r)
	if ls.Commit() != "4f1c0de" {
		t.Errorf("LiveSet.Commit() = %q, want 4f1c0de", ls.Commit())
	}
	lf, ok := ls.Lookup("acme", "order-intake")
	if !ok {
		t.Fatal("Lookup(acme, order-intake) found nothing")
	}
	sum := flow.Sum(f.Artifact())
	want := &registry.LiveFlow{
		Tenant:      "acme",
		Name:        "order-intake",
		Version:     1,
		SHA256:      hex.EncodeToString(sum[:]),
		SourcePath:  "flows/acme/orders/intake.md",
		Commit:      "4f1c0de",
		PublishedAt: t0.Add(1234 * time.Millisecond),
	}
	if diff := cmp.Diff(want, lf, cmpopts.IgnoreFields(registry.LiveFlow{}, "Flow")); diff != "" {
		t.Errorf("LiveFlow (-want +got):\n%s", diff)
	}
	if lf.Flow == nil {
		t.Fatal("LiveFlow.Flow is nil")
	}
	if !bytes.Equal(lf.Flow.Artifact(), f.Artifact()) || lf.Flow.Path() != f.Path() {
		t.Errorf("the loaded flow is not the published one: %s, %s", lf.Flow.Path(), lf.Flow.Description())
	}
	if _, ok := ls.Lookup("acme", "order"); ok {
		t.Error("Lookup(acme, order) found a flow")
	}
	if _, ok := ls.Lookup("globex", "order-intake"); ok {
		t.Error("Lookup(globex, order-intake) found a flow")
	}
}

// TestLiveSetIsASnapshot: a set taken before a publication keeps what it
// held; a new Load takes the flows that did not change from the old set
// without compiling them again.
func TestLiveSetIsASnapshot(t *testing.T) {
	r, _ := newRegistry(t)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "b", "1")}})
	old := load(t, r)
	oldA, _ := old.Lookup("acme", "a")
	oldSummary := summary(old)

	publish(t, r, registry.Publication{Complete: true, Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "c", "1")}})
	swapped, err := r.Refresh(context.Background())
	if err != nil || !swapped {
		t.Fatalf("Refresh after a publication = %v, %v; want true, nil", swapped, err)
	}
	cur := r.Live()
	if cur == old {
		t.Fatal("Refresh did not swap the live set")
	}
	if diff := cmp.Diff(oldSummary, summary(old)); diff != "" {
		t.Errorf("the old set changed (-before +after):\n%s", diff)
	}
	if _, ok := old.Lookup("acme", "b"); !ok {
		t.Error("the old set lost a flow withdrawn after it was taken")
	}
	if _, ok := old.Lookup("acme", "c"); ok {
		t.Error("the old set holds a flow published after it was taken")
	}
	want := []liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}, {Tenant: "acme", Name: "c", Version: 1, Mark: "1"}}
	if diff := cmp.Diff(want, summary(cur)); diff != "" {
		t.Errorf("the new set (-want +got):\n%s", diff)
	}
	if curA, _ := cur.Lookup("acme", "a"); curA.Flow != oldA.Flow {
		t.Error("an unchanged flow was compiled again instead of taken from the current set")
	}

	swapped, err = r.Refresh(context.Background())
	if err != nil || swapped || r.Live() != cur {
		t.Errorf("Refresh with no new publication = %v, %v (same set: %v); want false, nil, true", swapped, err, r.Live() == cur)
	}
}

// markOf reads the publication number a flow of the concurrency tests
// carries in its description ("publication N").
func markOf(lf *registry.LiveFlow) (int, error) {
	if lf.Flow == nil {
		return 0, fmt.Errorf("%s/%s: not compiled: %v", lf.Tenant, lf.Name, lf.Corrupt)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(lf.Flow.Description(), "publication "))
	if err != nil {
		return 0, fmt.Errorf("%s/%s: description %q", lf.Tenant, lf.Name, lf.Flow.Description())
	}
	return n, nil
}

// publicationMark checks that every flow of ls carries the same publication
// number, and returns it.
func publicationMark(ls *registry.LiveSet, flows int) (int, error) {
	if len(ls.Flows()) != flows {
		return 0, fmt.Errorf("the set holds %d flows, want %d", len(ls.Flows()), flows)
	}
	n := -1
	for _, lf := range ls.Flows() {
		m, err := markOf(lf)
		if err != nil {
			return 0, err
		}
		if n >= 0 && m != n {
			return 0, fmt.Errorf("one set mixes publications %d and %d (%s/%s)", n, m, lf.Tenant, lf.Name)
		}
		n = m
	}
	return n, nil
}

// TestLiveSetUnderPublications: 8 readers take the live set in a loop while
// 50 publications land and Refresh runs. Every flow of publication N
// carries N in its description; a reader must always see one whole
// publication, and never an older one than it saw before.
func TestLiveSetUnderPublications(t *testing.T) {
	tests := []struct {
		name string
		// watcher adds a goroutine refreshing in a loop beside the
		// publisher's own refresh, as a host's Watcher runs beside its
		// syncer (gitsync loads the live set right after publishing).
		watcher bool
	}{
		{name: "the publisher refreshes"},
		// Overlapping refreshes must not put an older set back (a failure
		// here depends on timing; TestRefreshNeverGoesBack forces it).
		{name: "a watcher and the publisher refresh", watcher: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testLiveSetUnderPublications(t, tt.watcher) })
	}
}

func testLiveSetUnderPublications(t *testing.T, watcher bool) {
	const readers, publications = 8, 50
	r, _ := newRegistry(t)
	ctx := context.Background()
	names := [][2]string{{"acme", "a"}, {"acme", "b"}, {"globex", "c"}, {"globex", "d"}}
	pubs := make([]registry.Publication, publications+1)
	for n := range pubs {
		pubs[n] = registry.Publication{Complete: true, Commit: fmt.Sprintf("commit-%d", n)}
		for _, tn := range names {
			pubs[n].Flows = append(pubs[n].Flows, compile(t, tn[0], tn[1], fmt.Sprintf("publication %d", n)))
		}
	}
	publish(t, r, pubs[0])
	load(t, r)

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		reads   atomic.Int64
		reports = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if len(errs) < 10 {
				errs = append(errs, err)
			}
		}
	)
	for i := range readers {
		wg.Go(func() {
			last, lastGen := -1, int64(-1)
			for !stop.Load() {
				ls := r.Live()
				n, err := publicationMark(ls, len(names))
				if err != nil {
					reports(fmt.Errorf("reader %d: %w", i, err))
					return
				}
				if n < last || ls.Generation() < lastGen {
					reports(fmt.Errorf("reader %d: saw publication %d (generation %d) after publication %d (generation %d)", i, n, ls.Generation(), last, lastGen))
					return
				}
				if ls.Generation() != int64(n+1) {
					reports(fmt.Errorf("reader %d: a set of generation %d holds publication %d", i, ls.Generation(), n))
					return
				}
				last, lastGen = n, ls.Generation()
				reads.Add(1)
				runtime.Gosched() // leave the publisher a processor
			}
		})
	}
	if watcher {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := r.Refresh(ctx); err != nil {
					reports(fmt.Errorf("refresh loop: %w", err))
					return
				}
			}
		})
	}
	for n := 1; n <= publications; n++ {
		if _, err := r.Publish(ctx, pubs[n]); err != nil {
			reports(fmt.Errorf("publication %d: %w", n, err))
			break
		}
		if _, err := r.Refresh(ctx); err != nil {
			reports(fmt.Errorf("refresh after publication %d: %w", n, err))
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if reads.Load() == 0 {
		t.Error("the readers read nothing")
	}
	if _, err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := publicationMark(r.Live(), len(names)); err != nil || n != publications {
		t.Errorf("the final live set: publication %d, %v; want %d", n, err, publications)
	}
	t.Logf("%d reads of the live set during %d publications", reads.Load(), publications)
}

// TestRefreshNeverGoesBack plays what a host does after a sync: its Watcher
// is refreshing (building a large set) when the syncer publishes and loads
// the newer set. Whichever finishes last, the live set must end at the
// newer generation: the slower, older build must not be stored over the
// newer one (else the process would serve the previous commit's flows
// until its next refresh).
func TestRefreshNeverGoesBack(t *testing.T) {
	const rounds, flows = 5, 200
	r, _ := newRegistry(t)
	ctx := context.Background()
	load(t, r)
	for round := range rounds {
		// A publication the watcher has not loaded yet: building it
		// compiles every flow.
		p := registry.Publication{Complete: true}
		for i := range flows {
			p.Flows = append(p.Flows, compile(t, "acme", fmt.Sprintf("f%d", i), fmt.Sprintf("round %d", round)))
		}
		publish(t, r, p)
		older := generation(t, r)

		watcher := make(chan error, 1)
		go func() { _, err := r.Refresh(ctx); watcher <- err }()
		// The syncer publishes a small set and loads it.
		publish(t, r, registry.Publication{Complete: true, Flows: []*flow.Flow{compile(t, "acme", "g", fmt.Sprintf("round %d", round))}})
		newer := load(t, r)
		if err := <-watcher; err != nil {
			t.Fatal(err)
		}
		if newer.Generation() != older+1 {
			t.Fatalf("round %d: the syncer's Load built generation %d, want %d", round, newer.Generation(), older+1)
		}
		if g := r.Live().Generation(); g != newer.Generation() {
			t.Fatalf("round %d: once both returned the live set is at generation %d (%d flows), want %d: the older set replaced the newer",
				round, g, len(r.Live().Flows()), newer.Generation())
		}
	}
}

// TestCorruptArtifact tampers with stored artifacts directly: the flow
// loads as corrupt, the others load as usual.
func TestCorruptArtifact(t *testing.T) {
	hashOf := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	tests := []struct {
		name   string
		tamper func(t *testing.T, art []byte) (newArt []byte, newSum string) // newSum "" keeps the stored sum
		want   string
	}{
		{
			name: "bytes changed",
			tamper: func(t *testing.T, art []byte) ([]byte, string) {
				b := bytes.Clone(art)
				b[len(b)-3] ^= 0x20
				return b, ""
			},
			want: "artifact acme/f v1 failed its integrity check",
		},
		{
			name:   "bytes cut short",
			tamper: func(t *testing.T, art []byte) ([]byte, string) { return art[:len(art)/2], "" },
			want:   "artifact acme/f v1 failed its integrity check",
		},
		{
			name:   "not an artifact, with a matching hash",
			tamper: func(t *testing.T, art []byte) ([]byte, string) { return []byte("garbage"), hashOf([]byte("garbage")) },
			want:   "artifact acme/f v1 failed its integrity check: flows/acme/f.md: not a flow artifact: bad header",
		},
		{
			name: "another flow's artifact, with a matching hash",
			tamper: func(t *testing.T, art []byte) ([]byte, string) {
				b := compile(t, "acme", "g", "1").Artifact()
				return b, hashOf(b)
			},
			want: "artifact acme/f v1 failed its integrity check: it holds acme/g",
		},
		{
			// an upgrade whose compiler refuses what an earlier one took:
			// the bytes are intact, their source no longer compiles
			name: "a source this compiler refuses, with a matching hash",
			tamper: func(t *testing.T, art []byte) ([]byte, string) {
				b := staleArtifact(t, art)
				return b, hashOf(b)
			},
			want: "artifact acme/f v1 does not compile under this build (" + flow.CompilerVersion + "): flows/acme/f.md:2: " + staleWhy,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := dbPath(t)
			r := open(t, path, registry.Options{})
			f := compile(t, "acme", "f", "1")
			publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1"), f, compile(t, "globex", "z", "1")}})

			db := sideDB(t, path)
			art, sum := tt.tamper(t, f.Artifact())
			exec(t, db, `UPDATE flow_versions SET artifact = ? WHERE tenant = 'acme' AND flow = 'f' AND version = 1`, art)
			if sum != "" {
				exec(t, db, `UPDATE flow_versions SET sha256 = ? WHERE tenant = 'acme' AND flow = 'f' AND version = 1`, sum)
			}

			// The handle that published it and a new one both see it.
			for i, h := range []*registry.Registry{r, open(t, path, registry.Options{})} {
				ls, err := h.Load(context.Background())
				if err != nil {
					t.Fatalf("handle %d: Load with a corrupt artifact: %v", i, err)
				}
				want := []liveFlow{
					{Tenant: "acme", Name: "a", Version: 1, Mark: "1"},
					{Tenant: "acme", Name: "f", Version: 1, Corrupt: true},
					{Tenant: "globex", Name: "z", Version: 1, Mark: "1"},
				}
				if diff := cmp.Diff(want, summary(ls)); diff != "" {
					t.Errorf("handle %d: live set (-want +got):\n%s", i, diff)
				}
				lf, ok := ls.Lookup("acme", "f")
				if !ok {
					t.Fatalf("handle %d: the corrupt flow is not in the live set", i)
				}
				if lf.Flow != nil {
					t.Errorf("handle %d: LiveFlow.Flow is set for a corrupt artifact", i)
				}
				if lf.Corrupt == nil {
					t.Fatalf("handle %d: LiveFlow.Corrupt is nil", i)
				}
				if !errors.Is(lf.Corrupt, registry.ErrCorrupt) && !errors.Is(lf.Corrupt, registry.ErrNoLongerCompiles) {
					t.Errorf("handle %d: Corrupt %v wraps neither ErrCorrupt nor ErrNoLongerCompiles", i, lf.Corrupt)
				}
				if got := lf.Corrupt.Error(); got != tt.want {
					t.Errorf("handle %d: Corrupt = %q, want %q", i, got, tt.want)
				}
				// a replay into it is refused, saying why (it said "not
				// live", which a deployed flow is)
				refusal := "flow acme/f cannot run (its artifact is corrupt): a replayed message would fail again; publish the flow again first"
				if err := ls.CanReplay("acme", "f"); err == nil || err.Error() != refusal {
					t.Errorf("handle %d: CanReplay of the corrupt flow = %v, want %q", i, err, refusal)
				}
				if err := ls.CanReplay("acme", "a"); err != nil {
					t.Errorf("handle %d: CanReplay of a live flow = %v", i, err)
				}
			}
			if st := status(t, r); st.Flows != 3 {
				t.Errorf("Status().Flows = %d, want 3 (a corrupt flow is still deployed)", st.Flows)
			}

			// When the stored hash no longer matches the flow, publishing the
			// flow again makes a new, sound version.
			if sum != "" {
				got := changeStrings(publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "f", "1")}}))
				if diff := cmp.Diff([]string{"published acme/f v2"}, got); diff != "" {
					t.Errorf("publishing acme/f again (-want +got):\n%s", diff)
				}
				if lf, _ := load(t, r).Lookup("acme", "f"); lf.Flow == nil || lf.Version != 2 || lf.Corrupt != nil {
					t.Errorf("after publishing again: acme/f v%d, corrupt %v", lf.Version, lf.Corrupt)
				}
			}
		})
	}
}

// openConcurrently opens n handles of path at once.
func openConcurrently(t *testing.T, path string, n int) []*registry.Registry {
	t.Helper()
	rs := make([]*registry.Registry, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			rs[i], errs[i] = registry.Open(context.Background(), path, registry.Options{})
		})
	}
	close(start)
	wg.Wait()
	for i, r := range rs {
		if r != nil {
			t.Cleanup(func() { r.Close() })
		}
		if errs[i] != nil {
			t.Errorf("handle %d: Open: %v", i, errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return rs
}

// TestTwoHandles: two handles of one file (as two processes) publish,
// refresh, read their status, claim dedup keys and write the journal at the
// same time; no call fails (no "database is locked"), and both end with the
// same live set.
func TestTwoHandles(t *testing.T) {
	const rounds = 10
	path := dbPath(t)
	rs := openConcurrently(t, path, 2)
	tenants := []string{"acme", "globex"}
	ctx := context.Background()

	var (
		mu   sync.Mutex
		errs []string
		fail = func(i int, what string, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, fmt.Sprintf("handle %d: %s: %v", i, what, err))
		}
		wg   sync.WaitGroup
		done atomic.Int32
	)
	for i, r := range rs {
		tenant := tenants[i]
		wg.Go(func() { // the publisher
			defer done.Add(1)
			for n := 1; n <= rounds; n++ {
				mark := fmt.Sprintf("publication %d", n)
				if _, err := r.Publish(ctx, registry.Publication{Flows: []*flow.Flow{
					compile(t, tenant, "a", mark), compile(t, tenant, "b", mark),
				}}); err != nil {
					fail(i, "Publish", err)
					return
				}
				if _, err := r.Refresh(ctx); err != nil {
					fail(i, "Refresh", err)
				}
			}
		})
		wg.Go(func() { // the reader
			for n := 0; done.Load() < 2; n++ {
				if _, err := r.Refresh(ctx); err != nil {
					fail(i, "Refresh", err)
				}
				if _, err := r.Status(ctx); err != nil {
					fail(i, "Status", err)
				}
				if _, err := r.Journal(ctx, registry.JournalQuery{Tenant: tenant}); err != nil {
					fail(i, "Journal", err)
				}
				if ls := r.Live(); ls != nil {
					for _, lf := range ls.Flows() {
						if lf.Corrupt != nil {
							fail(i, "Live", lf.Corrupt)
						}
					}
				}
			}
		})
		wg.Go(func() { // dedup and journal traffic
			w := r.NewJournalWriter(registry.JournalConfig{FlushEvery: 5 * time.Millisecond, Logger: quietLogger()})
			w.Start()
			d := r.Dedup()
			for n := 0; done.Load() < 2; n++ {
				key := fmt.Sprintf("key-%d-%d", i, n)
				_, claimed, err := d.Claim(ctx, tenant, "a", key, false, time.Minute)
				if err != nil || claimed == 0 {
					fail(i, "Claim", fmt.Errorf("claimed %v, %v", claimed, err))
				}
				if err := d.Commit(ctx, tenant, "a", key, claimed, []byte("{}"), false, time.Hour); err != nil {
					fail(i, "Commit", err)
				}
				w.Append(registry.Entry{At: time.Now(), Door: "run", Tenant: tenant, Flow: "a", Outcome: "succeeded", Status: 200})
			}
			w.Stop()
			if w.Dropped() != 0 {
				fail(i, "journal", fmt.Errorf("%d entries dropped", w.Dropped()))
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}

	want := []liveFlow{
		{Tenant: "acme", Name: "a", Version: rounds, Mark: fmt.Sprintf("publication %d", rounds)},
		{Tenant: "acme", Name: "b", Version: rounds, Mark: fmt.Sprintf("publication %d", rounds)},
		{Tenant: "globex", Name: "a", Version: rounds, Mark: fmt.Sprintf("publication %d", rounds)},
		{Tenant: "globex", Name: "b", Version: rounds, Mark: fmt.Sprintf("publication %d", rounds)},
	}
	for i, r := range rs {
		ls := load(t, r)
		if diff := cmp.Diff(want, summary(ls)); diff != "" {
			t.Errorf("handle %d: live set (-want +got):\n%s", i, diff)
		}
		if ls.Generation() != 2*rounds {
			t.Errorf("handle %d: generation %d, want %d", i, ls.Generation(), 2*rounds)
		}
	}
}

// createdFile creates a registry file, as the first process to start does,
// and returns its path.
func createdFile(t *testing.T) string {
	t.Helper()
	path := dbPath(t)
	r, err := registry.Open(context.Background(), path, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConcurrentOpen opens one file from several handles at once (several
// processes starting on one state directory): every one succeeds, the
// schema is made once, and all of them share what one publishes.
func TestConcurrentOpen(t *testing.T) {
	tests := []struct {
		name string
		path func(t *testing.T) string
	}{
		// The handles race to switch the new file to WAL, which SQLite
		// answers with SQLITE_BUSY rather than waiting: Open must cope.
		{"a new file", func(t *testing.T) string { return dbPath(t) }},
		{"an existing file", createdFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := range 100 {
				path := tt.path(t)
				rs := openConcurrently(t, path, 4)
				if round == 0 {
					checkShared(t, path, rs)
				}
				for _, r := range rs {
					r.Close()
				}
			}
		})
	}
}

// checkShared checks that handles of one file share what one publishes,
// and that the file is in WAL mode.
func checkShared(t *testing.T, path string, rs []*registry.Registry) {
	t.Helper()
	publish(t, rs[len(rs)-1], registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	for i, r := range rs {
		if diff := cmp.Diff([]liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}}, summary(load(t, r))); diff != "" {
			t.Errorf("handle %d: live set (-want +got):\n%s", i, diff)
		}
	}
	var mode string
	if err := sideDB(t, path).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q, %v; want wal", mode, err)
	}
}

// waitFor waits up to d for ok, checking it every few milliseconds and
// whenever ch delivers; it reports how long it took.
func waitFor[T any](t *testing.T, d time.Duration, ch <-chan T, ok func() bool) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-deadline.C:
			return time.Since(start), ok()
		case <-ch:
		case <-tick.C:
		}
	}
	return time.Since(start), true
}

// TestWatcherFollowsAnotherHandle: a publication through one handle
// reaches the live set of another through its Watcher within 2 s.
func TestWatcherFollowsAnotherHandle(t *testing.T) {
	path := dbPath(t)
	rs := openConcurrently(t, path, 2)
	pub, follower := rs[0], rs[1]
	load(t, follower)

	swaps := make(chan *registry.LiveSet, 16)
	var seenMu sync.Mutex
	var seen []*registry.LiveSet // every set OnSwap received, in order
	var logs jsonlogtest.Buffer
	w := &registry.Watcher{
		Registry: follower,
		Interval: 100 * time.Millisecond,
		Logger:   logs.Logger(slog.LevelInfo),
		OnSwap: func(ls *registry.LiveSet) {
			seenMu.Lock()
			seen = append(seen, ls)
			seenMu.Unlock()
			select {
			case swaps <- ls:
			default:
			}
		},
	}
	w.Start()
	defer w.Stop()

	steps := []struct {
		name string
		pub  registry.Publication
		want []liveFlow
	}{
		{
			name: "published",
			pub:  registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}},
			want: []liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}},
		},
		{
			name: "changed",
			pub:  registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "2")}},
			want: []liveFlow{{Tenant: "acme", Name: "a", Version: 2, Mark: "2"}},
		},
		{
			name: "withdrawn",
			pub:  registry.Publication{Complete: true, Flows: []*flow.Flow{compile(t, "globex", "b", "1")}},
			want: []liveFlow{{Tenant: "globex", Name: "b", Version: 1, Mark: "1"}},
		},
	}
	for _, s := range steps {
		publish(t, pub, s.pub)
		took, ok := waitFor(t, 2*time.Second, swaps, func() bool { return cmp.Equal(s.want, summary(follower.Live())) })
		if !ok {
			t.Fatalf("%s: the other handle's live set is %v after %v, want %v", s.name, summary(follower.Live()), took, s.want)
		}
		t.Logf("%s: followed in %v", s.name, took.Round(time.Millisecond))
	}
	// OnSwap received the sets in place: the last one it received is the
	// live set.
	w.Stop() // no swap after this
	// each swap is logged: a publication of another process (nexus
	// deploy, another server's sync) changed what this one serves, and
	// its log said nothing
	changed := logs.Events(t, "live_set_changed")
	if len(changed) == 0 || changed[len(changed)-1]["generation"] != float64(follower.Live().Generation()) {
		t.Errorf("live_set_changed lines %v, want one per swap, the last at generation %d", changed, follower.Live().Generation())
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	switch live := follower.Live(); {
	case len(seen) == 0:
		t.Error("OnSwap was never called")
	case seen[len(seen)-1] != live:
		t.Errorf("the last set OnSwap received (generation %d, %v) is not the live set (generation %d, %v); %d calls",
			seen[len(seen)-1].Generation(), summary(seen[len(seen)-1]), live.Generation(), summary(live), len(seen))
	}
}

func TestWatcherStartStop(t *testing.T) {
	r, clk := newRegistry(t)
	other := open(t, r.Path(), registry.Options{Now: clk.Now}) // another handle on the same file
	load(t, r)
	swaps := make(chan *registry.LiveSet, 16)
	w := &registry.Watcher{Registry: r, Interval: 10 * time.Millisecond, Logger: quietLogger(), OnSwap: func(ls *registry.LiveSet) {
		select {
		case swaps <- ls:
		default:
		}
	}}
	stopped := func(what string) {
		t.Helper()
		done := make(chan struct{})
		go func() { w.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Stop did not return", what)
		}
	}

	stopped("Stop without Start")
	stopped("Stop twice without Start")
	w.Start()
	w.Start() // does nothing
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	if took, ok := waitFor(t, 2*time.Second, swaps, func() bool { return len(r.Live().Flows()) == 1 }); !ok {
		t.Fatalf("the watcher did not load the publication in %v", took)
	}
	stopped("Stop after Start twice")
	stopped("Stop twice")

	// Stopped, it loads nothing: a publication by another handle stays
	// out of the live set for many intervals (a generous wait: a running
	// watcher loads it within one or two); Refresh still works by hand.
	for len(swaps) > 0 {
		<-swaps
	}
	before := r.Live()
	publish(t, other, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "b", "1")}})
	time.Sleep(50 * 10 * time.Millisecond) // 50 intervals
	if r.Live() != before {
		t.Errorf("the stopped watcher loaded a publication: live set %v, was %v", summary(r.Live()), summary(before))
	}
	if len(swaps) > 0 {
		t.Errorf("the stopped watcher called OnSwap %d times", len(swaps))
	}
	if swapped, err := r.Refresh(context.Background()); err != nil || !swapped {
		t.Fatalf("Refresh = %v, %v", swapped, err)
	}
	if r.Live() == before {
		t.Fatal("Refresh did not swap")
	}

	// Started again, it follows again.
	w.Start()
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "c", "1")}})
	if took, ok := waitFor(t, 2*time.Second, swaps, func() bool { return len(r.Live().Flows()) == 3 }); !ok {
		t.Fatalf("the restarted watcher did not load the publication in %v", took)
	}
	stopped("Stop after a restart")

	// Concurrent Start and Stop calls are safe.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { w.Start(); w.Stop() })
	}
	wg.Wait()
	stopped("Stop after concurrent Start and Stop")
}

// TestWatcherKeepsTheLastSet: when the registry cannot be read, the watcher
// logs it and the live set stays in place.
func TestWatcherKeepsTheLastSet(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	ls := load(t, r)

	var logs jsonlogtest.Buffer
	w := &registry.Watcher{Registry: r, Interval: 10 * time.Millisecond, Logger: logs.Logger(slog.LevelInfo)}
	w.Start()
	defer w.Stop()
	r.Close()
	if took, ok := waitFor[struct{}](t, 2*time.Second, nil, func() bool { return strings.Contains(logs.String(), "live_set_refresh_failed") }); !ok {
		t.Fatalf("no live_set_refresh_failed event after %v; log:\n%s", took, logs.String())
	}
	// Let it try a few more times: the failure is logged once while it lasts.
	time.Sleep(10 * w.Interval)
	w.Stop()
	if r.Live() != ls {
		t.Error("a failed refresh replaced the live set")
	}
	if n := strings.Count(logs.String(), "live_set_refresh_failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once while it lasts", n)
	}
}

func TestSchedules(t *testing.T) {
	r, _ := newRegistry(t)
	cron, err := flow.Compile("flows/acme/nightly.md", []byte(`---
flowmarkdown_version: "0.1"
flow: nightly
tenant: acme
schedule: "0 6 * * *"
schedule_timezone: Europe/Paris
schedule_input: '{"hours": 24}'
---

## Step: answer
`+"```ntd"+`
{"hours": "{{ $.hours }}"}
`+"```"+`
`))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, r, registry.Publication{Commit: "c1", Flows: []*flow.Flow{cron, compile(t, "acme", "a", "1"), compile(t, "globex", "z", "1")}})
	ls := load(t, r)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	want := []registry.Schedule{{
		Tenant: "acme", Flow: "nightly", Spec: "0 6 * * *", Zone: "Europe/Paris",
		Next: time.Date(2026, 8, 10, 6, 0, 0, 0, paris), // t0 is 16:02 in Paris
	}}
	if diff := cmp.Diff(want, ls.Schedules(t0, nil)); diff != "" {
		t.Errorf("Schedules (-want +got):\n%s", diff)
	}
	if ls.Commit() != "c1" {
		t.Errorf("Commit() = %q, want c1", ls.Commit())
	}
}

// TestOddPath opens a registry in a folder whose name holds characters a
// file: URI gives meaning to.
func TestOddPath(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "we#ird?dir %20&x=1", "registry.db")
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	r.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the registry is not at %s: %v", path, err)
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "we#ird?dir %20&x=1" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the folder holds %q, want only the registry's folder", names)
	}
	r2 := open(t, path, registry.Options{})
	if diff := cmp.Diff([]liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}}, summary(load(t, r2))); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}

// TestRepublishRepairsCorruptArtifact: publishing a flow whose stored
// artifact no longer matches its hash makes a new, intact version.
func TestRepublishRepairsCorruptArtifact(t *testing.T) {
	path := dbPath(t)
	reg := open(t, path, registry.Options{})
	f := compile(t, "acme", "f", "one")
	publish(t, reg, registry.Publication{Flows: []*flow.Flow{f}})
	exec(t, sideDB(t, path), `UPDATE flow_versions SET artifact = CAST('broken' AS BLOB)`)
	changes := publish(t, reg, registry.Publication{Flows: []*flow.Flow{f}})
	if len(changes) != 1 || changes[0].String() != "published acme/f v2" {
		t.Fatalf("republish: %v", changes)
	}
	if lf, _ := load(t, reg).Lookup("acme", "f"); lf == nil || lf.Corrupt != nil || lf.Version != 2 {
		t.Fatalf("after the repair: %+v", lf)
	}
}

// The process that publishes a flow serves it as it compiled it (the
// stored bytes are still checked: TestCorruptArtifact); another process
// compiles the stored artifact. Both serve the same flow.
func TestLoadTakesThePublishedFlow(t *testing.T) {
	path := dbPath(t)
	publisher, other := open(t, path, registry.Options{}), open(t, path, registry.Options{})
	f := compile(t, "acme", "f", "1")
	publish(t, publisher, registry.Publication{Flows: []*flow.Flow{f}})
	for _, r := range []*registry.Registry{publisher, other} {
		if _, err := r.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mine, ok1 := publisher.Live().Lookup("acme", "f")
	theirs, ok2 := other.Live().Lookup("acme", "f")
	if !ok1 || !ok2 || mine.Corrupt != nil || theirs.Corrupt != nil {
		t.Fatalf("lookups: %v %v, corrupt: %v %v", ok1, ok2, mine.Corrupt, theirs.Corrupt)
	}
	if mine.Flow != f {
		t.Error("the publisher compiled its own flow again")
	}
	if theirs.Flow == f || !bytes.Equal(theirs.Flow.Artifact(), f.Artifact()) {
		t.Error("the other process does not serve the stored artifact, compiled")
	}
	// handed over once: a flow published again later is a new version
	g := compile(t, "acme", "f", "2")
	publish(t, publisher, registry.Publication{Flows: []*flow.Flow{g}})
	if _, err := publisher.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lf, _ := publisher.Live().Lookup("acme", "f"); lf.Flow != g || lf.Version != 2 {
		t.Errorf("after the second publication: v%d, the published flow: %v", lf.Version, lf.Flow == g)
	}
}

// TestCorruptArtifactIsLogged: a live set that holds a version whose
// artifact fails its integrity check says so in the log, once per version
// (a cron flow's schedule would otherwise stop without a word).
func TestCorruptArtifactIsLogged(t *testing.T) {
	path := dbPath(t)
	var buf bytes.Buffer
	r := open(t, path, registry.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	f := compile(t, "acme", "f", "1")
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1"), f}})
	if buf.Len() != 0 {
		t.Fatalf("logged with no corrupt artifact: %s", buf.String())
	}
	art := bytes.Clone(f.Artifact())
	art[len(art)-3] ^= 0x20
	exec(t, sideDB(t, path), `UPDATE flow_versions SET artifact = ? WHERE tenant = 'acme' AND flow = 'f' AND version = 1`, art)
	for range 3 {
		if _, err := r.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var lines []map[string]any
	for l := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(lines), buf.String())
	}
	got := lines[0]
	want := map[string]any{"event": "artifact_corrupt", "tenant": "acme", "flow": "f", "version": float64(1), "level": "ERROR",
		"error": "artifact acme/f v1 failed its integrity check"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, got[k], v, got)
		}
	}
}

// staleWhy is the compile error of staleArtifact's source.
const staleWhy = `flowmarkdown_version "0.2" is not supported: this compiler reads "0.1"`

// staleArtifact is art with its source's flowmarkdown_version made one
// this compiler refuses, its header's source length mended: what an
// artifact of a rule an upgrade tightened looks like.
func staleArtifact(t *testing.T, art []byte) []byte {
	t.Helper()
	i := bytes.Index(art, []byte("\nsource "))
	if i < 0 {
		t.Fatal("no source line in the artifact")
	}
	j := bytes.IndexByte(art[i+1:], '\n') + i + 1
	src := bytes.Replace(art[j+1:], []byte(`flowmarkdown_version: "0.1"`), []byte(`flowmarkdown_version: "0.2"`), 1)
	if bytes.Equal(src, art[j+1:]) {
		t.Fatal("no flowmarkdown_version line in the source")
	}
	return append(append(bytes.Clone(art[:i]), fmt.Sprintf("\nsource %d\n", len(src))...), src...)
}
