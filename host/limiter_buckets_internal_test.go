package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// TestLimiterOneBucketPerKey: a key has one token bucket, replaced when a
// new commit changes its rate (once a bucket per rate and burst stayed
// beside the new one, so the map grew with every change for the life of
// the process): 50 commits that change one key's rate leave one bucket,
// of the last rate.
func TestLimiterOneBucketPerKey(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Open(ctx, filepath.Join(t.TempDir(), "registry.db"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	f, err := flow.Compile("flows/acme/echo.md", []byte("---\nflowmarkdown_version: \"0.1\"\nflow: echo\ntenant: acme\n---\n\n## Step: echo\n```ntd\n{{ $ }}\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(doc string) {
		t.Helper()
		keys, err := access.Parse("access.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Access: keys}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sum := access.HashKey("the-real-key")
	s := New(Config{Live: reg, Engine: engine.New(engine.Config{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	send := func() int {
		r := httptest.NewRequest(http.MethodPost, "/flows/acme/echo/run", strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer the-real-key")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		return w.Code
	}
	const commits = 50
	for i := 1; i <= commits; i++ {
		publish(fmt.Sprintf("keys:\n  - id: acme-limited\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: %d\n", sum, i))
		if code := send(); code != http.StatusOK {
			t.Fatalf("commit %d: %d", i, code)
		}
	}
	publish("keys: []\n") // the key is withdrawn
	if code := send(); code != http.StatusUnauthorized {
		t.Fatalf("withdrawn key: %d", code)
	}
	n := 0
	s.limiters.Range(func(_, v any) bool {
		n++
		if l := v.(*limiter); l.rate != commits {
			t.Errorf("the bucket's rate is %v, want the last commit's %d", l.rate, commits)
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d token buckets held after %d rate changes and the key's withdrawal, want 1 (one per key used)", n, commits)
	}
}
