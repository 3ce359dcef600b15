package main

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	_ "modernc.org/sqlite"

	"github.com/nexushq/nexus/queue"
)

// Bad input on the command line, from an operator's review: each is bad
// usage (exit 2) or a refusal said in one line, with nothing made or done.

// TestServeRefusesAnEmptyRepo: --repo "" (what --repo "$REPO" gives with
// REPO unset) or a --repo of blanks was taken: "" for no repo at all (a
// host that serves an empty registry and answers /readyz 200 with nothing
// deployed), " " for a local folder named " ". Like --admin-key "",
// --secret "" and --db "", it is bad usage, said in one line naming
// --repo, before anything is made.
func TestServeRefusesAnEmptyRepo(t *testing.T) {
	for _, repo := range []string{"", " "} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"serve", "--listen", "127.0.0.1:0", "--db", unmakeableDB(t), "--repo", repo}, &stdout, &stderr)
		line := firstLine(stderr.String())
		if code != exitUsage || !strings.HasPrefix(line, "nexus serve: --repo") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("nexus serve --repo %q: exit %d, stderr %q; want exit 2 and one line \"nexus serve: --repo …\"", repo, code, stderr.String())
		}
	}
}

// TestServeNamesNEXUS_DBWhenItIsAFolder: nexus serve names a setting it
// refuses as it was given (docs/decisions.md: "naming the setting as it was
// given (--poll or NEXUS_POLL)"), as it does for NEXUS_LISTEN, NEXUS_REPO
// or NEXUS_ADMIN_KEY; NEXUS_DB naming a folder was said as "--db DIR is a
// directory", a flag the operator never typed.
func TestServeNamesNEXUS_DBWhenItIsAFolder(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NEXUS_DB", dir)
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if code != exitUsage || !strings.HasPrefix(stderr.String(), "nexus serve: NEXUS_DB") {
		t.Errorf("NEXUS_DB=%s nexus serve: exit %d, stderr %q; want exit 2 and a line naming NEXUS_DB", dir, code, stderr.String())
	}
}

// TestDLQListRefusesAnotherProgramsDatabase: nexus status and nexus
// journal refuse a --db that is another program's SQLite database ("not a
// registry"); nexus dlq list, whose --db check exists so that a mistyped
// --db does not list "DLQ is empty", listed "DLQ is empty" beside it, exit 0.
func TestDLQListRefusesAnotherProgramsDatabase(t *testing.T) {
	db := filepath.Join(t.TempDir(), "places.sqlite")
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(`CREATE TABLE bookmarks (url TEXT); INSERT INTO bookmarks VALUES ('https://example.com')`); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	for _, cmd := range []string{"status", "journal", "dlq list"} {
		var stdout, stderr bytes.Buffer
		code := run(append(strings.Fields(cmd), "--db", db), &stdout, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), "not a registry") || stdout.Len() != 0 {
			t.Errorf("nexus %s --db (another program's SQLite database): exit %d, stdout %q, stderr %q; want exit 1 and \"not a registry\"",
				cmd, code, stdout.String(), stderr.String())
		}
	}
}

