package gitsync_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/gitsync"
)

// uploadPackSSH is an in-process sshd on 127.0.0.1 that accepts one
// client key and serves git-upload-pack (the local binary) for the bare
// repositories under root.
type uploadPackSSH struct {
	addr    string
	keyFile string
	root    string

	handshakes atomic.Int64 // connections that authenticated
	execs      atomic.Int64 // git-upload-pack runs that exited 0

	mu      sync.Mutex
	paths   []string // the repo paths asked for
	errs    []string // what went wrong on the server's side
	conns   []net.Conn
	closing bool
}

func (s *uploadPackSSH) fail(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *uploadPackSSH) serverErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

func (s *uploadPackSSH) askedPaths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// newUploadPackSSH starts the server, writes the client's private key and
// a known_hosts holding the server's host key, and points go-git at them
// (SSH_KNOWN_HOSTS, HOME).
func newUploadPackSSH(t *testing.T, root string) *uploadPackSSH {
	t.Helper()
	dir := t.TempDir()

	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clientSSHPub, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	s := &uploadPackSSH{root: root, keyFile: filepath.Join(dir, "id_ed25519")}
	if err := os.WriteFile(s.keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if md.User() == "git" && bytes.Equal(key.Marshal(), clientSSHPub.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("unknown key for %s", md.User())
		},
	}
	cfg.AddHostKey(hostSigner)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()

	knownHosts := filepath.Join(dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.addr)}, hostSigner.PublicKey()) + "\n"
	if err := os.WriteFile(knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_KNOWN_HOSTS", knownHosts)
	t.Setenv("HOME", dir)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.closing {
				s.mu.Unlock()
				c.Close()
				continue
			}
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serveConn(c, cfg)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		s.closing = true
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *uploadPackSSH) serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		s.fail("handshake: %v", err)
		return
	}
	defer sc.Close()
	s.handshakes.Add(1)
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			s.fail("accepting a session: %v", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveSession(ch, creqs)
		}()
	}
}

// parseUploadPack parses `git-upload-pack '/path'` (the path quoted as
// git's sq_quote_buf does).
func parseUploadPack(cmd string) (string, error) {
	rest, ok := strings.CutPrefix(cmd, "git-upload-pack ")
	if !ok {
		return "", fmt.Errorf("not git-upload-pack: %q", cmd)
	}
	var b strings.Builder
	for len(rest) > 0 {
		switch {
		case rest[0] == '\'':
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				return "", fmt.Errorf("unterminated quote in %q", cmd)
			}
			b.WriteString(rest[1 : 1+end])
			rest = rest[2+end:]
		case rest[0] == '\\' && len(rest) > 1:
			b.WriteByte(rest[1])
			rest = rest[2:]
		default:
			return "", fmt.Errorf("unquoted text in %q", cmd)
		}
	}
	return b.String(), nil
}

func (s *uploadPackSSH) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			if req.WantReply {
				req.Reply(false, nil)
			}
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			s.fail("exec payload: %v", err)
			req.Reply(false, nil)
			return
		}
		path, err := parseUploadPack(payload.Command)
		if err == nil && !strings.HasPrefix(path, s.root+string(filepath.Separator)) {
			err = fmt.Errorf("path %s outside %s", path, s.root)
		}
		if err != nil {
			s.fail("exec: %v", err)
			req.Reply(false, nil)
			return
		}
		s.mu.Lock()
		s.paths = append(s.paths, path)
		s.mu.Unlock()
		req.Reply(true, nil)

		cmd := exec.Command("git-upload-pack", path)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+s.root)
		cmd.Stdout = ch
		cmd.Stderr = ch.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			s.fail("stdin pipe: %v", err)
			return
		}
		if err := cmd.Start(); err != nil {
			s.fail("starting git-upload-pack: %v", err)
			return
		}
		go func() {
			io.Copy(stdin, ch) // ends when the channel closes or the process is gone
			stdin.Close()
		}()
		status := uint32(0)
		if err := cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = uint32(ee.ExitCode())
			} else {
				status = 255
			}
			s.fail("git-upload-pack %s: %v", path, err)
		} else {
			s.execs.Add(1)
		}
		ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return // the deferred Close ends the session
	}
}

