package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serverTableRow is one row of server.md's table of nexus serve's settings,
// with values each must refuse and one it takes.
type serverTableRow struct {
	flag, env string
	def       string   // the table's default; "" for none
	needs     []string // flags without which the setting is not checked (--repo)
	bad       []string // values refused, given by the flag or by the variable
	good      string   // a value taken
}

// serverTable is server.md's table, row by row.
func serverTable(t *testing.T) []serverTableRow {
	repo := []string{"--repo", t.TempDir()}
	numbers := []string{"", "abc", "1k", "1.5", "1e6", "0", "-1", "99999999999999999999"}
	return []serverTableRow{
		{flag: "listen", env: "NEXUS_LISTEN", def: ":9090", bad: []string{"", " ", "9090", "bogus", ":99999", "127.0.0.1:-1"}, good: "127.0.0.1:0"},
		{flag: "db", env: "NEXUS_DB", def: "~/.nexus/registry.db", bad: []string{"", t.TempDir()}, good: unmakeableDB(t)},
		{flag: "repo", env: "NEXUS_REPO", bad: []string{"", " ", "htp://git.example.com/x.git", "git://127.0.0.1:1/x.git"}, good: t.TempDir()},
		{flag: "branch", env: "NEXUS_BRANCH", def: "main", needs: repo, bad: []string{"", "a..b", "HEAD", "-x"}, good: "release"},
		{flag: "flows-dir", env: "NEXUS_FLOWS_DIR", def: "flows", needs: repo, bad: []string{"", "/", "/srv/flows", "../etc", ".git"}, good: "config/flows"},
		{flag: "poll", env: "NEXUS_POLL", def: "10s", bad: []string{"", "abc", "10", "10x", "0", "-1s", "50ms"}, good: "1m"},
		{flag: "secret", env: "NEXUS_SECRET", bad: []string{"", " ", ",", "a,,b"}, good: "s3cret"},
		{flag: "admin-key", env: "NEXUS_ADMIN_KEY", bad: []string{"", " "}, good: "admin"},
		{flag: "max-body-bytes", env: "NEXUS_MAX_BODY_BYTES", def: "1048576", bad: numbers, good: "4096"},
		{flag: "max-workers", env: "NEXUS_MAX_WORKERS", def: "256", bad: numbers, good: "8"},
		{flag: "log-format", env: "NEXUS_LOG_FORMAT", def: "json", bad: []string{"", "xml", "JSON"}, good: "text"},
		{flag: "journal-retention", env: "NEXUS_JOURNAL_RETENTION", def: "168h", bad: []string{"", "abc", "7d", "168", "1ns", "59s", "-1h"}, good: "24h"},
	}
}