// TestDLQFlagGivenTwiceIsBadUsage: nexus dlq discard --id 1 --id 2
// discarded dead letter 2 and said nothing of the 1 (the flag package keeps
// the last value); a discard cannot be undone ("there is no command to
// bring it back"), so a flag given twice with two values is bad usage,
// said in one line, and nothing is marked.
func TestDLQFlagGivenTwiceIsBadUsage(t *testing.T) {
	state := t.TempDir()
	q, _ := deadLetterQueue(t, state, 2)
	q.Close()
	db := filepath.Join(state, "registry.db")
	for _, args := range [][]string{
		{"dlq", "discard", "--tenant", "acme", "--flow", "orders", "--id", "1", "--id", "2", "--db", db},
		{"dlq", "discard", "--tenant", "acme", "--tenant", "acme", "--flow", "orders", "--id", "2", "--flow", "other", "--db", db},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitUsage || stdout.Len() != 0 {
			t.Errorf("nexus %s: exit %d, stdout %q, stderr %q; want exit 2 and nothing done", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
	}
	pending, _, err := queue.ReadDeadLetters(filepath.Join(state, "queues"), "acme", "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 {
		t.Errorf("%d dead letters pending after the refused discards, want 2", len(pending))
	}
}

// TestDeployAloneShowsTheUsage: the README says the usage is printed "when
// a command is given nothing to do, such as nexus validate alone"; nexus
// deploy alone printed one line and no usage.
func TestDeployAloneShowsTheUsage(t *testing.T) {
	for _, cmd := range []string{"validate", "deploy"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{cmd}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "Usage: nexus "+cmd) {
			t.Errorf("nexus %s alone: exit %d, stderr %q; want exit 2 and the usage", cmd, code, stderr.String())
		}
	}
}

// TestVersionFlagTakesNoArgument: nexus version x is bad usage (exit 2,
// "unexpected argument"); nexus --version x, which the README gives as the
// same command, printed the version and exited 0.
func TestVersionFlagTakesNoArgument(t *testing.T) {
	for _, args := range [][]string{{"version", "x"}, {"--version", "x"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitUsage || stdout.Len() != 0 {
			t.Errorf("nexus %s: exit %d, stdout %q, stderr %q; want exit 2", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
	}
}

// TestDBWithATrailingSlashIsBadUsage: a --db that names a folder is bad
// usage for every command (TestEmptyDBIsBadUsage), but only when the folder
// exists: --db NEW/ (the state directory, by its trailing slash, not made
// yet) made NEW and then failed, exit 1 (serve, deploy: "is a directory"),
// leaving an empty state directory behind, or read as an empty registry,
// exit 0 (status: "flows: 0", journal, dlq list: "DLQ is empty").
func TestDBWithATrailingSlashIsBadUsage(t *testing.T) {
	flowFile := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(flowFile, []byte(parityFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"deploy", flowFile}, {"status"}, {"journal"}, {"dlq", "list"}} {
		dir := filepath.Join(t.TempDir(), "state")
		var stdout, stderr bytes.Buffer
		code := run(append(append([]string{}, cmd...), "--db", dir+"/"), &stdout, &stderr)
		if code != exitUsage || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "--db") {
			t.Errorf("nexus %s --db %s/: exit %d, stdout %q, stderr %q; want exit 2 and one line naming --db",
				cmd[0], dir, code, stdout.String(), stderr.String())
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("nexus %s --db %s/ (exit %d) made the folder %s", cmd[0], dir, code, dir)
		}
	}
}

// TestKeyGenerateNamesTheTenantsFlows: a tenant breaking the name rule is
// named with the flow --flows gives (any flow for several); the error said
// flow "*" whatever --flows said. An empty --flows gives none to quote:
// any flow, as naming's Alone says it (it said flow "").
func TestKeyGenerateNamesTheTenantsFlows(t *testing.T) {
	for _, tt := range []struct {
		flows, want string
	}{
		{"x", `nexus key generate: invalid name "A" for tenant (flow "x"): character 'A' at position 1 is not allowed` + "\n"},
		{"*", `nexus key generate: invalid name "A" for tenant (flow "*"): character 'A' at position 1 is not allowed` + "\n"},
		{"x,y", `nexus key generate: invalid name "A" for tenant (any flow): character 'A' at position 1 is not allowed` + "\n"},
		// --flows "$FLOWS" with FLOWS unset: no flow to quote
		{"", `nexus key generate: invalid name "A" for tenant (any flow): character 'A' at position 1 is not allowed` + "\n"},
		{" ", `nexus key generate: invalid name "A" for tenant (any flow): character 'A' at position 1 is not allowed` + "\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"key", "generate", "--tenant", "A", "--flows", tt.flows, "--rate", "0"}, &stdout, &stderr)
		if code != exitError || stdout.Len() != 0 {
			t.Errorf("--flows %q: exit %d, stdout %q; want exit 1 and nothing printed", tt.flows, code, stdout.String())
		}
		if diff := cmp.Diff(tt.want, stderr.String()); diff != "" {
			t.Errorf("--flows %q: stderr (-want +got):\n%s", tt.flows, diff)
		}
	}
}

// TestEmptyOrUnreadableValuesAreBadUsage: nexus key generate --id ""
// (--id "$ID" with ID unset) printed an entry with the default id without a
// word; nexus serve --repo of a path that is not UTF-8 was taken and failed
// at every poll ("illegal UTF-8"). Both are bad usage, in one line; a repo
// URL is shown without its credentials, as everywhere else.
func TestEmptyOrUnreadableValuesAreBadUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "*", "--rate", "0", "--id", ""}, "nexus key generate: --id is empty: give an id, or leave it out for TENANT-XXXXXXXX\n"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", unmakeableDB(t), "--repo", "/srv/\xffrepo"}, "nexus serve: --repo \"/srv/\\xffrepo\" is not valid UTF-8\n"},
		// its password is not printed (it was, whole)
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", unmakeableDB(t), "--repo", "https://deploy:s3cr3t@127.0.0.1:1/\xffconfig.git"}, "nexus serve: --repo \"https://redacted@127.0.0.1:1/%FFconfig.git\" is not valid UTF-8\n"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", unmakeableDB(t), "--repo", "https://deploy:s3cr3t\xff@127.0.0.1:1/config.git"}, "nexus serve: --repo \"https://(a URL that does not parse)\" is not valid UTF-8\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != exitUsage || stdout.Len() != 0 || stderr.String() != tt.want {
			t.Errorf("nexus %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tt.args, code, stdout.String(), stderr.String(), tt.want)
		}
	}
}

