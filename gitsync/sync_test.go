package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/registry"
)

// A flow committed is live after one Sync; changed, it is a new version;
// deleted, it is withdrawn; a commit already live is skipped.
func TestSyncPublishesChangesAndWithdraws(t *testing.T) {
	e := newEnv(t)

	c1 := e.src.commit("no flow yet")
	e.mustApply(c1)
	if st := e.status(); st.Flows != 0 || st.SyncedAt.IsZero() {
		t.Fatalf("after an empty flows/: Status = %+v", st)
	}

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c2 := e.src.commit("add acme/x")
	e.mustApply(c2, "published acme/x v1")
	lf, ok := e.reg.Live().Lookup("acme", "x")
	if !ok || lf.Version != 1 || lf.Commit != c2 || lf.SourcePath != "flows/acme/x.md" || lf.Flow == nil || lf.Flow.Description() != "one" {
		t.Fatalf("Lookup(acme, x) = %+v, %v; want v1 of commit %s from flows/acme/x.md", lf, ok, c2)
	}
	if st := e.status(); st.Flows != 1 || st.Commit != c2 {
		t.Fatalf("Status = %+v", st)
	}

	res := e.sync()
	if res.Skipped != "up to date" || res.Commit != c2 || res.Applied() || res.Changes != nil || res.Errors != nil {
		t.Fatalf("second Sync of %s = %+v, want skipped as up to date", c2, res)
	}

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	c3 := e.src.commit("change acme/x")
	e.mustApply(c3, "published acme/x v2")
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.Version != 2 || lf.Flow.Description() != "two" {
		t.Fatalf("after the change: %+v", lf)
	}

	// A commit that changes no flow is applied: the flows are unchanged,
	// the live set moves to the new commit (one generation), and the
	// compiled flow is the same one.
	gen := e.status().Generation
	before, _ := e.reg.Live().Lookup("acme", "x")
	e.src.write("flows/README.md", []byte("# Flows\n\nRewritten.\n"))
	c4 := e.src.commit("docs only")
	e.mustApply(c4, "unchanged acme/x v2")
	if st := e.status(); st.Generation != gen+1 {
		t.Errorf("a docs-only commit moved the generation %d → %d, want one step", gen, st.Generation)
	}
	if after, _ := e.reg.Live().Lookup("acme", "x"); e.reg.Live().Commit() != c4 || after.Flow != before.Flow {
		t.Errorf("after a docs-only commit the live set is at %q (want %q), flow reused: %v", e.reg.Live().Commit(), c4, after.Flow == before.Flow)
	}

	e.src.remove("flows/acme/x.md")
	c5 := e.src.commit("remove acme/x")
	e.mustApply(c5, "withdrawn acme/x v2")
	if _, ok := e.reg.Live().Lookup("acme", "x"); ok {
		t.Fatal("acme/x is still live after its file was deleted")
	}
	if st := e.status(); st.Flows != 0 {
		t.Fatalf("Status = %+v, want no flow", st)
	}

	// Versions are never reused: the old artifact comes back as v3.
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c6 := e.src.commit("restore acme/x")
	e.mustApply(c6, "published acme/x v3")

	applied := e.logs.Events(t, "sync_applied")
	if len(applied) != 6 || applied[5]["commit"] != c6 || applied[5]["published"] != 1.0 {
		t.Errorf("sync_applied events: %v", applied)
	}
}

