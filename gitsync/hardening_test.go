package gitsync_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// A server (or proxy) that takes the connection and never answers costs
// one FetchTimeout: the round fails as unreachable and releases the sync
// lock, so another process can sync.
func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	e := newEnv(t, func(c *gitsync.Config) { c.Repo = srv.URL + "/config.git"; c.FetchTimeout = 300 * time.Millisecond })
	start := time.Now()
	_, err := e.s.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("Sync against a silent server: %v, want the fetch's timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Sync returned after %v", d)
	}
	// the lock is free again: a second process gets to fetch (and time out)
	s2, err := gitsync.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s2.Sync(context.Background()); res.Skipped != "" || err == nil {
		t.Errorf("a second process after the timeout: %+v %v, want its own fetch", res, err)
	}
}

// A password never reaches an error or the log: not from a URL that
// parses, and a URL that does not parse (an unescaped '#' or '%') is
// refused by New without being quoted.
func TestRepoPasswordsStaySecret(t *testing.T) {
	for _, repo := range []string{
		"https://deploy:s3cr3tPW@127.0.0.1:1/config.git",
		"ssh://deploy:s3cr3tPW@127.0.0.1:1/config.git",
	} {
		logs := &jsonlogtest.Buffer{}
		reg := openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))
		s, err := gitsync.New(gitsync.Config{Repo: repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: reg,
			Logger: logs.Logger(slog.LevelDebug), Poll: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, SSHKeyFile: "/nonexistent"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sync(context.Background()); err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: Sync error %v: want an error without the password", repo, err)
		}
		s.Start()
		// sync_unreachable for the https repo; sync_error for the ssh one,
		// whose key file cannot be read here
		waitFor(t, 5*time.Second, "a sync_unreachable or sync_error event", func() bool {
			return len(logs.Events(t, "sync_unreachable"))+len(logs.Events(t, "sync_error")) > 0
		})
		s.Stop()
		if strings.Contains(logs.String(), "s3cr3t") {
			t.Errorf("%s: the log holds the password:\n%s", repo, logs.String())
		}
		// an https URL's user information may be a token: none shows
		user := "deploy@127.0.0.1:1"
		if strings.HasPrefix(repo, "https:") {
			user = "redacted@127.0.0.1:1"
		}
		if got := gitsync.Redact(repo); strings.Contains(got, "s3cr3t") || !strings.Contains(got, user) {
			t.Errorf("Redact(%s) = %s, want the user shown as %s", repo, got, user)
		}
	}
	// a token given as the user name of an https URL
	for _, repo := range []string{"https://ghp_s3cr3tT0KEN@127.0.0.1:1/config.git", "http://ghp_s3cr3tT0KEN@127.0.0.1:1/config.git"} {
		logs := &jsonlogtest.Buffer{}
		s, err := gitsync.New(gitsync.Config{Repo: repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: openRegistry(t, filepath.Join(t.TempDir(), "registry.db")),
			Logger: logs.Logger(slog.LevelDebug), Poll: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sync(context.Background()); err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: Sync error %v: want an error without the token", repo, err)
		}
		s.Start()
		// sync_unreachable for the https repo; sync_error for the ssh one,
		// whose key file cannot be read here
		waitFor(t, 5*time.Second, "a sync_unreachable or sync_error event", func() bool {
			return len(logs.Events(t, "sync_unreachable"))+len(logs.Events(t, "sync_error")) > 0
		})
		s.Stop()
		if strings.Contains(logs.String(), "s3cr3t") {
			t.Errorf("%s: the log holds the token:\n%s", repo, logs.String())
		}
		if got, want := gitsync.Redact(repo), strings.Replace(repo, "ghp_s3cr3tT0KEN", "redacted", 1); got != want {
			t.Errorf("Redact(%s) = %s, want %s", repo, got, want)
		}
	}
	// a token in the query string (an access token some hosts take as a
	// parameter, a signed URL's signature): git cannot fetch with one (it
	// adds its own path after the URL), so New refuses it without quoting
	// it, and Redact shows it as redacted
	for _, tc := range []struct{ repo, redacted string }{
		{"https://127.0.0.1:1/config.git?private_token=glpat-s3cr3t", "https://127.0.0.1:1/config.git?redacted"},
		{"https://127.0.0.1:1/config.git?sig=s3cr3t&se=2027-01-01", "https://127.0.0.1:1/config.git?redacted"},
		{"ssh://git@127.0.0.1:1/config.git?token=s3cr3t", "ssh://git@127.0.0.1:1/config.git?redacted"},
		{"https://127.0.0.1:1/config.git#s3cr3t", "https://127.0.0.1:1/config.git#redacted"},
	} {
		_, err := gitsync.New(gitsync.Config{Repo: tc.repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "query string or a fragment") {
			t.Errorf("New(%s): %v, want a refusal of the query string or fragment that does not quote it", tc.repo, err)
		}
		if got := gitsync.Redact(tc.repo); got != tc.redacted {
			t.Errorf("Redact(%s) = %s, want %s", tc.repo, got, tc.redacted)
		}
	}
	// a token as the user name, beside a password (GitHub's TOKEN:x-oauth-basic
	// form) or an empty one: it once showed whole
	for _, repo := range []string{"https://ghp_s3cr3tT0KEN:x-oauth-basic@github.com/acme/flows.git", "https://ghp_s3cr3tT0KEN:@git.example.com/ops/flows.git"} {
		if got := gitsync.Redact(repo); strings.Contains(got, "s3cr3t") || !strings.Contains(got, "://redacted@") {
			t.Errorf("Redact(%s) = %s, want the user information shown as redacted", repo, got)
		}
	}
	if got, want := gitsync.Redact("ssh://git@127.0.0.1:1/config.git"), "ssh://git@127.0.0.1:1/config.git"; got != want {
		t.Errorf("Redact of an ssh URL = %s, want %s (its user name is no secret)", got, want)
	}
	for _, repo := range []string{"https://deploy:s3cr#tPW@127.0.0.1:1/config.git", "https://deploy:s3cr%tPW@127.0.0.1:1/config.git"} {
		_, err := gitsync.New(gitsync.Config{Repo: repo, Dir: filepath.Join(t.TempDir(), "repo"), Registry: openRegistry(t, filepath.Join(t.TempDir(), "registry.db"))})
		if err == nil || strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), "percent-encoded") {
			t.Errorf("New(%s): %v, want a refusal that does not quote the URL", repo, err)
		}
		if got := gitsync.Redact(repo); got != "https://(a URL that does not parse)" {
			t.Errorf("Redact(%s) = %s", repo, got)
		}
	}
	for _, repo := range []string{"/srv/config", "git@github.com:acme/config.git", "https://github.com/acme/config.git"} {
		if got := gitsync.Redact(repo); got != repo {
			t.Errorf("Redact(%s) = %s, want it unchanged", repo, got)
		}
	}
}

