package main

import (
	"bytes"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/nexushq/nexus/registry"
)

// schemaOf lists the names in sqlite_master and the user_version of the
// database at path, read through a handle of its own.
func schemaOf(t *testing.T, path string) ([]string, int, string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT type || ' ' || name FROM sqlite_master ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	var v int
	var mode string
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	return names, v, mode
}

// newRegistryFile makes a registry of the current schema, closed, and
// returns its path and a handle of the test's own on the file.
func newRegistryFile(t *testing.T) (string, *sql.DB) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "registry.db")
	r, err := registry.Open(t.Context(), p, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	return p, db
}

// TestReadOnlyCommandsDoNotWriteTheSchema: nexus status and nexus
// journal only read (docs/decisions.md: "Commands that only read ... create
// nothing"). Given --db naming an SQLite database that is not a registry
// (another program's), or a registry of an older schema, they refuse it in
// one line and leave it as it is (they once switched it to WAL and ran
// every migration in it).
func TestReadOnlyCommandsDoNotWriteTheSchema(t *testing.T) {
	for _, cmd := range []string{"status", "journal"} {
		t.Run(cmd+"/foreign database", func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "other.db")
			db, err := sql.Open("sqlite", "file:"+p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)`); err != nil {
				t.Fatal(err)
			}
			db.Close()
			before, bv, bm := schemaOf(t, p)
			var stdout, stderr bytes.Buffer
			code := run([]string{cmd, "--db", p}, &stdout, &stderr)
			after, av, am := schemaOf(t, p)
			if !slices.Equal(before, after) || bv != av || bm != am {
				t.Errorf("nexus %s --db (another program's SQLite database), exit %d, changed it:\nschema %q -> %q\nuser_version %d -> %d, journal_mode %s -> %s",
					cmd, code, before, after, bv, av, bm, am)
			}
			want := "nexus " + cmd + ": registry " + p + ": not a registry (an SQLite database without nexus's tables)\n"
			if code != exitError || stderr.String() != want {
				t.Errorf("nexus %s --db (another program's SQLite database): exit %d, %q; want exit 1 and %q", cmd, code, stderr.String(), want)
			}
		})
		t.Run(cmd+"/older registry", func(t *testing.T) {
			p := olderRegistryFile(t)
			before, bv, _ := schemaOf(t, p)
			var stdout, stderr bytes.Buffer
			code := run([]string{cmd, "--db", p}, &stdout, &stderr)
			after, av, _ := schemaOf(t, p)
			if !slices.Equal(before, after) || bv != av {
				t.Errorf("nexus %s --db (a schema-1 registry), exit %d, migrated it:\nschema %q -> %q\nuser_version %d -> %d",
					cmd, code, before, after, bv, av)
			}
			if code != exitError || !strings.Contains(stderr.String(), "schema version 1 is older than this nexus reads (2): nexus serve or nexus deploy upgrades it") {
				t.Errorf("nexus %s --db (a schema-1 registry): exit %d, %q; want exit 1 naming the versions", cmd, code, stderr.String())
			}
		})
	}
}

// TestReadOnlyCommandsNeedNoWriteLock: nexus status and nexus journal
// only read, and in WAL mode a reader never waits for a writer: while a
// server holds the write lock (a publication, a prune) they answer at once
// (they once took the write lock to check the migrations, and failed with
// "database is locked" after 10 s).
func TestReadOnlyCommandsNeedNoWriteLock(t *testing.T) {
	p, db := newRegistryFile(t)
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"status", "journal"} {
		done := make(chan int, 1)
		var stdout, stderr bytes.Buffer
		go func() { done <- run([]string{cmd, "--db", p}, &stdout, &stderr) }()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("nexus %s while a writer holds the lock: exit %d, %s", cmd, code, stderr.String())
			}
		case <-time.After(2 * time.Second):
			t.Errorf("nexus %s was still waiting for the write lock after 2 s", cmd)
			conn.ExecContext(t.Context(), `ROLLBACK`) // let it finish
			<-done
			return
		}
	}
	conn.ExecContext(t.Context(), `ROLLBACK`)
}

// olderRegistryFile makes a registry of schema version 1, closed, and
// returns its path.
func olderRegistryFile(t *testing.T) string {
	t.Helper()
	p, db := newRegistryFile(t)
	defer db.Close()
	for _, q := range []string{`DROP INDEX journal_flow_at`, `CREATE INDEX journal_flow ON journal (tenant, flow, id)`, `PRAGMA user_version = 1`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestDLQListAndDiscardBesideAnOlderRegistry: the dead letters are in the
// queues' files, which the registry's schema does not change: beside a
// registry of an older schema (a server not yet restarted on a new nexus),
// nexus dlq list lists them and nexus dlq discard marks one, leaving the
// registry as it is; nexus dlq replay, which reads the live set, refuses
// it as nexus status does. list and discard refused it too.
func TestDLQListAndDiscardBesideAnOlderRegistry(t *testing.T) {
	p := olderRegistryFile(t)
	q, _ := deadLetterQueue(t, filepath.Dir(p), 2)
	q.Close()
	before, bv, bm := schemaOf(t, p)
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // its first line
		stderr string
	}{
		{[]string{"dlq", "list"}, exitOK, "DLQ: 2 pending message(s)", ""},
		{[]string{"dlq", "discard", "--tenant", "acme", "--flow", "orders", "--id", "1"}, exitOK, "discarded id=1 tenant=acme flow=orders", ""},
		{[]string{"dlq", "list"}, exitOK, "DLQ: 1 pending message(s)", ""},
		{[]string{"dlq", "replay", "--tenant", "acme", "--flow", "orders", "--id", "2"}, exitError, "",
			"nexus dlq replay: registry " + p + ": schema version 1 is older than this nexus reads (2): nexus serve or nexus deploy upgrades it\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(c.args, "--db", p), &stdout, &stderr)
		if code != c.code || firstLine(stdout.String()) != c.stdout || stderr.String() != c.stderr {
			t.Errorf("nexus %s beside a schema-1 registry: exit %d, stdout %q, stderr %q; want exit %d, %q first and %q",
				strings.Join(c.args, " "), code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
	}
	after, av, am := schemaOf(t, p)
	if !slices.Equal(before, after) || bv != av || bm != am {
		t.Errorf("nexus dlq changed the schema-1 registry:\nschema %q -> %q\nuser_version %d -> %d, journal_mode %s -> %s", before, after, bv, av, bm, am)
	}
}
