package gitsync_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// superseding is a source repo with the branches main and other, each
// holding acme/x described by its branch, and a state directory that
// servers following either branch share.
type superseding struct {
	t     *testing.T
	src   *srcRepo
	state string
}

func newSuperseding(t *testing.T) *superseding {
	src := newSrcRepo(t)
	src.write("access.yaml", accessFile(acmeKey))
	src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "on main"))
	src.gitCommit("main")
	src.git("checkout", "-q", "-b", "other")
	src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "on other"))
	src.gitCommit("other")
	src.git("checkout", "-q", "main")
	return &superseding{t: t, src: src, state: filepath.Join(t.TempDir(), "state")}
}

// server is one process of the shared state directory: its own registry
// handle and a Syncer following branch, started at started.
func (s *superseding) server(branch string, started time.Time, edit ...func(*gitsync.Config)) (*gitsync.Syncer, *registry.Registry) {
	s.t.Helper()
	reg := openRegistry(s.t, filepath.Join(s.state, "registry.db"))
	cfg := gitsync.Config{
		Repo: s.src.dir, Branch: branch, Dir: filepath.Join(s.state, "repo"), Registry: reg, Logger: discard(), Started: started,
	}
	for _, f := range edit {
		f(&cfg)
	}
	syncer, err := gitsync.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(syncer.Stop)
	return syncer, reg
}

// serverFiles lists the servers' lock files in the state directory.
func (s *superseding) serverFiles() []string {
	s.t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.state, "repo.servers"))
	if err != nil {
		s.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// source is how a server following branch of the source repo is named.
func (s *superseding) source(branch string) string {
	return s.src.dir + " (branch " + branch + ", folder flows)"
}

// served is the description of acme/x and the commit the registry holds.
func served(t *testing.T, reg *registry.Registry) (string, string) {
	t.Helper()
	if _, err := reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := reg.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lf, ok := reg.Live().Lookup("acme", "x")
	if !ok || lf.Flow == nil {
		t.Fatalf("acme/x is not live: %+v", lf)
	}
	return lf.Flow.Description(), st.Commit
}

// TestALaterServerOfAnotherSourceSupersedes: two servers following
// different branches into one state directory do not flap the live set at
// every poll: the one started later publishes, and the other publishes
// nothing (its round fails with a SupersededError naming both sources,
// before it touches the clone) until it is restarted, which makes it the
// later one. Servers following the same source go on sharing the work.
func TestALaterServerOfAnotherSourceSupersedes(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	mainHead := func() string { return s.src.git("rev-parse", "main")[:40] }
	otherHead := s.src.git("rev-parse", "other")[:40]

	old, reg := s.server("main", t0)
	if res, err := old.Sync(ctx); err != nil || !res.Applied() || res.Commit != mainHead() {
		t.Fatalf("the first server's Sync = %+v, %v; want main applied", res, err)
	}
	later := t0.Add(time.Minute)
	rolled, _ := s.server("other", later)
	if res, err := rolled.Sync(ctx); err != nil || !res.Applied() || res.Commit != otherHead {
		t.Fatalf("the later server's Sync = %+v, %v; want other applied", res, err)
	}

	// The first server is superseded: now, and after a commit to main.
	for _, round := range []string{"at once", "after a commit to main"} {
		if round != "at once" {
			s.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "main moved"))
			s.src.gitCommit("main moves")
		}
		res, err := old.Sync(ctx)
		var se *gitsync.SupersededError
		if !errors.As(err, &se) || res.Commit != "" {
			t.Fatalf("%s: the first server's Sync = %+v, %v; want a SupersededError", round, res, err)
		}
		want := &gitsync.SupersededError{Source: s.source("other"), Started: later, Own: s.source("main")}
		if diff := cmp.Diff(want, se); diff != "" {
			t.Errorf("%s: SupersededError (-want +got):\n%s", round, diff)
		}
		if desc, commit := served(t, reg); desc != "on other" || commit != otherHead {
			t.Errorf("%s: the registry serves %q of %s, want the other branch's %s", round, desc, commit, otherHead)
		}
	}
	_, err := old.Sync(ctx)
	wantMsg := "another server, started later (2026-08-09T14:03:11Z), publishes " + s.source("other") +
		" into this state directory: this one follows " + s.source("main") +
		" and publishes nothing while that one runs (stop one of them)"
	if err == nil || err.Error() != wantMsg {
		t.Errorf("the error:\n got %v\nwant %s", err, wantMsg)
	}
	// the clone was not fetched by the superseded server: main's new
	// commit is not in it
	if out := runGit(t, filepath.Join(s.state, "repo"), "rev-parse", "refs/remotes/origin/main")[:40]; out == mainHead() {
		t.Errorf("the superseded server fetched main's new head %s", out)
	}

	// Restarted, the first server is the later one: it publishes, and the
	// server following other is superseded in turn.
	restarted, _ := s.server("main", later.Add(time.Minute))
	if res, err := restarted.Sync(ctx); err != nil || !res.Applied() || res.Commit != mainHead() {
		t.Fatalf("the restarted server's Sync = %+v, %v; want main's new head applied", res, err)
	}
	var se *gitsync.SupersededError
	if _, err := rolled.Sync(ctx); !errors.As(err, &se) || se.Source != s.source("main") {
		t.Fatalf("the server following other after the restart: %v; want superseded by main", err)
	}
	if desc, commit := served(t, reg); desc != "main moved" || commit != mainHead() {
		t.Errorf("the registry serves %q of %s, want main's new head", desc, commit)
	}

	// A server following the same source, started later still, shares the
	// work: the one before it is not superseded.
	replica, _ := s.server("main", later.Add(2*time.Minute))
	if res, err := replica.Sync(ctx); err != nil || !res.Applied() {
		t.Fatalf("the replica's first Sync = %+v, %v", res, err)
	}
	s.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "main again"))
	c := s.src.gitCommit("main again")
	if res, err := restarted.Sync(ctx); err != nil || !res.Applied() || res.Commit != c {
		t.Fatalf("the restarted server's Sync after the replica = %+v, %v; want %s applied", res, err, c)
	}

	// Once the later servers have ended, the one they superseded publishes
	// again.
	if _, err := rolled.Sync(ctx); !errors.As(err, &se) {
		t.Fatalf("the server following other while main's run: %v; want superseded", err)
	}
	restarted.Stop()
	replica.Stop()
	if res, err := rolled.Sync(ctx); err != nil || !res.Applied() || res.Commit != otherHead {
		t.Fatalf("the server following other once main's have ended: %+v, %v; want other applied", res, err)
	}
	if desc, commit := served(t, reg); desc != "on other" || commit != otherHead {
		t.Errorf("the registry serves %q of %s, want the other branch's %s", desc, commit, otherHead)
	}
}

