package registry_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestWatcherRegistryReplaced: a registry.db replaced under the running
// process by another file renamed over it (a backup copied in with cp
// and mv, a restore tool's rename), or deleted, is reported once, as an
// ERROR naming the registry (registry_replaced): the process goes on
// reading and writing the file it opened, which nothing else sees and
// which is gone at its restart (its publications, journal and dedup
// records with it). It went on without a word.
func TestWatcherRegistryReplaced(t *testing.T) {
	for _, how := range []string{"renamed over", "deleted"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			clk := newClock()
			var logs jsonlogtest.Buffer
			path := dbPath(t)
			r := open(t, path, registry.Options{Now: clk.Now})
			publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1")}, Commit: "c1"})
			load(t, r)
			w := &registry.Watcher{Registry: r, Clock: clk, Logger: logs.Logger(slog.LevelInfo)}
			w.Start()
			defer w.Stop()
			clk.WaitCalls(t, 1)
			clk.Step(t)
			if n := len(logs.Events(t, "registry_replaced")); n != 0 {
				t.Fatalf("%d registry_replaced lines before the file was replaced\nlog:\n%s", n, logs.String())
			}

			switch how {
			case "renamed over":
				backup := filepath.Join(t.TempDir(), "backup.db")
				exec(t, sideDB(t, path), `VACUUM INTO ?`, backup)
				if err := os.Rename(backup, path); err != nil {
					t.Fatal(err)
				}
			case "deleted":
				for _, p := range []string{path, path + "-wal", path + "-shm"} {
					os.Remove(p)
				}
			}
			for range 3 {
				clk.Step(t)
			}
			w.Stop()
			lines := logs.Events(t, "registry_replaced")
			if len(lines) != 1 {
				t.Fatalf("%d registry_replaced lines after the registry was %s, want 1\nlog:\n%s", len(lines), how, logs.String())
			}
			if lines[0]["level"] != "ERROR" || !strings.Contains(lines[0]["msg"].(string), path) {
				t.Errorf("registry_replaced line %v: want an ERROR naming %s", lines[0], path)
			}
		})
	}
}