// TestDLQSubcommandHelpIsTheCommandsHelp: nexus dlq list -h prints the same
// flag list as nexus dlq -h. flagsOnce wraps each flag's Value in
// *onceValue, whose zero value (nil embedded Value) panics in String: the
// flag package's PrintDefaults recovers and appends "panic calling String
// method on zero main.onceValue for flag …" for every flag, and no
// longer shows --db's default (the registry the command would use).
func TestDLQSubcommandHelpIsTheCommandsHelp(t *testing.T) {
	t.Setenv("NEXUS_DB", "")
	os.Unsetenv("NEXUS_DB")
	var plain, plainErr bytes.Buffer
	if code := run([]string{"dlq", "-h"}, &plain, &plainErr); code != exitOK {
		t.Fatalf("nexus dlq -h: exit %d", code)
	}
	for _, sub := range []string{"list", "replay", "discard"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"dlq", sub, "-h"}, &stdout, &stderr)
		if code != exitOK {
			t.Errorf("nexus dlq %s -h: exit %d", sub, code)
		}
		if strings.Contains(stdout.String(), "panic") {
			t.Errorf("nexus dlq %s -h prints panics:\n%s", sub, stdout.String())
		}
		if !strings.Contains(stdout.String(), `(default "`+DefaultDB+`")`) {
			t.Errorf("nexus dlq %s -h does not show --db's default %q", sub, DefaultDB)
		}
		if stdout.String() != plain.String() {
			t.Errorf("nexus dlq %s -h differs from nexus dlq -h", sub)
		}
	}
}

// TestDLQBoolFlagGivenTwice: --all given twice is
// refused as --id given twice is, in the same words; the flag package's
// "invalid boolean flag all: …" prefix is not nexus's wording (flagError's
// regexp matches only "invalid boolean value").
func TestDLQBoolFlagGivenTwice(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"dlq", "discard", "--tenant", "acme", "--flow", "orders", "--all", "--all", "--db", filepath.Join(t.TempDir(), "registry.db")}, &stdout, &stderr)
	if want := "nexus dlq discard: --all is given twice"; code != exitUsage || !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and a line beginning %q", code, stderr.String(), want)
	}
}

