package registry_test

import (
	"context"
	"strings"
	"testing"

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
