package registry_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestWatcherLeavesThisProcessesPublications: the watcher logs
// live_set_changed for another handle's publication only. A check made
// between this handle's publication and its own load (a sync's round)
// loaded the set and logged it as a change from elsewhere; one made after
// the load finds the set live and does nothing.
func TestWatcherLeavesThisProcessesPublications(t *testing.T) {
	r, clk := newRegistry(t)
	other := open(t, r.Path(), registry.Options{Now: clk.Now})
	load(t, r)
	var logs jsonlogtest.Buffer
	w := &registry.Watcher{Registry: r, Clock: clk, Logger: logs.Logger(slog.LevelInfo)}
	w.Start()
	defer w.Stop()
	clk.WaitCalls(t, 1)

	// this process's sync: publishes, the watcher checks, the sync loads
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}})
	clk.Step(t)
	load(t, r)
	clk.Step(t)
	// and again, the watcher checking after the load only
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "2")}})
	load(t, r)
	clk.Step(t)
	// another process's publication
	publish(t, other, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "b", "1")}})
	clk.Step(t)
	w.Stop()

	want := []liveFlow{{Tenant: "acme", Name: "a", Version: 2, Mark: "2"}, {Tenant: "acme", Name: "b", Version: 1, Mark: "1"}}
	if diff := cmp.Diff(want, summary(r.Live())); diff != "" {
		t.Errorf("the live set (-want +got):\n%s", diff)
	}
	var gens []float64
	for _, e := range logs.Events(t, "live_set_changed") {
		gens = append(gens, e["generation"].(float64))
	}
	if diff := cmp.Diff([]float64{3}, gens); diff != "" {
		t.Errorf("the generations of the live_set_changed lines (-want +got):\n%s\nlog:\n%s", diff, logs.String())
	}
}

// restore replaces the content of the registry at path by that of backup,
// in one transaction, as sqlite3's .restore does under a running server.
func restore(t *testing.T, path, backup string) {
	t.Helper()
	db := sideDB(t, path)
	exec(t, db, `ATTACH DATABASE ? AS b`, backup)
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func(tx *sql.Tx) { _ = tx.Rollback() }(tx)
	for _, q := range []string{
		`DELETE FROM main.latest`, `DELETE FROM main.flow_versions`, `DELETE FROM main.state`,
		`INSERT INTO main.flow_versions SELECT * FROM b.flow_versions`,
		`INSERT INTO main.latest SELECT * FROM b.latest`,
		`INSERT INTO main.state SELECT * FROM b.state`,
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestWatcherRegistryWentBack: a registry.db restored under the running
// process from an older backup (its generation below the live set's) is
// loaded once, with one warning naming both generations, and followed
// from there; the watcher loaded it at every check for ever, logging
// live_set_changed each time, and never served it.
func TestWatcherRegistryWentBack(t *testing.T) {
	clk := newClock()
	var logs jsonlogtest.Buffer
	path := dbPath(t)
	r := open(t, path, registry.Options{Now: clk.Now, Logger: logs.Logger(slog.LevelInfo)})
	other := open(t, path, registry.Options{Now: clk.Now})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}, Commit: "c1"})
	backup := filepath.Join(t.TempDir(), "backup.db")
	exec(t, sideDB(t, path), `VACUUM INTO ?`, backup)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "2")}, Commit: "c2"})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "b", "1")}, Commit: "c3"})
	if g := load(t, r).Generation(); g != 3 {
		t.Fatalf("the live set's generation is %d, want 3", g)
	}

	var swaps atomic.Int32
	w := &registry.Watcher{Registry: r, Clock: clk, Logger: logs.Logger(slog.LevelInfo),
		OnSwap: func(*registry.LiveSet) { swaps.Add(1) }}
	w.Start()
	defer w.Stop()
	clk.WaitCalls(t, 1)
	restore(t, path, backup)
	for range 5 {
		clk.Step(t)
	}
	want := []liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}}
	if diff := cmp.Diff(want, summary(r.Live())); diff != "" {
		t.Errorf("the live set after the restore (-want +got):\n%s", diff)
	}
	if g, c := r.Live().Generation(), r.Live().Commit(); g != 1 || c != "c1" {
		t.Errorf("the live set after the restore is generation %d of commit %q, want 1 of c1", g, c)
	}
	if n := swaps.Load(); n != 1 {
		t.Errorf("5 checks after the restore swapped %d live sets, want 1", n)
	}
	type wentBack struct{ From, To float64 }
	var got []wentBack
	for _, e := range logs.Events(t, "registry_generation_went_back") {
		got = append(got, wentBack{e["live_generation"].(float64), e["generation"].(float64)})
	}
	if diff := cmp.Diff([]wentBack{{3, 1}}, got); diff != "" {
		t.Errorf("registry_generation_went_back lines (-want +got):\n%s\nlog:\n%s", diff, logs.String())
	}
	if n := len(logs.Events(t, "live_set_changed")); n != 1 {
		t.Errorf("%d live_set_changed lines, want 1\nlog:\n%s", n, logs.String())
	}

	// followed from there: another handle's publication is generation 2
	publish(t, other, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "c", "1")}})
	clk.Step(t)
	want = append(want, liveFlow{Tenant: "acme", Name: "c", Version: 1, Mark: "1"})
	if diff := cmp.Diff(want, summary(r.Live())); diff != "" {
		t.Errorf("the live set after a publication (-want +got):\n%s", diff)
	}
	if g := r.Live().Generation(); g != 2 {
		t.Errorf("the live set's generation is %d, want 2", g)
	}
}
