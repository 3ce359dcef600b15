package registry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestCorruptArtifactLoggedOnceUnderConcurrentLoads: the watcher's Refresh
// and the sync's Refresh/Load build from the same live set at once; the
// corrupt version must still be logged once per process.
func TestCorruptArtifactLoggedOnceUnderConcurrentLoads(t *testing.T) {
	for round := range 20 {
		path := dbPath(t)
		var buf jsonlogtest.Buffer
		r := open(t, path, registry.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		var fs []*flow.Flow
		for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
			fs = append(fs, compile(t, "acme", n, "1"))
		}
		publish(t, r, registry.Publication{Flows: fs})
		art := bytes.Clone(fs[5].Artifact())
		art[len(art)-3] ^= 0x20
		exec(t, sideDB(t, path), `UPDATE flow_versions SET artifact = ? WHERE tenant = 'acme' AND flow = 'f' AND version = 1`, art)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				if _, err := r.Load(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := strings.Count(buf.String(), `"event":"artifact_corrupt"`); n != 1 {
			t.Fatalf("round %d: artifact_corrupt logged %d times, want once:\n%s", round, n, buf.String())
		}
	}
}

// TestCorruptArtifactLoggedOnceWhenRefreshFails: a refresh that fails after
// reading the corrupt row (here: a later row that does not scan) is retried
// at every watcher round; artifact_corrupt must not be logged at each.
func TestCorruptArtifactLoggedOnceWhenRefreshFails(t *testing.T) {
	path := dbPath(t)
	var buf jsonlogtest.Buffer
	r := open(t, path, registry.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	f := compile(t, "acme", "f", "1")
	publish(t, r, registry.Publication{Flows: []*flow.Flow{f, compile(t, "acme", "g", "1")}})
	if _, err := r.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "f", "2"), compile(t, "acme", "g", "1")}})
	art := bytes.Clone(compile(t, "acme", "f", "2").Artifact())
	art[len(art)-3] ^= 0x20
	side := sideDB(t, path)
	exec(t, side, `UPDATE flow_versions SET artifact = ? WHERE tenant = 'acme' AND flow = 'f' AND version = 2`, art)
	exec(t, side, `UPDATE flow_versions SET published_at = 'x' WHERE tenant = 'acme' AND flow = 'g'`)
	for range 3 {
		if _, err := r.Refresh(context.Background()); err == nil {
			t.Fatal("refresh did not fail")
		}
	}
	if n := strings.Count(buf.String(), `"event":"artifact_corrupt"`); n != 1 {
		t.Fatalf("artifact_corrupt logged %d times over 3 failed refreshes, want once:\n%s", n, buf.String())
	}
}
