package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputToAFullDiskIsAnError: a command whose output cannot be written
// (stdout a full disk) says so in one line on stderr and exits 1; every
// command but nexus key generate exited 0 having printed nothing, and a
// script (nexus status > status.txt, nexus journal > audit.log) went on
// with an empty file.
func TestOutputToAFullDiskIsAnError(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/full (Linux's full disk) cannot be opened: %v", err)
	}
	defer full.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "state", "registry.db")
	deployOrders(t, db)
	src := filepath.Join(dir, "x.md")
	if err := os.WriteFile(src, []byte(minimalFlow("acme", "x")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		cmd  string
	}{
		{[]string{"status", "--db", db}, "nexus status"},
		{[]string{"journal", "--db", db}, "nexus journal"},
		{[]string{"dlq", "list", "--db", db}, "nexus dlq list"},
		{[]string{"validate", src}, "nexus validate"},
		{[]string{"deploy", "--db", db, src}, "nexus deploy"},
		{[]string{"version"}, "nexus version"},
		{[]string{"--version"}, "nexus"},
		{[]string{"help"}, "nexus"},
		{[]string{"status", "--help"}, "nexus status"},
		{[]string{"serve", "--help"}, "nexus serve"},
		{[]string{"serve", "--dev", "-h"}, "nexus serve"},
		{[]string{"help", "serve"}, "nexus serve"},
		{[]string{"help", "journal"}, "nexus journal"},
	} {
		var stderr bytes.Buffer
		code := run(c.args, full, &stderr)
		want := c.cmd + ": the output could not be written (write /dev/full: no space left on device)\n"
		if code != exitError || stderr.String() != want {
			t.Errorf("nexus %s >/dev/full: exit %d, stderr %q; want exit 1 and %q", strings.Join(c.args, " "), code, stderr.String(), want)
		}
	}
}

// TestArgumentsEchoedAreSafeOnATerminal: what a command prints back of its
// arguments (an unknown flag, a path, a --db) shows control characters and
// bytes that are not UTF-8 escaped, as Go writes them in a string
// ("\x1b"), never raw: ESC [ 2 J in a file name or a mistyped flag cleared
// the operator's terminal, and an OSC sequence could retitle it or worse.
// The lines are otherwise as before, and so are the exit codes, but for a
// --db holding one, now refused as bad usage, its value quoted.
func TestArgumentsEchoedAreSafeOnATerminal(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// a folder holding a flow file whose name holds ESC, with an error
	flows := filepath.Join(dir, "flows")
	if err := os.Mkdir(flows, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(minimalFlow("acme", "x"), "tenant: acme", "tenant: Acme!", 1)
	if err := os.WriteFile(filepath.Join(flows, "\x1b[2Jx.md"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	const hostile = "\x1b]0;owned\x07\x1b[2J\x9b31m\xff"
	const shown = `\x1b]0;owned\a\x1b[2J\x9b31m\xff`
	for _, c := range []struct {
		args       []string
		code       int
		want       string // in stdout or stderr, escaped
		wantStdout bool
	}{
		{[]string{"status", "--" + hostile}, exitUsage, "nexus status: unknown flag --" + shown + " (nexus status --help lists the flags)\n", false},
		{[]string{"serve", "--" + hostile}, exitUsage, "nexus serve: unknown flag --" + shown + " (nexus serve --help lists the flags)\n", false},
		{[]string{"serve", "--db", filepath.Join(dir, hostile) + "/"}, exitUsage, `--db "` + filepath.Join(dir, shown) + `/" holds a control character`, false},
		{[]string{"journal", "---" + hostile}, exitUsage, "nexus journal: bad flag syntax: ---" + shown + "\n", false},
		{[]string{"validate", filepath.Join(dir, hostile+".md")}, exitError, filepath.Join(dir, shown+".md") + ": no such file or directory\n", true},
		{[]string{"validate", flows}, exitError, `"` + filepath.Join(flows, `\x1b[2Jx.md`) + `": a name with a control`, true}, // refused, quoted, as before
		{[]string{"deploy", "--db", filepath.Join(dir, "r", "registry.db"), filepath.Join(dir, hostile+".md")}, exitError, filepath.Join(dir, shown+".md") + ": no such file or directory\n", true},
		{[]string{"status", "--db", filepath.Join(dir, hostile, "registry.db")}, exitUsage, `nexus status: --db "` + filepath.Join(dir, shown, "registry.db") + `" holds a control character`, false},
		{[]string{"dlq", "list", "--db", filepath.Join(file, hostile, "registry.db")}, exitUsage, `nexus dlq list: --db "` + filepath.Join(file, shown, "registry.db") + `" holds a control character`, false},
	} {
		code, stdout, stderr := runNexus(t, c.args...)
		got := stderr
		if c.wantStdout {
			got = stdout
		}
		if code != c.code || !strings.Contains(got, c.want) || strings.ContainsAny(stdout+stderr, "\x1b\x07") || strings.IndexByte(stdout+stderr, 0x9b) >= 0 || strings.IndexByte(stdout+stderr, 0xff) >= 0 {
			t.Errorf("nexus %q: exit %d\nstdout %q\nstderr %q\nwant exit %d and %q, no raw control character", c.args, code, stdout, stderr, c.code, c.want)
		}
	}
}

// TestReadOnlyCommandsRefuseADanglingLink: a --db that is a symbolic link
// is refused by every command (the registry and its -wal and -shm files
// are regular files of the state directory), a dangling one too; nexus
// status, journal and dlq list read a dangling one as an empty registry
// (exit 0, "flows: 0", "DLQ is empty") while a link to a registry, and
// deploy and serve on the dangling one, were refused.
func TestReadOnlyCommandsRefuseADanglingLink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "registry.db")
	if err := os.Symlink(filepath.Join(dir, "elsewhere", "registry.db"), link); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"status"}, {"journal"}, {"dlq", "list"}} {
		code, stdout, stderr := runNexus(t, append(cmd, "--db", link)...)
		want := "nexus " + strings.Join(cmd, " ") + ": registry " + link + ": registry.db is a symbolic link: the registry and its -wal and -shm files are regular files of the state directory\n"
		if code != exitError || stderr != want || stdout != "" {
			t.Errorf("nexus %s --db (a dangling link): exit %d\nstdout %q\nstderr %q\nwant exit 1 and %q", strings.Join(cmd, " "), code, stdout, stderr, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the folder holds %d entries, want the link alone", len(entries))
	}
}
