package gitsync_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// genKey is the only access key of commit n.
func genKey(n int) key {
	return key{"gen-" + strconv.Itoa(n), "acme", fmt.Sprintf("nxk_test_gen_%04d_padding_padding", n)}
}

// writeGeneration writes commit n: acme/a, acme/b, globex/c and (odd n
// only) globex/odd, each described "gen N", and access.yaml with genKey(n).
func writeGeneration(src *srcRepo, n int) {
	mark := "gen " + strconv.Itoa(n)
	src.write("flows/acme/a.md", flowtest.Marked("acme", "a", mark))
	src.write("flows/acme/b.md", flowtest.Marked("acme", "b", mark))
	src.write("flows/globex/c.md", flowtest.Marked("globex", "c", mark))
	if n%2 == 1 {
		src.write("flows/globex/odd.md", flowtest.Marked("globex", "odd", mark))
	} else {
		src.remove("flows/globex/odd.md")
	}
	src.write("access.yaml", accessFile(genKey(n)))
}

// checkSnapshot checks that one live set is all of one commit, and
// returns that commit's number.
func checkSnapshot(ls *registry.LiveSet) (int, error) {
	flows := ls.Flows()
	if len(flows) == 0 {
		return 0, fmt.Errorf("an empty live set")
	}
	n := -1
	for _, lf := range flows {
		if lf.Flow == nil {
			return 0, fmt.Errorf("%s/%s is not compiled: %v", lf.Tenant, lf.Name, lf.Corrupt)
		}
		m, err := strconv.Atoi(strings.TrimPrefix(lf.Flow.Description(), "gen "))
		if err != nil {
			return 0, fmt.Errorf("%s/%s: description %q", lf.Tenant, lf.Name, lf.Flow.Description())
		}
		if n == -1 {
			n = m
		} else if m != n {
			return 0, fmt.Errorf("a live set mixes commits: %q", liveFlows(ls))
		}
	}
	want := []string{"acme/a", "acme/b", "globex/c"}
	if n%2 == 1 {
		want = append(want, "globex/odd")
	}
	var got []string
	for _, lf := range flows {
		got = append(got, lf.Tenant+"/"+lf.Name)
	}
	if !slices.Equal(got, want) {
		return 0, fmt.Errorf("the live set of gen %d holds %q, want %q", n, got, want)
	}
	keys := ls.Access().Keys()
	if len(keys) != 1 || keys[0].ID != genKey(n).id {
		return 0, fmt.Errorf("the live set of gen %d has the keys %v", n, keys)
	}
	if _, ok := ls.Access().Lookup(genKey(n).secret); !ok {
		return 0, fmt.Errorf("the key of gen %d does not work in its own live set", n)
	}
	return n, nil
}

// 50 commits synced while 8 readers loop on Live: every live set a reader
// takes is one commit, whole, and a reader never sees an older commit
// after a newer one.
func TestSyncSwapsTheLiveSetAtomically(t *testing.T) {
	const commits, readers = 50, 8
	e := newEnv(t)
	writeGeneration(e.src, 1)
	e.mustApply(e.src.commit("gen 1"))

	var (
		done     = make(chan struct{})
		wg       sync.WaitGroup
		reads    atomic.Int64
		failures atomic.Int64
		lastSeen = make([]atomic.Int64, readers)
		distinct = make([]int, readers) // generations each reader saw
	)
	stop := sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
	t.Cleanup(stop)
	for r := range readers {
		wg.Go(func() {
			last, i := 0, 0
			for {
				select {
				case <-done:
					return
				default:
				}
				ls := e.reg.Live()
				n, err := checkSnapshot(ls)
				reads.Add(1)
				switch {
				case err != nil:
					if failures.Add(1) <= 5 {
						t.Errorf("reader %d: %v", r, err)
					}
				case n < last:
					if failures.Add(1) <= 5 {
						t.Errorf("reader %d saw gen %d after gen %d", r, n, last)
					}
				case n > last:
					last = n
					lastSeen[r].Store(int64(n))
					distinct[r]++
				}
				// Leave the syncer some of the two cores CI has.
				if i++; i%8 == 0 {
					time.Sleep(time.Millisecond)
				} else {
					runtime.Gosched()
				}
			}
		})
	}

	for n := 2; n <= commits; n++ {
		writeGeneration(e.src, n)
		c := e.src.commit("gen " + strconv.Itoa(n))
		want := []string{"published acme/a v" + strconv.Itoa(n), "published acme/b v" + strconv.Itoa(n), "published globex/c v" + strconv.Itoa(n)}
		if n%2 == 1 {
			want = append(want, "published globex/odd v"+strconv.Itoa((n+1)/2))
		} else {
			want = append(want, "withdrawn globex/odd v"+strconv.Itoa(n/2))
		}
		e.mustApply(c, want...)
	}
	waitFor(t, 5*time.Second, "every reader to see the last commit", func() bool {
		for r := range lastSeen {
			if lastSeen[r].Load() != commits {
				return false
			}
		}
		return true
	})
	stop()
	if n, err := checkSnapshot(e.reg.Live()); err != nil || n != commits {
		t.Fatalf("the final live set: gen %d, %v", n, err)
	}
	for r := range distinct {
		// Each reader went through the swaps, not just the last one (at
		// least two sets: how many depends on the scheduling).
		if distinct[r] < 2 {
			t.Errorf("reader %d saw only %d of the %d commits", r, distinct[r], commits)
		}
	}
	t.Logf("%d live sets read", reads.Load())
	if st := e.status(); st.Generation != commits {
		t.Errorf("generation %d after %d commits that each changed the set", st.Generation, commits)
	}
}

