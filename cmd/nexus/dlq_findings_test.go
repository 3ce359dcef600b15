package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nexushq/nexus/queue"
)

// TestDLQMarkPrintsRecoveryFindings: nexus dlq replay and discard open the
// queue, which runs its recovery; what it finds (a checkpoint that does not
// verify, a damaged frame of segment.log) is printed on stderr, one line
// each, naming the queue, and the command goes through. The findings were
// dropped.
func TestDLQMarkPrintsRecoveryFindings(t *testing.T) {
	damages := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string // stderr, a regular expression of each line after "nexus dlq SUB: "
	}{
		{"a damaged checkpoint", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "segment.log.ckpt"), []byte("not a checkpoint"))
		}, regexp.QuoteMeta(`acme/orders: segment.log.ckpt: read a damaged checkpoint as 0 at offset 0 (16 bytes): no checkpoint magic ("not "); the messages in segment.log are delivered again`)},
		{"a torn checkpoint", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "segment.log.ckpt"), []byte("NXC1\x00\x00"))
		}, regexp.QuoteMeta(`acme/orders: segment.log.ckpt: read a torn checkpoint as 0 at offset 0 (6 bytes): a write cut short (a value is 16 bytes); the messages in segment.log are delivered again`)},
		{"a damaged frame of segment.log", func(t *testing.T, dir string) {
			seg := filepath.Join(dir, "segment.log")
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/4] ^= 0xff // in the first of the two messages
			writeFile(t, seg, b)
		}, `acme/orders: segment\.log: quarantined a damaged frame at offset 0 \(\d+ bytes(, id=1 as the damaged frame holds it)?\): .+`},
	}
	commands := [][]string{
		{"discard", "--id", "1"},
		{"discard", "--all"},
		{"replay", "--id", "1"},
		{"replay", "--all"},
	}
	for _, d := range damages {
		for _, c := range commands {
			t.Run(d.name+"/"+strings.Join(c, " "), func(t *testing.T) {
				state := t.TempDir()
				db := filepath.Join(state, "registry.db")
				deployOrders(t, db)
				q, dir := deadLetterQueue(t, state, 1)
				for range 2 {
					if _, err := q.Append(queue.NewMessage{Source: "enqueue", Payload: []byte(`{"orderId":"A-1"}`)}); err != nil {
						t.Fatal(err)
					}
				}
				q.Close()
				d.damage(t, dir)
				var stdout, stderr bytes.Buffer
				args := append([]string{"dlq"}, c...)
				code := run(append(args, "--tenant", "acme", "--flow", "orders", "--db", db), &stdout, &stderr)
				if code != exitOK || !strings.Contains(stdout.String(), "id=1 tenant=acme flow=orders") {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 0 and the dead letter handled", code, stdout.String(), stderr.String())
				}
				want := regexp.MustCompile(`^nexus dlq ` + c[0] + `: ` + d.want + "\n$")
				if !want.MatchString(stderr.String()) {
					t.Errorf("stderr %q, want one line matching %s", stderr.String(), want)
				}
			})
		}
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
