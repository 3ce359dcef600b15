package registry_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

func TestChangeString(t *testing.T) {
	tests := []struct {
		c    registry.Change
		want string
	}{
		{registry.Change{Tenant: "acme", Flow: "order-intake", Version: 3, Action: registry.Published}, "published acme/order-intake v3"},
		{registry.Change{Tenant: "acme", Flow: "x", Version: 1, Action: registry.Unchanged}, "unchanged acme/x v1"},
		{registry.Change{Tenant: "globex", Flow: "legacy-intake", Version: 12, Action: registry.Withdrawn}, "withdrawn globex/legacy-intake v12"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.c, got, tt.want)
		}
	}
}

// changeStrings formats changes as Change.String does.
func changeStrings(cs []registry.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// TestPublishLifecycle walks one flow through publish, republish unchanged,
// change, withdraw and publish again, checking after each step what Publish
// answered, the generation and the live set.
func TestPublishLifecycle(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	db := sideDB(t, path)

	steps := []struct {
		name     string
		pub      registry.Publication
		want     []string
		wantGen  int64
		wantLive []liveFlow
	}{
		{
			name:     "first publication starts at v1",
			pub:      registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "x", "one")}},
			want:     []string{"published acme/x v1"},
			wantGen:  1,
			wantLive: []liveFlow{{Tenant: "acme", Name: "x", Version: 1, Mark: "one"}},
		},
		{
			name:     "republished unchanged",
			pub:      registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "x", "one")}},
			want:     []string{"unchanged acme/x v1"},
			wantGen:  1,
			wantLive: []liveFlow{{Tenant: "acme", Name: "x", Version: 1, Mark: "one"}},
		},
		{
			name:     "changed becomes v2",
			pub:      registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "x", "two")}},
			want:     []string{"published acme/x v2"},
			wantGen:  2,
			wantLive: []liveFlow{{Tenant: "acme", Name: "x", Version: 2, Mark: "two"}},
		},
		{
			name:     "complete publication without it withdraws it",
			pub:      registry.Publication{Complete: true, Flows: []*flow.Flow{compile(t, "acme", "y", "one")}},
			want:     []string{"withdrawn acme/x v2", "published acme/y v1"},
			wantGen:  3,
			wantLive: []liveFlow{{Tenant: "acme", Name: "y", Version: 1, Mark: "one"}},
		},
		{
			name:    "published again after the withdrawal: a new version",
			pub:     registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "x", "two")}},
			want:    []string{"published acme/x v3"},
			wantGen: 4,
			wantLive: []liveFlow{
				{Tenant: "acme", Name: "x", Version: 3, Mark: "two"},
				{Tenant: "acme", Name: "y", Version: 1, Mark: "one"},
			},
		},
	}
	for _, s := range steps {
		got := changeStrings(publish(t, r, s.pub))
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: changes (-want +got):\n%s", s.name, diff)
		}
		if g := generation(t, r); g != s.wantGen {
			t.Errorf("%s: generation %d, want %d", s.name, g, s.wantGen)
		}
		ls := load(t, r)
		if diff := cmp.Diff(s.wantLive, summary(ls)); diff != "" {
			t.Errorf("%s: live set (-want +got):\n%s", s.name, diff)
		}
		if ls.Generation() != s.wantGen {
			t.Errorf("%s: live set generation %d, want %d", s.name, ls.Generation(), s.wantGen)
		}
	}

	// Every version is kept, with its own artifact.
	if diff := cmp.Diff([]int{1, 2, 3}, versions(t, db, "acme", "x")); diff != "" {
		t.Errorf("versions of acme/x (-want +got):\n%s", diff)
	}
	for v, mark := range map[int]string{1: "one", 2: "two", 3: "two"} {
		var art []byte
		var sum string
		if err := db.QueryRow(`SELECT artifact, sha256 FROM flow_versions WHERE tenant = 'acme' AND flow = 'x' AND version = ?`, v).Scan(&art, &sum); err != nil {
			t.Fatal(err)
		}
		want := compile(t, "acme", "x", mark).Artifact()
		if !bytes.Equal(art, want) {
			t.Errorf("acme/x v%d: the stored artifact is not the one published", v)
		}
		if s := flow.Sum(want); sum != hex.EncodeToString(s[:]) {
			t.Errorf("acme/x v%d: stored sha256 %s, want %x", v, sum, s)
		}
	}
}

