package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	xssh "golang.org/x/crypto/ssh"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// TestServeRefusesNetworkStateDirectory: when the state directory is on a
// network file system (queue.CheckLocal says so; a stand-in here, as the
// test machine has no NFS mount), nexus serve exits 1 with one line naming
// it, before it creates the registry or anything else in that folder.
func TestServeRefusesNetworkStateDirectory(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	var checked string
	defer func(f func(string) error) { checkStateDir = f }(checkStateDir)
	checkStateDir = func(dir string) error {
		checked = dir
		return errors.New("the state directory " + dir + " is on NFS, a network file system: put --db on a local disk")
	}
	var stdout, stderr bytes.Buffer
	code := runServe([]string{"--db", filepath.Join(state, "registry.db"), "--repo", t.TempDir(), "--log-format", "text"}, &stdout, &stderr)
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if checked != state {
		t.Errorf("checked %q, want the state directory %q", checked, state)
	}
	want := "nexus serve: the state directory " + state + " is on NFS, a network file system: put --db on a local disk\n"
	if !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("stderr ends %q, want %q", stderr.String(), want)
	}
	entries, err := os.ReadDir(state)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the refused state directory holds %v, want nothing", entries)
	}
}

// TestServeFlagsAndVariables: every flag of nexus serve whose usage names a
// variable (env NEXUS_…) takes its value from that variable, and the flag,
// when given, wins over it.
func TestServeFlagsAndVariables(t *testing.T) {
	_, fs, err := serveFlags()
	if err != nil {
		t.Fatal(err)
	}
	// a value each kind of flag accepts, other than its default
	fromEnv := map[string]string{"duration": "42s", "int": "42", "int64": "42", "string": "from-env"}
	fromFlag := map[string]string{"duration": "7s", "int": "7", "int64": "7", "string": "from-flag"}
	kind := func(f *flag.Flag) string {
		switch f.Value.(flag.Getter).Get().(type) {
		case time.Duration:
			return "duration"
		case int:
			return "int"
		case int64:
			return "int64"
		}
		return "string"
	}
	variable := regexp.MustCompile(`\(env (NEXUS_[A-Z_]+)\)`)
	named := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		m := variable.FindStringSubmatch(f.Usage)
		if m == nil {
			return
		}
		named[m[1]] = true
		t.Run(f.Name, func(t *testing.T) {
			k := kind(f)
			t.Setenv(m[1], fromEnv[k])
			_, fs, err := serveFlags()
			if err != nil {
				t.Fatalf("%s=%s: %v", m[1], fromEnv[k], err)
			}
			if got := fs.Lookup(f.Name).Value.String(); got != fromEnv[k] {
				t.Errorf("%s=%s: --%s is %q, want the variable's value", m[1], fromEnv[k], f.Name, got)
			}
			if err := fs.Parse([]string{"--" + f.Name, fromFlag[k]}); err != nil {
				t.Fatal(err)
			}
			if got := fs.Lookup(f.Name).Value.String(); got != fromFlag[k] {
				t.Errorf("%s=%s --%s %s: %q, want the flag's value", m[1], fromEnv[k], f.Name, fromFlag[k], got)
			}
		})
	})
	// the variables of server.md's table
	for _, v := range []string{"NEXUS_LISTEN", "NEXUS_DB", "NEXUS_REPO", "NEXUS_BRANCH", "NEXUS_FLOWS_DIR", "NEXUS_POLL",
		"NEXUS_SECRET", "NEXUS_ADMIN_KEY", "NEXUS_MAX_BODY_BYTES", "NEXUS_MAX_WORKERS", "NEXUS_LOG_FORMAT", "NEXUS_JOURNAL_RETENTION"} {
		if !named[v] {
			t.Errorf("no flag of nexus serve names %s", v)
		}
	}
}

