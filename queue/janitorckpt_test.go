package queue

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestJanitorReportsADamagedCheckpointOfAnEmptyLog: an idle queue whose log
// is empty and whose checkpoint does not verify has its files deleted as
// before, the checkpoint with them, and the checkpoint is reported
// (queue_damage) as the worker reports it as it starts. It was deleted
// without a word.
func TestJanitorReportsADamagedCheckpointOfAnEmptyLog(t *testing.T) {
	tests := []struct {
		name string
		ckpt func(b []byte) []byte // the checkpoint's bytes, as left on disk
		want []Damage              // Reason aside
	}{
		{"intact", func(b []byte) []byte { return b }, nil},
		{"a drain marker", func([]byte) []byte { return encodeValue(drainMagic, 9) }, nil},
		{"cut short", func(b []byte) []byte { return b[:4] }, []Damage{{File: ckptFile, Length: 4, Torn: true}}},
		{"zeros", func(b []byte) []byte { return make([]byte, len(b)) }, []Damage{{File: ckptFile, Length: 16, Torn: true}}},
		{"a bit flipped", func(b []byte) []byte { b[6] ^= 1; return b }, []Damage{{File: ckptFile, Length: 16}}},
		{"garbage", func([]byte) []byte { return []byte("not a checkpoint") }, []Damage{{File: ckptFile, Length: 16}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			q, _, err := Open(root, testTenant, testFlow, Options{})
			if err != nil {
				t.Fatal(err)
			}
			appendProcessed(t, q, 1, 20)
			if err := q.Drain(); err != nil {
				t.Fatal(err)
			}
			q.Close()
			ckpt := filepath.Join(root, testTenant, testFlow, ckptFile)
			b, err := os.ReadFile(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ckpt, tt.ckpt(b), FileMode); err != nil {
				t.Fatal(err)
			}

			var logs jsonLog
			m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour, Logger: logs.Logger()})
			defer m.Stop()
			m.sweepIdle()
			if _, err := os.Stat(ckpt); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the checkpoint is still there (%v); want it deleted", err)
			}
			got := damageEvents(t, &logs)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("queue_damage events (-want +got):\n%s\nlog:\n%s", diff, logs.String())
			}
		})
	}
}

// TestJanitorReportsADamagedCounter: the janitor, about to delete an idle
// queue's log of processed messages, rebuilds an id counter that does not
// verify past the log's ids, and reports one that held bytes as Open
// reports it (queue_damage: cut short or zeros, torn). It was rebuilt
// without a word.
func TestJanitorReportsADamagedCounter(t *testing.T) {
	for _, tc := range counterDamage {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			q, _, err := Open(root, testTenant, testFlow, Options{})
			if err != nil {
				t.Fatal(err)
			}
			last := appendProcessed(t, q, 3, 20)
			q.Close()
			seq := filepath.Join(root, testTenant, testFlow, seqFile)
			tc.damage(t, seq)

			var logs jsonLog
			m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour, Logger: logs.Logger()})
			defer m.Stop()
			m.sweepIdle()
			if _, err := os.Stat(filepath.Join(root, testTenant, testFlow, segmentFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("segment.log is still there (%v); want the idle queue deleted", err)
			}
			b, err := os.ReadFile(seq)
			if err != nil {
				t.Fatal(err)
			}
			if next, ok := decodeValue(seqMagic, b); !ok || next <= last.ID {
				t.Errorf("the counter holds %d (verifies: %v); want one past %d", next, ok, last.ID)
			}
			var want []Damage
			if tc.want.Length > 0 { // as Open, an empty counter is not reported
				want = []Damage{tc.want}
			}
			got := damageEvents(t, &logs)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("queue_damage events (-want +got):\n%s\nlog:\n%s", diff, logs.String())
			}
		})
	}
}

// damageEvents are the queue_damage events of logs, each as the Damage it
// says (Reason aside), checked to name the test's queue and a reason.
func damageEvents(t *testing.T, logs *jsonLog) []Damage {
	t.Helper()
	var got []Damage
	for _, e := range logs.Events("queue_damage") {
		if e["tenant"] != testTenant || e["flow"] != testFlow || e["reason"] == "" {
			t.Errorf("queue_damage event %v: want the queue named and a reason", e)
		}
		length, _ := e["length"].(float64)
		torn, _ := e["torn"].(bool)
		file, _ := e["file"].(string)
		got = append(got, Damage{File: file, Length: int64(length), Torn: torn})
	}
	return got
}
