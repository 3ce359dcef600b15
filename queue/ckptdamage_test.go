package queue

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDamagedCheckpointIsReported: a segment.log.ckpt that does not hold a
// value is reported as damage where recovery finds it (Open's findings,
// logged queue_damage by the manager; the worker's log as it starts): cut
// short or zeros, a torn write; anything else that does not verify,
// damage. Recovery reads it as 0, so every message of the log is delivered
// again (at-least-once), and writes that back: the next Open finds nothing
// to report. It was read as 0 without a word.
func TestDamagedCheckpointIsReported(t *testing.T) {
	flip := func(b []byte) []byte { b[6] ^= 0x01; return b } // a bit of the value
	tests := []struct {
		name    string
		damage  func(b []byte) []byte // the checkpoint's 16 bytes, as left on disk
		want    []Damage              // Reason aside
		deliver []uint64              // the ids delivered after it
	}{
		{"intact", func(b []byte) []byte { return b }, nil, []uint64{3}},
		{"an editor's newline after it", func(b []byte) []byte { return append(b, '\n') }, nil, []uint64{3}},
		{"cut short", func(b []byte) []byte { return b[:5] },
			[]Damage{{File: ckptFile, Length: 5, Torn: true}}, []uint64{1, 2, 3}},
		{"zeros", func(b []byte) []byte { return make([]byte, len(b)) },
			[]Damage{{File: ckptFile, Length: 16, Torn: true}}, []uint64{1, 2, 3}},
		{"a bit flipped", flip, []Damage{{File: ckptFile, Length: 16}}, []uint64{1, 2, 3}},
		{"garbage", func([]byte) []byte { return []byte("not a checkpoint") },
			[]Damage{{File: ckptFile, Length: 16}}, []uint64{1, 2, 3}},
	}
	ignoreReason := cmpopts.IgnoreFields(Damage{}, "Reason")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			ckpt := checkpointAfterTwo(t, root)
			b, err := os.ReadFile(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ckpt, tt.damage(b), FileMode); err != nil {
				t.Fatal(err)
			}

			q, damage, err := Open(root, testTenant, testFlow, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if diff := cmp.Diff(tt.want, damage, ignoreReason, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Open's findings (-want +got):\n%s", diff)
			}
			for _, d := range damage {
				if d.Reason == "" {
					t.Errorf("%+v: no reason", d)
				}
			}
			if _, again, err := Open(root, testTenant, testFlow, Options{}); err != nil || len(again) > 0 {
				t.Errorf("the next Open: %v, %v; want nothing to report, the value written back", again, err)
			}
			if got := deliveries(t, q, len(tt.deliver), nil); !slices.Equal(got, tt.deliver) {
				t.Errorf("delivered %v, want %v", got, tt.deliver)
			}
		})
	}

	// damaged while the queue was open (Open found nothing): the worker,
	// as it starts, reports it and delivers every message again
	t.Run("found by the worker", func(t *testing.T) {
		root := t.TempDir()
		ckpt := checkpointAfterTwo(t, root)
		q, damage, err := Open(root, testTenant, testFlow, Options{})
		if err != nil || len(damage) > 0 {
			t.Fatal(damage, err)
		}
		defer q.Close()
		if err := os.WriteFile(ckpt, []byte("NXC1"), FileMode); err != nil {
			t.Fatal(err)
		}
		var logs jsonLog
		got := make(chan uint64, 10)
		w := NewWorker(q, WorkerConfig{Poll: 10 * time.Millisecond,
			Logger: logs.Logger(),
			Handler: HandlerFunc(func(ctx context.Context, d Delivery) Verdict {
				got <- d.ID
				return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
			})})
		w.Start()
		var ids []uint64
		for len(ids) < 3 {
			select {
			case id := <-got:
				ids = append(ids, id)
			case <-time.After(10 * time.Second):
				t.Fatalf("delivered %v within 10 s, want 1, 2 and 3", ids)
			}
		}
		w.Stop()
		found := logs.Events("queue_damage")
		if len(found) != 1 || found[0]["file"] != ckptFile || found[0]["torn"] != true || found[0]["length"] != float64(4) {
			t.Errorf("queue_damage events %v, want one for %s, torn, 4 bytes", found, ckptFile)
		}
	})
}

// checkpointAfterTwo makes a queue under root of three messages whose
// checkpoint is past the first two, and returns its checkpoint's path.
func checkpointAfterTwo(t *testing.T, root string) string {
	t.Helper()
	q, _ := openQueue(t, root, Options{})
	var after int64
	for i := range 3 {
		m, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			after = m.Offset
		}
	}
	if err := q.SaveCheckpoint(after); err != nil {
		t.Fatal(err)
	}
	q.Close()
	return filepath.Join(root, testTenant, testFlow, ckptFile)
}

// TestManagerDiscardLogsRecoveryFindings: a discard through the manager
// (the UI's button, the API) of a queue this process has not opened opens
// a handle of its own, whose recovery's findings are logged queue_damage
// as those of a queue the manager opens are. They were dropped.
func TestManagerDiscardLogsRecoveryFindings(t *testing.T) {
	root := t.TempDir()
	ckpt := checkpointAfterTwo(t, root)
	q, _ := openQueue(t, root, Options{})
	if err := q.MoveToDLQ(DeadLetter{ID: 1, Attempts: 3, LastError: "x", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(DeadLetter{ID: 2, Attempts: 3, LastError: "x", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	var logs jsonLog
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour, Logger: logs.Logger()})
	defer m.Stop()
	for _, discard := range []func() error{
		func() error { return m.Discard(testTenant, testFlow, 1) },
		func() error { _, err := m.DiscardAll(testTenant, testFlow); return err },
	} {
		if err := os.WriteFile(ckpt, []byte("not a checkpoint"), FileMode); err != nil {
			t.Fatal(err)
		}
		if err := discard(); err != nil {
			t.Fatal(err)
		}
	}
	found := logs.Events("queue_damage")
	if len(found) != 2 {
		t.Fatalf("queue_damage events %v, want one for each discard", found)
	}
	for _, e := range found {
		if e["file"] != ckptFile || e["tenant"] != testTenant || e["flow"] != testFlow || e["torn"] != false {
			t.Errorf("queue_damage %v, want %s of %s/%s, not torn", e, ckptFile, testTenant, testFlow)
		}
	}
}