// TestServeEnvironmentErrorsNameTheVariable: a variable nexus serve cannot
// read, or whose value it refuses, is named as the operator set it, with
// its value and what it takes, in one line, exit 2. A value that could not
// be read was reported as caarlos0/env's error (the Go field and type,
// strconv's words), and one out of range as a flag that was never given.
func TestServeEnvironmentErrorsNameTheVariable(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"NEXUS_POLL", "10", `nexus serve: NEXUS_POLL="10" is not a duration (such as 10s, 5m or 168h)`},
		{"NEXUS_MAX_WORKERS", "many", `nexus serve: NEXUS_MAX_WORKERS="many" is not a whole number`},
		{"NEXUS_MAX_WORKERS", "99999999999999999999", `nexus serve: NEXUS_MAX_WORKERS="99999999999999999999" is out of range`},
		{"NEXUS_JOURNAL_RETENTION", "7d", `nexus serve: NEXUS_JOURNAL_RETENTION="7d" is not a duration (such as 10s, 5m or 168h)`},
		{"NEXUS_MAX_BODY_BYTES", "1e6", `nexus serve: NEXUS_MAX_BODY_BYTES="1e6" is not a whole number`},
		{"NEXUS_POLL", "50ms", "nexus serve: NEXUS_POLL must be at least 100ms, not 50ms"},
		{"NEXUS_MAX_WORKERS", "0", "nexus serve: NEXUS_MAX_WORKERS must be at least 1, not 0"},
		{"NEXUS_MAX_RUNS", "-1", "nexus serve: NEXUS_MAX_RUNS must not be negative (0 sets no limit), not -1"},
		{"NEXUS_JOURNAL_MAX_ENTRIES", "-1", "nexus serve: NEXUS_JOURNAL_MAX_ENTRIES must not be negative"},
		{"NEXUS_JOURNAL_RETENTION", "1ns", "nexus serve: NEXUS_JOURNAL_RETENTION must be 0 (keep forever) or at least 1m, not 1ns"},
		{"NEXUS_JOURNAL_RETENTION", "-1h", "nexus serve: NEXUS_JOURNAL_RETENTION must be 0 (keep forever) or at least 1m, not -1h0m0s"},
		{"NEXUS_JOURNAL_MAX_ENTRIES", "1e7", `nexus serve: NEXUS_JOURNAL_MAX_ENTRIES="1e7" is not a whole number`},
		{"NEXUS_LOG_FORMAT", "JSON", `nexus serve: NEXUS_LOG_FORMAT must be json or text, not "JSON"`},
		{"NEXUS_LISTEN", "9090", `nexus serve: NEXUS_LISTEN "9090": not an address: give host:port, such as :9090 or 127.0.0.1:9090`},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			state := filepath.Join(t.TempDir(), "state")
			var stdout, stderr bytes.Buffer
			code := runServe([]string{"--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
			if got := firstLine(stderr.String()); code != exitUsage || got != c.want {
				t.Errorf("exit %d, %q; want exit 2 and %q", code, got, c.want)
			}
			if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused command made the state directory (%v)", err)
			}
		})
	}
	// a variable that cannot be read does not matter when its flag is
	// given (the flag wins), and the variables that can be read still are:
	// here NEXUS_POLL's value is refused, not NEXUS_MAX_WORKERS's
	t.Run("the flag wins over a variable that cannot be read", func(t *testing.T) {
		t.Setenv("NEXUS_MAX_WORKERS", "abc")
		t.Setenv("NEXUS_POLL", "50ms")
		var stdout, stderr bytes.Buffer
		code := runServe([]string{"--db", filepath.Join(t.TempDir(), "registry.db"), "--max-workers", "4"}, &stdout, &stderr)
		if want := "nexus serve: NEXUS_POLL must be at least 100ms, not 50ms"; code != exitUsage || firstLine(stderr.String()) != want {
			t.Errorf("exit %d, %q; want %q", code, firstLine(stderr.String()), want)
		}
	})
	// the flag given wins, and is named
	t.Setenv("NEXUS_POLL", "10s")
	var stdout, stderr bytes.Buffer
	code := runServe([]string{"--db", filepath.Join(t.TempDir(), "registry.db"), "--poll", "1ms"}, &stdout, &stderr)
	if want := "nexus serve: --poll must be at least 100ms, not 1ms"; code != exitUsage || firstLine(stderr.String()) != want {
		t.Errorf("--poll 1ms: exit %d, %q; want %q", code, firstLine(stderr.String()), want)
	}
}