// TestServeSettingsOfServerMd checks each row of server.md's settings table
// against nexus serve: --help lists the flag with its variable and the
// table's default; a bad value, by the flag or by the variable, is refused
// in one line naming the setting as it was given, exit 2 (a variable set
// and empty counts as not set, its default taken); and the flag wins over
// its variable, a good flag over a bad variable, and a bad flag is named
// beside a good variable.
func TestServeSettingsOfServerMd(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // the default registry, should a row fall back to it
	rows := serverTable(t)
	for _, r := range rows {
		t.Setenv(r.env, "") // restored at the end
		os.Unsetenv(r.env)
	}
	var help, stderr bytes.Buffer
	if code := run([]string{"serve", "--help"}, &help, &stderr); code != exitOK {
		t.Fatalf("nexus serve --help: exit %d %s", code, stderr.String())
	}
	// --help: each flag, its variable and the table's default
	type listed struct{ Env, Default string }
	want, got := map[string]listed{}, map[string]listed{}
	for _, r := range rows {
		want[r.flag] = listed{r.env, normalDefault(r.def)}
		m := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(r.flag) + `(?: \S+)?\n\s+(.*)$`).FindStringSubmatch(help.String())
		if m == nil {
			continue
		}
		var l listed
		if e := regexp.MustCompile(`\(env (NEXUS_[A-Z_]+)\)`).FindStringSubmatch(m[1]); e != nil {
			l.Env = e[1]
		}
		if d := regexp.MustCompile(`\(default "?(.*?)"?\)$`).FindStringSubmatch(m[1]); d != nil {
			l.Default = normalDefault(d[1])
		}
		got[r.flag] = l
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("server.md's table (-) and nexus serve --help (+):\n%s", diff)
	}
	for _, r := range rows {
		t.Run(r.flag, func(t *testing.T) {
			// the variable set and empty is the default
			os.Setenv(r.env, "")
			_, fs, problems := serveFlags()
			os.Unsetenv(r.env)
			if problems != nil {
				t.Fatalf("%s=\"\": %v", r.env, problems)
			}
			if got := normalDefault(fs.Lookup(r.flag).Value.String()); got != normalDefault(r.def) {
				t.Errorf("%s=\"\": --%s is %q, want the default %q", r.env, r.flag, got, r.def)
			}

			for _, v := range r.bad {
				code, line := serveOnce(t, r.flag, append(append([]string(nil), r.needs...), "--"+r.flag, v), "", "")
				if code != exitUsage || !strings.HasPrefix(line, "nexus serve: --"+r.flag) {
					t.Errorf("--%s %q: exit %d, %q; want exit 2 and one line naming --%s", r.flag, v, code, line, r.flag)
				}
				if v == "" {
					continue // an empty variable counts as not set
				}
				code, line = serveOnce(t, r.flag, r.needs, r.env, v)
				if code != exitUsage || !strings.HasPrefix(line, "nexus serve: "+r.env) {
					t.Errorf("%s=%q: exit %d, %q; want exit 2 and one line naming %s", r.env, v, code, line, r.env)
				}
				// the flag wins: a good flag over the bad variable ...
				code, line = serveOnce(t, r.flag, append(append([]string(nil), r.needs...), "--"+r.flag, r.good), r.env, v)
				if code != exitError || !strings.HasPrefix(line, "nexus serve: the state directory: ") {
					t.Errorf("%s=%q --%s %s: exit %d, %q; want the flag's value taken, and the start to fail at the state directory", r.env, v, r.flag, r.good, code, line)
				}
				// ... and a bad flag named beside a good variable
				code, line = serveOnce(t, r.flag, append(append([]string(nil), r.needs...), "--"+r.flag, v), r.env, r.good)
				if code != exitUsage || !strings.HasPrefix(line, "nexus serve: --"+r.flag) {
					t.Errorf("%s=%s --%s %q: exit %d, %q; want exit 2 naming --%s", r.env, r.good, r.flag, v, code, line, r.flag)
				}
			}
		})
	}
}

// serveOnce runs nexus serve with args, and the variable env set to value
// (none when env is ""), on a registry whose folder cannot be made: a
// configuration it takes fails there at once (exit 1) rather than serving.
// The log format, the address and the registry are given by flags, but
// that of flagName, the setting under test.
// It returns the exit code and stderr, which must be one line.
func serveOnce(t *testing.T, flagName string, args []string, env, value string) (int, string) {
	t.Helper()
	if env != "" {
		os.Setenv(env, value)
		defer os.Unsetenv(env)
	}
	var base []string
	for _, kv := range [][2]string{{"log-format", "text"}, {"listen", "127.0.0.1:0"}, {"db", unmakeableDB(t)}} {
		if kv[0] != flagName {
			base = append(base, "--"+kv[0], kv[1])
		}
	}
	var stdout, stderr bytes.Buffer
	code := runServe(append(base, args...), &stdout, &stderr)
	out := strings.TrimSuffix(stderr.String(), "\n")
	if code == exitUsage && strings.Contains(out, "\n") {
		t.Errorf("nexus serve %q (%s=%q): the error runs over more than one line:\n%s", args, env, value, out)
	}
	return code, firstLine(out)
}

// normalDefault is a default written one way: a duration as Go prints it
// (the table's 168h is 168h0m0s).
func normalDefault(s string) string {
	if d, err := time.ParseDuration(s); err == nil {
		return d.String()
	}
	return s
}
