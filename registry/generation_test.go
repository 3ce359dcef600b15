package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// TestGenerationNotAnInteger: a generation counter a person (or a damaged
// file) left as something other than an integer is refused alike by every
// read of it, with one error naming the counter and what it holds; Status
// read it as 0 while Snapshot and Load failed with a driver's conversion
// error.
func TestGenerationNotAnInteger(t *testing.T) {
	for _, value := range []any{"seven", "1.5", "", []byte{0xff}, 2.5, "missing"} {
		path := dbPath(t)
		r, err := registry.Open(context.Background(), path, registry.Options{Now: newClock().Now})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if value == "missing" {
			exec(t, sideDB(t, path), `DELETE FROM state WHERE key = 'generation'`)
		} else {
			exec(t, sideDB(t, path), `UPDATE state SET value = ? WHERE key = 'generation'`, value)
		}
		ctx := context.Background()
		_, errStatus := r.Status(ctx)
		_, _, errSnapshot := r.Snapshot(ctx)
		_, errGen := r.Generation(ctx)
		_, errLoad := r.Load(ctx)
		for name, err := range map[string]error{"Status": errStatus, "Snapshot": errSnapshot, "Generation": errGen, "Load": errLoad} {
			if err == nil || !strings.Contains(err.Error(), "the generation counter in registry.db is ") {
				t.Errorf("generation %#v: %s: %v, want the generation counter named", value, name, err)
			}
		}
	}
}

// TestPublicationOverAGenerationNotAnInteger: a publication into a
// registry whose generation counter is not an integer (or is missing) is
// refused with the one error every read gives, naming the counter, and
// leaves the counter as it found it. SQLite's value + 1 made "seven" 1 and
// "1.5" 2.5 without a word (the counter going back under every other
// process), and a missing counter failed the publication with
// "sql: no rows in result set".
func TestPublicationOverAGenerationNotAnInteger(t *testing.T) {
	for _, value := range []any{"seven", "1.5", "", []byte{0xff}, "missing"} {
		path := dbPath(t)
		r, err := registry.Open(context.Background(), path, registry.Options{Now: newClock().Now})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		side := sideDB(t, path)
		if value == "missing" {
			exec(t, side, `DELETE FROM state WHERE key = 'generation'`)
		} else {
			exec(t, side, `UPDATE state SET value = ? WHERE key = 'generation'`, value)
		}
		var before any
		_ = side.QueryRow(`SELECT value FROM state WHERE key = 'generation'`).Scan(&before)
		_, err = r.Publish(context.Background(), registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}, Commit: "c1"})
		if err == nil || !strings.Contains(err.Error(), "the generation counter in registry.db is ") {
			t.Errorf("generation %#v: Publish: %v, want the generation counter named", value, err)
		}
		var after any
		_ = side.QueryRow(`SELECT value FROM state WHERE key = 'generation'`).Scan(&after)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("generation %#v: the counter was %v after the publication, want it left as %v", value, after, before)
		}
	}
}
