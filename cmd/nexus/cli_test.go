package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// Bad input and edge cases of the command line, in process.

// TestKeyGenerateRefusesANonNumberRate: --rate NaN or Inf is bad input
// (NaN passes both rate < 0 and rate == 0 unseen, which made an unlimited
// key and dropped --burst): one line naming the flag, exit 2.
func TestKeyGenerateRefusesANonNumberRate(t *testing.T) {
	for _, args := range [][]string{
		{"key", "generate", "--tenant", "acme", "--flows", "hello", "--rate", "NaN"},
		{"key", "generate", "--tenant", "acme", "--flows", "hello", "--rate", "NaN", "--burst", "5"},
		{"key", "generate", "--tenant", "acme", "--flows", "hello", "--rate", "+Inf"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := "nexus key generate: --rate must be a number of requests per second, 0 (unlimited) or more"
		if code != exitUsage || firstLine(stderr.String()) != want || stdout.Len() != 0 {
			t.Errorf("nexus %s: exit %d, first line %q, printed %q; want exit 2 and %q",
				strings.Join(args, " "), code, firstLine(stderr.String()), stdout.String(), want)
		}
	}
}

// TestValidateDoubleDash: "--" ends the flags wherever it stands, so a
// file whose name starts with '-' can be given after it (a leading "--",
// taken by flag.Parse itself, once let what follows be parsed as flags).
func TestValidateDoubleDash(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "flows-example", "flows", "acme", "hello.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.md"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(src), "flow: hello", "flow: hello-b", 1)
	if err := os.WriteFile(filepath.Join(dir, "-b.md"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, args := range [][]string{{"validate", "--", "a.md", "-b.md"}, {"validate", "a.md", "--", "-b.md"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitOK || stdout.String() != "ok: 2 flows in 2 files\n" {
			t.Errorf("nexus %s: exit %d\nstdout %q\nstderr %q\nwant exit 0 and \"ok: 2 flows in 2 files\"",
				strings.Join(args, " "), code, stdout.String(), firstLine(stderr.String()))
		}
	}
}

// TestReadOnlyCommandsLeaveAFileAlone: nexus status, nexus journal and
// nexus dlq list only read (dlq list listed "DLQ is empty" beside any file). Given a --db naming an existing file that is not a registry (a
// mistyped path: a lock file of the state directory, say), they once wrote
// a whole SQLite registry into it; now an empty file reads as an empty
// registry and another file is refused in one line, both left as they were.
func TestReadOnlyCommandsLeaveAFileAlone(t *testing.T) {
	for _, cmd := range []string{"status", "journal", "dlq list"} {
		t.Run(cmd, func(t *testing.T) {
			for _, content := range []string{"", "not a database\n"} {
				p := filepath.Join(t.TempDir(), "append.lock")
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				var stdout, stderr bytes.Buffer
				code := run(append(strings.Fields(cmd), "--db", p), &stdout, &stderr)
				if b, err := os.ReadFile(p); err != nil || string(b) != content {
					t.Errorf("nexus %s --db %s (exit %d) changed the file: %d bytes, want %q", cmd, p, code, len(b), content)
				}
				for _, extra := range []string{"-wal", "-shm"} {
					if _, err := os.Stat(p + extra); err == nil {
						t.Errorf("nexus %s created %s", cmd, p+extra)
					}
				}
				want := "nexus " + cmd + ": " + p + " is not a registry (not an SQLite database)"
				if content == "" && code != exitOK {
					t.Errorf("nexus %s --db (an empty file): exit %d, %q; want it read as an empty registry", cmd, code, stderr.String())
				}
				if content != "" && (code != exitError || stderr.String() != want+"\n") {
					t.Errorf("nexus %s --db (another file): exit %d, %q; want exit 1 and %q", cmd, code, stderr.String(), want)
				}
			}
		})
	}
}

// TestHelpListsFlags: "nexus dlq --help" and "nexus key --help" (and
// "nexus help dlq|key") list the flags under their "Flags:", as
// "nexus dlq list --help" does.
func TestHelpListsFlags(t *testing.T) {
	for _, args := range [][]string{{"dlq", "--help"}, {"key", "--help"}, {"help", "dlq"}, {"help", "key"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitOK || strings.HasSuffix(stdout.String(), "Flags:\n") || !strings.Contains(stdout.String(), "  -tenant tenant") {
			t.Errorf("nexus %s: exit %d, output ends with an empty \"Flags:\" section:\n%s", strings.Join(args, " "), code, stdout.String())
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// unmakeableDB is a registry path whose folder is a file: a serve that
// took its settings fails at once (exit 1) rather than serving until the
// test times out.
func unmakeableDB(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(file, "registry.db")
}

// TestServeRefusesABlankSecret: a --secret (or NEXUS_SECRET) with a blank
// part (",", " ", "a,,b") is refused at start, exit 2, rather than
// dropped: a value of blanks alone once left every door unsigned; so is a
// --secret given empty.
func TestServeRefusesABlankSecret(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string // NEXUS_SECRET
		want string
	}{
		{[]string{"--secret="}, "", "nexus serve: --secret is empty: give one or more secrets, comma-separated, or leave it out for unsigned doors"},
		{[]string{"--secret", ""}, "", "nexus serve: --secret is empty: give one or more secrets, comma-separated, or leave it out for unsigned doors"},
		// leaving it out would not do: the variable's secret would hold
		{[]string{"--secret", ""}, "env-secret", "nexus serve: --secret is empty: give one or more secrets, comma-separated (for unsigned doors, leave out both --secret and NEXUS_SECRET, which is set)"},
	} {
		t.Setenv("NEXUS_SECRET", c.env)
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"serve", "--db", unmakeableDB(t)}, c.args...), &stdout, &stderr)
		if code != exitUsage || firstLine(stderr.String()) != c.want {
			t.Errorf("%q, NEXUS_SECRET %q: exit %d, %q; want exit 2 and %q", c.args, c.env, code, firstLine(stderr.String()), c.want)
		}
	}
	t.Setenv("NEXUS_SECRET", "")
	for _, secret := range []string{",", " ", " , ", "s3cret,,other", "s3cret, "} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"serve", "--secret", secret, "--db", unmakeableDB(t)}, &stdout, &stderr)
		want := "nexus serve: --secret holds an empty secret: give one or more secrets, comma-separated, none blank"
		if code != exitUsage || firstLine(stderr.String()) != want {
			t.Errorf("--secret %q: exit %d, %q; want exit 2 and %q", secret, code, firstLine(stderr.String()), want)
		}
	}
}