// TestServersLocksOfEndedServersAreRemoved: each Syncer holds a lock file
// in {state}/repo.servers while it lives; Stop removes its own, and a new
// Syncer removes those of servers that died without Stop (a free lock).
func TestServersLocksOfEndedServersAreRemoved(t *testing.T) {
	s := newSuperseding(t)
	dir := filepath.Join(s.state, "repo.servers")
	files := func() []string { return s.serverFiles() }
	a, _ := s.server("main", t0)
	b, _ := s.server("main", t0)
	if n := len(files()); n != 2 {
		t.Fatalf("%d files in repo.servers with two servers, want 2: %q", n, files())
	}
	a.Stop()
	a.Stop() // idempotent
	if n := len(files()); n != 1 {
		t.Fatalf("%d files in repo.servers after one Stop, want 1: %q", n, files())
	}
	live := files()[0] // b's
	// a server killed two minutes ago: its file stays, unlocked; and a
	// file just made, which a server starting now may not have locked yet
	for name, age := range map[string]time.Duration{"0123456789abcdef.lock": 2 * time.Minute, "00000000000000bb.lock": 0} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, time.Now().Add(-age), time.Now().Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	s.server("main", t0)
	after := files()
	if slices.Contains(after, "0123456789abcdef.lock") || !slices.Contains(after, "00000000000000bb.lock") ||
		!slices.Contains(after, live) || len(after) != 3 {
		t.Errorf("repo.servers after a new server = %q; want the dead server's file gone, the live one's (%s) and the new one kept", after, live)
	}
	b.Stop()
}