// Two Syncers sharing a clone and a registry, as two processes sharing a
// state directory: the lock lets one fetch and publish at a time, nothing
// fails or is corrupted, and the other process's live set follows through
// its Watcher.
func TestTwoSyncersShareAStateDirectory(t *testing.T) {
	src := newSrcRepo(t)
	state := filepath.Join(t.TempDir(), "state")
	dbPath := filepath.Join(state, "registry.db")
	type proc struct {
		reg *registry.Registry
		s   *gitsync.Syncer
		w   *registry.Watcher
	}
	procs := make([]proc, 2)
	for i := range procs {
		reg := openRegistry(t, dbPath)
		s, err := gitsync.New(gitsync.Config{Repo: src.dir, Dir: filepath.Join(state, "repo"), Registry: reg, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		w := &registry.Watcher{Registry: reg, Interval: 100 * time.Millisecond, Logger: discard()}
		w.Start()
		t.Cleanup(w.Stop)
		procs[i] = proc{reg, s, w}
	}
	// liveGen reads the generation of the commit a process serves.
	liveGen := func(p proc) int {
		ls := p.reg.Live()
		if ls == nil || ls.Generation() == 0 {
			return 0 // the empty set before the first publication
		}
		n, err := checkSnapshot(ls)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	const rounds = 12
	var skippedBusy int
	for n := 1; n <= rounds; n++ {
		writeGeneration(src, n)
		c := src.commit("gen " + strconv.Itoa(n))
		results := make([]gitsync.Result, len(procs))
		errs := make([]error, len(procs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, p := range procs {
			wg.Go(func() {
				<-start
				results[i], errs[i] = p.s.Sync(context.Background())
			})
		}
		close(start)
		wg.Wait()
		applied := 0
		for i, res := range results {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d: process %d: %v", n, i, errs[i])
			case res.Applied():
				applied++
				if res.Commit != c {
					t.Fatalf("round %d: process %d applied %s, want %s", n, i, res.Commit, c)
				}
			case res.Skipped == "up to date" && res.Commit == c:
			case res.Skipped == "another process is syncing" && res.Commit == "":
				skippedBusy++
			default:
				t.Fatalf("round %d: process %d: %+v", n, i, res)
			}
		}
		if applied != 1 {
			t.Fatalf("round %d: %d processes applied %s, want 1: %+v", n, applied, c, results)
		}
		st, err := procs[1].reg.Status(context.Background())
		if err != nil || st.Commit != c || st.LastError != nil {
			t.Fatalf("round %d: Status = %+v, %v", n, st, err)
		}
		for i, p := range procs {
			waitFor(t, 2*time.Second, fmt.Sprintf("process %d to serve gen %d", i, n), func() bool { return liveGen(p) == n })
		}
	}
	t.Logf("%d of %d Syncs found the other process syncing", skippedBusy, 2*rounds)

	// Only the first process syncs; the second follows within 2 s.
	writeGeneration(src, rounds+1)
	c := src.commit("synced by one process")
	res, err := procs[0].s.Sync(context.Background())
	if err != nil || !res.Applied() || res.Commit != c {
		t.Fatalf("Sync = %+v, %v", res, err)
	}
	began := time.Now()
	waitFor(t, 2*time.Second, "the second process to follow", func() bool { return liveGen(procs[1]) == rounds+1 })
	t.Logf("the second process followed in %v", time.Since(began).Round(time.Millisecond))

	// The shared clone is sound and on the last commit.
	dir := filepath.Join(state, "repo")
	runGit(t, dir, "fsck", "--no-progress", "--no-dangling")
	if got := strings.TrimSpace(runGit(t, dir, "rev-parse", "refs/remotes/origin/main")); got != c {
		t.Errorf("the clone's origin/main is %s, want %s", got, c)
	}
	if res, err := procs[1].s.Sync(context.Background()); err != nil || res.Skipped != "up to date" {
		t.Errorf("Sync of the second process = %+v, %v; want up to date", res, err)
	}
}

// A process holding the sync lock makes Sync skip its round.
func TestSyncSkipsWhileTheLockIsHeld(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c := e.src.commit("one")
	other := flock.New(e.cfg.Dir + ".lock")
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatalf("taking the lock: %v, %v", ok, err)
	}
	res := e.sync()
	if res.Skipped != "another process is syncing" || res.Commit != "" || res.Applied() {
		t.Fatalf("Sync while another process holds the lock = %+v", res)
	}
	if st := e.status(); st.Commit != "" {
		t.Fatalf("Status = %+v", st)
	}
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	e.mustApply(c, "published acme/x v1")
}

// Trigger syncs at once whatever Poll says; Stop is synchronous and
// idempotent, and a stopped Syncer can start again.
func TestStartTriggerStop(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.Poll = time.Hour })
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("one")

	commitIs := func(c string) func() bool {
		return func() bool {
			st, err := e.reg.Status(context.Background())
			return err == nil && st.Commit == c
		}
	}
	e.s.Start()
	e.s.Start() // already started: nothing more
	waitFor(t, 5*time.Second, "the first sync at Start", commitIs(c1))

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	c2 := e.src.commit("two")
	began := time.Now()
	e.s.Trigger()
	waitFor(t, 5*time.Second, "the triggered sync", commitIs(c2))
	t.Logf("applied %v after Trigger", time.Since(began).Round(time.Millisecond))
	// the registry has the commit: the live set follows at once, but a
	// loaded machine can take a second or more to get there
	waitFor(t, 10*time.Second, "the live set of the triggered sync", func() bool {
		lf, ok := e.reg.Live().Lookup("acme", "x")
		return ok && lf.Flow.Description() == "two"
	})

	// Triggers while a sync runs are coalesced, never blocking.
	for range 100 {
		e.s.Trigger()
	}

	e.s.Stop()
	events := len(e.logs.Events(t, "sync_applied"))
	e.s.Stop() // again: nothing to do

	// Stopped: a trigger does nothing.
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "three"))
	c3 := e.src.commit("three")
	e.s.Trigger()
	time.Sleep(200 * time.Millisecond)
	if st := e.status(); st.Commit != c2 {
		t.Fatalf("a stopped Syncer synced: commit %s", st.Commit)
	}
	if n := len(e.logs.Events(t, "sync_applied")); n != events {
		t.Fatalf("%d sync_applied events after Stop", n-events)
	}

	// Started again, it syncs at once.
	e.s.Start()
	waitFor(t, 5*time.Second, "the sync at the second Start", commitIs(c3))
	e.s.Stop()

	// Stop without Start, twice.
	s, err := gitsync.New(gitsync.Config{Repo: e.src.dir, Dir: filepath.Join(t.TempDir(), "repo"), Registry: e.reg, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop()
}

// Observe is told the outcome of every round of the loop, and nothing
// after Stop.
func TestStartObservesEveryRound(t *testing.T) {
	type round struct {
		res gitsync.Result
		err error
	}
	var (
		mu     sync.Mutex
		rounds []round
	)
	seen := func() []round {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(rounds)
	}
	e := newEnv(t, func(c *gitsync.Config) {
		c.Poll = 10 * time.Millisecond
		c.Observe = func(res gitsync.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			rounds = append(rounds, round{res, err})
		}
	})
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("one")
	e.s.Start()
	waitFor(t, 5*time.Second, "three rounds", func() bool { return len(seen()) >= 3 })

	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	bad := e.src.commit("broken")
	waitFor(t, 5*time.Second, "the refused commit", func() bool {
		r := seen()
		return r[len(r)-1].res.Skipped == "already refused"
	})
	e.s.Stop()
	got := seen()
	time.Sleep(50 * time.Millisecond)
	if n := len(seen()); n != len(got) {
		t.Errorf("%d rounds observed after Stop returned", n-len(got))
	}

	if r := got[0]; r.err != nil || !r.res.Applied() || r.res.Commit != c1 || !slices.Equal(changeStrings(r.res.Changes), []string{"published acme/x v1"}) {
		t.Errorf("first round: %+v, %v", r.res, r.err)
	}
	refused := 0
	for i, r := range got[1:] {
		switch {
		case r.err != nil:
			t.Errorf("round %d: %v", i+2, r.err)
		case r.res.Commit == c1 && r.res.Skipped == "up to date":
		case r.res.Commit == bad && len(r.res.Errors) == 1 && r.res.Errors[0] == badFlowError:
			refused++
		case r.res.Commit == bad && r.res.Skipped == "already refused":
		default:
			t.Errorf("round %d: %+v", i+2, r.res)
		}
	}
	if refused != 1 {
		t.Errorf("the refused commit was compiled in %d rounds, want 1", refused)
	}

	// An unreachable repo: the error is observed.
	var errs []error
	s, err := gitsync.New(gitsync.Config{
		Repo: closedURL(t) + "/config.git", Dir: filepath.Join(t.TempDir(), "repo"), Registry: e.reg, Logger: discard(),
		Poll: time.Millisecond, MaxBackoff: time.Millisecond,
		Observe: func(_ gitsync.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	waitFor(t, 5*time.Second, "an observed failure", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) > 0
	})
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if err == nil {
			t.Error("a round on an unreachable repo was observed without an error")
		}
	}
}

// Stop cancels the fetch in progress and waits for the loop: once it
// returns, nothing more is fetched or logged.
func TestStopEndsAFetchInProgress(t *testing.T) {
	var requests atomic.Int64
	entered := make(chan struct{}, 1)
	aborted := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			aborted <- struct{}{}
		case <-time.After(10 * time.Second):
		}
		http.Error(w, "too late", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	logs := &jsonlogtest.Buffer{}
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	s, err := gitsync.New(gitsync.Config{
		Repo: srv.URL + "/config.git", Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg,
		Logger: logs.Logger(slog.LevelDebug), Poll: time.Millisecond, MaxBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not fetch")
	}
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return while a fetch was in progress")
	}
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("the fetch in progress was not canceled")
	}
	n, logged := requests.Load(), logs.String()
	time.Sleep(100 * time.Millisecond)
	if requests.Load() != n || logs.String() != logged {
		t.Errorf("the loop went on after Stop returned: %d more requests, log:\n%s", requests.Load()-n, logs.String()[len(logged):])
	}
	if ev := logs.Events(t, "sync_unreachable"); len(ev) != 0 {
		t.Errorf("a canceled fetch was logged as unreachable: %v", ev)
	}
}

