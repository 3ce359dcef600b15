package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/registry"
)

// TestStatusDescribesOneSet: GET /status answers the commit of this
// process's live set, but its flow count and generation from the
// registry. While the process's set trails the registry (the watcher's
// second, or a watcher whose refresh keeps failing), the answer pairs
// the old commit with the new commit's flow count and generation: a
// half-published state no single set ever was.
// /status describes the set this process serves: its commit, flow count
// and generation together, even while another process has published a
// newer set this one has not loaded yet (it paired the old commit with the
// new set's count and generation, a set no one ever published).
func TestStatusDescribesOneSet(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, func(c *host.Config) { c.AdminKey = adminKey })
	// another process sharing the state directory publishes commit B,
	// which holds one flow; this process has not reloaded yet
	other, err := registry.Open(ctx, fx.reg.Path(), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	f, err := flow.Compile("flows/acme/echo.md", []byte(flowFile("acme", "echo", "", echoSteps)))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := access.Parse("access.yaml", []byte(testAccessYAML()))
	if err != nil {
		t.Fatal(err)
	}
	const commitB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	if _, err := other.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Complete: true, Access: keys, Commit: commitB}); err != nil {
		t.Fatal(err)
	}

	w := fx.serve(newRequest(http.MethodGet, "/status", "", "Authorization", "Bearer "+adminKey))
	var got struct {
		Commit     string `json:"commit"`
		Flows      int    `json:"flows"`
		Generation int64  `json:"generation"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	live := fx.reg.Live()
	switch got.Commit {
	case live.Commit():
		if got.Flows != len(live.Flows()) || got.Generation != live.Generation() {
			t.Errorf("/status pairs commit %s (the live set's: %d flows, generation %d) with flows %d and generation %d (commit %s's): %s",
				got.Commit[:7], len(live.Flows()), live.Generation(), got.Flows, got.Generation, commitB[:7], w.Body)
		}
	case commitB:
		if got.Flows != 1 {
			t.Errorf("/status: commit B with %d flows: %s", got.Flows, w.Body)
		}
	default:
		t.Errorf("/status: commit %q: %s", got.Commit, w.Body)
	}
}
