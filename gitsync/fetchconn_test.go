package gitsync_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// The fetch's watch over its connections (fetchconn.go).

// hungSSH is a TCP server that accepts connections and never answers (a
// hung sshd, a proxy that black-holes), with a key file and an empty
// known_hosts for the client; release closes its connections.
type hungSSH struct {
	url, keyFile string
	accepted     chan struct{}
	release      func()
}

func newHungSSH(t *testing.T) *hungSSH {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	h := &hungSSH{url: "ssh://git@" + ln.Addr().String() + "/config.git", accepted: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			} else {
				conns = append(conns, c) // held open, never answered
			}
			mu.Unlock()
			select {
			case h.accepted <- struct{}{}:
			default:
			}
		}
	}()
	h.release = func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	dir := t.TempDir()
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	h.keyFile = filepath.Join(dir, "id_rsa")
	if err := os.WriteFile(h.keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(pk)}), 0o600); err != nil {
		t.Fatal(err)
	}
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_KNOWN_HOSTS", knownHosts)
	t.Setenv("HOME", dir)
	return h
}

// TestSSHFetchThatNeverAnswersIsBounded: a fetch over ssh:// from a server
// that takes the connection and never speaks (a hung sshd, a proxy or load
// balancer that swallows traffic) ends after FetchTimeout as an
// unreachable repo. go-git's ssh handshake ignores the fetch's context: the
// round held the sync lock for ever (no process sharing the state
// directory synced again) and nexus serve never finished its shutdown.
func TestSSHFetchThatNeverAnswersIsBounded(t *testing.T) {
	h := newHungSSH(t)
	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = h.url
		c.SSHKeyFile = h.keyFile
		c.FetchTimeout = 300 * time.Millisecond
	})
	t.Cleanup(h.release) // runs before the Stop newEnv registered
	done := make(chan error, 1)
	go func() {
		_, err := e.s.Sync(context.Background())
		done <- err
	}()
	select {
	case <-h.accepted:
	case err := <-done:
		t.Fatalf("the fetch ended before reaching the server: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch never connected")
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("Sync against a silent ssh server succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Sync against an ssh server that never answers was still running 5 s after connecting, with FetchTimeout 300ms: the sync lock is held for ever")
	}
}

// TestGitProtocolIsRefused: a git:// repo is refused at New, naming the
// setting, whatever its spelling. go-git dials the git protocol with a
// plain net.Dial that nothing watches: a git:// server that took the
// connection and said nothing held the round, and the sync lock every
// process sharing the state directory needs, for 30 minutes whatever
// FetchTimeout said. The server here is such a one; nothing may dial it.
func TestGitProtocolIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dialed := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
			select {
			case dialed <- struct{}{}:
			default:
			}
		}
	}()
	for _, repo := range []string{
		"git://" + ln.Addr().String() + "/config.git",
		"GIT://" + ln.Addr().String() + "/config.git",
	} {
		t.Run(repo, func(t *testing.T) {
			e := newEnv(t) // for a registry and a state directory
			cfg := e.cfg
			cfg.Repo = repo
			cfg.Dir += "-git"
			cfg.FetchTimeout = 300 * time.Millisecond
			s, err := gitsync.New(cfg)
			if err == nil {
				s.Stop()
				t.Fatalf("New accepted the repo %s", repo)
			}
			var se *gitsync.SourceError
			if !errors.As(err, &se) || se.Field != "Repo" {
				t.Fatalf("New: %v, want a SourceError of Repo", err)
			}
			want := "a git:// repo is not followed: the git protocol has no authentication or encryption, and a silent server could not be timed out; give the repo's https:// or ssh:// URL"
			if diff := cmp.Diff(want, se.Error()); diff != "" {
				t.Errorf("the error (-want +got):\n%s", diff)
			}
		})
	}
	select {
	case <-dialed:
		t.Error("the git:// server was dialed")
	default:
	}
}

// TestStopEndsAHungSSHFetch: the same hung ssh server; Stop (nexus
// serve's shutdown) ends the round in progress, which it waited for, for
// ever.
func TestStopEndsAHungSSHFetch(t *testing.T) {
	h := newHungSSH(t)
	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = h.url
		c.SSHKeyFile = h.keyFile
		c.Poll = time.Hour
	})
	t.Cleanup(h.release)
	e.s.Start()
	select {
	case <-h.accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop never connected")
	}
	stopped := make(chan struct{})
	go func() {
		e.s.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Errorf("Stop did not return within 5 s while a fetch hung in the ssh handshake: nexus serve's shutdown would hang")
	}
}

// throttled writes a response in small pieces with a pause between them:
// a slow link that keeps delivering.
type throttled struct {
	http.ResponseWriter
	chunk int
	pause time.Duration
}

func (w throttled) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), w.chunk)
		m, err := w.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[k:]
		time.Sleep(w.pause)
	}
	return n, nil
}

// TestSlowButProgressingFetchIsNotCutOff: FetchTimeout bounds a fetch's
// silence, not its length: a remote that keeps sending (a large first
// clone over a slow link) is not cut off. It was a deadline on the whole
// fetch: such a transfer was cut off at every round, its partial pack
// thrown away, and the log said "no answer" of a server answering all
// along.
func TestSlowButProgressingFetchIsNotCutOff(t *testing.T) {
	root := t.TempDir()
	srv := smartHTTP(t, root, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				w = throttled{ResponseWriter: w, chunk: 1024, pause: 40 * time.Millisecond}
			}
			h.ServeHTTP(w, r)
		})
	})
	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = srv.URL + "/config.git"
		// 3 s: git packing the answer on a loaded machine can be silent
		// for over a second before the first byte (1 s failed under load)
		c.FetchTimeout = 3 * time.Second
	})
	push := e.bareRemote(root)
	// ~160 KiB that does not compress: the pack takes ~6.5 s at ~25
	// KiB/s, more than twice the FetchTimeout, a KiB arriving every 40 ms
	blob := make([]byte, 160<<10)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	e.src.write("flows/acme/attachment.bin", blob)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c := e.src.commit("one")
	push()
	res, err := e.s.Sync(context.Background())
	if err != nil {
		t.Fatalf("a fetch that kept receiving data for ~6.5 s was cut off by the 3 s FetchTimeout: %v", err)
	}
	if !res.Applied() || res.Commit != c {
		t.Errorf("Sync = %+v, want %s applied", res, c[:8])
	}
}