// TestSyncJudgesAgainstTheRegistrysLiveFlows: two processes share a state
// directory. B applies a commit adding acme/x; A's live set has not
// followed yet (its watcher looks every second). The next commit breaks
// x's front matter and A syncs it: A judges it against the flows live in
// the registry, not its own stale set, so the broken file is refused
// rather than withdrawing acme/x.
func TestSyncJudgesAgainstTheRegistrysLiveFlows(t *testing.T) {
	src := newSrcRepo(t)
	src.write("access.yaml", accessFile(acmeKey))
	src.write("flows/README.md", []byte("# Flows\n"))
	state := filepath.Join(t.TempDir(), "state")
	dbPath := filepath.Join(state, "registry.db")
	newProc := func() (*registry.Registry, *gitsync.Syncer) {
		reg := openRegistry(t, dbPath)
		if _, err := reg.Load(context.Background()); err != nil { // as nexus serve does at start
			t.Fatal(err)
		}
		s, err := gitsync.New(gitsync.Config{Repo: src.dir, Dir: filepath.Join(state, "repo"), Registry: reg, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		return reg, s
	}
	regA, a := newProc()
	_, b := newProc()

	src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	c1 := src.commit("add x")
	if res, err := b.Sync(context.Background()); err != nil || !res.Applied() || res.Commit != c1 {
		t.Fatalf("B: %+v, %v", res, err)
	}
	src.write("flows/acme/x.md", append([]byte("Notes for on-call.\n"), flowtest.Marked("acme", "x", "1")...))
	c2 := src.commit("a line above the front matter")
	res, err := a.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied() {
		t.Errorf("A applied %s (changes %q): the broken file withdrew the live flow acme/x; want the commit refused", c2[:8], changeStrings(res.Changes))
	}
	if got := liveFlows(regA.Live()); len(got) != 1 {
		t.Errorf("live set after the commit: %q, want acme/x kept", got)
	}
}
