package host_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/registry"
)

// TestJournalDropsAreAMetric: entries the journal never wrote (here a
// full buffer whose writer is not running) are counted in /metrics as
// nexus_journal_dropped_total, beside the journal_dropped log line, so an
// alert can watch them; they were in the log alone.
func TestJournalDropsAreAMetric(t *testing.T) {
	var journal *registry.JournalWriter
	fx := newFixture(t, func(c *host.Config) {
		reg := c.Live.(*registry.Registry)
		journal = reg.NewJournalWriter(registry.JournalConfig{Buffer: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		c.Journal = journal
	})
	for range 5 {
		if w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)); w.Code != http.StatusOK {
			t.Fatalf("run: %d %s", w.Code, w.Body)
		}
	}
	if n := journal.Dropped(); n != 3 {
		t.Fatalf("the writer dropped %d entries, want 3 (5 runs, a buffer of 2)", n)
	}
	text := fx.serve(newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, want := range []string{
		"\n# TYPE nexus_journal_dropped_total counter\n",
		"\nnexus_journal_dropped_total 3\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics holds no %q", strings.TrimSpace(want))
		}
	}
}