// An invalid flow beside valid changes refuses the whole commit; the same
// commit is not compiled or recorded again; the next good commit is
// applied and clears the error.
func TestSyncRefusesAnInvalidCommitWhole(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.src.write("flows/acme/y.md", flowtest.Marked("acme", "y", "one"))
	good := e.src.commit("two flows")
	e.mustApply(good, "published acme/x v1", "published acme/y v1")
	live := liveFlows(e.reg.Live())
	before := e.status()

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two")) // a change
	e.src.remove("flows/acme/y.md")                                     // a withdrawal
	e.src.write("flows/globex/z.md", flowtest.Marked("globex", "z", "one"))
	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	bad := e.src.commit("changes and a broken flow")
	res := e.mustRefuse(badFlowError)
	if res.Commit != bad {
		t.Fatalf("Result.Commit = %s, want %s", res.Commit, bad)
	}
	st := e.status()
	if st.Commit != good || st.Generation != before.Generation || !st.SyncedAt.Equal(before.SyncedAt) {
		t.Errorf("Status after the refused commit = %+v, was %+v", st, before)
	}
	if got := liveFlows(e.reg.Live()); !slices.Equal(got, live) {
		t.Errorf("live set = %q, want %q", got, live)
	}
	failed := e.logs.Events(t, "sync_failed")
	if len(failed) != 1 || failed[0]["commit"] != bad || failed[0]["error_count"] != 1.0 ||
		!cmp.Equal(failed[0]["errors"], []any{badFlowError}) || failed[0]["msg"] != "commit refused: the last good commit keeps serving" {
		t.Errorf("sync_failed events: %v", failed)
	}

	// The same commit again: nothing is compiled or recorded (the clock
	// moves at every write, so a second record would move At).
	res = e.sync()
	if res.Skipped != "already refused" || res.Commit != bad || res.Errors != nil || res.Applied() {
		t.Fatalf("Sync of the refused commit again = %+v, want skipped as already refused", res)
	}
	again := e.status()
	if again.LastError == nil || !again.LastError.At.Equal(st.LastError.At) || !slices.Equal(again.LastError.Errors, []string{badFlowError}) {
		t.Errorf("LastError after the second Sync = %+v, was %+v: recorded twice", again.LastError, st.LastError)
	}
	if n := len(e.logs.Events(t, "sync_failed")); n != 1 {
		t.Errorf("%d sync_failed events, want 1", n)
	}

	e.src.write("flows/acme/bad.md", flowtest.Marked("acme", "bad", "fixed"))
	fixed := e.src.commit("fix acme/bad")
	e.mustApply(fixed,
		"published acme/bad v1",
		"published acme/x v2",
		"withdrawn acme/y v1",
		"published globex/z v1")
	if st := e.status(); st.LastError != nil || st.Commit != fixed || st.Flows != 3 || st.Generation != before.Generation+1 {
		t.Errorf("Status after the good commit = %+v", st)
	}
	want := []string{"acme/bad v1 fixed", "acme/x v2 two", "globex/z v1 one"}
	if got := liveFlows(e.reg.Live()); !slices.Equal(got, want) {
		t.Errorf("live set = %q, want %q", got, want)
	}
}

// Every error of every file is reported, each as FILE:LINE: message.
func TestSyncReportsEveryError(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/ok.md", flowtest.Marked("acme", "ok", "one"))
	e.mustApply(e.src.commit("one flow"))

	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	e.src.write("flows/acme/upper.md", flowtest.Marked("Acme", "upper", "x"))
	e.src.write("access.yaml", []byte("keys:\n  - id: acme-main\n    tenant: acme\n    sha256: abcde\n    flows: [\"*\"]\n"))
	e.src.commit("three broken files")
	e.mustRefuse(
		"access.yaml:4: sha256 must be the 64 hexadecimal characters of the key's SHA-256, not 5 characters",
		badFlowError,
		`flows/acme/upper.md:4: invalid name "Acme" for tenant (flow "upper"): character 'A' at position 1 is not allowed`,
	)
}

// Two files declaring one (tenant, flow) refuse the commit; the error
// names both files.
func TestSyncRefusesTwoFilesForOneFlow(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	good := e.src.commit("acme/x")
	e.mustApply(good, "published acme/x v1")

	e.src.write("flows/other/x.md", flowtest.Marked("acme", "x", "copy"))
	e.src.commit("a second file for acme/x")
	res := e.mustRefuse("flows/other/x.md:3: flow acme/x is also declared in flows/acme/x.md: one file per (tenant, flow)")
	if !strings.Contains(res.Errors[0], "flows/acme/x.md") || !strings.Contains(res.Errors[0], "flows/other/x.md") {
		t.Errorf("the error does not name both files: %q", res.Errors[0])
	}
}