// The Markdown one commit makes the host read is bounded in all, not only
// per file: git compresses such files to almost nothing, so a small push
// could otherwise hold gigabytes. Past the bound the commit is refused
// before the rest is read, and the live set stays.
func TestMaxTotalBytes(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.MaxTotalBytes = 4 << 20 })
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	e.mustApply(e.src.commit("0"))

	big := bytes.Repeat([]byte("lorem ipsum dolor sit amet\n"), (1<<20-100)/27)
	var entries []object.TreeEntry
	for i := range 6 {
		entries = append(entries, treeEntry(fmt.Sprintf("notes-%d.md", i), filemode.Regular, e.src.storeBlob(append([]byte(fmt.Sprint(i)), big...))))
	}
	notes := e.src.storeTree(entries)
	flows, err := e.src.headTree().Tree("flows")
	if err != nil {
		t.Fatal(err)
	}
	root := e.src.storeTree(withEntry(e.src.headTree(), treeEntry("flows", filemode.Dir, e.src.storeTree(withEntry(flows, treeEntry("notes", filemode.Dir, notes))))))
	e.src.commitTree(root, "6 notes of 1 MiB")
	e.mustRefuse(fmt.Sprintf("flows/: more than %d bytes of Markdown in all (the limit of one commit)", 4<<20))
	if got := liveFlows(e.reg.Live()); len(got) != 1 || !strings.HasPrefix(got[0], "acme/x") {
		t.Errorf("live set after the refusal: %q", got)
	}
}

