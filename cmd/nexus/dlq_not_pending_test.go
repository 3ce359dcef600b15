package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/queue"
)

// stateFiles is every folder and file under dir, each file with its
// content: what a command that writes nothing leaves as it found it.
func stateFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			files[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(path)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDLQMarkOfAnIDNotPending: nexus dlq replay and discard of an id that
// is not a pending dead letter (never one, discarded, replayed; in a queue
// that holds dead letters or in one that was never made) print "no pending
// dead letter id=9 tenant=acme flow=forward-order", write nothing (no file
// or folder made or changed under the state directory, the registry
// included) and exit 1 (server.md, "Precise answers").
func TestDLQMarkOfAnIDNotPending(t *testing.T) {
	// a state directory with dead letters 1, 2 and 3 of acme/forward-order:
	// 2 discarded, 3 replayed, 1 pending
	withQueue := t.TempDir()
	q, _ := deadLetterQueueOf(t, withQueue, "forward-order", 3)
	if err := q.Mark(2, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if err := q.Mark(3, queue.MarkReplayed); err != nil {
		t.Fatal(err)
	}
	q.Close()
	// one where no queue was ever made
	empty := t.TempDir()

	for _, c := range []struct {
		name, state, id string
	}{
		{"an id never used, no queue", empty, "9"},
		{"an id never used", withQueue, "9"},
		{"a discarded dead letter", withQueue, "2"},
		{"a replayed dead letter", withQueue, "3"},
	} {
		for _, verb := range []string{"replay", "discard"} {
			t.Run(verb+" of "+c.name, func(t *testing.T) {
				before := stateFiles(t, c.state)
				var stdout, stderr bytes.Buffer
				code := run([]string{"dlq", verb, "--tenant", "acme", "--flow", "forward-order", "--id", c.id,
					"--db", filepath.Join(c.state, "registry.db")}, &stdout, &stderr)
				want := "no pending dead letter id=" + c.id + " tenant=acme flow=forward-order\n"
				if code != exitError || stdout.String() != "" || stderr.String() != want {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout.String(), stderr.String(), want)
				}
				if diff := cmp.Diff(before, stateFiles(t, c.state)); diff != "" {
					t.Errorf("the state directory changed (-before +after):\n%s", diff)
				}
			})
		}
	}
}