// TestServeRefusesABlankAdminKey: an admin key of blanks only (an empty
// secret file, a newline) is refused, as a blank secret is, and so is an
// --admin-key given empty; they closed /status, the API and the UI
// without a word.
func TestServeRefusesABlankAdminKey(t *testing.T) {
	for _, c := range []struct{ flag, env, want string }{
		{"  ", "", "nexus serve: --admin-key is blank: give a key, or leave it out to close /status, the API and the UI"},
		{"", "\n", "nexus serve: NEXUS_ADMIN_KEY is blank: give a key, or leave it out to close /status, the API and the UI"},
		// --admin-key "$(cat file)" of an empty file
		{"=", "", "nexus serve: --admin-key is empty: give a key, or leave it out to close /status, the API and the UI"},
		{"=", "nxk_from_the_environment_0123456789", "nexus serve: --admin-key is empty: give a key (to close /status, the API and the UI, leave out both --admin-key and NEXUS_ADMIN_KEY, which is set)"},
	} {
		t.Setenv("NEXUS_ADMIN_KEY", c.env)
		args := []string{"serve", "--db", unmakeableDB(t)}
		switch c.flag {
		case "":
		case "=": // given, empty
			args = append(args, "--admin-key", "")
		default:
			args = append(args, "--admin-key", c.flag)
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitUsage || firstLine(stderr.String()) != c.want {
			t.Errorf("admin key %q / env %q: exit %d, %q; want exit 2 and %q", c.flag, c.env, code, firstLine(stderr.String()), c.want)
		}
	}
}

// TestServeRefusesGitSettingsWithoutARepo: --branch, --flows-dir and
// --ssh-key, or their variables, without --repo (or --dev) do nothing: refused as bad
// usage, naming the setting as it was given; the variables were accepted
// silently (beside a misspelt NEXUS_REPO, the host would not follow git).
func TestServeRefusesGitSettingsWithoutARepo(t *testing.T) {
	const tail = " too (without it the host serves what nexus deploy published)"
	for _, c := range []struct{ flag, value, env, want string }{
		{flag: "--branch", value: "staging", want: "--branch is a setting of the git sync: give --repo"},
		{flag: "--flows-dir", value: "config", want: "--flows-dir is a setting of the git sync: give --repo"},
		{env: "NEXUS_BRANCH=staging", want: "NEXUS_BRANCH is a setting of the git sync: give NEXUS_REPO"},
		{env: "NEXUS_FLOWS_DIR=config", want: "NEXUS_FLOWS_DIR is a setting of the git sync: give NEXUS_REPO"},
		{flag: "--flows-dir", value: "config", env: "NEXUS_BRANCH=staging", want: "NEXUS_BRANCH is a setting of the git sync: give NEXUS_REPO"},
		{flag: "--ssh-key", value: "/nonexistent", want: "--ssh-key is a setting of the git sync: give --repo"},
		{env: "NEXUS_SSH_KEY=/etc/nexus/deploy_key", want: "NEXUS_SSH_KEY is a setting of the git sync: give NEXUS_REPO"},
	} {
		t.Setenv("NEXUS_BRANCH", "")
		t.Setenv("NEXUS_FLOWS_DIR", "")
		t.Setenv("NEXUS_SSH_KEY", "")
		if name, value, ok := strings.Cut(c.env, "="); ok {
			t.Setenv(name, value)
		}
		state := t.TempDir()
		args := []string{"serve", "--db", filepath.Join(state, "registry.db")}
		if c.flag != "" {
			args = append(args, c.flag, c.value)
		}
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if want := "nexus serve: " + c.want + tail; code != exitUsage || firstLine(stderr.String()) != want {
			t.Errorf("%s %s without a repo: exit %d, %q; want exit 2 and %q", c.flag, c.env, code, firstLine(stderr.String()), want)
		}
		if entries, _ := os.ReadDir(state); len(entries) != 0 {
			t.Errorf("%s %s without a repo: the state directory holds %d entries, want none", c.flag, c.env, len(entries))
		}
	}
}

// deadLetterQueue opens the queue acme/orders of the state directory
// state and dead-letters its messages 1 to n in it; it returns the queue
// and its folder. The caller closes the queue.
func deadLetterQueue(t *testing.T, state string, n uint64) (*queue.Queue, string) {
	t.Helper()
	return deadLetterQueueOf(t, state, "orders", n)
}

// deadLetterQueueOf is deadLetterQueue of the queue acme/flow.
func deadLetterQueueOf(t *testing.T, state, flow string, n uint64) (*queue.Queue, string) {
	t.Helper()
	root := filepath.Join(state, "queues")
	q, _, err := queue.Open(root, "acme", flow, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= n; id++ {
		if err := q.MoveToDLQ(testDeadLetter(id)); err != nil {
			t.Fatal(err)
		}
	}
	return q, filepath.Join(root, "acme", flow)
}

// testDeadLetter is deadLetterQueue's dead letter id.
func testDeadLetter(id uint64) queue.DeadLetter {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	return queue.DeadLetter{ID: id, EnqueuedAt: at, FailedAt: at, Attempts: 5, LastError: "HTTP 503", Payload: []byte(`{"n":1}`)}
}

// deadLetterBytes is what dlq.log holds after testDeadLetter(1) to
// testDeadLetter(n) alone: its length is the offset of the next dead
// letter's frame.
func deadLetterBytes(t *testing.T, n uint64) []byte {
	t.Helper()
	q, dir := deadLetterQueue(t, t.TempDir(), n)
	q.Close()
	b, err := os.ReadFile(filepath.Join(dir, "dlq.log"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDLQListReportsDamage: a dead letter whose frame in dlq.log is
// damaged cannot be listed; nexus dlq list lists the others and says so on
// stderr, in one line naming the queue, the file and the offset, instead
// of leaving it out silently.
func TestDLQListReportsDamage(t *testing.T) {
	state := t.TempDir()
	q, dir := deadLetterQueue(t, state, 3)
	q.Close()
	dlq := filepath.Join(dir, "dlq.log")
	first := len(deadLetterBytes(t, 1))
	b, err := os.ReadFile(dlq)
	if err != nil {
		t.Fatal(err)
	}
	b[first+20] ^= 0xff // inside dead letter 2
	if err := os.WriteFile(dlq, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
	if code != exitOK || !strings.HasPrefix(stdout.String(), "DLQ: 2 pending message(s)\n") ||
		strings.Contains(stdout.String(), "id=2 ") {
		t.Errorf("exit %d, stdout:\n%s\nwant exit 0 and dead letters 1 and 3", code, stdout.String())
	}
	want := fmt.Sprintf("nexus dlq list: acme/orders: dlq.log: a damaged dead letter at offset %d (", first)
	if lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Errorf("stderr %q, want one line beginning %q", stderr.String(), want)
	}
}

// TestDLQListReportsADamagedMark: a replay or discard mark whose frame in
// dlq.log.acked is damaged no longer hides its dead letter; nexus dlq list
// lists it as pending and says why on stderr, in one line.
func TestDLQListReportsADamagedMark(t *testing.T) {
	state := t.TempDir()
	q, dir := deadLetterQueue(t, state, 2)
	if err := q.Mark(1, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	q.Close()
	acked := filepath.Join(dir, "dlq.log.acked")
	b, err := os.ReadFile(acked)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(acked, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
	if code != exitOK || !strings.HasPrefix(stdout.String(), "DLQ: 2 pending message(s)\n") {
		t.Errorf("exit %d, stdout:\n%s\nwant exit 0 and dead letters 1 and 2", code, stdout.String())
	}
	want := "nexus dlq list: acme/orders: dlq.log.acked: a damaged replay or discard mark at offset 0 ("
	if lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) ||
		!strings.Contains(lines[0], "the dead letter it marked is listed as pending") {
		t.Errorf("stderr %q, want one line beginning %q", stderr.String(), want)
	}
}

// TestDLQListEscapesControlCharacters: a dead letter's last_error holding
// a line break or another control character is printed on its one line,
// the text escaped as a Go string's body (\n, \x1b, and so \\ and \"); one
// without prints as it is, a backslash too. A line break printed as it
// was made a line of its own, which could pass for another dead letter.
func TestDLQListEscapesControlCharacters(t *testing.T) {
	state := t.TempDir()
	q, _ := deadLetterQueue(t, state, 0)
	for id, lastError := range map[uint64]string{
		1: "step 'forward': HTTP 503\n\n  id=9 tenant=acme flow=orders\r\x1b[2K \"C:\\x\" \u2028é\u0085\xff\t",
		2: `step 'check': C:\x "quoted" é`,
	} {
		d := testDeadLetter(id)
		d.LastError = lastError
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "list", "--db", filepath.Join(state, "registry.db")}, &stdout, &stderr)
	want := `DLQ: 2 pending message(s)

  id=1 tenant=acme flow=orders
    enqueued_at: 2026-11-30T09:00:00Z
    failed_at:   2026-11-30T09:00:00Z
    attempts:    5
    last_error:  step 'forward': HTTP 503\n\n  id=9 tenant=acme flow=orders\r\x1b[2K \"C:\\x\" \u2028é\u0085\xff\t

  id=2 tenant=acme flow=orders
    enqueued_at: 2026-11-30T09:00:00Z
    failed_at:   2026-11-30T09:00:00Z
    attempts:    5
    last_error:  step 'check': C:\x "quoted" é
`
	if code != exitOK || stderr.Len() != 0 {
		t.Errorf("exit %d, stderr %q; want exit 0 and nothing", code, stderr.String())
	}
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("nexus dlq list (-want +got):\n%s", diff)
	}
}

// TestValidateReadsAsGitSyncDoes: a folder's .md link (which could take a
// flow from outside it) is refused, as git sync refuses it; a file that is
// not a regular file (/dev/zero) or is over 1 MiB is refused without being
// read whole.
func TestValidateReadsAsGitSyncDoes(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "flows-example", "flows", "acme", "hello.md"))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.md")
	if err := os.WriteFile(outside, src, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "linked.md")); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big.md")
	if err := os.WriteFile(big, append(src, bytes.Repeat([]byte("x"), 1<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{dir}, filepath.Join(dir, "linked.md") + ": a symbolic link or special file: a folder of flows holds regular files only"},
		{[]string{"/dev/zero"}, "/dev/zero: not a regular file"},
		{[]string{big}, big + ": over the limit of 1048576 bytes"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"validate"}, c.args...), &stdout, &stderr)
		if code != exitError || firstLine(stdout.String()) != c.want {
			t.Errorf("nexus validate %v: exit %d, %q; want exit 1 and %q", c.args, code, stdout.String(), c.want)
		}
	}
}