// TestServeHelpWithABadVariable: nexus serve --help (and nexus help
// serve) print the usage whatever the environment holds: that is where an
// operator learns what a variable takes. A variable that could not be
// read made both fail without the usage.
func TestServeHelpWithABadVariable(t *testing.T) {
	t.Setenv("NEXUS_POLL", "soon")
	for _, args := range [][]string{{"serve", "--help"}, {"help", "serve"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitOK || !strings.HasPrefix(stdout.String(), "Usage: nexus serve") {
			t.Errorf("NEXUS_POLL=soon nexus %s: exit %d, stdout %q, stderr %q; want exit 0 and the usage",
				strings.Join(args, " "), code, firstLine(stdout.String()), firstLine(stderr.String()))
		}
	}
}

// TestServeRefusedConfigCreatesNothing: a configuration nexus serve
// refuses leaves nothing on disk: a --listen that is not an address or
// whose port is out of range, a --branch that is not a branch name, a
// --flows-dir that is the repo's root, a --repo URL that does not parse or
// whose scheme git does not speak here (a typo it once retried for ever),
// --dev with a branch of its own, are bad usage (exit 2), refused before
// the state directory is made; a port already in use is refused (exit 1)
// before it too. They all made the state directory and a registry.db. Each
// is said in one line; a port in use was said twice, as a fatal log line
// and then as the command's error.
func TestServeRefusedConfigCreatesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	repo := t.TempDir()
	key := writeSSHKey(t)
	for _, c := range []struct {
		args []string
		env  string // NAME=VALUE
		code int
		want string // the first line of stderr
	}{
		// a flag's bad value in the words a variable's gets
		{[]string{"--poll", "10"}, "", exitUsage, `nexus serve: --poll "10" is not a duration (such as 10s, 5m or 168h)`},
		{[]string{"--max-body-bytes", "1MB"}, "", exitUsage, `nexus serve: --max-body-bytes "1MB" is not a whole number`},
		{[]string{"--max-workers", "99999999999999999999"}, "", exitUsage, `nexus serve: --max-workers "99999999999999999999" is out of range`},
		{[]string{"--dev=maybe"}, "", exitUsage, `nexus serve: --dev "maybe" is not true or false`},
		{[]string{"--listen", "bogus"}, "", exitUsage, `nexus serve: --listen "bogus": not an address: give host:port, such as :9090 or 127.0.0.1:9090`},
		{[]string{"--listen", "127.0.0.1:99999"}, "", exitUsage, `nexus serve: --listen "127.0.0.1:99999": the port "99999" is not a port number (0 to 65535)`},
		// an empty port bound one at random, unsaid (the bad --flows-dir,
		// checked after, stops a host that would serve)
		{[]string{"--listen", "127.0.0.1:", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen "127.0.0.1:": the port is missing: give host:port, such as :9090 or 127.0.0.1:9090`},
		{[]string{"--listen", ":", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen ":": the port is missing: give host:port, such as :9090 or 127.0.0.1:9090`},
		{[]string{"--listen", "127.0.0.1: 9099", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen "127.0.0.1: 9099": the port " 9099" is not a port number (0 to 65535)`},
		{[]string{"--listen", ":http", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen ":http": the port "http" is not a port number (0 to 65535)`},
		// a host no resolver takes was a lookup error, exit 1, after
		// the state directory was made
		{[]string{"--listen", " :9099", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen " :9099": the host " " is not an IP address or a host name`},
		{[]string{"--listen", "local host:9099", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen "local host:9099": the host "local host" is not an IP address or a host name`},
		{[]string{"--listen", "127.0.0.1\n:9099", "--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --listen "127.0.0.1\n:9099": the host "127.0.0.1\n" is not an IP address or a host name`},
		// a control character was taken into the repo's path or URL,
		// or the flows folder's name, and failed at every poll (the bad
		// --branch, checked after, stops a host that would serve)
		{[]string{"--repo", repo + "\n", "--branch", "a..b"}, "", exitUsage, fmt.Sprintf("nexus serve: --repo %q holds a control character: give the config repo's git URL or path", repo+"\n")},
		{[]string{"--repo", "https://git.example.com/x\t.git", "--branch", "a..b"}, "", exitUsage, `nexus serve: --repo "https://git.example.com/x\t.git" holds a control character: give the config repo's git URL or path`},
		// a password is not shown
		{[]string{"--repo", "https://ops:s3cret@git.example.com/x.git\r", "--branch", "a..b"}, "", exitUsage, `nexus serve: --repo "https://redacted@git.example.com/x.git" holds a control character (not shown): give the config repo's git URL or path`},
		{[]string{"--branch", "a..b"}, "NEXUS_REPO=x\x1b[31m", exitUsage, `nexus serve: NEXUS_REPO "x\x1b[31m" holds a control character: give the config repo's git URL or path`},
		{[]string{"--repo", repo, "--flows-dir", "flows\n", "--branch", "a..b"}, "", exitUsage, `nexus serve: --flows-dir "flows\n" holds a control character: give a folder of the repo, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", "fl\x7fows", "--branch", "a..b"}, "", exitUsage, `nexus serve: --flows-dir "fl\x7fows" holds a control character: give a folder of the repo, such as flows`},
		// --dev's folder and the ssh key a repo is fetched with, the
		// same: taken, the line break was printed in the middle of the
		// refusal, or failed at every poll
		{[]string{"--dev", "--dev-flows", repo + "\n"}, "", exitUsage, fmt.Sprintf("nexus serve: --dev-flows %q holds a control character: give the config repo folder to serve (flows/ and access.yaml), such as flows-example", repo+"\n")},
		{[]string{"--dev", "--dev-flows", "flows\x1b[2J-example"}, "", exitUsage, `nexus serve: --dev-flows "flows\x1b[2J-example" holds a control character: give the config repo folder to serve (flows/ and access.yaml), such as flows-example`},
		{[]string{"--repo", "ssh://git@127.0.0.1:1/x.git", "--ssh-key", key + "\n"}, "", exitUsage, fmt.Sprintf("nexus serve: --ssh-key %q holds a control character: give the private key file for the ssh repo", key+"\n")},
		{[]string{"--repo", "git@127.0.0.1:x.git"}, "NEXUS_SSH_KEY=" + key + "\t", exitUsage, fmt.Sprintf("nexus serve: NEXUS_SSH_KEY %q holds a control character: give the private key file for the ssh repo", key+"\t")},
		// a file named registry.db and a line break was made
		{[]string{"--db", filepath.Join(repo, "registry.db") + "\n", "--log-format", "bogus"}, "", exitUsage, fmt.Sprintf("nexus serve: --db %q holds a control character: give the registry file (such as ~/.nexus/registry.db)", filepath.Join(repo, "registry.db")+"\n")},
		{[]string{"--repo", repo, "--branch", "a..b"}, "", exitUsage, `nexus serve: --branch: "a..b" is not a branch name`},
		{[]string{"--repo", repo}, "NEXUS_BRANCH=a..b", exitUsage, `nexus serve: NEXUS_BRANCH: "a..b" is not a branch name`},
		// no branch is called HEAD (git check-ref-format --branch): it was
		// fetched for ever as refs/heads/HEAD
		{[]string{"--repo", repo, "--branch", "HEAD"}, "", exitUsage, `nexus serve: --branch: "HEAD" is not a branch name`},
		// no commit holds a .git folder: the clone was blamed, and cloned anew at every round
		{[]string{"--repo", repo, "--flows-dir", "flows/.git"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "flows/.git" is in a .git folder, which no commit holds: give a folder of the repo, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", ".GIT"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder ".GIT" is in a .git folder, which no commit holds: give a folder of the repo, such as flows`},
		// it was read as srv/flows of the repo
		{[]string{"--repo", repo, "--flows-dir", "/srv/flows"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "/srv/flows" is an absolute path: give a folder of the repo, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", "/"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "/" is the repo's root: flows live in a folder of the repo, such as flows`},
		// it was read as etc/, and the commits were blamed for lacking it
		{[]string{"--repo", repo, "--flows-dir", "../etc"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "../etc" leaves the repo: give a folder inside it, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", "flows/../../etc"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "flows/../../etc" leaves the repo: give a folder inside it, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", "flows/.."}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "flows/.." is the repo's root: flows live in a folder of the repo, such as flows`},
		{[]string{"--repo", repo, "--flows-dir", "/srv/../flows"}, "", exitUsage, `nexus serve: --flows-dir: the flows folder "/srv/../flows" is an absolute path: give a folder of the repo, such as flows`},
		{[]string{"--repo", "https://ops:p%zz@git.example.com/x.git"}, "", exitUsage, "nexus serve: --repo: the repo URL does not parse; in a user name or password, write '#', '%', '/', '?' and '@' percent-encoded (%23, %25, %2F, %3F, %40)"},
		{[]string{"--repo", "htp://git.example.com/x.git"}, "", exitUsage, `nexus serve: --repo: the repo URL's scheme "htp" is not one git speaks here: give an https://, http://, ssh:// or file:// URL, or a local path`},
		// go-git dials git:// unwatched: a silent server held the sync lock for 30 minutes
		{[]string{"--repo", "git://127.0.0.1:47400/x.git"}, "", exitUsage, "nexus serve: --repo: a git:// repo is not followed: the git protocol has no authentication or encryption, and a silent server could not be timed out; give the repo's https:// or ssh:// URL"},
		{[]string{"--dev"}, "NEXUS_BRANCH=prod", exitUsage, "nexus serve: --dev serves --dev-flows through its own repo (branch main, folder flows): leave NEXUS_BRANCH out"},
		{[]string{"--dev", "--flows-dir", "config"}, "", exitUsage, "nexus serve: --dev serves --dev-flows through its own repo (branch main, folder flows): leave --flows-dir out"},
		{[]string{"--repo", "ssh://git@127.0.0.1:1/x.git", "--ssh-key", "/nonexistent/id_ed25519"}, "", exitUsage, `nexus serve: --ssh-key "/nonexistent/id_ed25519": no such file or directory`},
		{[]string{"--repo", "ssh://git@127.0.0.1:1/x.git", "--ssh-key", repo}, "", exitUsage, fmt.Sprintf("nexus serve: --ssh-key %q: is a directory", repo)},
		// every fetch would fail at every poll
		{[]string{"--repo", "git@127.0.0.1:x.git"}, "SSH_AUTH_SOCK=", exitUsage, "nexus serve: --repo is fetched over ssh, which needs a key: give --ssh-key, or run an ssh agent (SSH_AUTH_SOCK is not set)"},
		// the server's host key is checked at every fetch, against no file
		{[]string{"--repo", "ssh://git@127.0.0.1:1/x.git", "--ssh-key", key}, "SSH_KNOWN_HOSTS=/nonexistent/known_hosts", exitUsage,
			"nexus serve: --repo is fetched over ssh, which checks the server's host key against a known_hosts file: no file SSH_KNOWN_HOSTS lists (/nonexistent/known_hosts) exists (write one with ssh-keyscan HOST and point SSH_KNOWN_HOSTS at it)"},
		{[]string{"--listen", taken.Addr().String()}, "", exitError, "nexus serve: listen tcp " + taken.Addr().String() + ": bind: address already in use"},
	} {
		t.Run(strings.Join(c.args, " ")+" "+c.env, func(t *testing.T) {
			if name, value, ok := strings.Cut(c.env, "="); ok {
				t.Setenv(name, value)
			}
			state := filepath.Join(t.TempDir(), "state")
			args := append([]string{"--log-format", "text", "--listen", "127.0.0.1:0", "--db", filepath.Join(state, "registry.db")}, c.args...)
			var stdout, stderr bytes.Buffer
			code := runServe(args, &stdout, &stderr)
			got := stderr.String()
			if code != c.code || got != c.want+"\n" {
				t.Errorf("exit %d, %q; want exit %d and %q", code, got, c.code, c.want)
			}
			if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
				entries, _ := os.ReadDir(state)
				t.Errorf("the refused command left the state directory behind, holding %d entries", len(entries))
			}
		})
	}
}

// TestDevModeRefusedCreatesNothing: nexus serve --dev where --dev-flows
// is not a config repo folder (run outside the repository's root, or a
// mistyped --dev-flows) is bad usage, refused before ./.nexus-dev is made;
// it left an empty one in the operator's folder.
func TestDevModeRefusedCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code := runServe([]string{"--dev", "--dev-flows", "no-such-folder", "--log-format", "text", "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if want := `nexus serve: --dev-flows "no-such-folder" is not a config repo folder (flows/ and access.yaml): access.yaml: no such file or directory`; code != exitUsage || firstLine(stderr.String()) != want {
		t.Errorf("exit %d, %q; want exit 2 and %q", code, firstLine(stderr.String()), want)
	}
	if _, err := os.Stat(filepath.Join(dir, ".nexus-dev")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused command made ./.nexus-dev (%v)", err)
	}
}

// TestServeChecksOnlyTheSSHKeyItUses: an --ssh-key (or NEXUS_SSH_KEY set
// for every service) beside a repo that is not fetched over ssh is not
// read, so a missing file does not stop such a server; beside an ssh repo
// it is checked.
func TestServeChecksOnlyTheSSHKeyItUses(t *testing.T) {
	for _, c := range []struct {
		repo string
		want string
	}{
		{"https://git.example.com/ops/flows.git", ""},
		{t.TempDir(), ""},
		{"ssh://git@git.example.com/ops/flows.git", `--ssh-key "/nonexistent/id_ed25519": no such file or directory`},
		{"git@git.example.com:ops/flows.git", `--ssh-key "/nonexistent/id_ed25519": no such file or directory`},
	} {
		cfg := serveConfig{Listen: "127.0.0.1:0", Repo: c.repo, Branch: "main", FlowsDir: "flows", Poll: time.Second,
			LogFormat: "json", MaxBodyBytes: 1, MaxWorkers: 1, ShutdownGrace: time.Second, SSHKey: "/nonexistent/id_ed25519"}
		got := ""
		if err := checkServeConfig(cfg, nil, map[string]bool{"ssh-key": true}); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("repo %s with a missing key: %q, want %q", c.repo, got, c.want)
		}
	}
}

// TestUnusedSSHKeyIsSaid: an ssh key given for a repo that is not fetched
// over ssh is not checked (TestServeChecksOnlyTheSSHKeyItUses) but said at
// start, named as it was given.
func TestUnusedSSHKeyIsSaid(t *testing.T) {
	for _, c := range []struct {
		repo, key string
		set       bool
		env       string
		want      string
	}{
		{"https://git.example.com/ops/flows.git", "/keys/id", true, "", "--ssh-key"},
		{"https://git.example.com/ops/flows.git", "/keys/id", false, "/keys/id", "NEXUS_SSH_KEY"},
		{"/srv/flows", "/keys/id", true, "", "--ssh-key"},
		{"ssh://git@git.example.com/ops/flows.git", "/keys/id", true, "", ""},
		{"git@git.example.com:ops/flows.git", "/keys/id", true, "", ""},
		{"https://git.example.com/ops/flows.git", "", false, "", ""},
	} {
		t.Setenv("NEXUS_SSH_KEY", c.env)
		cfg := serveConfig{Repo: c.repo, SSHKey: c.key}
		if got := unusedSSHKey(cfg, map[string]bool{"ssh-key": c.set}); got != c.want {
			t.Errorf("repo %s, key %q (flag %v, variable %q): %q, want %q", c.repo, c.key, c.set, c.env, got, c.want)
		}
	}
}

// writeSSHKey writes a new ed25519 private key without a passphrase, in
// OpenSSH's format, and returns its path.
func writeSSHKey(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	block, err := xssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// TestHangup: SIGHUP begins the graceful shutdown when the log goes to a
// terminal (a person closed it), and is logged and ignored otherwise (a
// logrotate hook, a supervisor's reload); its default action ended the
// process on the spot. (The integration test TestHangupIsIgnored sends it
// to the binary.)
func TestHangup(t *testing.T) {
	for _, hupStops := range []bool{false, true} {
		var log jsonlogtest.Buffer
		ctx, stop := stopOnSignal(log.Logger(slog.LevelInfo), nopCloser{}, hupStops)
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if hupStops {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Errorf("with a terminal, SIGHUP did not begin the shutdown within 5 s")
			}
		} else {
			for deadline := time.Now().Add(5 * time.Second); len(log.Events(t, "signal_ignored")) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("without a terminal, SIGHUP was not logged as ignored within 5 s: %q", log.String())
				}
			}
			if ctx.Err() != nil {
				t.Errorf("without a terminal, SIGHUP began the shutdown")
			}
		}
		stop()
	}
}

// TestDevDefaults: --dev listens on the loopback unless --listen or
// NEXUS_LISTEN says otherwise (it listened on every interface, and the
// example key it accepts is printed in the README), and keeps its state
// in ./.nexus-dev unless --db or NEXUS_DB does; without --dev nothing
// changes.
func TestDevDefaults(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		env      map[string]string
		listen   string
		database string
	}{
		{"--dev", []string{"--dev"}, nil, "127.0.0.1:9090", filepath.Join(".nexus-dev", "registry.db")},
		{"--dev --listen", []string{"--dev", "--listen", ":9191"}, nil, ":9191", filepath.Join(".nexus-dev", "registry.db")},
		{"--dev NEXUS_LISTEN", []string{"--dev"}, map[string]string{"NEXUS_LISTEN": "0.0.0.0:9090"}, "0.0.0.0:9090", filepath.Join(".nexus-dev", "registry.db")},
		{"--dev --db", []string{"--dev", "--db", "/tmp/x/registry.db"}, nil, "127.0.0.1:9090", "/tmp/x/registry.db"},
		{"--dev NEXUS_DB", []string{"--dev"}, map[string]string{"NEXUS_DB": "/tmp/y/registry.db"}, "127.0.0.1:9090", "/tmp/y/registry.db"},
		{"without --dev", nil, nil, ":9090", "~/.nexus/registry.db"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []string{"NEXUS_LISTEN", "NEXUS_DB"} {
				t.Setenv(v, c.env[v])
			}
			cfg, fs, _ := serveFlags()
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			devDefaults(cfg, set)
			if cfg.Listen != c.listen || cfg.DB != c.database {
				t.Errorf("listen %q, db %q; want %q and %q", cfg.Listen, cfg.DB, c.listen, c.database)
			}
		})
	}
}

// TestFitWorkerBudget: the worker budget is lowered to what half the
// open-file limit holds at queue.FilesPerQueue files a queue, never below
// one, and left alone when the limit holds it.
func TestFitWorkerBudget(t *testing.T) {
	for _, tt := range []struct {
		budget  int
		limit   uint64
		want    int
		lowered bool
	}{
		{256, 1 << 20, 256, false},
		{256, 524288, 256, false},
		{256, 3072, 256, false}, // 1536 / 6 = 256
		{256, 3071, 255, true},
		{256, 1024, 85, true},
		{256, 256, 21, true},
		{10, 256, 10, false},
		{256, 11, 1, true},
		{256, 0, 1, true},
	} {
		got, lowered := fitWorkerBudget(tt.budget, tt.limit)
		if got != tt.want || lowered != tt.lowered {
			t.Errorf("fitWorkerBudget(%d, %d) = %d, %v; want %d, %v", tt.budget, tt.limit, got, lowered, tt.want, tt.lowered)
		}
	}
}

// TestSecondSignalWithAStalledLog: a second SIGTERM ends the process by
// that signal even when the log's destination has stopped taking lines
// (a stuck collector, a full pipe): the buffered log is written out if it
// can be, not waited for; and an ignored SIGHUP before it, whose warning
// the log cannot take, does not keep the SIGTERMs from being seen. The
// process stayed, blocked in the log, until it was killed with SIGKILL.
// (It runs in a child process, which the signal ends.)
func TestSecondSignalWithAStalledLog(t *testing.T) {
	if child := os.Getenv("NEXUS_SERVE_TEST_CHILD"); strings.HasPrefix(child, "stalled-log") {
		out := &lockedBuffer{gate: make(chan struct{})} // never opened
		lw := newLogWriter(out, 100, time.Millisecond)
		logger := slog.New(slog.NewTextHandler(lw, nil))
		ctx, _ := stopOnSignal(logger, lw, false)
		logger.Info("a first line, which the writing goroutine takes and stalls on")
		if child == "stalled-log hangup" {
			time.Sleep(50 * time.Millisecond) // the writing goroutine takes the first line
			logger.Info("a second line, which fills the buffer: the next line waits")
			syscall.Kill(os.Getpid(), syscall.SIGHUP)
			time.Sleep(100 * time.Millisecond)
		}
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
			os.Exit(4) // the first SIGTERM was not seen
		}
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(20 * time.Second)
		os.Exit(3)
	}
	for _, child := range []string{"stalled-log", "stalled-log hangup"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSecondSignalWithAStalledLog$", "-test.count=1")
		cmd.Env = append(os.Environ(), "NEXUS_SERVE_TEST_CHILD="+child)
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("%s: the second SIGTERM did not end the process by that signal: %v after %v", child, err, took)
		} else if took > 10*time.Second {
			t.Errorf("%s: the second SIGTERM ended the process after %v", child, took)
		}
	}
}