// TestSupersededIsLoggedOnce: the loop of a superseded server says so in
// one sync_superseded line, looks again every poll (without backoff), and
// every round is observed with the error (for sync_error in /status).
func TestSupersededIsLoggedOnce(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	var (
		mu      sync.Mutex
		errs    []error
		skipped int // rounds another process ran
		logs    jsonlogtest.Buffer
		poll    = 20 * time.Millisecond
		rounds  = 12
	)
	old, _ := s.server("main", t0, func(c *gitsync.Config) {
		c.Poll, c.MaxBackoff, c.Logger = poll, time.Hour, logs.Logger(slog.LevelDebug)
		c.Observe = func(res gitsync.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil && res.Skipped == "another process is syncing" {
				skipped++
				return
			}
			errs = append(errs, err)
		}
	})
	if _, err := old.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	rolled, _ := s.server("other", t0.Add(time.Minute))
	if _, err := rolled.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	old.Start()
	// rounds skipped while another process holds the sync lock (the later
	// server, fetching) do not make it say so again
	held := flock.New(filepath.Join(s.state, "repo.lock"))
	for range 3 {
		waitFor(t, 10*time.Second, "a superseded round", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs) > 0 && errs[len(errs)-1] != nil
		})
		if err := held.Lock(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		before := skipped
		mu.Unlock()
		waitFor(t, 10*time.Second, "a round skipped", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return skipped > before
		})
		held.Unlock()
	}
	// twelve rounds take a quarter of a second at the poll; a backoff
	// doubling from 20 ms would take 80 s
	waitFor(t, 10*time.Second, "twelve observed rounds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) >= rounds
	})
	old.Stop()
	mu.Lock()
	defer mu.Unlock()
	for i, err := range errs {
		var se *gitsync.SupersededError
		if !errors.As(err, &se) {
			t.Errorf("round %d: %v, want a SupersededError", i+1, err)
		}
	}
	lines := logs.Events(t, "sync_superseded")
	if len(lines) != 1 {
		t.Fatalf("%d sync_superseded lines, want 1:\n%s", len(lines), logs.String())
	}
	want := map[string]any{
		"level": "ERROR", "event": "sync_superseded", "source": s.source("main"), "other_source": s.source("other"),
		"other_started": "2026-08-09T14:03:11Z",
		"msg":           "another server publishes another source into this state directory: this one has stopped publishing",
	}
	got := lines[0]
	delete(got, "time")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sync_superseded (-want +got):\n%s", diff)
	}
	if n := len(logs.Events(t, "sync_error")); n != 0 {
		t.Errorf("%d sync_error lines beside sync_superseded", n)
	}
}

// TestASupersededServerRepublishesTheSameCommit: when the later server,
// which followed another folder of the same branch (so the registry's
// commit is this server's head too), has ended, the first one does not
// find its head "up to date": it publishes its own folder's set again.
func TestASupersededServerRepublishesTheSameCommit(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	s.src.write("flows2/acme/x.md", flowtest.Marked("acme", "x", "from flows2"))
	head := s.src.gitCommit("a second folder")

	first, reg := s.server("main", t0)
	if res, err := first.Sync(ctx); err != nil || !res.Applied() || res.Commit != head {
		t.Fatalf("the first server's Sync = %+v, %v", res, err)
	}
	canary, _ := s.server("main", t0.Add(time.Minute), func(c *gitsync.Config) { c.FlowsDir = "flows2" })
	if res, err := canary.Sync(ctx); err != nil || !res.Applied() || res.Commit != head {
		t.Fatalf("the later server's Sync = %+v, %v", res, err)
	}
	if desc, _ := served(t, reg); desc != "from flows2" {
		t.Fatalf("the registry serves %q, want the later server's folder", desc)
	}
	var se *gitsync.SupersededError
	if _, err := first.Sync(ctx); !errors.As(err, &se) {
		t.Fatalf("the first server's Sync beside the later one: %v, want superseded", err)
	}
	canary.Stop()
	if res, err := first.Sync(ctx); err != nil || !res.Applied() || res.Commit != head {
		t.Fatalf("the first server's Sync once the later one ended = %+v, %v; want %s applied again", res, err, head)
	}
	if desc, commit := served(t, reg); desc != "on main" || commit != head {
		t.Errorf("the registry serves %q of %s, want the first server's folder", desc, commit)
	}
	if res, err := first.Sync(ctx); err != nil || res.Skipped != "up to date" {
		t.Errorf("the first server's next Sync = %+v, %v; want up to date", res, err)
	}
}