// TestUsageNeverPrintsSecretsFromTheEnvironment: nexus serve takes its
// flags' defaults from the environment (NEXUS_ADMIN_KEY, NEXUS_SECRET,
// NEXUS_REPO), and every usage message (--help, an unknown flag, a bad
// value such as NEXUS_LOG_FORMAT=JSON or --poll 1ms) prints the flags with
// flag.PrintDefaults, "(default …)" included, on stderr, the host's log:
// it shows whether the admin key and the signing secrets are set, never
// their values, and a repo URL without its password.
func TestUsageNeverPrintsSecretsFromTheEnvironment(t *testing.T) {
	const (
		adminKey = "nxk_zz3adminkey_5c1e0f7a9b2d4e6f8a0b"
		secret   = "whsec_zz3_signing_secret_9f8e7d"
		password = "zz3-repo-password"
	)
	t.Setenv("NEXUS_ADMIN_KEY", adminKey)
	t.Setenv("NEXUS_SECRET", secret)
	t.Setenv("NEXUS_REPO", "https://ops:"+password+"@git.example.com/ops/flows.git")
	for name, args := range map[string][]string{
		"an unknown flag":   {"--bogus"},
		"a bad log format":  {"--log-format", "JSON"},
		"a poll too short":  {"--poll", "1ms"},
		"an extra argument": {"now"},
		"--help":            {"--help"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			runServe(args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			for what, s := range map[string]string{"the admin key": adminKey, "the signing secret": secret, "the repo password": password} {
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, s) {
						t.Errorf("the output prints %s: %s", what, strings.TrimSpace(line))
					}
				}
			}
		})
	}
}

