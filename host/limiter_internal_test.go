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

// TestLimitersOnlyForAuthenticatedKeys: a token bucket is created only
// after a key is authenticated, so bogus keys cannot fill memory.
func TestLimitersOnlyForAuthenticatedKeys(t *testing.T) {
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
	sum := access.HashKey("the-real-key")
	keys, err := access.Parse("access.yaml", fmt.Appendf(nil, "keys:\n  - id: acme-limited\n    tenant: acme\n    sha256: %x\n    flows: [\"*\"]\n    rate: 5\n    burst: 5\n", sum))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Access: keys}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Load(ctx); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Live: reg, Engine: engine.New(engine.Config{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	count := func() int {
		n := 0
		s.limiters.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	send := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/flows/acme/echo/run", strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		return w.Code
	}
	for i := 0; i < 100; i++ {
		if code := send(fmt.Sprintf("bogus-key-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("bogus key %d: %d", i, code)
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d limiters after 100 bogus keys, want 0", n)
	}
	if code := send("the-real-key"); code != http.StatusOK {
		t.Fatalf("the real key: %d", code)
	}
	for i := 0; i < 100; i++ {
		send(fmt.Sprintf("bogus-key-%d", i))
	}
	if n := count(); n != 1 {
		t.Errorf("%d limiters after one real key and 100 bogus ones, want 1", n)
	}
}
