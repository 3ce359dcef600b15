package registry_test

import (
	"log/slog"
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