// TestARefusedHeadOfTheLaterServerSupersedes: a later server whose head
// is refused takes the registry over all the same: the set it found keeps
// serving, its refusal stays reported (the first server, superseded, does
// not clear it at every round), and the first publishes nothing.
func TestARefusedHeadOfTheLaterServerSupersedes(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	s.src.git("checkout", "-q", "other")
	s.src.write("flows/acme/bad.md", []byte(badFlowFile))
	bad := s.src.gitCommit("broken")
	s.src.git("checkout", "-q", "main")

	first, reg := s.server("main", t0)
	if res, err := first.Sync(ctx); err != nil || !res.Applied() {
		t.Fatalf("the first server's Sync = %+v, %v", res, err)
	}
	later, _ := s.server("other", t0.Add(time.Minute))
	if res, err := later.Sync(ctx); err != nil || res.Commit != bad || len(res.Errors) != 1 {
		t.Fatalf("the later server's Sync = %+v, %v; want %s refused", res, err, bad)
	}
	for round := 1; round <= 2; round++ {
		var se *gitsync.SupersededError
		if _, err := first.Sync(ctx); !errors.As(err, &se) {
			t.Fatalf("round %d: the first server's Sync: %v, want superseded", round, err)
		}
		if res, err := later.Sync(ctx); err != nil || res.Skipped != "already refused" {
			t.Fatalf("round %d: the later server's Sync = %+v, %v; want already refused", round, res, err)
		}
		st, err := reg.Status(ctx)
		if err != nil || st.LastError == nil || st.LastError.Commit != bad {
			t.Fatalf("round %d: Status = %+v, %v; want the refusal of %s reported", round, st, err, bad)
		}
	}
	if desc, _ := served(t, reg); desc != "on main" {
		t.Errorf("the registry serves %q, want the set the later server found", desc)
	}
}

// TestServersStartingAtOnce: servers made at the same moment on one state
// directory all start (one's sweep may find another's new file before it
// is locked), each with its own lock, and leave no file once stopped.
func TestServersStartingAtOnce(t *testing.T) {
	s := newSuperseding(t)
	reg := openRegistry(t, filepath.Join(s.state, "registry.db"))
	for round := range 30 {
		syncers := make([]*gitsync.Syncer, 16)
		errs := make([]error, len(syncers))
		var wg sync.WaitGroup
		for i := range syncers {
			wg.Go(func() {
				syncers[i], errs[i] = gitsync.New(gitsync.Config{Repo: s.src.dir, Dir: filepath.Join(s.state, "repo"), Registry: reg, Logger: discard()})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: server %d: %v", round, i, err)
			}
		}
		if files := s.serverFiles(); len(files) != len(syncers) {
			t.Fatalf("round %d: %d files in repo.servers for %d servers", round, len(files), len(syncers))
		}
		for _, syncer := range syncers {
			syncer.Stop()
		}
		if files := s.serverFiles(); len(files) != 0 {
			t.Fatalf("round %d: %d files in repo.servers once every server stopped", round, len(files))
		}
	}
}

// TestServersStartWhileOthersReadTheirLocks: a superseded server reads
// the other servers' lock files (*.lock), locking each shared for a
// moment to tell a running server from a dead one, and may do so while a
// server is making its own: that server's lock must not fail for it (its
// file is locked and written before it takes its name). Here the reader
// holds each file 2 ms, as a loaded machine might.
func TestServersStartWhileOthersReadTheirLocks(t *testing.T) {
	s := newSuperseding(t)
	reg := openRegistry(t, filepath.Join(s.state, "registry.db"))
	first, err := gitsync.New(gitsync.Config{Repo: s.src.dir, Dir: filepath.Join(s.state, "repo"), Registry: reg, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	dir := filepath.Join(s.state, "repo.servers")
	done := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !strings.HasSuffix(e.Name(), ".lock") {
					continue // as a server reads them
				}
				l := flock.New(filepath.Join(dir, e.Name()), flock.SetFlag(os.O_RDONLY))
				if ok, _ := l.TryRLock(); ok {
					time.Sleep(2 * time.Millisecond)
					l.Unlock()
				}
			}
		}
	})
	for i := range 200 {
		syncer, err := gitsync.New(gitsync.Config{Repo: s.src.dir, Dir: filepath.Join(s.state, "repo"), Registry: reg, Logger: discard()})
		if err != nil {
			close(done)
			reader.Wait()
			t.Fatalf("server %d did not start while another read the locks: %v", i, err)
		}
		syncer.Stop()
	}
	close(done)
	reader.Wait()
}