// A crash while go-git rewrites the clone's ref of the branch (in place)
// can leave it empty: the next round removes it and fetches it anew.
func TestEmptyRefInTheClone(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	e.mustApply(e.src.commit("0"))
	ref := filepath.Join(e.cfg.Dir, "refs", "remotes", "origin", "main")
	if err := os.WriteFile(ref, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "1"))
	c := e.src.commit("1")
	res, err := e.s.Sync(context.Background())
	if err != nil || res.Commit != c || !res.Applied() {
		t.Fatalf("Sync after the ref was emptied: %+v, %v; want %s applied", res, err, c[:8])
	}
	if evs := e.logs.Events(t, "sync_repaired"); len(evs) != 1 {
		t.Errorf("sync_repaired events: %v", evs)
	}
}

// A live flow's file that no longer reads as a flow file (a line above its
// front matter, a misspelt flowmarkdown_version, a Git LFS pointer) refuses
// the commit, saying why, rather than withdrawing the flow; deleting the
// file, or moving the flow to another file, still works.
func TestBrokenFrontMatterKeepsTheFlow(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	e.src.write("flows/acme/y.md", flowtest.Marked("acme", "y", "0"))
	e.mustApply(e.src.commit("0"))
	lost := func(why string) string {
		return "flows/acme/x.md: no longer a flow file (" + why + "), but it holds the live flow acme/x: fix the file, or delete or move it to withdraw the flow"
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"a line above the front matter", append([]byte("Notes for on-call.\n"), flowtest.Marked("acme", "x", "1")...),
			lost("its front matter does not open the file or lacks flowmarkdown_version")},
		{"a misspelt version key", bytes.Replace(flowtest.Marked("acme", "x", "1"), []byte("flowmarkdown_version"), []byte("flowmarkdown_verison"), 1),
			lost("its front matter has flowmarkdown_verison, not flowmarkdown_version")},
		// *.md added to .gitattributes' LFS patterns: the refusal says so
		// (it blamed the front matter of a file that has none)
		{"a Git LFS pointer", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1234\n"),
			lost("it is a Git LFS pointer: its content is kept outside the repo, and git sync reads the repo only (keep flow files out of LFS: see .gitattributes)")},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.src.write("flows/acme/x.md", c.data)
			e.src.commit(c.name)
			e.mustRefuse(c.want)
			if got := liveFlows(e.reg.Live()); len(got) != 2 {
				t.Errorf("live set after the refusal: %q", got)
			}
		})
	}
	// the flow moved to another file, the old one kept as notes: applied
	e.src.write("flows/acme/x.md", []byte("# Notes\n\nacme/x lives in x2.md now.\n"))
	e.src.write("flows/acme/x2.md", flowtest.Marked("acme", "x", "2"))
	e.mustApply(e.src.commit("moved"), "published acme/x v2", "unchanged acme/y v1")
	// a flow's file deleted: withdrawn, as before
	e.src.remove("flows/acme/y.md")
	e.mustApply(e.src.commit("y deleted"), "unchanged acme/x v2", "withdrawn acme/y v1")
}

// A new file whose front matter looks meant for a flow but is not a flow
// file's (a misspelt flowmarkdown_version) is skipped, as other Markdown
// is, and said: a sync_file_skipped line names it and why. A README is
// skipped without a word.
func TestLookalikeFlowFileIsSaid(t *testing.T) {
	e := newEnv(t)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "0"))
	e.src.write("flows/acme/README.md", []byte("---\ntitle: acme's flows\n---\n# Flows\n"))
	e.src.write("flows/acme/y.md", bytes.Replace(flowtest.Marked("acme", "y", "0"), []byte("flowmarkdown_version"), []byte("flowmarkdown_verison"), 1))
	c := e.src.commit("0")
	e.mustApply(c, "published acme/x v1")
	evs := e.logs.Events(t, "sync_file_skipped")
	if len(evs) != 1 || evs[0]["file"] != "flows/acme/y.md" || evs[0]["commit"] != c ||
		evs[0]["reason"] != "its front matter has flowmarkdown_verison, not flowmarkdown_version" {
		t.Errorf("sync_file_skipped lines: %v", evs)
	}
}