func TestPublishSortsChanges(t *testing.T) {
	r, _ := newRegistry(t)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "m", "1"), compile(t, "acme", "old", "1")}})
	got := publish(t, r, registry.Publication{Complete: true, Flows: []*flow.Flow{
		compile(t, "globex", "b", "1"),
		compile(t, "acme", "z", "1"),
		compile(t, "globex", "a", "1"),
		compile(t, "acme", "m", "1"),
		compile(t, "acme", "a", "1"),
	}})
	want := []registry.Change{
		{Tenant: "acme", Flow: "a", Version: 1, Action: registry.Published},
		{Tenant: "acme", Flow: "m", Version: 1, Action: registry.Unchanged},
		{Tenant: "acme", Flow: "old", Version: 1, Action: registry.Withdrawn},
		{Tenant: "acme", Flow: "z", Version: 1, Action: registry.Published},
		{Tenant: "globex", Flow: "a", Version: 1, Action: registry.Published},
		{Tenant: "globex", Flow: "b", Version: 1, Action: registry.Published},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

// A publication that is not Complete (nexus deploy) leaves the other flows
// alone; a Complete one with no flows withdraws everything.
func TestPublishCompleteOrNot(t *testing.T) {
	r, _ := newRegistry(t)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "globex", "b", "1")}})

	got := changeStrings(publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "c", "1")}}))
	if diff := cmp.Diff([]string{"published acme/c v1"}, got); diff != "" {
		t.Errorf("deploy: changes (-want +got):\n%s", diff)
	}
	want := []liveFlow{
		{Tenant: "acme", Name: "a", Version: 1, Mark: "1"},
		{Tenant: "acme", Name: "c", Version: 1, Mark: "1"},
		{Tenant: "globex", Name: "b", Version: 1, Mark: "1"},
	}
	if diff := cmp.Diff(want, summary(load(t, r))); diff != "" {
		t.Errorf("deploy: live set (-want +got):\n%s", diff)
	}

	got = changeStrings(publish(t, r, registry.Publication{Complete: true}))
	if diff := cmp.Diff([]string{"withdrawn acme/a v1", "withdrawn acme/c v1", "withdrawn globex/b v1"}, got); diff != "" {
		t.Errorf("empty complete publication: changes (-want +got):\n%s", diff)
	}
	if ls := load(t, r); len(ls.Flows()) != 0 {
		t.Errorf("after withdrawing everything the live set holds %v", summary(ls))
	}
	if st := status(t, r); st.Flows != 0 {
		t.Errorf("Status().Flows = %d after withdrawing everything, want 0", st.Flows)
	}
}

// state is everything a failed publication must leave as it was.
type state struct {
	Generation int64
	Status     registry.Status
	Live       []liveFlow
	Keys       []string // ids of the keys of the live set
	Versions   map[string][]int
}

func readState(t *testing.T, r *registry.Registry, path string) state {
	t.Helper()
	db := sideDB(t, path)
	ls := load(t, r)
	st := state{Generation: generation(t, r), Status: status(t, r), Live: summary(ls), Versions: map[string][]int{}}
	for _, k := range ls.Access().Keys() {
		st.Keys = append(st.Keys, k.ID)
	}
	for _, name := range []string{"a", "old", "x", "boom"} {
		st.Versions[name] = versions(t, db, "acme", name)
	}
	return st
}

// baseline publishes the state the failure tests start from: acme/a and
// acme/old at v1, key k1, commit c1.
func baseline(t *testing.T) (*registry.Registry, string) {
	t.Helper()
	path := dbPath(t)
	c := newClock()
	r := open(t, path, registry.Options{Now: c.Now})
	publish(t, r, registry.Publication{
		Flows:  []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "old", "1")},
		Access: keysFile(t, [3]string{"k1", "acme", "secret-one"}),
		Commit: "c1",
	})
	c.Advance(time.Minute) // a later publication would record a later time
	return r, path
}