// TestDevModeSaysWhatToDoWithWhatItSkips: the warning for an entry the
// development mode does not serve says what to do for its kind: a link to
// a file, copy the file in; a link to a folder, copy the folder in; a
// special file (a FIFO, a socket), or a link leading nowhere or to the top
// of the folder, remove it or move it out. Every one of them said "copy
// the file in", even a link to a folder or a FIFO.
func TestDevModeSaysWhatToDoWithWhatItSkips(t *testing.T) {
	const lead = ": not served (a config repo holds regular files; "
	for _, tc := range []struct {
		name string
		make func(t *testing.T, src string) // makes src/flows/acme/e
		want string
	}{
		{"link to a file", func(t *testing.T, src string) {
			symlink(t, "x.md", filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to the file flows/acme/x.md" + lead + "copy the file in)"},
		{"link to a file outside", func(t *testing.T, src string) {
			out := filepath.Join(t.TempDir(), "y.md")
			if err := os.WriteFile(out, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			symlink(t, out, filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to OUT, outside the folder" + lead + "copy the file in)"},
		{"link to a folder", func(t *testing.T, src string) {
			if err := os.Mkdir(filepath.Join(src, "flows/other"), 0o755); err != nil {
				t.Fatal(err)
			}
			symlink(t, "../other", filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to the folder flows/other" + lead + "copy the folder in)"},
		{"link to a folder outside", func(t *testing.T, src string) {
			symlink(t, t.TempDir(), filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to OUT, outside the folder" + lead + "copy the folder in)"},
		{"link to the top of the folder", func(t *testing.T, src string) {
			symlink(t, "../..", filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to the top of the folder" + lead + "remove it)"},
		{"link to nothing", func(t *testing.T, src string) {
			symlink(t, "gone.md", filepath.Join(src, "flows/acme/e"))
		}, "flows/acme/e is a symbolic link to gone.md, which does not exist" + lead + "remove it, or copy in the file it was meant to lead to)"},
		{"FIFO", func(t *testing.T, src string) {
			if err := syscall.Mkfifo(filepath.Join(src, "flows/acme/e"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "flows/acme/e is a named pipe (FIFO), not a regular file" + lead + "remove it or move it out of the folder)"},
		{"socket", func(t *testing.T, src string) {
			l, err := net.Listen("unix", filepath.Join(src, "flows/acme/e"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, "flows/acme/e is a socket, not a regular file" + lead + "remove it or move it out of the folder)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// short: a socket's path has room for about 100 bytes
			src, err := os.MkdirTemp("", "nx")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(src) })
			if err := os.MkdirAll(filepath.Join(src, "flows", "acme"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"access.yaml", "flows/acme/x.md"} {
				if err := os.WriteFile(filepath.Join(src, name), []byte("keys: []\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tc.make(t, src)
			var got []string
			for _, ev := range devSkipped(t, src) {
				got = append(got, fmt.Sprint(ev["msg"]))
			}
			want := tc.want
			if strings.Contains(want, "OUT") {
				to, err := filepath.EvalSymlinks(filepath.Join(src, "flows/acme/e"))
				if err != nil {
					t.Fatal(err)
				}
				want = strings.Replace(want, "OUT", to, 1)
			}
			if diff := cmp.Diff([]string{want}, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// symlink makes the symbolic link link to target.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestDevModeNamesTheLinksItSkips: a symbolic link in the folder the
// development mode serves is not served, and one warning names each: to
// a flow inside the folder, outside it, or to nothing. They were skipped
// without a word, and a flow linked in was never served.
func TestDevModeNamesTheLinksItSkips(t *testing.T) {
	src, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "flows", "acme"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"access.yaml": src, "flows/acme/x.md": src, "y.md": outside} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("keys: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"flows/acme/inside.md":   "x.md",
		"flows/acme/outside.md":  filepath.Join(outside, "y.md"),
		"flows/acme/dangling.md": "gone.md",
	} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, ev := range devSkipped(t, src) {
		got = append(got, fmt.Sprint(ev["level"], " ", ev["msg"]))
	}
	const tail = ": not served (a config repo holds regular files; copy the file in)"
	want := []string{
		"WARN flows/acme/dangling.md is a symbolic link to gone.md, which does not exist: not served (a config repo holds regular files; remove it, or copy in the file it was meant to lead to)",
		"WARN flows/acme/inside.md is a symbolic link to the file flows/acme/x.md" + tail,
		"WARN flows/acme/outside.md is a symbolic link to " + filepath.Join(outside, "y.md") + ", outside the folder" + tail,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// devSkipped prepares the development mode's repo from the folder src and
// returns the dev_file_skipped events it logged.
func devSkipped(t *testing.T, src string) []map[string]any {
	t.Helper()
	var log jsonlogtest.Buffer
	_, _, unlock, err := prepareDev(src, t.TempDir(), log.Logger(slog.LevelInfo))
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	return log.Events(t, "dev_file_skipped")
}

// TestServeHelpSaysTheDefaultsOfATerminalAndOfDev: nexus serve --help
// says the defaults as they are taken, server.md's `json` (`text` for a
// terminal) and the README's :9090 (with --dev, 127.0.0.1:9090): it said
// (default "json") and (default ":9090") alone, where a log going to a
// terminal is text and --dev listens on the loopback.
func TestServeHelpSaysTheDefaultsOfATerminalAndOfDev(t *testing.T) {
	for _, v := range []string{"NEXUS_LOG_FORMAT", "NEXUS_LISTEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus serve --help: exit %d %s", code, stderr.String())
	}
	for flagName, want := range map[string]string{
		"log-format": "text when stderr is a terminal",
		"listen":     "127.0.0.1:9090 with --dev",
	} {
		m := regexp.MustCompile(`(?m)^  -` + flagName + ` \S+\n\s+(.*)$`).FindStringSubmatch(stdout.String())
		if m == nil || !strings.Contains(m[1], want) {
			t.Errorf("nexus serve --help, --%s: %q; want it to say %q", flagName, m, want)
		}
	}
}