// A restart judges the branch's head again: a commit refused under one
// --flows-dir applies once the folder is fixed, and a new --flows-dir on
// an unchanged head takes effect, without a new push.
func TestRestartJudgesTheHeadAgain(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.FlowsDir = "flow" }) // a typo
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.src.write("flows-v2/acme/y.md", flowtest.Marked("acme", "y", "two"))
	c := e.src.commit("one")
	if res := e.sync(); res.Applied() || len(res.Errors) == 0 {
		t.Fatalf("with --flows-dir flow: %+v, want the commit refused", res)
	}

	restart := func(flowsDir string) gitsync.Result {
		t.Helper()
		cfg := e.cfg
		cfg.FlowsDir = flowsDir
		s, err := gitsync.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Sync(context.Background()) // then judged: skipped
		if err != nil || again.Skipped != "up to date" {
			t.Errorf("the second round after the restart: %+v, %v; want up to date", again, err)
		}
		return res
	}
	if res := restart("flows"); !res.Applied() || res.Commit != c {
		t.Errorf("after fixing --flows-dir: %+v; want %s applied", res, c[:8])
	}
	if got := liveFlows(e.reg.Live()); len(got) != 1 || !strings.HasPrefix(got[0], "acme/x") {
		t.Errorf("live set: %q", got)
	}
	if res := restart("flows-v2"); !res.Applied() {
		t.Errorf("after switching --flows-dir on an unchanged head: %+v", res)
	}
	if got := liveFlows(e.reg.Live()); len(got) != 1 || !strings.HasPrefix(got[0], "acme/y") {
		t.Errorf("live set after the switch: %q, want acme/y only", got)
	}
}

// A refused commit says every error at once: a live flow's file broken
// into other Markdown (lostFlows) in the same commit as a symbolic link
// under flows/ was refused for the link only, and the lost flow said a
// push later.
func TestRefusedCommitSaysTheLostFlowToo(t *testing.T) {
	e := newEnv(t)
	e.deployed() // acme/x live, from flows/acme/x.md
	const lost = "flows/acme/x.md: no longer a flow file (its front matter has flowmarkdown_verison, not flowmarkdown_version), " +
		"but it holds the live flow acme/x: fix the file, or delete or move it to withdraw the flow"
	const link = "flows/acme/link.md: a symbolic link: flows/ holds regular files only"

	e.src.write("flows/acme/x.md", bytes.Replace(flowtest.Marked("acme", "x", "two"), []byte("flowmarkdown_version"), []byte("flowmarkdown_verison"), 1))
	if err := os.Symlink("x.md", filepath.Join(e.src.dir, "flows", "acme", "link.md")); err != nil {
		t.Fatal(err)
	}
	e.src.gitCommit("a link, and x's version key misspelt")
	res := e.sync()
	got := strings.Join(res.Errors, "\n")
	if !strings.Contains(got, link) || !strings.Contains(got, lost) {
		t.Errorf("the refused commit's errors:\n%s\nwant both %q and %q (every error at once)", got, link, lost)
	}
	// the link gone: the lost flow alone
	os.Remove(filepath.Join(e.src.dir, "flows", "acme", "link.md"))
	e.src.gitCommit("the link gone")
	e.mustRefuse(lost)
}

// With --flows-dir config/flows, a commit whose config is a symbolic link
// is refused, saying so: go-git looked a tree up under the link's hash and
// failed as if the clone lacked it, and the clone was removed and cloned
// anew at every round.
func TestFlowsFolderBelowALinkIsRefused(t *testing.T) {
	e := newEnv(t, func(c *gitsync.Config) { c.FlowsDir = "config/flows" })
	e.src.write("config/flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.mustApply(e.src.commit("acme/x"))

	e.src.git("mv", "config", "real")
	if err := os.Symlink("real", filepath.Join(e.src.dir, "config")); err != nil {
		t.Fatal(err)
	}
	e.src.gitCommit("config is a link")
	e.mustRefuse("config: is a symbolic link in the commit, not a folder (on the path of the flows folder config/flows, --flows-dir)")
	if evs := e.logs.Events(t, "sync_repaired"); len(evs) != 0 {
		t.Errorf("the commit was taken for damage to the clone, and the repo cloned anew: %v", evs)
	}
}
