package integration

import (
	"errors"
	"fmt"
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

// TestStateDirectoryIsTheOwnersAlone: the state directory's folders are
// 0700 and its files 0600 (the registry and its -wal and -shm, the queues'
// files, the cron records, the locks): queued payloads and the registry are
// the owner's alone. The clone, written by go-git inside the 0700 state
// directory, is left out.
func TestStateDirectoryIsTheOwnersAlone(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	h, _ := queueHost(t, map[string]string{
		"flows/acme/forward-order.md":      queueExample(t, "forward-order", be.URL),
		"flows/acme/open-orders-report.md": queueExample(t, "open-orders-report", be.URL),
	}, hostOptions{}, "forward-order")
	id := mustEnqueue(t, h, "acme", "forward-order", acmeKey, `{"orderId":"A-1"}`)
	waitEvents(t, h, "queue_processed", 1, field("msg_id", id), 15*time.Second)
	state := filepath.Dir(h.db)
	eventually(t, 10*time.Second, "the cron flow's lock", func() bool { return exists(filepath.Join(state, "cron", "acme")) })
	var files int
	err := filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(state, path)
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", rel, got, want)
		}
		if d.IsDir() && filepath.Base(path) == "repo" && filepath.Dir(path) == state {
			return fs.SkipDir // what the 0700 clone holds is go-git's
		}
		if !d.IsDir() {
			files++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 6 {
		t.Errorf("found %d files in %s, want the registry and the queue's files at least", files, state)
	}
}

// TestServeWarnsOfAnOpenStateDirectory: a state directory that others may
// read (made by an earlier version, or by hand) is worth a warning at every
// start, naming it and the command that closes it.
func TestServeWarnsOfAnOpenStateDirectory(t *testing.T) {
	t.Parallel()
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want int
	}{
		{open, 1},
		{filepath.Join(t.TempDir(), "made-by-serve"), 0},
	} {
		h := startHost(t, hostOptions{db: filepath.Join(tc.dir, "registry.db")})
		evs := h.events("state_directory_open")
		if len(evs) != tc.want {
			t.Errorf("%s: %d state_directory_open lines, want %d: %v", tc.dir, len(evs), tc.want, evs)
		}
		if tc.want > 0 && len(evs) > 0 && !strings.Contains(fmt.Sprint(evs[0]["msg"]), tc.dir+" is open to other users (mode -rwxr-xr-x): chmod 700 it") {
			t.Errorf("the warning: %v", evs[0])
		}
		h.stop(10 * time.Second)
	}
}