// TestKeyGenerateEntryErrors: what the entry nexus key generate would
// print does not accept is said in terms of the flags, one line per
// error, without the internal entry's line numbers ("entry:5:").
func TestKeyGenerateEntryErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"key", "generate", "--tenant", "acme", "--flows", "a,a", "--rate", "5", "--id", "nxk_x"}, &stdout, &stderr)
	want := "nexus key generate: id holds nxk_ like an API key: ids appear in logs, so give the key a name such as acme-orders\n" +
		"nexus key generate: flows lists \"a\" twice\n"
	if code != exitUsage || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, stderr.String(), stdout.String(), want)
	}
}

// TestHelpOfAnUnknownCommand: nexus help bogus says the command is
// unknown and exits 2, as nexus bogus does; it printed the general usage
// and exited 0.
func TestHelpOfAnUnknownCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"help", "bogus"}, &stdout, &stderr)
	if want := "nexus: unknown command \"bogus\"; run 'nexus help' for the list\n"; code != exitUsage || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestHelpOfMoreThanOneCommand: nexus help takes one command name at most;
// nexus help status extra printed the help of status and ignored extra.
func TestHelpOfMoreThanOneCommand(t *testing.T) {
	for _, args := range [][]string{{"help", "status", "extra"}, {"help", "help", "dlq"}, {"--help", "dlq", "list"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := fmt.Sprintf("nexus: help takes one command at most, not %q; run 'nexus help' for the list\n", strings.Join(args[1:], " "))
		if code != exitUsage || stderr.String() != want || stdout.Len() != 0 {
			t.Errorf("nexus %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestHelpOfEveryCommand: nexus help NAME prints NAME's help on stdout and
// exits 0 for every command, help itself included (and its spellings
// -h, -help and --help), which prints the general usage; nexus help help
// said help was an unknown command.
func TestHelpOfEveryCommand(t *testing.T) {
	var general bytes.Buffer
	if code := run([]string{"help"}, &general, io.Discard); code != exitOK {
		t.Fatalf("nexus help: exit %d", code)
	}
	names := []string{"help", "-h", "-help", "--help"}
	for name := range commands() {
		names = append(names, name)
	}
	for _, name := range names {
		var stdout, stderr bytes.Buffer
		code := run([]string{"help", name}, &stdout, &stderr)
		if code != exitOK || stdout.Len() == 0 || stderr.Len() != 0 {
			t.Errorf("nexus help %s: exit %d, stdout %q, stderr %q; want exit 0 and the help on stdout", name, code, stdout.String(), stderr.String())
		}
		var own bytes.Buffer
		if name == "help" || strings.HasPrefix(name, "-") {
			own = general
		} else {
			run([]string{name, "--help"}, &own, io.Discard)
		}
		if stdout.String() != own.String() {
			t.Errorf("nexus help %s printed %q, want what nexus %s --help prints, %q", name, stdout.String(), name, own.String())
		}
	}
}

// TestEmptyDBIsBadUsage: --db "" (what --db "$DB" gives with DB unset),
// or a --db naming a folder, is bad usage for every command that takes
// it; the read-only commands read it as an empty registry and exited 0
// ("flows: 0", "DLQ is empty").
func TestEmptyDBIsBadUsage(t *testing.T) {
	for _, args := range [][]string{{"status", "--db", ""}, {"journal", "--db", ""}, {"dlq", "list", "--db", ""},
		{"deploy", "--db", "", "x.md"}, {"serve", "--db", ""}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := "nexus " + args[0] + ": --db is empty: give the registry file (such as ~/.nexus/registry.db)"
		if args[0] == "dlq" {
			want = "nexus dlq list: --db is empty: give the registry file (such as ~/.nexus/registry.db)"
		}
		if code != exitUsage || firstLine(stderr.String()) != want {
			t.Errorf("nexus %s: exit %d, %q; want exit 2 and %q", strings.Join(args, " "), code, firstLine(stderr.String()), want)
		}
	}
	// a folder (the state directory instead of the file in it): dlq list
	// read the queues beside it and said "DLQ is empty"
	dir := t.TempDir()
	for _, args := range [][]string{{"dlq", "list", "--db", dir}, {"status", "--db", dir}, {"journal", "--db", dir}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := "--db " + dir + " is a directory: give the registry file, such as " + filepath.Join(dir, "registry.db")
		if code != exitUsage || !strings.HasSuffix(firstLine(stderr.String()), want) || stdout.Len() != 0 {
			t.Errorf("nexus %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, stdout.String(), firstLine(stderr.String()), want)
		}
	}
}

// TestKeyGenerateSaysWhenTheKeyIsLost: a key is shown once and stored
// nowhere, so when it cannot be written out (stdout a full disk) nexus key
// generate says so and exits 1; it exited 0, and a script went on without
// the key.
func TestKeyGenerateSaysWhenTheKeyIsLost(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/full (Linux's full disk) cannot be opened: %v", err)
	}
	defer full.Close()
	var stderr bytes.Buffer
	code := run([]string{"key", "generate", "--tenant", "acme", "--flows", "hello", "--rate", "0"}, full, &stderr)
	want := "nexus key generate: the key could not be written out (write /dev/full: no space left on device): it is lost; generate another\n"
	if code != exitError || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, stderr.String(), want)
	}
}

// TestJournalFilterNames: a --tenant or --flow the name rule refuses is
// said, in the rule's words, exit 1 (flow-file.md: "the CLI prints it and
// exits 1"), as nexus dlq says it; it printed "the journal is empty", as
// if the filter had matched nothing. An empty --correlation-id is bad
// usage (exit 2).
func TestJournalFilterNames(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "../x"}, `nexus journal: invalid name "../x" for tenant (any flow): character '.' at position 1 is not allowed`},
		{[]string{"--tenant", "acme", "--flow", "a.b"}, `nexus journal: invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		// given empty (a shell variable not set): refused, not "no filter"
		{[]string{"--tenant", ""}, `nexus journal: invalid name "" for tenant (any flow): the name is empty`},
		{[]string{"--tenant", "acme", "--flow="}, `nexus journal: invalid name "" for flow (tenant "acme"): the name is empty`},
		{[]string{"--flow", "a.b"}, `nexus journal: invalid name "a.b" for flow (any tenant): character '.' at position 2 is not allowed`},
		{[]string{"--tenant", "", "--flow", "hello"}, `nexus journal: invalid name "" for tenant (flow "hello"): the name is empty`},
		{[]string{"--correlation-id", ""}, `nexus journal: --correlation-id is empty: give one, or leave it out`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"journal", "--db", db}, c.args...), &stdout, &stderr)
		wantCode := exitError
		if !strings.Contains(c.want, "invalid name") {
			wantCode = exitUsage
		}
		if code != wantCode || stderr.String() != c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("nexus journal %v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, stdout.String(), stderr.String(), wantCode, c.want)
		}
	}
}

// TestStatusNextTickOfAnEverySchedule: nexus status shows an @every
// schedule's next tick as the last tick (the scheduler's record in the
// state directory) plus the period, the time a serving process ticks it.
// It printed now + period, 50 minutes late here, and moving at every
// call.
func TestStatusNextTickOfAnEverySchedule(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: beat\ntenant: acme\nschedule: \"@every 1h\"\n---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "beat.md"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(state, "registry.db")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"deploy", "--db", db, dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus deploy: exit %d: %s", code, stderr.String())
	}
	last := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	if err := os.MkdirAll(filepath.Join(state, "cron", "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "cron", "acme", "beat.last"), fmt.Appendf(nil, "%d\n", last.UnixNano()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"status", "--db", db}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus status: exit %d: %s", code, stderr.String())
	}
	want := fmt.Sprintf("schedule: acme/beat \"@every 1h\" UTC next %s\n", last.Add(time.Hour).UTC().Format(time.RFC3339))
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("nexus status:\n%s\nwant the line %q", stdout.String(), want)
	}
}

// TestDLQReplayNeedsTheFlowLive: nexus dlq replay of a dead letter whose
// flow is not live (withdrawn, renamed, never deployed, or no registry at
// all) is refused, as the API refuses it, and the dead letter stays
// pending. It said "replayed", and the running worker dropped the message
// (queue_dropped): the payload was lost.
func TestDLQReplayNeedsTheFlowLive(t *testing.T) {
	state := t.TempDir()
	db := filepath.Join(state, "registry.db")
	q, _ := deadLetterQueue(t, state, 2)
	q.Close()
	replay := func(id string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"dlq", "replay", "--tenant", "acme", "--flow", "orders", "--id", id, "--db", db}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	const refusal = "nexus dlq replay: flow acme/orders is not live: its worker would drop a replayed message; publish the flow first\n"
	// no registry yet, then one where acme/orders is not deployed
	for _, deployed := range []string{"", "other"} {
		if deployed != "" {
			dir := t.TempDir()
			src := "---\nflowmarkdown_version: \"0.1\"\nflow: " + deployed + "\ntenant: acme\n---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n"
			if err := os.WriteFile(filepath.Join(dir, "f.md"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"deploy", "--db", db, dir}, &stdout, &stderr); code != exitOK {
				t.Fatalf("nexus deploy: exit %d: %s", code, stderr.String())
			}
		}
		if code, out, errOut := replay("1"); code != exitError || out != "" || errOut != refusal {
			t.Errorf("replay with %q deployed: exit %d, stdout %q, stderr %q; want exit 1 and %q", deployed, code, out, errOut, refusal)
		}
	}
	// an id that is not pending says so first, as the API's 404 does
	if code, _, errOut := replay("9"); code != exitError || !strings.Contains(errOut, "no pending dead letter id=9") {
		t.Errorf("replay of id 9: exit %d, stderr %q", code, errOut)
	}
	dl, _, err := queue.ReadDeadLetters(filepath.Join(state, "queues"), "acme", "orders", nil)
	if err != nil || len(dl) != 2 {
		t.Fatalf("pending after the refusals: %v %v, want both dead letters", dl, err)
	}
	// once the flow is deployed, the replay goes through
	deployOrders(t, db)
	if code, out, errOut := replay("1"); code != exitOK || out != "replayed  id=1 tenant=acme flow=orders\n" {
		t.Errorf("replay with acme/orders live: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestDLQReplayAllLeavesAnOversizedDeadLetter: nexus dlq replay --all
// replays every dead letter but one whose payload is over the limit of a
// message (an older nexus wrote it), which it leaves pending with a line on
// stderr naming the limit, and exits 1. It failed at that one, replaying
// none (the error of the chunk dropped the ones before it).
func TestDLQReplayAllLeavesAnOversizedDeadLetter(t *testing.T) {
	state := t.TempDir()
	db := filepath.Join(state, "registry.db")
	deployOrders(t, db)
	q, _ := deadLetterQueue(t, state, 1)
	big := testDeadLetter(2)
	big.Payload = bytes.Repeat([]byte("x"), queue.MaxPayload+1)
	if err := q.MoveToDLQ(big); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(testDeadLetter(3)); err != nil {
		t.Fatal(err)
	}
	q.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "replay", "--tenant", "acme", "--flow", "orders", "--all", "--db", db}, &stdout, &stderr)
	wantErr := fmt.Sprintf("nexus dlq replay: left pending: queue acme/orders: dead letter 2 cannot be replayed: the message is too large for a frame: its payload of %d bytes is over the limit of %d bytes a message may have\n",
		queue.MaxPayload+1, queue.MaxPayload)
	if want := "replayed  id=1 tenant=acme flow=orders\nreplayed  id=3 tenant=acme flow=orders\n"; code != exitError || stdout.String() != want || stderr.String() != wantErr {
		t.Errorf("replay --all: exit %d, stdout %q, stderr %q; want exit 1, %q and %q", code, stdout.String(), stderr.String(), want, wantErr)
	}
	dl, _, err := queue.ReadDeadLetters(filepath.Join(state, "queues"), "acme", "orders", nil)
	if err != nil || len(dl) != 1 || dl[0].ID != 2 {
		t.Errorf("pending after replay --all: %d dead letters, %v; want dead letter 2 alone", len(dl), err)
	}
}

// TestDeployIntoARegistryFollowingGit: nexus deploy into a registry that
// a server fills from git publishes, and says on stderr that the next
// commit the server syncs replaces it; into one without git, it says
// nothing more, and neither does a deploy that changed nothing.
func TestDeployIntoARegistryFollowingGit(t *testing.T) {
	dir := t.TempDir()
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: x\ntenant: acme\n---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []string{"", "0123456789abcdef0123456789abcdef01234567"} {
		db := filepath.Join(t.TempDir(), "registry.db")
		if commit != "" {
			reg, err := registry.Open(context.Background(), db, registry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Publish(context.Background(), registry.Publication{Commit: commit, Complete: true}); err != nil {
				t.Fatal(err)
			}
			reg.Close()
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"deploy", "--db", db, dir}, &stdout, &stderr); code != exitOK || stdout.String() != "published acme/x v1\n" {
			t.Fatalf("nexus deploy: exit %d, %q %q", code, stdout.String(), stderr.String())
		}
		want := ""
		if commit != "" {
			want = "nexus deploy: note: this registry follows git (commit 0123456789ab): the next commit a server syncs, or a server's next start, replaces what this published\n"
		}
		if stderr.String() != want {
			t.Errorf("deploy into a registry at commit %q: stderr %q, want %q", commit, stderr.String(), want)
		}
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{"deploy", "--db", db, dir}, &stdout, &stderr); code != exitOK || stdout.String() != "unchanged acme/x v1\n" || stderr.Len() != 0 {
			t.Errorf("the same deploy again into a registry at commit %q: exit %d, %q %q; want unchanged and no note", commit, code, stdout.String(), stderr.String())
		}
	}
}

// TestFlagValueErrors: a flag's value that its type refuses is said as
// nexus serve says a variable's (the setting, the value, what it takes),
// exit 2, in every command; the flag package said `invalid value "abc"
// for flag -limit: parse error`. An unknown flag and a flag without its
// value are said in nexus's words too. Each is the one line on stderr: the
// usage no longer follows it.
func TestFlagValueErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"journal", "--db", db, "--limit", "abc"}, `nexus journal: --limit "abc" is not a whole number`},
		{[]string{"journal", "--db", db, "--limit", "a\"b\n"}, `nexus journal: --limit "a\"b\n" is not a whole number`},
		{[]string{"key", "generate", "--tenant", "acme", "--rate", "fast"}, `nexus key generate: --rate "fast" is not a number`},
		{[]string{"dlq", "list", "--db", db, "--flow"}, `nexus dlq list: --flow needs a value`},
		{[]string{"dlq", "replay", "--db", db, "--bogus"}, `nexus dlq replay: unknown flag --bogus (nexus dlq --help lists the flags)`},
		{[]string{"key", "generate", "--tenant", "acme", "---x"}, `nexus key generate: bad flag syntax: ---x`},
		{[]string{"serve", "--listen"}, `nexus serve: --listen needs a value`},
		{[]string{"serve", "--poll", "soon"}, `nexus serve: --poll "soon" is not a duration (such as 10s, 5m or 168h)`},
		{[]string{"status", "--db", db, "now"}, `nexus status: unexpected argument "now"`},
		{[]string{"deploy", "--db", db, "--bogus", "x.md"}, `nexus deploy: unknown flag --bogus (nexus deploy --help lists the flags)`},
		{[]string{"validate", "--bogus", "x.md"}, `nexus validate: unknown flag --bogus (nexus validate --help lists the flags)`},
		// the flags of server.md's command table: negative, zero, not a
		// number, a unit, empty, past the type's range
		{[]string{"journal", "--db", db, "--limit", "0"}, `nexus journal: --limit must be at least 1`},
		{[]string{"journal", "--db", db, "--limit", "-1"}, `nexus journal: --limit must be at least 1`},
		{[]string{"journal", "--db", db, "--limit", ""}, `nexus journal: --limit "" is not a whole number`},
		{[]string{"journal", "--db", db, "--limit", "1.5"}, `nexus journal: --limit "1.5" is not a whole number`},
		{[]string{"journal", "--db", db, "--limit", "50k"}, `nexus journal: --limit "50k" is not a whole number`},
		{[]string{"journal", "--db", db, "--limit", "99999999999999999999"}, `nexus journal: --limit "99999999999999999999" is out of range`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "-1"}, `nexus key generate: --rate must be a number of requests per second, 0 (unlimited) or more`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", ""}, `nexus key generate: --rate "" is not a number`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "5/s"}, `nexus key generate: --rate "5/s" is not a number`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "1e400"}, `nexus key generate: --rate "1e400" is out of range`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "5", "--burst", "-1"}, `nexus key generate: --burst must be 0 (the default) or more`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "0", "--burst", "5"}, `nexus key generate: --burst needs a --rate above 0`},
		// server.md's table gives --rate N as it gives --tenant and
		// --flows, not in brackets as an optional flag: left out, it is
		// named (a key without a limit was written without a word)
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x"}, `nexus key generate: --rate is required: requests per second, 0 for no limit`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--burst", "5"}, `nexus key generate: --rate is required: requests per second, 0 for no limit`},
		{[]string{"dlq", "replay", "--db", db, "--tenant", "acme", "--flow", "f", "--id", "0"}, `nexus dlq replay: --id "0" is not a message id (a whole number from nexus dlq list)`},
		{[]string{"dlq", "discard", "--db", db, "--tenant", "acme", "--flow", "f", "--id", "-1"}, `nexus dlq discard: --id "-1" is not a message id (a whole number from nexus dlq list)`},
		{[]string{"dlq", "replay", "--db", db, "--tenant", "acme", "--flow", "f", "--id", "abc"}, `nexus dlq replay: --id "abc" is not a message id (a whole number from nexus dlq list)`},
		// the flags left out are named, not all three
		{[]string{"dlq", "replay", "--db", db, "--tenant", "acme", "--flow", "f"}, `nexus dlq replay: replay needs --id (or --all)`},
		{[]string{"dlq", "discard", "--db", db, "--tenant", "acme", "--id", "7"}, `nexus dlq discard: discard needs --flow`},
		{[]string{"dlq", "replay", "--db", db, "--flow", "f", "--all"}, `nexus dlq replay: replay needs --tenant`},
		{[]string{"dlq", "replay", "--db", db, "--id", "7"}, `nexus dlq replay: replay needs --tenant and --flow`},
		{[]string{"dlq", "discard", "--db", db}, `nexus dlq discard: discard needs --tenant, --flow and --id (or --all)`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != exitUsage || stderr.String() != c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("nexus %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
	}
}