// access.yaml is part of the commit: its errors refuse it, its absence
// refuses it, and its keys switch with the commit.
func TestSyncAccessKeys(t *testing.T) {
	e := newEnv(t)
	one := key{"acme-one", "acme", "nxk_test_one_aaaaaaaaaaaaaaaaaaaa"}
	two := key{"globex-two", "globex", "nxk_test_two_bbbbbbbbbbbbbbbbbbbb"}
	e.src.write("access.yaml", accessFile(one))
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("key one"), "published acme/x v1")
	keys := e.reg.Live().Access()
	if k, ok := keys.Lookup(one.secret); !ok || k.ID != one.id || k.Tenant != "acme" {
		t.Fatalf("Lookup(key one) = %+v, %v", k, ok)
	}
	if _, ok := keys.Lookup(two.secret); ok {
		t.Fatal("key two is live before its commit")
	}

	// Invalid access.yaml: refused, key one keeps working.
	e.src.write("access.yaml", []byte("keys:\n  - id: globex-two\n    tenant: globex\n    flows: [\"*\"]\n    burst: 5\n"))
	e.src.commit("broken access.yaml")
	e.mustRefuse(
		`access.yaml:2: key "globex-two" has no sha256: add the hex SHA-256 of the key (nexus key generate prints the entry)`,
		"access.yaml:5: burst without rate does nothing: add rate (requests per second), or remove burst",
	)
	if _, ok := e.reg.Live().Access().Lookup(one.secret); !ok {
		t.Fatal("key one stopped working after a refused commit")
	}

	// The keys switch with the commit, flows unchanged.
	e.src.write("access.yaml", accessFile(two))
	c := e.src.commit("key two")
	e.mustApply(c, "unchanged acme/x v1")
	keys = e.reg.Live().Access()
	if _, ok := keys.Lookup(one.secret); ok {
		t.Error("key one still works after the commit that removed it")
	}
	if k, ok := keys.Lookup(two.secret); !ok || k.ID != two.id || k.Tenant != "globex" || !k.AllFlows {
		t.Errorf("Lookup(key two) = %+v, %v", k, ok)
	}

	// No access.yaml: refused.
	e.src.remove("access.yaml")
	e.src.commit("no access.yaml")
	e.mustRefuse("access.yaml: the commit has no such file at the root of the repo")

	// An empty access.yaml is an error too (keys: [] is the way to say
	// nobody).
	e.src.write("access.yaml", nil)
	e.src.commit("empty access.yaml")
	e.mustRefuse("access.yaml:1: the file is empty: write keys: with a list of keys (keys: [] lets nobody call)")

	e.src.write("access.yaml", []byte("keys: []\n"))
	e.mustApply(e.src.commit("nobody"), "unchanged acme/x v1")
	if n := e.reg.Live().Access().Len(); n != 0 {
		t.Errorf("%d keys after keys: []", n)
	}
	if _, ok := e.reg.Live().Access().Lookup(two.secret); ok {
		t.Error("key two still works after keys: []")
	}
}

// missingFlowsDir is the error of a commit without the flows folder.
const missingFlowsDir = "flows/: the commit has no such folder (the flows folder, --flows-dir; to withdraw every flow, keep the folder with a file that is not a flow, such as flows/.gitkeep)"

// A commit without the flows folder is refused (it would withdraw every
// flow by accident); so is one without flows/ nor access.yaml. Every flow
// is withdrawn by a commit that keeps the folder with no flow in it, as
// the error says.
func TestSyncRefusesMissingFlowsFolder(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("acme/x"), "published acme/x v1")

	e.src.remove("flows")
	e.src.write("README.md", []byte("moved\n"))
	e.src.commit("flows/ gone")
	e.mustRefuse(missingFlowsDir)

	e.src.remove("access.yaml")
	e.src.commit("access.yaml gone too")
	e.mustRefuse(
		"access.yaml: the commit has no such file at the root of the repo",
		missingFlowsDir,
	)

	// flows as a file, not a folder.
	e.src.write("access.yaml", accessFile(acmeKey))
	e.src.write("flows", []byte("not a folder\n"))
	e.src.commit("flows is a file")
	e.mustRefuse("flows: is a file in the commit, not a folder (the flows folder, --flows-dir)")
	if _, ok := e.reg.Live().Lookup("acme", "x"); !ok {
		t.Fatal("acme/x is no longer live")
	}

	e.src.remove("flows")
	e.src.write("flows/.gitkeep", nil)
	e.mustApply(e.src.gitCommit("no flows"), "withdrawn acme/x v1") // go-git cannot stage a file becoming a folder
	if _, ok := e.reg.Live().Lookup("acme", "x"); ok {
		t.Error("acme/x is still live after a commit keeping flows/ with no flow")
	}
}

// The first commit the host ever sees can be refused: nothing is live,
// and the status says why.
func TestSyncRefusesTheFirstCommit(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	bad := e.src.commit("broken from the start")
	e.mustRefuse(badFlowError)
	st := e.status()
	if st.Commit != "" || st.Flows != 0 || st.LastError == nil || st.LastError.Commit != bad {
		t.Fatalf("Status = %+v", st)
	}
}

