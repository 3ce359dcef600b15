package queue

import (
	"os"
	"path/filepath"
	"testing"
)

// The id counter deleted, emptied or overwritten by hand while a server
// runs, and another process (nexus dlq replay) appending meanwhile: no id
// is issued twice.
func TestIDCounterChangedUnderARunningServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"emptied", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("not a counter..."), 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			server, _ := openQueue(t, root, Options{})
			seen := map[uint64]int{}
			add := func(q *Queue, i int) {
				t.Helper()
				m, err := q.Append(newMessage(i, 40))
				if err != nil {
					t.Fatalf("Append: %v", err)
				}
				if prev, dup := seen[m.ID]; dup {
					t.Errorf("id %d issued to message %d and again to message %d", m.ID, prev, i)
				}
				seen[m.ID] = i
			}
			for i := range 3 {
				add(server, i)
			}
			tc.change(t, filepath.Join(root, testTenant, testFlow, seqFile))
			add(server, 3)
			other, _ := openQueue(t, root, Options{})
			add(other, 4)
			add(server, 5)
			add(other, 6)
			add(server, 7)
		})
	}
}