// TestDLQListSaysWhatItPassesOver: a queue folder whose name breaks the
// rule (made by hand, or by an older build) is not listed, and nexus dlq
// list says so on stderr when it holds a dlq.log, rather than passing over
// its dead letters in silence; an empty one left over is not worth a word,
// nor is one a filter leaves out.
func TestDLQListSaysWhatItPassesOver(t *testing.T) {
	dir := t.TempDir()
	queues := filepath.Join(dir, "queues")
	for _, p := range []string{"acme/Weird.Name/dlq.log", "acme/Empty.Name/", "Globex/x/dlq.log"} {
		path := filepath.Join(queues, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(p, "/") {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	db := filepath.Join(dir, "registry.db")
	for _, c := range []struct {
		args []string
		want []string // the folders named on stderr
	}{
		{nil, []string{"Globex", "acme/Weird.Name"}},
		{[]string{"--tenant", "acme"}, []string{"acme/Weird.Name"}},
		{[]string{"--tenant", "acme", "--flow", "echo"}, nil},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"dlq", "list", "--db", db}, c.args...), &stdout, &stderr)
		var want string
		for _, f := range c.want {
			want += "nexus dlq list: " + filepath.Join(queues, filepath.FromSlash(f)) +
				": not listed: the folder's name breaks the rule for a name that becomes a path (made by hand, or by an older build)\n"
		}
		if code != exitOK || stdout.String() != "DLQ is empty\n" || stderr.String() != want {
			t.Errorf("dlq list %v: exit %d, stdout %q, stderr:\n%s\nwant:\n%s", c.args, code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestVersion: nexus version (and nexus --version) prints which build this
// is, on one line: the module's version, then the Go release; an operator
// could not tell which build a host ran.
func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^nexus \S+( commit [0-9a-f]{12}(\+modified)?)?, go1\.\d+(\.\d+)?\S*\n$`)
	var help bytes.Buffer
	if code := run([]string{"version", "--help"}, &help, io.Discard); code != exitOK || !strings.HasPrefix(help.String(), "Usage: nexus version\n") {
		t.Errorf("nexus version --help: exit %d, %q", code, help.String())
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitOK || !want.MatchString(stdout.String()) || stderr.Len() != 0 {
			t.Errorf("nexus %s: exit %d, stdout %q, stderr %q", args[0], code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version", "now"}, &stdout, &stderr); code != exitUsage || stderr.String() != "nexus version: unexpected argument \"now\"\n" {
		t.Errorf("nexus version now: exit %d, stderr %q", code, stderr.String())
	}
}

// deployOrders publishes acme/orders, a flow answering {"ok": true}, into
// the registry db with nexus deploy.
func deployOrders(t *testing.T, db string) {
	t.Helper()
	dir := t.TempDir()
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: orders\ntenant: acme\n---\n\n## Step: answer\n```ntd\n{\"ok\": true}\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "orders.md"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"deploy", "--db", db, dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("nexus deploy: exit %d: %s", code, stderr.String())
	}
}
