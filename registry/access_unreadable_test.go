package registry_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/registry"
)

// TestStoredAccessThatNoLongerParses: access keys an earlier build stored
// that this build's parser refuses (a YAML tag it took) do not stop the
// registry from opening, which stopped nexus serve at start and left the
// sync unable to bring the mended file: the live set accepts no key (every
// door answers 401, as with keys: []), says why (AccessErr, and
// access_unreadable logged once however often the set is built), and keeps
// its flows; the next publication of keys replaces them.
func TestStoredAccessThatNoLongerParses(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	keys, err := access.Parse("access.yaml", []byte("keys:\n  - id: k1\n    tenant: acme\n    sha256: "+strings.Repeat("ab", 32)+"\n    flows: [\"*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "f", "1")}, Access: keys})
	r.Close()
	stored := "keys:\n  - id: k1\n    tenant: acme\n    sha256: " + strings.Repeat("ab", 32) + "\n    flows: [\"*\"]\n    rate: 5\n    burst: ! 5\n"
	exec(t, sideDB(t, path), `UPDATE state SET value = ? WHERE key = 'access'`, []byte(stored))

	var buf jsonlogtest.Buffer
	r = open(t, path, registry.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	live, err := r.Load(context.Background())
	if err != nil {
		t.Fatalf("Load with stored keys that do not parse: %v", err)
	}
	if n := len(live.Access().Keys()); n != 0 {
		t.Errorf("%d keys live from stored keys that do not parse, want none", n)
	}
	if err := live.AccessErr(); err == nil || !strings.HasPrefix(err.Error(), "the stored access keys do not parse: access.yaml:7: ") {
		t.Errorf("AccessErr() = %v, want the stored keys' parse error", err)
	}
	if _, ok := live.Lookup("acme", "f"); !ok {
		t.Error("the flow is not live beside keys that do not parse")
	}
	for range 3 {
		if _, err := r.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), `"event":"access_unreadable"`); n != 1 {
		t.Errorf("access_unreadable logged %d times, want once:\n%s", n, buf.String())
	}

	publish(t, r, registry.Publication{Access: keys})
	if live, err = r.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if live.AccessErr() != nil || len(live.Access().Keys()) != 1 {
		t.Errorf("after the keys were published again: AccessErr() = %v, %d keys; want none and 1", live.AccessErr(), len(live.Access().Keys()))
	}
}