// TestSyncOverSSH: a fetch over ssh:// succeeds with the fetch's watch in
// place (fetchconn.go routes go-git's ssh dial through the nexus-fetch
// "proxy"; the hung-server tests of fetchconn_test.go prove the routing):
// a first Sync clones and applies the branch's commit, a second fetches
// and applies the next one, and the server saw the connections and served
// git-upload-pack for them.
func TestSyncOverSSH(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		t.Fatalf("no git-upload-pack command (the gitsync tests need git): %v", err)
	}
	root := t.TempDir()
	srv := newUploadPackSSH(t, root)
	repoURL := "ssh://git@" + srv.addr + filepath.ToSlash(filepath.Join(root, "config.git"))
	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = repoURL
		c.SSHKeyFile = srv.keyFile
		c.FetchTimeout = 10 * time.Second // a guard; the fetch takes milliseconds
	})
	push := e.bareRemote(root)

	// a guard against a hang (FetchTimeout bounds silence already): the
	// watched connection closes when the round's context ends
	syncRound := func() (gitsync.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return e.s.Sync(ctx)
	}

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	c1 := e.src.commit("one")
	push()
	res, err := syncRound()
	if err != nil {
		t.Fatalf("first Sync over ssh through the watched dial: %v\nserver: handshakes %d, upload-packs %d, errors %q",
			err, srv.handshakes.Load(), srv.execs.Load(), srv.serverErrors())
	}
	if !res.Applied() || res.Commit != c1 {
		t.Fatalf("first Sync = %+v, want %s applied", res, c1[:8])
	}
	if got := changeStrings(res.Changes); len(got) != 1 || got[0] != "published acme/x v1" {
		t.Fatalf("first Sync changes %q, want [published acme/x v1]", got)
	}
	if st := e.status(); st.Commit != c1 || st.LastError != nil {
		t.Fatalf("after the first Sync: Status = %+v", st)
	}
	// the server counts an upload-pack once the process has exited, which
	// may come after the client has read all it needs
	waitFor(t, 10*time.Second, "the ssh server to count the first Sync's connection and upload-pack", func() bool {
		return srv.handshakes.Load() >= 1 && srv.execs.Load() >= 1
	})
	h1, x1 := srv.handshakes.Load(), srv.execs.Load()

	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "two"))
	c2 := e.src.commit("two")
	push()
	res, err = syncRound()
	if err != nil {
		t.Fatalf("second Sync over ssh through the watched dial: %v\nserver: handshakes %d, upload-packs %d, errors %q",
			err, srv.handshakes.Load(), srv.execs.Load(), srv.serverErrors())
	}
	if !res.Applied() || res.Commit != c2 {
		t.Fatalf("second Sync = %+v, want %s applied", res, c2[:8])
	}
	if got := changeStrings(res.Changes); len(got) != 1 || got[0] != "published acme/x v2" {
		t.Fatalf("second Sync changes %q, want [published acme/x v2]", got)
	}
	if st := e.status(); st.Commit != c2 || st.LastError != nil {
		t.Fatalf("after the second Sync: Status = %+v", st)
	}
	if got := liveFlows(e.reg.Live()); len(got) != 1 || !strings.HasPrefix(got[0], "acme/x v2 ") {
		t.Errorf("live flows after the second Sync: %q, want acme/x v2", got)
	}
	waitFor(t, 10*time.Second, "the ssh server to count the second Sync's new connection and upload-pack", func() bool {
		return srv.handshakes.Load() > h1 && srv.execs.Load() > x1
	})
	want := filepath.Join(root, "config.git")
	for _, p := range srv.askedPaths() {
		if p != want {
			t.Errorf("the server was asked for %s, want %s", p, want)
		}
	}
	if errs := srv.serverErrors(); len(errs) > 0 {
		t.Errorf("the ssh server reported: %q", errs)
	}
}

