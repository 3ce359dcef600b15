package queue

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// counterDamage are the ways the id counter is found damaged while a
// queue is open (another program wrote it), and what each is reported as
// (Reason aside): the Damage kinds Open reports at its start.
var counterDamage = []struct {
	name   string
	damage func(t *testing.T, path string)
	want   Damage
}{
	{"cut short", func(t *testing.T, path string) { truncateFile(t, path, 5) },
		Damage{File: seqFile, Length: 5, Torn: true}},
	{"emptied", func(t *testing.T, path string) { truncateFile(t, path, 0) },
		Damage{File: seqFile, Length: 0, Torn: true}},
	{"deleted", func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}, Damage{File: seqFile, Length: 0, Torn: true}},
	{"zeros", func(t *testing.T, path string) { overwrite(t, path, make([]byte, valueSize)) },
		Damage{File: seqFile, Length: 16, Torn: true}},
	{"a bit flipped", func(t *testing.T, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[6] ^= 1
		overwrite(t, path, b)
	}, Damage{File: seqFile, Length: 16}},
	{"garbage", func(t *testing.T, path string) { overwrite(t, path, []byte("not a counter...")) },
		Damage{File: seqFile, Length: 16}},
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// overwrite writes b over the start of the file at path, in place.
func overwrite(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

// TestIDCounterDamagedWhileOpenIsReported: an id counter damaged while the
// queue is open (another program cut, emptied, deleted or overwrote it
// between two appends) is rebuilt by the next append past the ids issued,
// and reported once (Options.OnDamage) as Open reports it. It was rebuilt
// without a word.
func TestIDCounterDamagedWhileOpenIsReported(t *testing.T) {
	for _, tc := range counterDamage {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var mu sync.Mutex
			var found []Damage
			q, _ := openQueue(t, root, Options{OnDamage: func(d Damage) {
				mu.Lock()
				defer mu.Unlock()
				found = append(found, d)
			}})
			var last uint64
			add := func() {
				t.Helper()
				m, err := q.Append(newMessage(int(last), 20))
				if err != nil {
					t.Fatalf("Append: %v", err)
				}
				if m.ID <= last {
					t.Errorf("id %d issued after %d", m.ID, last)
				}
				last = m.ID
			}
			add()
			add()
			mu.Lock()
			if len(found) > 0 {
				t.Fatalf("reported %v with the counter intact", found)
			}
			mu.Unlock()
			tc.damage(t, filepath.Join(root, testTenant, testFlow, seqFile))
			add()
			add()
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff([]Damage{tc.want}, found, cmpopts.IgnoreFields(Damage{}, "Reason")); diff != "" {
				t.Errorf("reported (-want +got):\n%s", diff)
			}
			for _, d := range found {
				if d.Reason == "" {
					t.Errorf("%+v: no reason", d)
				}
			}
			if _, again, err := Open(root, testTenant, testFlow, Options{}); err != nil || len(again) > 0 {
				t.Errorf("the next Open: %v, %v; want nothing to report, the counter rebuilt", again, err)
			}
		})
	}
}

// TestManagerLogsACounterDamagedWhileOpen: the manager logs the id counter
// found damaged by an append as it logs Open's findings: one queue_damage
// event naming the queue.
func TestManagerLogsACounterDamagedWhileOpen(t *testing.T) {
	root := t.TempDir()
	var logs jsonLog
	m := NewManager(ManagerConfig{Root: root, Poll: time.Hour, Logger: logs.Logger(),
		Handler: HandlerFunc(func(context.Context, Delivery) Verdict { return Verdict{Kind: VerdictAck, Outcome: "succeeded"} })})
	defer m.Stop()
	for i := range 2 {
		if _, err := m.Append(testTenant, testFlow, newMessage(i, 20)); err != nil {
			t.Fatal(err)
		}
	}
	overwrite(t, filepath.Join(root, testTenant, testFlow, seqFile), make([]byte, valueSize))
	for i := 2; i < 4; i++ {
		if _, err := m.Append(testTenant, testFlow, newMessage(i, 20)); err != nil {
			t.Fatal(err)
		}
	}
	found := logs.Events("queue_damage")
	if len(found) != 1 || found[0]["file"] != seqFile || found[0]["torn"] != true || found[0]["length"] != float64(16) ||
		found[0]["tenant"] != testTenant || found[0]["flow"] != testFlow || found[0]["reason"] == "" {
		t.Errorf("queue_damage events %v, want one for %s/%s's %s, torn, 16 bytes", found, testTenant, testFlow, seqFile)
	}
}
