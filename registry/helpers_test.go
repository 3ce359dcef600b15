package registry_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/registry"
)

// t0 is the fake clocks' starting time.
var t0 = time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)

// newClock is a fake clock at t0.
func newClock() *clocktest.Fake { return clocktest.New(t0) }

// dbPath is a registry path in a fresh temporary folder (a subfolder, so
// that Open has to create it).
func dbPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "state", "registry.db")
}

// open opens the registry at path and closes it when the test ends.
func open(t testing.TB, path string, opts registry.Options) *registry.Registry {
	t.Helper()
	r, err := registry.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newRegistry opens a registry in a fresh folder with a fake clock.
func newRegistry(t testing.TB) (*registry.Registry, *clocktest.Fake) {
	t.Helper()
	c := newClock()
	return open(t, dbPath(t), registry.Options{Now: c.Now}), c
}

// sideDB opens path through a separate database/sql handle, as another
// program would, to look at or tamper with the tables directly.
func sideDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// compile compiles flowtest.Marked(tenant, name, mark) as flows/TENANT/NAME.md.
func compile(t testing.TB, tenant, name, mark string) *flow.Flow {
	t.Helper()
	return compileAt(t, "flows/"+tenant+"/"+name+".md", tenant, name, mark)
}

// compileAt compiles flowtest.Marked(tenant, name, mark) as path.
func compileAt(t testing.TB, path, tenant, name, mark string) *flow.Flow {
	t.Helper()
	f, err := flow.Compile(path, flowtest.Marked(tenant, name, mark))
	if err != nil {
		t.Fatalf("compiling %s: %v", path, err)
	}
	return f
}

// keysFile is an access.yaml holding one key per (id, tenant, secret)
// triple, allowed every flow of its tenant.
func keysFile(t testing.TB, keys ...[3]string) *access.Set {
	t.Helper()
	src := "keys:\n"
	if len(keys) == 0 {
		src = "keys: []\n"
	}
	for _, k := range keys {
		src += access.Entry(k[0], k[1], []string{"*"}, 10, 20, access.HashKey(k[2]))
	}
	set, err := access.Parse("access.yaml", []byte(src))
	if err != nil {
		t.Fatalf("access.yaml does not parse: %v\n%s", err, src)
	}
	return set
}

func publish(t testing.TB, r *registry.Registry, p registry.Publication) []registry.Change {
	t.Helper()
	changes, err := r.Publish(context.Background(), p)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return changes
}

func load(t testing.TB, r *registry.Registry) *registry.LiveSet {
	t.Helper()
	ls, err := r.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return ls
}

func generation(t testing.TB, r *registry.Registry) int64 {
	t.Helper()
	g, err := r.Generation(context.Background())
	if err != nil {
		t.Fatalf("Generation: %v", err)
	}
	return g
}

func status(t testing.TB, r *registry.Registry) registry.Status {
	t.Helper()
	st, err := r.Status(context.Background())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// liveFlow is what a test compares of a LiveFlow.
type liveFlow struct {
	Tenant, Name string
	Version      int
	Mark         string // the compiled flow's description; "" when not compiled
	Corrupt      bool
}

// summary lists the set's flows as liveFlows, in the set's order.
func summary(ls *registry.LiveSet) []liveFlow {
	var out []liveFlow
	for _, lf := range ls.Flows() {
		s := liveFlow{Tenant: lf.Tenant, Name: lf.Name, Version: lf.Version, Corrupt: lf.Corrupt != nil}
		if lf.Flow != nil {
			s.Mark = lf.Flow.Description()
		}
		out = append(out, s)
	}
	return out
}

// versions lists the stored versions of tenant/flow, read directly.
func versions(t testing.TB, db *sql.DB, tenant, name string) []int {
	t.Helper()
	return column[int](t, db, `SELECT version FROM flow_versions WHERE tenant = ? AND flow = ? ORDER BY version`, tenant, name)
}

// column runs query, which selects one column, and returns its values.
func column[T any](t testing.TB, db *sql.DB, query string, args ...any) []T {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// quietLogger discards everything.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// lockAsAnotherProcess takes SQLite's write lock on path through a handle of its own,
// as another process's long write would; the returned func releases it.
func lockAsAnotherProcess(t *testing.T, path string) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := sideDB(t, path).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			conn.ExecContext(ctx, `ROLLBACK`)
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}
