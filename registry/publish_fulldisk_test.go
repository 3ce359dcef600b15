//go:build linux

package registry_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// TestPublishOnAFullDisk: a publication the disk has no room for (the
// server's sync, nexus deploy) fails with an error that names the registry
// and says its disk is full, and publishes nothing: the live set, read by
// another handle as nexus status does, is the one before it. Its error was
// SQLite's "database or disk is full (13)", which names neither.
func TestPublishOnAFullDisk(t *testing.T) {
	dir := smallDisk(t, 1<<20)
	path := filepath.Join(dir, "registry.db")
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: compileAll(t, "a", "b"), Commit: "c1"})
	filler := fillDisk(t, dir)

	big := strings.Repeat("x", 64<<10)
	var flows []*flow.Flow
	for _, n := range []string{"a", "b", "c", "d"} {
		flows = append(flows, compile(t, "acme", n, big))
	}
	_, err := r.Publish(context.Background(), registry.Publication{Flows: flows, Commit: "c2"})
	if want := "registry " + path + ": the disk holding " + dir + " is full ("; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Publish on a full disk: %v; want an error beginning %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Publish on a full disk: the error is more than one line: %q", err)
	}

	reader := open(t, path, registry.Options{ReadOnly: true})
	want := []liveFlow{{Tenant: "acme", Name: "a", Version: 1, Mark: "1"}, {Tenant: "acme", Name: "b", Version: 1, Mark: "1"}}
	if diff := cmp.Diff(want, summary(load(t, reader))); diff != "" {
		t.Errorf("the live set after the refused publication (-want +got):\n%s", diff)
	}
	if st := status(t, reader); st.Commit != "c1" || st.Generation != 1 {
		t.Errorf("status after the refused publication: commit %q generation %d, want c1 and 1", st.Commit, st.Generation)
	}

	// room again: the same publication goes through
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	publish(t, r, registry.Publication{Flows: flows, Commit: "c2"})
	if got := summary(load(t, reader)); len(got) != 4 {
		t.Errorf("the live set once the disk has room: %v, want 4 flows", got)
	}
}