// FlowsDir names another folder; the repo's root cannot be it.
func TestSyncFlowsDir(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.FlowsDir = "config/flows/" })
	e.src.write("flows/acme/ignored.md", flowtest.Marked("acme", "ignored", "one"))
	e.src.write("config/flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("flows in config/flows"), "published acme/x v1")
	if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.SourcePath != "config/flows/acme/x.md" {
		t.Errorf("Lookup(acme, x) = %+v", lf)
	}

	e.src.write("config/flows/acme/bad.md", []byte(badFlowFile))
	e.src.commit("broken")
	e.mustRefuse("config/flows/acme/bad.md:6: queue_max_attempts must be at least 1, not 0")

	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	for _, dir := range []string{"/", ".", "./", "a/.."} {
		_, err := gitsync.New(gitsync.Config{Repo: e.src.dir, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg, FlowsDir: dir})
		if err == nil {
			t.Errorf("New accepted FlowsDir %q (the repo's root)", dir)
		}
	}
}

// A FlowsDir that goes back up with ".." and stays inside the repo names
// the folder it leads to, as "./flows" and "flows/" name flows: it was
// refused as leaving the repo.
func TestSyncFlowsDirGoingBackUp(t *testing.T) {
	for _, dir := range []string{"config/acme/../flows", "config/flows/acme/..", "./config/../config/flows/"} {
		t.Run(dir, func(t *testing.T) {
			if err := gitsync.CheckSource("https://git.example.com/x.git", "main", dir); err != nil {
				t.Errorf("CheckSource: %v", err)
			}
			e := newEnv(t, func(c *gitsync.Config) { c.FlowsDir = dir })
			e.src.write("flows/acme/ignored.md", flowtest.Marked("acme", "ignored", "one"))
			e.src.write("config/flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
			e.mustApply(e.src.commit("flows in config/flows"), "published acme/x v1")
			if lf, _ := e.reg.Live().Lookup("acme", "x"); lf == nil || lf.SourcePath != "config/flows/acme/x.md" {
				t.Errorf("Lookup(acme, x) = %+v", lf)
			}
		})
	}
}

// New needs Repo, Dir and Registry, and touches no network.
func TestNewChecksTheConfig(t *testing.T) {
	reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
	dir := filepath.Join(t.TempDir(), "state", "repo")
	for name, cfg := range map[string]gitsync.Config{
		"no Repo":     {Dir: dir, Registry: reg},
		"no Dir":      {Repo: "https://example.com/config.git", Registry: reg},
		"no Registry": {Repo: "https://example.com/config.git", Dir: dir},
	} {
		if _, err := gitsync.New(cfg); err == nil {
			t.Errorf("%s: New accepted the config", name)
		}
	}
	s, err := gitsync.New(gitsync.Config{Repo: "https://config.invalid/config.git", Dir: dir, Registry: reg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.Stop()
	s.Trigger()
	s.Trigger() // never blocks, even with nobody listening
	if _, err := s.Sync(canceled()); err == nil {
		t.Error("Sync with a canceled context succeeded")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Every *.md under the flows folder, at any depth and executable or not,
// is read; other files and non-flow Markdown are ignored.
func TestSyncReadsMarkdownAtAnyDepth(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/a/b/c/deep.md", flowtest.Marked("acme", "deep", "one"))
	e.src.write("flows/acme/LOUD.MD", flowtest.Marked("acme", "loud", "one"))
	e.src.write("flows/acme/run.md", flowtest.Marked("acme", "run", "one"))
	e.src.write("flows/acme/other.markdown", flowtest.Marked("acme", "other", "one"))
	e.src.write("flows/acme/notes.txt", []byte("---\nnot: [valid\n"))
	e.src.write("flows/acme/prose.md", []byte("# Notes\n\nNot a flow: no front matter.\n"))
	e.src.write("flows/acme/draft.md", []byte("---\ntitle: a draft\n---\n\nFront matter without flowmarkdown_version.\n"))
	if err := os.Chmod(filepath.Join(e.src.dir, "flows", "acme", "run.md"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := e.src.gitCommit("flows everywhere")
	if ls := e.src.git("ls-tree", "HEAD", "flows/acme/run.md"); !strings.HasPrefix(ls, "100755 ") {
		t.Fatalf("run.md is not executable in the commit: %s", ls)
	}
	e.mustApply(c, "published acme/deep v1", "published acme/loud v1", "published acme/run v1")
	want := []string{"flows/a/b/c/deep.md", "flows/acme/LOUD.MD", "flows/acme/run.md"}
	var got []string
	for _, lf := range e.reg.Live().Flows() {
		got = append(got, lf.SourcePath)
	}
	if !slices.Equal(got, want) {
		t.Errorf("source paths %q, want %q", got, want)
	}
}

// The clone is bare (nothing is checked out) and of full depth.
func TestSyncKeepsABareFullClone(t *testing.T) {
	e := newEnv(t)
	var commits []string
	for i := range 5 {
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "n"+strconv.Itoa(i)))
		commits = append(commits, e.src.commit("commit "+strconv.Itoa(i)))
	}
	e.mustApply(commits[4])
	dir := e.cfg.Dir
	if got := strings.TrimSpace(runGit(t, dir, "rev-parse", "--is-bare-repository")); got != "true" {
		t.Errorf("the clone is not bare: %s", got)
	}
	for _, name := range []string{"flows", "access.yaml", "shallow", "index"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("the clone holds %s", name)
		}
	}
	if got := strings.TrimSpace(runGit(t, dir, "rev-list", "--count", "refs/remotes/origin/main")); got != "5" {
		t.Errorf("the clone holds %s commits of main, want 5", got)
	}
	runGit(t, dir, "fsck", "--no-progress", "--no-dangling")
	if _, err := os.Stat(dir + ".lock"); err != nil {
		t.Errorf("no sync lock file beside the clone: %v", err)
	}
}

// TestSyncRenamesAFlowInPlace: changing `flow:` inside a file is a good
// commit (the file still reads as a flow file): the old flow is withdrawn
// and the new one published, not refused as a broken file.
func TestSyncRenamesAFlowInPlace(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	e.mustApply(e.src.commit("0"))
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "renamed", "0"))
	c := e.src.commit("rename x to renamed")
	e.mustApply(c, "published acme/renamed v1", "withdrawn acme/x v1")
}

// TestTriggerFloodIsPaced: POST /hooks/git needs no key without --secret,
// and each Trigger once started a fetch at once, backoff or not. A flood
// of triggers now starts at most one sync a second (and at least one).
func TestTriggerFloodIsPaced(t *testing.T) {
	var rounds atomic.Int64
	e := newEnv(t, func(c *gitsync.Config) {
		c.Poll = time.Hour
		c.Observe = func(gitsync.Result, error) { rounds.Add(1) }
	})
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.src.commit("one")
	e.s.Start()
	deadline := time.Now().Add(10 * time.Second)
	for rounds.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no first sync within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before, began := rounds.Load(), time.Now()
	for time.Since(began) < 1500*time.Millisecond {
		e.s.Trigger()
		time.Sleep(2 * time.Millisecond)
	}
	// a sync the flood started may still be running (on a loaded machine
	// it takes longer than the flood's last half second): it is waited
	// for, and Stop does not cut it short unobserved
	for deadline := time.Now().Add(10 * time.Second); rounds.Load() == before && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	e.s.Stop()
	// the syncs start at least a second apart, the first a second after
	// the one before the flood: at most one a second of the time until
	// they were counted, and one more that began as the flood ended
	took := time.Since(began)
	if n := rounds.Load() - before; n < 1 || n > int64(took/time.Second)+2 {
		t.Errorf("%d syncs in %v of triggers every 2 ms, want 1 to %d", n, took.Round(time.Millisecond), int64(took/time.Second)+2)
	}
}

// TestRefusalOfTheLiveCommitStaysReported: when a restart's first round
// refuses the live commit itself (a mistyped --flows-dir, or a stricter
// compiler), the refusal stays reported at the next rounds, as a refused
// head does (docs/decisions.md): the branch never moved. The next poll took
// the head's being the live commit for the branch having gone back to it,
// and cleared the refusal: /status said last_error null while the host did
// not serve what its settings said.
func TestRefusalOfTheLiveCommitStaysReported(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c := e.src.commit("one")
	e.mustApply(c, "published acme/x v1")

	// a restart with a mistyped --flows-dir: the live commit is refused
	cfg := e.cfg
	cfg.FlowsDir = "flow"
	s, err := gitsync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sync(context.Background())
	if err != nil || len(res.Errors) == 0 {
		t.Fatalf("first round after the restart: %+v, %v; want the head refused", res, err)
	}
	if st := e.status(); st.LastError == nil || st.LastError.Commit != c {
		t.Fatalf("after the refusal: LastError = %+v, want commit %s", st.LastError, c)
	}
	// the next poll: nothing has changed, the branch is where it was
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.status(); st.LastError == nil {
		t.Errorf("one poll later the refusal of %s is gone from the status (last_error null) although the branch never moved and the settings still refuse it", c[:8])
	}
}

// TestSyncedAtIsTheLastSuccessfulSync: synced_at (GET /status, nexus
// status) is the time of the last round that found the branch's head live,
// as server.md says ("time of last sync"), not of the last publication: a
// host polling a quiet repo moves it at every poll, so it tells such a
// host from one that cannot reach its repo. A round whose head is refused
// does not move it.
func TestSyncedAtIsTheLastSuccessfulSync(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("one"))
	published := e.status().SyncedAt
	if res := e.sync(); res.Skipped != "up to date" {
		t.Fatalf("second round: %+v, want up to date", res)
	}
	confirmed := e.status().SyncedAt
	if !confirmed.After(published) {
		t.Errorf("synced_at after an up-to-date round: %v, want later than the publication's %v", confirmed, published)
	}
	e.src.write("flows/acme/x.md", []byte("not a flow file at all, but named .md\n---\nflowmarkdown_version: \"0.1\"\nflow: x\n"))
	e.src.commit("broken")
	if res := e.sync(); len(res.Errors) == 0 {
		t.Fatalf("the broken commit: %+v, want it refused", res)
	}
	e.sync() // already refused
	if got := e.status().SyncedAt; !got.Equal(confirmed) {
		t.Errorf("synced_at after refused rounds: %v, want it kept at %v", got, confirmed)
	}
}

// TestRefusedFirstCommitSaysNothingIsDeployed: the sync_failed line of a
// first commit refused, with nothing deployed, says so; it said "the last
// good commit keeps serving", where none had ever served.
func TestRefusedFirstCommitSaysNothingIsDeployed(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/bad.md", []byte(badFlowFile))
	e.src.commit("a broken first flow")
	e.mustRefuse(badFlowError)
	if failed := e.logs.Events(t, "sync_failed"); len(failed) != 1 || failed[0]["msg"] != "commit refused: nothing is deployed yet" {
		t.Errorf("sync_failed events: %v", failed)
	}
}

// TestSyncAppliedSaysTheKeysChanged: a commit that changes access.yaml
// alone (a key revoked) publishes no flow; its sync_applied line says the
// keys changed and how many the commit holds. It said "published 0,
// unchanged N" and nothing of the keys.
func TestSyncAppliedSaysTheKeysChanged(t *testing.T) {
	e := newEnv(t)
	other := key{"acme-other", "acme", "nxk_test_acme_other_0123456789abcdef"}
	e.src.write("access.yaml", accessFile(acmeKey, other))
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("a flow and two keys"), "published acme/x v1")
	e.src.write("flows/README.md", []byte("# Flows\n"))
	e.mustApply(e.src.commit("docs only"), "unchanged acme/x v1")
	e.src.write("access.yaml", accessFile(acmeKey))
	e.mustApply(e.src.commit("revoke a key"), "unchanged acme/x v1")
	applied := e.logs.Events(t, "sync_applied")
	if len(applied) != 3 {
		t.Fatalf("sync_applied events: %v", applied)
	}
	for i, want := range []struct {
		keys    float64
		changed bool
	}{{2, true}, {2, false}, {1, true}} {
		if applied[i]["keys"] != want.keys || applied[i]["access_changed"] != want.changed {
			t.Errorf("sync_applied %d: keys %v, access_changed %v; want %v, %v", i, applied[i]["keys"], applied[i]["access_changed"], want.keys, want.changed)
		}
	}
}

// A start judges the head again and publishes it: a flow published by
// nexus deploy over a registry that follows git (a hotfix) is replaced by
// the head's at a server's next start, as nexus deploy's note says, though
// the head did not move.
func TestAStartPublishesTheHeadOverAHotfix(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("x")
	e.mustApply(c1, "published acme/x v1")
	hot, err := flow.Compile("/ops/hotfix/x.md", flowtest.Marked("acme", "x", "hotfix"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Publish(ctx, registry.Publication{Flows: []*flow.Flow{hot}}); err != nil {
		t.Fatal(err)
	}
	e.s.Stop()
	s2, err := gitsync.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if _, err := s2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	live, err := e.reg.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lf, _ := live.Lookup("acme", "x"); lf.SourcePath != "flows/acme/x.md" || lf.Version != 3 {
		t.Errorf("after a start on the unchanged head %s: acme/x v%d from %s, want v3 from flows/acme/x.md (the head's again)", c1[:7], lf.Version, lf.SourcePath)
	}
}
