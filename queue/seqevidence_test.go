package queue

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDamagedCounterIsReportedAndNeverReissues: three messages were
// delivered and the log emptied (by the worker's drain, or by the janitor
// with the queue's files), with no dead letter left: then the id counter
// is damaged. Open reports it (cut short or zeros as a torn write, anything
// else as damage) and rebuilds it past every id issued: the next message
// gets id 4. The counter was rebuilt without a word, from evidence (the
// log, the dead letters) that the drain had emptied: ids started again
// at 1.
func TestDamagedCounterIsReportedAndNeverReissues(t *testing.T) {
	damages := []struct {
		name   string
		damage func(b []byte) []byte // the counter's 16 bytes, as left on disk
		want   []Damage              // Reason aside
	}{
		{"a bit flipped", func(b []byte) []byte { b[6] ^= 1; return b }, []Damage{{File: seqFile, Length: 16}}},
		{"garbage", func([]byte) []byte { return []byte("not a counter!!!") }, []Damage{{File: seqFile, Length: 16}}},
		{"cut short", func(b []byte) []byte { return b[:7] }, []Damage{{File: seqFile, Length: 7, Torn: true}}},
		{"zeros", func(b []byte) []byte { return make([]byte, 16) }, []Damage{{File: seqFile, Length: 16, Torn: true}}},
		{"emptied", func([]byte) []byte { return nil }, nil},
	}
	emptied := []struct {
		name  string
		empty func(t *testing.T, root string, q *Queue)
	}{
		{"drained", func(t *testing.T, _ string, q *Queue) {
			if err := q.Drain(); err != nil {
				t.Fatal(err)
			}
		}},
		{"deleted by the janitor", func(t *testing.T, root string, q *Queue) {
			q.Close()
			if deleted, err := deleteIdleQueue(root, testTenant, testFlow, OS{}); !deleted || err != nil {
				t.Fatalf("deleteIdleQueue: %v, %v", deleted, err)
			}
		}},
	}
	for _, e := range emptied {
		for _, d := range damages {
			t.Run(e.name+"/"+d.name, func(t *testing.T) {
				root := t.TempDir()
				q, _ := openQueue(t, root, Options{})
				appendProcessed(t, q, 3, 2)
				e.empty(t, root, q)
				q.Close()
				seq := filepath.Join(root, testTenant, testFlow, seqFile)
				b, err := os.ReadFile(seq)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(seq, d.damage(b), FileMode); err != nil {
					t.Fatal(err)
				}

				q, damage, err := Open(root, testTenant, testFlow, Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if diff := cmp.Diff(d.want, damage, cmpopts.IgnoreFields(Damage{}, "Reason"), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("Open's findings (-want +got):\n%s", diff)
				}
				for _, x := range damage {
					if x.Reason == "" {
						t.Errorf("%+v: no reason", x)
					}
				}
				m, err := q.Append(NewMessage{Source: "enqueue", Payload: []byte(`{}`)})
				if err != nil || m.ID != 4 {
					t.Errorf("the next message got id %d (%v), want 4: ids 1 to 3 were issued", m.ID, err)
				}
			})
		}
	}
}