// TestCheckSSHKey: the key file nexus serve checks at start: a usable key
// passes; a missing file, a folder, a file that holds no key and a key
// under a passphrase (which nothing could type at a fetch) are each said
// in one line, without the path (the caller names the setting).
func TestCheckSSHKey(t *testing.T) {
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	plain, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	locked, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"a usable key", write("id_ed25519", pem.EncodeToMemory(plain)), ""},
		{"a missing file", filepath.Join(dir, "nothing"), "no such file or directory"},
		{"a folder", dir, "is a directory"},
		{"no key", write("notes", []byte("hello\n")), "not a private key: ssh: no key found"},
		{"a passphrase", write("id_locked", pem.EncodeToMemory(locked)), "the key is protected by a passphrase: give one without (nothing could type it)"},
	} {
		got := ""
		if err := gitsync.CheckSSHKey(c.path); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: CheckSSHKey = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSSHAgentConnectionsAreClosed: without a key file, a fetch over ssh
// signs with the ssh agent (SSH_AUTH_SOCK), and each round closes its
// connection to the agent when it ends. go-git's agent auth dropped the
// connection it dialled, so every poll left one open (a descriptor of the
// host's, and one of the agent's) until the garbage collector happened to
// close it.
func TestSSHAgentConnectionsAreClosed(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		t.Fatalf("no git-upload-pack command (the gitsync tests need git): %v", err)
	}
	root := t.TempDir()
	srv := newUploadPackSSH(t, root)
	pemBytes, err := os.ReadFile(srv.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ssh.ParseRawPrivateKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	sock, ln := agentListener(t)
	var open, served atomic.Int64 // connections to the agent open now, and in all
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			open.Add(1)
			served.Add(1)
			go func() {
				defer open.Add(-1)
				defer conn.Close()
				agent.ServeAgent(keyring, conn)
			}()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)

	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = "ssh://git@" + srv.addr + filepath.ToSlash(filepath.Join(root, "config.git"))
		c.FetchTimeout = 10 * time.Second
	})
	push := e.bareRemote(root)
	const rounds = 4
	for i := range rounds {
		e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", fmt.Sprint("round ", i)))
		e.src.commit(fmt.Sprint("round ", i))
		push()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := e.s.Sync(ctx)
		cancel()
		if err != nil || !res.Applied() {
			t.Fatalf("Sync %d over ssh with the agent = %+v, %v; server errors %q", i, res, err, srv.serverErrors())
		}
	}
	if served.Load() < rounds {
		t.Fatalf("the agent was asked %d times in %d rounds, want one a round at least", served.Load(), rounds)
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open.Load(); n > 0 {
		t.Errorf("%d connections to the ssh agent are still open after %d rounds have ended, want 0", n, rounds)
	}
}

// TestASilentSSHAgentIsTimedOut: an ssh agent that takes the connection
// and never answers (a forwarded agent whose session stalled) ends the
// round after FetchTimeout, as a silent server does, and releases the sync
// lock; Stop does not wait on it. The round waited on the agent for ever:
// nothing watched its connection, and go-git signs during the ssh
// handshake, which the fetch's context does not reach.
func TestASilentSSHAgentIsTimedOut(t *testing.T) {
	root := t.TempDir()
	srv := newUploadPackSSH(t, root)
	sock, ln := agentListener(t)
	var mu sync.Mutex
	var held []net.Conn // taken, never answered
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)

	e := newEnv(t, func(c *gitsync.Config) {
		c.Repo = "ssh://git@" + srv.addr + filepath.ToSlash(filepath.Join(root, "config.git"))
		c.FetchTimeout = 300 * time.Millisecond
	})
	push := e.bareRemote(root)
	e.src.write("flows/acme/x.md", flowtest.Marked("acme", "x", "one"))
	e.src.commit("one")
	push()

	done := make(chan error, 1)
	go func() {
		_, err := e.s.Sync(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
			t.Errorf("Sync with a silent ssh agent: %v, want the fetch's timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Sync with a silent ssh agent had not returned after 20 s")
	}
}

// agentListener listens on a unix socket for a test's ssh agent, in a
// short temporary folder (a socket's path is limited to 108 bytes, which
// t.TempDir's can pass); both go at the test's end.
func agentListener(t *testing.T) (sock string, ln net.Listener) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock = filepath.Join(dir, "agent.sock")
	ln, err = net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock, ln
}
