package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// TestStatusPrintsOneSet: nexus status --db reads the state
// (commit, flows: N, generation) in one transaction and the flow lines in
// another, so a publication between the two prints a commit and a count
// of one set with the flow lines of another.
// nexus status prints one set: its commit, flow count and generation with
// its flow lines, while another process publishes sets of one and two
// flows in turn (a publication between its two reads printed "flows: 2"
// above one flow line).
func TestStatusPrintsOneSet(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "state", "registry.db")
	reg, err := registry.Open(ctx, db, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	mk := func(name string) *flow.Flow {
		src := "---\nflowmarkdown_version: \"0.1\"\nflow: " + name + "\ntenant: acme\n---\n\n## Step: echo\n```ntd\n{{ $ }}\n```\n"
		f, err := flow.Compile("flows/acme/"+name+".md", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	one := []*flow.Flow{mk("a")}
	two := []*flow.Flow{mk("a"), mk("b")}
	publish := func(i int) {
		set, commit := one, fmt.Sprintf("%040d", i)
		if i%2 == 1 {
			set = two
		}
		if _, err := reg.Publish(ctx, registry.Publication{Flows: set, Complete: true, Commit: commit}); err != nil {
			t.Error(err)
		}
	}
	publish(0)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another process publishing commits, one flow then two
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			publish(i)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	deadline := time.Now().Add(5 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		var out, errb bytes.Buffer
		if code := runStatus([]string{"--db", db}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		count, lines := -1, 0
		for _, l := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(l, "flows: "); ok {
				fmt.Sscan(v, &count)
			}
			if strings.HasPrefix(l, "flow: ") {
				lines++
			}
		}
		if count != lines {
			t.Fatalf("run %d: nexus status prints flows: %d and %d flow lines (two publications in one answer):\n%s", n, count, lines, out.String())
		}
	}
}
