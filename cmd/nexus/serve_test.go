package main

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
