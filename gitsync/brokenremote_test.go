package gitsync_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// cutWriter passes the first left bytes of an answer, then closes the
// connection under it: a server killed, or a proxy that drops the
// connection, in the middle of a fetch.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if len(b) > c.left {
		b = b[:c.left]
	}
	n, _ := c.ResponseWriter.Write(b)
	if c.left -= n; c.left <= 0 {
		c.ResponseWriter.(http.Flusher).Flush()
		if conn, _, err := c.ResponseWriter.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		panic(http.ErrAbortHandler)
	}
	return n, nil
}

// tempPacks lists the files go-git writes a pack into before it is whole
// (objects/pack/tmp_pack_*, tmp_obj_*) that the clone in dir holds.
func tempPacks(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	for _, pattern := range []string{"tmp_pack_*", "tmp_obj_*"} {
		m, err := filepath.Glob(filepath.Join(dir, "objects", "pack", pattern))
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, m...)
	}
	return found
}

// A fetch cut short in the middle of its pack (the server killed, the
// connection dropped) fails naming the repo, keeps the live set, and
// leaves no part of the pack in the clone: go-git leaves the file it wrote
// the pack into when the pack does not parse, so a remote that dropped
// every fetch of a large repo half way filled the disk a poll at a time.
// A part a process killed in a fetch left is removed by the next round.
func TestAFetchCutShortLeavesNoPartOfItsPack(t *testing.T) {
	root := t.TempDir()
	var cut atomic.Bool
	srv := smartHTTP(t, root, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cut.Load() && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
				w = &cutWriter{ResponseWriter: w, left: 64 << 10}
			}
			h.ServeHTTP(w, r)
		})
	})
	e := newEnv(t, func(c *gitsync.Config) { c.Repo = srv.URL + "/config.git" })
	push := e.bareRemote(root)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	first := e.src.gitCommit("one")
	push()
	e.mustApply(first, "published acme/x v1")

	// a commit whose pack is far larger than what the server sends of it
	big := make([]byte, 4<<20)
	rand.Read(big)
	e.src.write("vendor/blob.bin", big)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	second := e.src.gitCommit("two")
	push()
	cut.Store(true)
	for range 3 {
		res, err := e.s.Sync(context.Background())
		if err == nil || !strings.Contains(err.Error(), "fetching main from "+srv.URL+"/config.git") {
			t.Fatalf("Sync of a fetch cut short: %+v, %v; want an error naming the repo", res, err)
		}
		if got := tempPacks(t, e.cfg.Dir); len(got) > 0 {
			t.Fatalf("after a fetch cut short the clone holds %q", got)
		}
	}
	if got := liveFlows(e.reg.Live()); len(got) != 1 || got[0] != "acme/x v1 one" {
		t.Errorf("live set after the cut fetches: %q, want acme/x v1 one", got)
	}

	// what a process killed in a fetch leaves
	left := filepath.Join(e.cfg.Dir, "objects", "pack", "tmp_pack_4242")
	if err := os.WriteFile(left, big[:1<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	cut.Store(false)
	e.mustApply(second, "published acme/x v2")
	if got := tempPacks(t, e.cfg.Dir); len(got) > 0 {
		t.Errorf("after a round the clone holds %q", got)
	}
}

// A remote's error page (a 401, 403 or 404, whose body go-git puts in its
// error) is folded into one line of the error: its line breaks, tabs and
// control characters (a terminal's escape sequences) each a space, bytes
// that are not UTF-8 U+FFFD. The error reaches sync_unreachable, /status
// and the UI, and it held the page's lines and escapes as sent.
func TestARemotesErrorPageIsOneLine(t *testing.T) {
	const page = "Access denied\r\n\n\x1b[2J\x1b]0;pwned\x07\tsee \xffhttps://help.example/\u202e \u0085done\n"
	for _, tt := range []struct {
		status int
		want   string
	}{
		{http.StatusUnauthorized, "authentication required: Access denied [2J ]0;pwned see \ufffdhttps://help.example/ done"},
		{http.StatusForbidden, "authorization failed: Access denied [2J ]0;pwned see \ufffdhttps://help.example/ done"},
		{http.StatusNotFound, "repository not found: Access denied [2J ]0;pwned see \ufffdhttps://help.example/ done"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.status)
			io.WriteString(w, page)
		}))
		t.Cleanup(srv.Close)
		s, err := gitsync.New(gitsync.Config{Repo: srv.URL + "/config.git", Dir: filepath.Join(t.TempDir(), "repo"),
			Registry: openRegistry(t, filepath.Join(t.TempDir(), "registry.db")), Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Sync(context.Background())
		want := "fetching main from " + srv.URL + "/config.git: " + tt.want
		if err == nil {
			t.Fatalf("%d: Sync succeeded", tt.status)
		}
		if diff := cmp.Diff(want, err.Error()); diff != "" {
			t.Errorf("%d: the error (-want +got):\n%s", tt.status, diff)
		}
	}
}

// TestARemotesErrLineIsOneLine: a remote may refuse a fetch with an "ERR"
// packet in a 200 answer (git's protocol for a refusal it explains), whose
// text go-git puts in its error as sent, as it does with the first line an
// ssh server writes to its error stream. The fetch's error is one line all
// the same, whatever the remote put in it.
func TestARemotesErrLineIsOneLine(t *testing.T) {
	const text = "ERR Access denied\r\n\x1b[2J\x1b]0;pwned\x07\tsee \xffhelp\u202e done\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		fmt.Fprintf(w, "%04x%s", len(text)+4, text)
	}))
	t.Cleanup(srv.Close)
	s, err := gitsync.New(gitsync.Config{Repo: srv.URL + "/config.git", Dir: filepath.Join(t.TempDir(), "repo"),
		Registry: openRegistry(t, filepath.Join(t.TempDir(), "registry.db")), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Sync(context.Background())
	if err == nil {
		t.Fatal("Sync succeeded")
	}
	msg := err.Error()
	if strings.ContainsFunc(msg, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) || !utf8.ValidString(msg) {
		t.Errorf("the error holds control or format characters or bytes that are not UTF-8: %q", msg)
	}
	if !strings.Contains(msg, "Access denied [2J ]0;pwned see \ufffdhelp done") {
		t.Errorf("the error %q does not carry the remote's text, folded", msg)
	}
}
