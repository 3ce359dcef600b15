package integration

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStateDirectoryLinkRefused: a symbolic link planted in the state
// directory where a queue's folder would be (here to a folder outside it)
// makes /enqueue to that queue answer 503 with Retry-After, logs
// queue_enqueue_failed naming the link, and writes nothing through it;
// the other queues keep working.
func TestStateDirectoryLinkRefused(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	state := filepath.Join(t.TempDir(), "state")
	outside := t.TempDir()
	link := filepath.Join(state, "queues", "acme", "order-intake")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	h, _ := queueHost(t, map[string]string{
		"flows/acme/order-intake.md":     queueExample(t, "order-intake", be.URL),
		"flows/acme/order-fulfilment.md": queueExample(t, "order-fulfilment", be.URL),
	}, hostOptions{db: filepath.Join(state, "registry.db")}, "order-intake", "order-fulfilment")

	r := h.enqueue("acme", "order-intake", acmeKey, `{"orderId":"A-1","total":5}`, "X-Correlation-ID", "trace-link")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" {
		t.Errorf("enqueue through a linked queue folder: %d Retry-After %q %s; want 503 with Retry-After: 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	if strings.Contains(r.body, outside) || strings.Contains(r.body, state) {
		t.Errorf("the answer names the host's files: %s", r.body)
	}
	ev := waitEvents(t, h, "queue_enqueue_failed", 1, field("correlation_id", "trace-link"), 5*time.Second)[0]
	if msg, _ := ev["error"].(string); !strings.Contains(msg, link+" is a symbolic link") {
		t.Errorf("queue_enqueue_failed error %q, want it to name the link %s", msg, link)
	}
	entries, err := os.ReadDir(outside)
	if err != nil || len(entries) != 0 {
		t.Errorf("the link's target holds %v (%v), want nothing written through the link", entries, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "segment.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("segment.log was created through the link: %v", err)
	}
	mustEnqueue(t, h, "acme", "order-fulfilment", acmeKey, `{"orderId":"A-2","total":5}`)
}
