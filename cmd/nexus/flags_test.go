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