// TestAnOlderReplicaKeepsTheLaterOnesClaim: of the servers following
// other, B0 started before the server following main (A) and B1 after it.
// B0 publishing or refusing a commit of other keeps B1's claim, which
// still runs: A stays superseded, rather than taking the registry back at
// every push to other (or for good, after a refused one).
func TestAnOlderReplicaKeepsTheLaterOnesClaim(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	// each server's first round runs before the next starts (a server
	// started later and running supersedes from its start)
	start := func(branch string, at time.Time) *gitsync.Syncer {
		p, _ := s.server(branch, at)
		if res, err := p.Sync(ctx); err != nil || !res.Applied() {
			t.Fatalf("the %s server started at %v: first Sync = %+v, %v", branch, at, res, err)
		}
		return p
	}
	b0, reg := s.server("other", t0)
	if _, err := b0.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	a := start("main", t0.Add(time.Minute))
	b1 := start("other", t0.Add(2*time.Minute))
	for _, push := range []struct {
		name string
		file string
		data []byte
	}{
		{"a good push to other", "flows/acme/x.md", flowtest.Marked("acme", "x", "other moved")},
		{"a refused push to other", "flows/acme/bad.md", []byte(badFlowFile)},
	} {
		s.src.git("checkout", "-q", "other")
		s.src.write(push.file, push.data)
		c := s.src.gitCommit(push.name)
		s.src.git("checkout", "-q", "main")
		if res, err := b0.Sync(ctx); err != nil || res.Commit != c {
			t.Fatalf("%s: B0's Sync = %+v, %v", push.name, res, err)
		}
		var se *gitsync.SupersededError
		if _, err := a.Sync(ctx); !errors.As(err, &se) {
			t.Fatalf("%s: A's Sync: %v, want superseded", push.name, err)
		}
		if res, err := b1.Sync(ctx); err != nil || res.Applied() || res.Commit != c {
			t.Fatalf("%s: B1's Sync = %+v, %v; want %s found as B0 left it", push.name, res, err, c)
		}
		if desc, _ := served(t, reg); desc != "other moved" {
			t.Errorf("%s: the registry serves %q, want other's", push.name, desc)
		}
	}
}

// TestAReplicaOfTheLaterSourceHoldsWhenTheLastPublisherEnds: when the
// server that published last ends while a replica of its source, started
// after the superseded server, still runs, the superseded server stays
// quiet: it publishing its own source until that replica's next round
// would flip the live set for a poll. Once the last replica has ended it
// publishes again.
func TestAReplicaOfTheLaterSourceHoldsWhenTheLastPublisherEnds(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	a, reg := s.server("main", t0)
	b1, _ := s.server("other", t0.Add(time.Minute))
	b2, _ := s.server("other", t0.Add(2*time.Minute))
	for i, p := range []*gitsync.Syncer{a, b1, b2} {
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("server %d's first Sync: %v", i, err)
		}
	}
	b2.Stop()
	var se *gitsync.SupersededError
	if _, err := a.Sync(ctx); !errors.As(err, &se) {
		t.Fatalf("A's Sync after B2 ended: %v, want superseded by B1", err)
	}
	if want := t0.Add(time.Minute); !se.Started.Equal(want) || se.Source != s.source("other") {
		t.Errorf("superseded by %s started %v, want %s started %v (B1)", se.Source, se.Started, s.source("other"), want)
	}
	if desc, _ := served(t, reg); desc != "on other" {
		t.Fatalf("the registry serves %q, want other's", desc)
	}
	if _, err := b1.Sync(ctx); err != nil {
		t.Fatalf("B1's Sync: %v", err)
	}
	if _, err := a.Sync(ctx); !errors.As(err, &se) {
		t.Fatalf("A's Sync after B1's round: %v, want superseded", err)
	}
	b1.Stop()
	if res, err := a.Sync(ctx); err != nil || !res.Applied() {
		t.Fatalf("A's Sync after every server of other ended = %+v, %v; want main applied", res, err)
	}
	if desc, _ := served(t, reg); desc != "on main" {
		t.Errorf("the registry serves %q, want main's", desc)
	}
}

