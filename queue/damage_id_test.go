package queue

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// flipByte flips the byte at off of the queue's file name on the OS.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The id a damaged frame holds is read from bytes its CRC did not vouch
// for: the damage may be in it. What says the damage (Retries' error, the
// worker's error when it cannot rewrite the schedule without it, nexus
// dlq list's line) names it as the frame holds it, not as the retry's or
// dead letter's id. With the last byte of retry 1's id flipped, they said
// "id=254" as if it were the message's id: another message's, or none.
func TestDamagedFrameIDIsSaidAsTheFrameHoldsIt(t *testing.T) {
	const idByte = headerSize + 8 // the last byte of the id, after the kind byte
	for _, c := range []struct {
		name   string
		damage int64 // the offset of the byte flipped in the first frame
		said   func(t *testing.T) string
		want   string
	}{
		{"Retries, the id damaged", idByte, retriesSaid(idByte), "id=254 as the damaged frame holds it"},
		{"Retries, the due time damaged", headerSize + 25, retriesSaid(headerSize + 25), "id=1 as the damaged frame holds it"},
		{"the worker's rewrite failing", idByte, workerOpenSaid(idByte), "id=254 as the damaged frame holds it"},
		{"nexus dlq list", idByte, dlqListSaid(idByte), "id=254 as the damaged frame holds it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			said := c.said(t)
			if !strings.Contains(said, c.want) {
				t.Errorf("said %q, want it to say %q", said, c.want)
			}
			if strings.Contains(said, "id=254)") || strings.Contains(said, "id=1)") {
				t.Errorf("said %q: the id of a damaged frame as a fact", said)
			}
		})
	}
}

// retriesSaid is Retries' error with the byte at off of a schedule of
// retries 1 and 2 flipped.
func retriesSaid(off int64) func(t *testing.T) string {
	return func(t *testing.T) string {
		q, _ := openQueue(t, t.TempDir(), Options{})
		if err := q.SaveRetries([]Retry{retryAt(1, 2, time.Second), retryAt(2, 2, time.Minute)}); err != nil {
			t.Fatal(err)
		}
		flipByte(t, filepath.Join(q.dir, retryFile), off)
		_, err := q.Retries()
		if err == nil {
			t.Fatal("Retries of a damaged schedule: no error")
		}
		return err.Error()
	}
}

// workerOpenSaid is the worker's error when the byte at off of its
// schedule is flipped and the rewrite without it fails.
func workerOpenSaid(off int64) func(t *testing.T) string {
	return func(t *testing.T) string {
		m, q := twoRetriesOneByteChanged(t, off, func(b byte) byte { return b ^ 0xff })
		m.Fail(opRename, "", 1, syscall.EIO, false)
		defer m.Heal()
		_, _, err := q.openRetrySchedule()
		if err == nil {
			t.Fatal("the worker's open with the rewrite failing: no error")
		}
		return err.Error()
	}
}

// dlqListSaid is what nexus dlq list says of dead letter 1 with the byte
// at off of its frame flipped, dead letter 2 after it.
func dlqListSaid(off int64) func(t *testing.T) string {
	return func(t *testing.T) string {
		root := t.TempDir()
		q, _ := openQueue(t, root, Options{})
		for _, id := range []uint64{1, 2} {
			appendRawDeadLetter(t, q, deadLetter(id))
		}
		flipByte(t, filepath.Join(q.dir, dlqFile), off)
		_, damage, err := ListDeadLetters(root, testTenant, testFlow, nil)
		if err != nil || len(damage) != 1 {
			t.Fatalf("ListDeadLetters: damage %v, %v; want one", damage, err)
		}
		return damage[0].DeadLetterText()
	}
}