// TestPublishDuplicateFlow: two flows of one (tenant, flow) in a
// publication fail it, and nothing of it is applied.
func TestPublishDuplicateFlow(t *testing.T) {
	tests := []struct {
		name  string
		flows func(t *testing.T) []*flow.Flow
		want  string
	}{
		{
			name: "different sources",
			flows: func(t *testing.T) []*flow.Flow {
				return []*flow.Flow{
					compile(t, "acme", "a", "2"),
					compileAt(t, "flows/x1.md", "acme", "x", "1"),
					compileAt(t, "flows/x2.md", "acme", "x", "2"),
				}
			},
			want: "flow acme/x is declared in both flows/x1.md and flows/x2.md",
		},
		{
			name: "identical sources",
			flows: func(t *testing.T) []*flow.Flow {
				return []*flow.Flow{
					compileAt(t, "flows/one.md", "acme", "a", "2"),
					compileAt(t, "flows/two.md", "acme", "a", "2"),
				}
			},
			want: "flow acme/a is declared in both flows/one.md and flows/two.md",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, path := baseline(t)
			before := readState(t, r, path)
			changes, err := r.Publish(context.Background(), registry.Publication{
				Complete: true,
				Flows:    tt.flows(t),
				Access:   keysFile(t, [3]string{"k2", "acme", "secret-two"}),
				Commit:   "c2",
			})
			if err == nil {
				t.Fatalf("Publish succeeded with %v", changeStrings(changes))
			}
			if err.Error() != tt.want {
				t.Errorf("error %q, want %q", err, tt.want)
			}
			if diff := cmp.Diff(before, readState(t, r, path)); diff != "" {
				t.Errorf("a refused publication changed the registry (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPublishFailsMidTransaction makes the database refuse one statement of
// a publication, after others of it have run: nothing of it stays, and the
// next publication is numbered as if it had never been tried.
func TestPublishFailsMidTransaction(t *testing.T) {
	tests := []struct {
		name    string
		trigger string
	}{
		{"on the second flow", `CREATE TRIGGER fail BEFORE INSERT ON flow_versions WHEN NEW.flow = 'boom'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`},
		{"on the withdrawal", `CREATE TRIGGER fail BEFORE DELETE ON latest WHEN OLD.flow = 'old'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`},
		{"on the access keys", `CREATE TRIGGER fail BEFORE UPDATE ON state WHEN OLD.key = 'access'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`},
		{"on the generation counter, the last statement", `CREATE TRIGGER fail BEFORE UPDATE ON state WHEN OLD.key = 'generation'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, path := baseline(t)
			before := readState(t, r, path)
			db := sideDB(t, path)
			exec(t, db, tt.trigger)
			pub := func() registry.Publication {
				return registry.Publication{
					Complete: true,
					Flows:    []*flow.Flow{compile(t, "acme", "a", "2"), compile(t, "acme", "boom", "1")},
					Access:   keysFile(t, [3]string{"k2", "acme", "secret-two"}),
					Commit:   "c2",
				}
			}
			changes, err := r.Publish(context.Background(), pub())
			if err == nil {
				t.Fatalf("Publish succeeded with %v", changeStrings(changes))
			}
			if diff := cmp.Diff(before, readState(t, r, path)); diff != "" {
				t.Errorf("a failed publication changed the registry (-before +after):\n%s", diff)
			}

			exec(t, db, `DROP TRIGGER fail`)
			got := changeStrings(publish(t, r, pub()))
			want := []string{"published acme/a v2", "published acme/boom v1", "withdrawn acme/old v1"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the publication tried again: changes (-want +got):\n%s", diff)
			}
			if g := generation(t, r); g != before.Generation+1 {
				t.Errorf("generation %d, want %d", g, before.Generation+1)
			}
		})
	}
}

func TestPublishCanceledContext(t *testing.T) {
	r, path := baseline(t)
	before := readState(t, r, path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	changes, err := r.Publish(ctx, registry.Publication{
		Complete: true,
		Flows:    []*flow.Flow{compile(t, "acme", "a", "2")},
		Access:   keysFile(t, [3]string{"k2", "acme", "secret-two"}),
		Commit:   "c2",
	})
	if err == nil {
		t.Fatalf("Publish with a canceled context succeeded with %v", changeStrings(changes))
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want one wrapping context.Canceled", err)
	}
	if diff := cmp.Diff(before, readState(t, r, path)); diff != "" {
		t.Errorf("a canceled publication changed the registry (-before +after):\n%s", diff)
	}
}

func TestPublishClosedDatabase(t *testing.T) {
	r, path := baseline(t)
	before := readState(t, r, path)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	changes, err := r.Publish(context.Background(), registry.Publication{
		Complete: true,
		Flows:    []*flow.Flow{compile(t, "acme", "a", "2")},
		Commit:   "c2",
	})
	if err == nil {
		t.Fatalf("Publish on a closed registry succeeded with %v", changeStrings(changes))
	}
	r2 := open(t, path, registry.Options{})
	if diff := cmp.Diff(before, readState(t, r2, path)); diff != "" {
		t.Errorf("a failed publication changed the registry (-before +after):\n%s", diff)
	}
}

// TestGenerationMovesOncePerChange publishes a sequence and checks by how
// much each publication moved the generation counter: one when it changed
// flows, access keys or the commit (the live set carries its commit),
// however many, and zero otherwise.
func TestGenerationMovesOncePerChange(t *testing.T) {
	r, _ := newRegistry(t)
	// Each call parses the keys again: "the same keys" are the same bytes,
	// not the same *access.Set.
	k1 := func() *access.Set { return keysFile(t, [3]string{"k1", "acme", "secret-one"}) }
	k2 := func() *access.Set { return keysFile(t, [3]string{"k2", "acme", "secret-two"}) }
	a := func(mark string) *flow.Flow { return compile(t, "acme", "a", mark) }
	b := func(mark string) *flow.Flow { return compile(t, "acme", "b", mark) }
	steps := []struct {
		name    string
		pub     registry.Publication
		wantErr bool
		move    int64
	}{
		{name: "a new flow", pub: registry.Publication{Flows: []*flow.Flow{a("1")}}, move: 1},
		{name: "the same flow again", pub: registry.Publication{Flows: []*flow.Flow{a("1")}}},
		{name: "two flows change at once", pub: registry.Publication{Flows: []*flow.Flow{a("2"), b("1")}}, move: 1},
		{name: "one of two flows changes", pub: registry.Publication{Flows: []*flow.Flow{a("2"), b("2")}}, move: 1},
		{name: "only a new commit", pub: registry.Publication{Flows: []*flow.Flow{a("2"), b("2")}, Commit: "c1"}, move: 1},
		{name: "the same commit again", pub: registry.Publication{Complete: true, Flows: []*flow.Flow{a("2"), b("2")}, Commit: "c1"}},
		{name: "no commit: the commit stays", pub: registry.Publication{Flows: []*flow.Flow{a("2")}}},
		{name: "flows, keys and a commit at once", pub: registry.Publication{Flows: []*flow.Flow{a("2.5"), b("2.5")}, Access: keysFile(t, [3]string{"k0", "acme", "secret-zero"}), Commit: "c1.5"}, move: 1},
		{name: "access keys", pub: registry.Publication{Access: k1()}, move: 1},
		{name: "the same access keys", pub: registry.Publication{Access: k1()}},
		{name: "no access keys: left as they are", pub: registry.Publication{}},
		{name: "access keys and a flow", pub: registry.Publication{Flows: []*flow.Flow{a("3")}, Access: k2()}, move: 1},
		{name: "complete, the same set", pub: registry.Publication{Complete: true, Flows: []*flow.Flow{a("3"), b("2.5")}, Access: k2(), Commit: "c1.5"}},
		{name: "refused: a duplicate", pub: registry.Publication{Flows: []*flow.Flow{a("4"), a("5")}, Access: k1()}, wantErr: true},
		{name: "complete, one withdrawn", pub: registry.Publication{Complete: true, Flows: []*flow.Flow{a("3")}}, move: 1},
		{name: "complete, the rest withdrawn", pub: registry.Publication{Complete: true}, move: 1},
		{name: "complete, nothing left to withdraw", pub: registry.Publication{Complete: true}},
		{name: "a withdrawn flow published again", pub: registry.Publication{Flows: []*flow.Flow{b("2")}}, move: 1},
	}
	for _, s := range steps {
		before := generation(t, r)
		_, err := r.Publish(context.Background(), s.pub)
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: Publish error %v, want error %v", s.name, err, s.wantErr)
		}
		if got := generation(t, r) - before; got != s.move {
			t.Errorf("%s: the generation moved by %d, want %d", s.name, got, s.move)
		}
		if st := status(t, r); st.Generation != before+s.move {
			t.Errorf("%s: Status().Generation %d, want %d", s.name, st.Generation, before+s.move)
		}
	}
}

func TestPublishAccess(t *testing.T) {
	r, _ := newRegistry(t)

	ls := load(t, r)
	if ls.Access() == nil {
		t.Fatal("Access() is nil before any keys were published; want an empty set")
	}
	if n := ls.Access().Len(); n != 0 {
		t.Errorf("Access().Len() = %d before any keys were published, want 0", n)
	}

	publish(t, r, registry.Publication{
		Flows:  []*flow.Flow{compile(t, "acme", "a", "1")},
		Access: keysFile(t, [3]string{"acme-orders", "acme", "secret-one"}, [3]string{"globex-all", "globex", "secret-globex"}),
	})
	ls = load(t, r)
	k, ok := ls.Access().Lookup("secret-one")
	if !ok {
		t.Fatal("the published key is not found in the live set")
	}
	if k.ID != "acme-orders" || k.Tenant != "acme" || !k.Allows("anything") {
		t.Errorf("Lookup found %+v", k)
	}
	if k, ok := ls.Access().Lookup("secret-globex"); !ok || k.ID != "globex-all" {
		t.Errorf("Lookup(secret-globex) = %+v, %v", k, ok)
	}
	if _, ok := ls.Access().Lookup("secret-two"); ok {
		t.Error("an unpublished key was found")
	}
	gen := generation(t, r)

	// The same keys (parsed again) do not move the generation; nil leaves
	// the keys as they are.
	publish(t, r, registry.Publication{Access: keysFile(t, [3]string{"acme-orders", "acme", "secret-one"}, [3]string{"globex-all", "globex", "secret-globex"})})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "2")}})
	if g := generation(t, r); g != gen+1 {
		t.Errorf("generation %d after the same keys and a changed flow, want %d", g, gen+1)
	}
	ls = load(t, r)
	if _, ok := ls.Access().Lookup("secret-one"); !ok {
		t.Error("a publication without access keys dropped the keys")
	}

	// New keys replace the old ones.
	publish(t, r, registry.Publication{Access: keysFile(t, [3]string{"acme-new", "acme", "secret-two"})})
	if g := generation(t, r); g != gen+2 {
		t.Errorf("generation %d after new keys, want %d", g, gen+2)
	}
	ls = load(t, r)
	if _, ok := ls.Access().Lookup("secret-one"); ok {
		t.Error("a replaced key is still found")
	}
	if k, ok := ls.Access().Lookup("secret-two"); !ok || k.ID != "acme-new" {
		t.Errorf("Lookup(secret-two) = %+v, %v", k, ok)
	}

	// The keys survive closing and opening the registry.
	r2 := open(t, r.Path(), registry.Options{})
	if k, ok := load(t, r2).Access().Lookup("secret-two"); !ok || k.ID != "acme-new" {
		t.Errorf("after reopening: Lookup(secret-two) = %+v, %v", k, ok)
	}
}

func TestStatus(t *testing.T) {
	r, c := newRegistry(t)
	ctx := context.Background()
	check := func(step string, want registry.Status) {
		t.Helper()
		if diff := cmp.Diff(want, status(t, r)); diff != "" {
			t.Errorf("%s: Status (-want +got):\n%s", step, diff)
		}
	}
	check("fresh", registry.Status{})

	publish(t, r, registry.Publication{Complete: true, Commit: "c1", Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "b", "1")}})
	synced := t0
	check("after a sync", registry.Status{Commit: "c1", SyncedAt: synced, Flows: 2, Generation: 1})

	c.Advance(time.Minute)
	errs := []string{"flows/x.md:7: unknown front matter key \"flwo\"", "access.yaml:3: tenant is required"}
	if err := r.RecordSyncFailure(ctx, "c2", errs, registry.SyncSource{}); err != nil {
		t.Fatal(err)
	}
	failed := &registry.SyncError{Commit: "c2", Errors: errs, At: t0.Add(time.Minute)}
	check("after a refused commit", registry.Status{Commit: "c1", SyncedAt: synced, Flows: 2, Generation: 1, LastError: failed})

	c.Advance(time.Minute)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "c", "1")}})
	check("a deploy without a commit keeps the last error", registry.Status{Commit: "c1", SyncedAt: synced, Flows: 3, Generation: 2, LastError: failed})

	c.Advance(time.Minute)
	if err := r.RecordSyncFailure(ctx, "c3", errs[:1], registry.SyncSource{}); err != nil {
		t.Fatal(err)
	}
	failed = &registry.SyncError{Commit: "c3", Errors: errs[:1], At: t0.Add(3 * time.Minute)}
	check("a second refused commit replaces the first", registry.Status{Commit: "c1", SyncedAt: synced, Flows: 3, Generation: 2, LastError: failed})

	c.Advance(time.Minute)
	publish(t, r, registry.Publication{Complete: true, Commit: "c4", Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "b", "1"), compile(t, "acme", "c", "1")}})
	// The flows are unchanged; the new commit alone moves the generation.
	check("a good commit clears it", registry.Status{Commit: "c4", SyncedAt: t0.Add(4 * time.Minute), Flows: 3, Generation: 3})
	if ls := load(t, r); ls.Commit() != "c4" || ls.Generation() != 3 {
		t.Errorf("the live set: commit %q, generation %d; want c4, 3", ls.Commit(), ls.Generation())
	}

	c.Advance(time.Minute)
	if err := r.RecordSyncFailure(ctx, "c5", errs, registry.SyncSource{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ClearSyncFailure(ctx); err != nil {
		t.Fatal(err)
	}
	check("ClearSyncFailure forgets the refused commit", registry.Status{Commit: "c4", SyncedAt: t0.Add(4 * time.Minute), Flows: 3, Generation: 3})
	if err := r.ClearSyncFailure(ctx); err != nil {
		t.Errorf("ClearSyncFailure with nothing to clear: %v", err)
	}

	// Another handle reads the same.
	r2 := open(t, r.Path(), registry.Options{})
	st, err := r2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(status(t, r), st); diff != "" {
		t.Errorf("Status through a second handle (-first +second):\n%s", diff)
	}
}

// A flow whose file moved, unchanged otherwise, is a new version naming
// its new file, in this process's live set and in another's.
func TestPublishMovedFile(t *testing.T) {
	r, _ := newRegistry(t)
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compileAt(t, "flows/old.md", "acme", "x", "m")}, Complete: true, Commit: "c1"})
	load(t, r)
	changes := publish(t, r, registry.Publication{Flows: []*flow.Flow{compileAt(t, "flows/acme/x.md", "acme", "x", "m")}, Complete: true, Commit: "c2"})
	if diff := cmp.Diff([]registry.Change{{Tenant: "acme", Flow: "x", Version: 2, Action: registry.Published}}, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	lf, _ := load(t, r).Lookup("acme", "x")
	other, _ := load(t, open(t, r.Path(), registry.Options{})).Lookup("acme", "x")
	if lf.SourcePath != "flows/acme/x.md" || lf.Flow.Path() != "flows/acme/x.md" || other.Flow.Path() != "flows/acme/x.md" {
		t.Errorf("after the move: SourcePath %q, Flow.Path %q, another process's Flow.Path %q", lf.SourcePath, lf.Flow.Path(), other.Flow.Path())
	}
}
