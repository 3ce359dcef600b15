package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNumberFlagsAreDecimal: a whole-number flag takes decimal digits, as
// its variable does (caarlos0/env reads base 10). The flag package read
// Go's literals, so --max-workers 0x10 was 16, 0b11 3, 1_000 a thousand
// and 010 eight where NEXUS_MAX_WORKERS=010 is ten. Any other form is bad
// usage, said in one line naming the flag and the value, exit 2.
func TestNumberFlagsAreDecimal(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--max-workers", "0x10"}, `nexus serve: --max-workers "0x10" is not a whole number`},
		{[]string{"serve", "--max-workers", "-0x10"}, `nexus serve: --max-workers "-0x10" is not a whole number`},
		{[]string{"serve", "--max-runs", "0b11"}, `nexus serve: --max-runs "0b11" is not a whole number`},
		{[]string{"serve", "--max-body-bytes", "1_000"}, `nexus serve: --max-body-bytes "1_000" is not a whole number`},
		{[]string{"serve", "--journal-max-entries", "0o7"}, `nexus serve: --journal-max-entries "0o7" is not a whole number`},
		{[]string{"journal", "--db", db, "--limit", "0x10"}, `nexus journal: --limit "0x10" is not a whole number`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "5", "--burst", "0X5"}, `nexus key generate: --burst "0X5" is not a whole number`},
		// a number with a fraction is decimal too: ParseFloat read hex
		// floats and digits apart with '_'
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "0x1p4"}, `nexus key generate: --rate "0x1p4" is not a number`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "-0X1P-2"}, `nexus key generate: --rate "-0X1P-2" is not a number`},
		{[]string{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "1_000.5"}, `nexus key generate: --rate "1_000.5" is not a number`},
	} {
		args := c.args
		if args[0] == "serve" {
			// a host taken wrongly stops at its bad --log-format,
			// serving nothing
			args = append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, append(args[1:], "--log-format", "bogus")...)
		}
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitUsage || stderr.String() != c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("nexus %q: exit %d, stderr %q, stdout %q; want exit 2 and %q", args, code, stderr.String(), stdout.String(), c.want)
		}
	}
	// leading zeros are base 10, as in the variable
	for _, c := range []struct {
		value string
		want  int
	}{{"010", 10}, {"+010", 10}, {"0008", 8}} {
		cfg, fs, problems := serveFlags()
		if problems != nil {
			t.Fatal(problems)
		}
		if _, err := parseInterleaved(fs, []string{"--max-workers", c.value}); err != nil {
			t.Fatalf("--max-workers %s: %v", c.value, err)
		}
		if cfg.MaxWorkers != c.want {
			t.Errorf("--max-workers %s is %d, want %d", c.value, cfg.MaxWorkers, c.want)
		}
	}
	// the usage shows each flag's default as the flag package does
	var stdout, stderr bytes.Buffer
	if code := run([]string{"key", "generate", "--help"}, &stdout, &stderr); code != exitOK || strings.Contains(stdout.String(), "(default 0)") {
		t.Errorf("nexus key generate --help: exit %d, usage %q; want exit 0 and no (default 0)", code, stdout.String())
	}
}

// TestDBWithAControlCharacterIsBadUsage: a --db (or NEXUS_DB) holding a
// control character, most often a line break left by a variable, is bad
// usage in every command that has one; the writers made a registry whose
// name ended in a line break, and the readers read it as an empty one.
func TestDBWithAControlCharacterIsBadUsage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db") + "\n"
	for _, args := range [][]string{
		{"status", "--db", db},
		{"journal", "--db", db},
		{"dlq", "list", "--db", db},
		{"deploy", "--db", db, filepath.Join("..", "..", "flows-example")},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := fmt.Sprintf("%s: --db %q holds a control character: give the registry file (such as ~/.nexus/registry.db)\n", commandName(args), db)
		if code != exitUsage || stderr.String() != want || stdout.Len() != 0 {
			t.Errorf("nexus %q: exit %d, stderr %q, stdout %q; want exit 2 and %q", args, code, stderr.String(), stdout.String(), want)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused command made %q (%v)", db, err)
	}
}

