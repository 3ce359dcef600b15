package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/flow/flowtest"
	"github.com/nexushq/nexus/registry"
)

// TestStatusIsOneStateOfTheRegistry: nexus status, run while a server
// syncs (each round publishes commit cN and then records commit fN
// refused), prints one state of the registry: a last_error beside a commit
// is the one recorded after that commit, never an older one a later
// publication cleared. It read the sync's record (synced_at, last_error)
// and the live set (commit, flows) in two transactions, and a publication
// between them printed the new commit beside the refusal it had cleared.
func TestStatusIsOneStateOfTheRegistry(t *testing.T) {
	db := filepath.Join(t.TempDir(), "registry.db")
	ctx := context.Background()
	srv, err := registry.Open(ctx, db, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	f, err := flow.Compile("flows/acme/a.md", flowtest.Marked("acme", "a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; !stop.Load(); n++ {
			if _, err := srv.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Complete: true, Commit: fmt.Sprintf("c%d", n)}); err != nil {
				t.Error(err)
				return
			}
			if err := srv.RecordSyncFailure(ctx, fmt.Sprintf("f%d", n), []string{"flows/acme/b.md:1: bad"}, registry.SyncSource{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	commit := regexp.MustCompile(`(?m)^commit: c(\d+)$`)
	refused := regexp.MustCompile(`(?m)^last_error: commit f(\d+) refused`)
	for i := 0; i < 2000; i++ {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"status", "--db", db}, &stdout, &stderr); code != exitOK {
			t.Fatalf("nexus status: exit %d: %s", code, stderr.String())
		}
		c, r := commit.FindStringSubmatch(stdout.String()), refused.FindStringSubmatch(stdout.String())
		if c != nil && r != nil && c[1] != r[1] {
			t.Fatalf("nexus status printed commit c%s beside the refusal of f%s, which the publication of c%s cleared:\n%s", c[1], r[1], c[1], stdout.String())
		}
	}
}