// TestDefaultDBIsNotNamedAsTheVariable: with neither --db nor NEXUS_DB
// given, a default registry path that is a folder is said as --db (the
// flag's default), not as NEXUS_DB, a variable the operator never set.
func TestDefaultDBIsNotNamedAsTheVariable(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("NEXUS_DB", "")
	os.Unsetenv("NEXUS_DB")
	if err := os.MkdirAll(filepath.Join(home, ".nexus", "registry.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"status"}, &stdout, &stderr)
	if code != exitUsage || strings.Contains(stderr.String(), "NEXUS_DB") {
		t.Errorf("nexus status (NEXUS_DB unset, %s/.nexus/registry.db a folder): exit %d, stderr %q; want exit 2 and no mention of NEXUS_DB, which is not set", home, code, stderr.String())
	}
}

// TestBlankDBIsBadUsage: a --db or NEXUS_DB of blanks (NEXUS_DB=" " in a
// compose file) is bad usage for every command that takes it, as an empty
// one is: serve and deploy made a registry named "   " in the working
// folder, and status, journal and dlq list read it as an empty registry
// (exit 0, "flows: 0", "DLQ is empty").
func TestBlankDBIsBadUsage(t *testing.T) {
	flowFile := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(flowFile, []byte(parityFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, viaEnv := range []bool{false, true} {
		for _, cmd := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"deploy", flowFile}, {"status"}, {"journal"}, {"dlq", "list"}} {
			dir := t.TempDir()
			t.Chdir(dir)
			args := append([]string{}, cmd...)
			setting := "--db"
			if viaEnv {
				t.Setenv("NEXUS_DB", "   ")
				setting = "NEXUS_DB"
			} else {
				t.Setenv("NEXUS_DB", "")
				args = append(args, "--db", "   ")
			}
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(args, &stdout, &stderr) }()
			var code int
			select {
			case code = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("nexus %s with %s of blanks is still running after 10 s (serving a registry named %q)", cmd[0], setting, "   ")
			}
			name := "nexus " + cmd[0]
			if cmd[0] == "dlq" {
				name = "nexus dlq list"
			}
			want := name + ": " + setting + " is blank: give the registry file (such as ~/.nexus/registry.db)\n"
			if code != exitUsage || stdout.Len() != 0 || stderr.String() != want {
				t.Errorf("nexus %s with %s of blanks: exit %d, stdout %q, stderr %q; want exit 2 and %q",
					cmd[0], setting, code, stdout.String(), stderr.String(), want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("nexus %s with %s of blanks (exit %d) made %s in the working folder", cmd[0], setting, code, entries[0].Name())
			}
		}
	}
}

// TestUnknownSubcommandIsOneLine: nexus dlq lst, or a flag before the
// subcommand, is one line naming what was given, as nexus lst is ("unknown
// command"); it printed the command's whole usage after a line that did not
// name it. nexus dlq and nexus key alone still print the usage.
func TestUnknownSubcommandIsOneLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "lst"}, `nexus dlq: unknown subcommand "lst": the subcommand is list, replay or discard` + "\n"},
		{[]string{"dlq", "--tenant", "acme", "list"}, `nexus dlq: unknown subcommand "--tenant": the subcommand is list, replay or discard, before its flags` + "\n"},
		{[]string{"key", "gen", "--tenant", "acme"}, `nexus key: unknown subcommand "gen": the subcommand is generate` + "\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != exitUsage || stdout.Len() != 0 || stderr.String() != tt.want {
			t.Errorf("nexus %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tt.args, code, stdout.String(), stderr.String(), tt.want)
		}
	}
	for _, cmd := range []string{"dlq", "key"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "Usage:") {
			t.Errorf("nexus %s alone: exit %d, stderr %q; want exit 2 and the usage", cmd, code, stderr.String())
		}
	}
}