// TestAFlagIsNotTheValueOfTheFlagBefore: a flag given without its value
// and followed by another flag of the command is bad usage naming the one
// without a value, exit 2, in every command, and nothing is made. The flag
// package took the next flag as the value: nexus serve --db --dev made a
// registry named "--dev" in the working folder and served it, not
// development mode; nexus serve --admin-key --dev served with the admin
// key "--dev"; nexus key generate --tenant --flows a said `unexpected
// argument "a"`, naming neither flag.
func TestAFlagIsNotTheValueOfTheFlagBefore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	db := filepath.Join(dir, "state", "registry.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", "--dev"}, `nexus serve: --db needs a value (--dev is a flag)`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", "--dev"}, `nexus serve: --admin-key needs a value (--dev is a flag)`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", "--log-format", "text"}, `nexus serve: --admin-key needs a value (--log-format is a flag)`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--secret", "-poll=1s"}, `nexus serve: --secret needs a value (-poll=1s is a flag)`},
		{[]string{"key", "generate", "--tenant", "--flows", "a"}, `nexus key generate: --tenant needs a value (--flows is a flag)`},
		{[]string{"dlq", "list", "--db", db, "--tenant", "--flow", "x"}, `nexus dlq list: --tenant needs a value (--flow is a flag)`},
		{[]string{"dlq", "replay", "--db", db, "--tenant", "acme", "--flow", "--all"}, `nexus dlq replay: --flow needs a value (--all is a flag)`},
		{[]string{"journal", "--db", db, "--tenant", "--limit", "3"}, `nexus journal: --tenant needs a value (--limit is a flag)`},
		{[]string{"status", "--db", "--help"}, `nexus status: --db needs a value (--help is a flag)`},
		{[]string{"deploy", "--db", "-h", "x.md"}, `nexus deploy: --db needs a value (-h is a flag)`},
	} {
		args := c.args
		if args[0] == "serve" {
			// a host taken wrongly stops at its bad --log-format,
			// serving nothing
			args = append(args, "--log-format", "bogus")
		}
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != exitUsage || stderr.String() != c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("nexus %q: exit %d, stderr %q, stdout %q; want exit 2 and %q", args, code, stderr.String(), stdout.String(), c.want)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("refused commands left %v in the working folder (%v)", entries, err)
	}
	// a value that only looks like a flag is still a value: a negative
	// number, a lone dash, a flag of another command; and --flag=value
	// takes anything
	for _, args := range [][]string{
		{"journal", "--db", db, "--limit", "-1"},
		{"key", "generate", "--tenant", "acme", "--flows", "x", "--rate", "-1"},
		{"journal", "--db", db, "--tenant", "--all"},
		{"journal", "--db", db, "--tenant=--flow"},
	} {
		var stdout, stderr bytes.Buffer
		run(args, &stdout, &stderr)
		if strings.Contains(stderr.String(), "needs a value") {
			t.Errorf("nexus %q: %q; want the value taken", args, stderr.String())
		}
	}
}

// TestABoolFlagTakesItsValueAfterAnEqualsSign: a flag that is on or off
// given a separate true or false (--dev false) is bad usage naming the
// flag and how to write it, exit 2; the flag package turned it on and left
// the word, said as `unexpected argument "false"`, naming no flag.
func TestABoolFlagTakesItsValueAfterAnEqualsSign(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--dev", "false", "--log-format", "bogus"}, `nexus serve: --dev takes true or false after an equals sign: write --dev=false`},
		{[]string{"dlq", "replay", "--db", db, "--tenant", "acme", "--flow", "f", "--id", "1", "-all", "true"}, `nexus dlq replay: --all takes true or false after an equals sign: write --all=true`},
		{[]string{"dlq", "discard", "--db", db, "--tenant", "acme", "--flow", "f", "--all", "0"}, `nexus dlq discard: --all takes true or false after an equals sign: write --all=0`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != exitUsage || stderr.String() != c.want+"\n" || stdout.Len() != 0 {
			t.Errorf("nexus %q: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
	}
}