// TestAnOlderReplicasPublicationDoesNotHandBack: a replica of the later
// source that started before the superseded server records its own start
// when it publishes (the later replica whose claim it kept has ended); the
// superseded server stays quiet all the same while another replica of
// that source, started after it, runs.
func TestAnOlderReplicasPublicationDoesNotHandBack(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	var reg *registry.Registry
	start := func(branch string, at time.Time) *gitsync.Syncer {
		p, r := s.server(branch, at)
		if reg == nil {
			reg = r
		}
		if res, err := p.Sync(ctx); err != nil || !res.Applied() {
			t.Fatalf("the %s server started at %v: first Sync = %+v, %v", branch, at, res, err)
		}
		return p
	}
	b1 := start("other", t0)
	a := start("main", t0.Add(time.Minute))
	start("other", t0.Add(2*time.Minute))
	b3 := start("other", t0.Add(3*time.Minute))
	b3.Stop()
	s.src.git("checkout", "-q", "other")
	s.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "other moved"))
	c := s.src.gitCommit("other moves")
	s.src.git("checkout", "-q", "main")
	if res, err := b1.Sync(ctx); err != nil || res.Commit != c {
		t.Fatalf("B1's Sync = %+v, %v; want %s", res, err, c)
	}
	var se *gitsync.SupersededError
	if _, err := a.Sync(ctx); !errors.As(err, &se) || !se.Started.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("A's Sync while B2 runs: %v, want superseded by B2", err)
	}
	if desc, _ := served(t, reg); desc != "other moved" {
		t.Errorf("the registry serves %q, want other's", desc)
	}
}

// TestAServerStartedAgainAfterStopHoldsItsLock: Stop lets the server's lock
// go (a server it superseded publishes again), and Start after Stop takes a
// new one before the loop runs, so the server it supersedes stays
// superseded; Stop lets it go again, and a Sync after Stop is refused.
// Started again, it ran without a lock: the earlier server, finding the
// publisher's lock gone, published its own source over it, and the two
// flapped.
func TestAServerStartedAgainAfterStopHoldsItsLock(t *testing.T) {
	ctx := context.Background()
	s := newSuperseding(t)
	old, reg := s.server("main", t0)
	if res, err := old.Sync(ctx); err != nil || !res.Applied() {
		t.Fatalf("the first server's Sync = %+v, %v", res, err)
	}
	rounds := make(chan error, 10)
	later, _ := s.server("other", t0.Add(time.Minute), func(c *gitsync.Config) {
		c.Poll = time.Hour
		c.Observe = func(_ gitsync.Result, err error) { rounds <- err }
	})
	later.Start()
	if err := <-rounds; err != nil {
		t.Fatalf("the later server's first round: %v", err)
	}
	later.Stop()
	later.Stop()
	if got := s.serverFiles(); len(got) != 1 {
		t.Fatalf("the servers' locks after Stop: %v, want the first server's alone", got)
	}
	later.Start()
	if err := <-rounds; err != nil {
		t.Fatalf("the later server's round after Start again: %v", err)
	}
	if got := s.serverFiles(); len(got) != 2 {
		t.Errorf("the servers' locks after Start again: %v, want both servers'", got)
	}
	var se *gitsync.SupersededError
	if res, err := old.Sync(ctx); !errors.As(err, &se) {
		t.Errorf("the first server's Sync while the later one runs again = %+v, %v; want a SupersededError", res, err)
	}
	if desc, _ := served(t, reg); desc != "on other" {
		t.Errorf("the registry serves %q, want the later server's %q", desc, "on other")
	}
	later.Stop()
	if _, err := later.Sync(ctx); err == nil || err.Error() != "gitsync: the Syncer is stopped (Start it again to sync)" {
		t.Errorf("a Sync after Stop: %v; want it refused", err)
	}
	if res, err := old.Sync(ctx); err != nil || !res.Applied() {
		t.Errorf("the first server's Sync once the later one stopped again = %+v, %v; want main applied", res, err)
	}
}
