package queue

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// deadLetter is a test's dead letter for id; its payload holds the marker
// "body-{id}".
func deadLetter(id uint64) DeadLetter {
	return DeadLetter{
		ID:         id,
		EnqueuedAt: epoch.Add(time.Duration(id) * time.Second),
		FailedAt:   epoch.Add(time.Duration(id) * time.Minute),
		Attempts:   int(id%5) + 1,
		LastError:  fmt.Sprintf("step 'forward': HTTP 503 (%d)", id),
		Payload:    fmt.Appendf(nil, `{"secret":"body-%d"}`, id),
	}
}

func sameDeadLetter(got, want DeadLetter) bool {
	return got.ID == want.ID && got.EnqueuedAt.Equal(want.EnqueuedAt) && got.FailedAt.Equal(want.FailedAt) &&
		got.Attempts == want.Attempts && got.LastError == want.LastError && bytes.Equal(got.Payload, want.Payload)
}

// checkDeadLetters checks the pending dead letters' ids, in order, and
// that the file held no damage.
func checkDeadLetters(t *testing.T, q *Queue, ids ...uint64) {
	t.Helper()
	got, damage, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(damage) != 0 {
		t.Errorf("dlq.log damage: %v", damage)
	}
	var gotIDs []uint64
	for _, d := range got {
		gotIDs = append(gotIDs, d.ID)
		if !sameDeadLetter(d, deadLetter(d.ID)) {
			t.Errorf("dead letter %d: %+v, want %+v", d.ID, d, deadLetter(d.ID))
		}
	}
	if fmt.Sprint(gotIDs) != fmt.Sprint(ids) {
		t.Errorf("pending dead letters %v, want %v", gotIDs, ids)
	}
}

func moveToDLQ(t *testing.T, q *Queue, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if err := q.MoveToDLQ(deadLetter(id)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeadLetters(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	checkDeadLetters(t, q)
	moveToDLQ(t, q, 9, 3, 7)
	checkDeadLetters(t, q, 3, 7, 9)
}

func TestMark(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	acked := filepath.Join(root, testTenant, testFlow, ackedFile)
	if err := q.Mark(1, MarkDiscarded); !errors.Is(err, ErrNotPending) {
		t.Errorf("marking in an empty dead-letter queue: %v, want ErrNotPending", err)
	}
	if _, err := os.Stat(acked); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused mark created %s: %v", ackedFile, err)
	}

	moveToDLQ(t, q, 9, 3, 7)
	if err := q.Mark(7, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	checkDeadLetters(t, q, 3, 9)
	info, err := os.Stat(acked)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{7, 100} {
		if err := q.Mark(id, MarkReplayed); !errors.Is(err, ErrNotPending) {
			t.Errorf("Mark(%d): %v, want ErrNotPending", id, err)
		}
	}
	if after, _ := os.Stat(acked); after.Size() != info.Size() {
		t.Errorf("refused marks wrote to %s: %d → %d bytes", ackedFile, info.Size(), after.Size())
	}
	if err := q.Mark(3, MarkReplayed); err != nil {
		t.Fatal(err)
	}
	checkDeadLetters(t, q, 9)
}

func TestCompactDLQ(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	moveToDLQ(t, q, 9, 3, 7)
	before, _ := os.ReadFile(dlq)
	if applied, _, err := q.CompactDLQ(); err != nil || len(applied) != 0 {
		t.Fatalf("CompactDLQ without marks = %v, %v", applied, err)
	}
	if after, _ := os.ReadFile(dlq); !bytes.Equal(after, before) {
		t.Errorf("compacting without marks rewrote dlq.log")
	}

	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if err := q.MarkReplayed(9, 42); err != nil {
		t.Fatal(err)
	}
	applied, _, err := q.CompactDLQ()
	if err != nil {
		t.Fatal(err)
	}
	want := []Marked{{ID: 3, Action: MarkDiscarded}, {ID: 9, Action: MarkReplayed, ReplayID: 42}}
	if diff := cmp.Diff(want, applied, cmpopts.IgnoreFields(Marked{}, "At")); diff != "" {
		t.Errorf("CompactDLQ applied (-want +got):\n%s", diff)
	}
	b, _ := os.ReadFile(dlq)
	for _, body := range []string{"body-3", "body-9"} {
		if bytes.Contains(b, []byte(body)) {
			t.Errorf("dlq.log still holds %s after compaction", body)
		}
	}
	if !bytes.Contains(b, []byte("body-7")) {
		t.Errorf("compaction removed the unmarked body-7")
	}
	checkDeadLetters(t, q, 7)
	if info, err := os.Stat(filepath.Join(root, testTenant, testFlow, ackedFile)); err != nil || info.Size() != 0 {
		t.Errorf("the marks after compaction: %v, %v; want an empty file", info, err)
	}
	if err := q.Mark(3, MarkDiscarded); !errors.Is(err, ErrNotPending) {
		t.Errorf("marking a compacted entry: %v, want ErrNotPending", err)
	}
	moveToDLQ(t, q, 11)
	checkDeadLetters(t, q, 7, 11)
}

// TestMoveToDLQCutsTornTail: a frame cut short at the end of dlq.log is
// cut before the next dead letter is written.
func TestMoveToDLQCutsTornTail(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	moveToDLQ(t, q, 1)
	good, _ := os.ReadFile(dlq)
	torn := appendFrame(nil, appendDeadLetterRecord(nil, &DeadLetter{ID: 2, Payload: []byte("lost")}))
	if err := os.WriteFile(dlq, append(good, torn[:len(torn)/2]...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, damage, _ := q.DeadLetters(); len(damage) != 1 || !damage[0].Torn || damage[0].Offset != int64(len(good)) {
		t.Errorf("a torn dlq.log: damage %v, want a torn tail at %d", damage, len(good))
	}
	moveToDLQ(t, q, 3)
	want := appendFrame(good, appendDeadLetterRecord(nil, ptr(deadLetter(3))))
	if b, _ := os.ReadFile(dlq); !bytes.Equal(b, want) {
		t.Errorf("dlq.log after the torn tail:\n%q\nwant\n%q", b, want)
	}
	checkDeadLetters(t, q, 1, 3)
}

func ptr[T any](v T) *T { return &v }

// TestMoveToDLQConcurrent: 32 goroutines dead-letter a message each, and
// all 32 are listed. The race depends on timing: 20 rounds.
func TestMoveToDLQConcurrent(t *testing.T) {
	for round := 1; round <= 20; round++ {
		q, _ := openQueue(t, t.TempDir(), Options{})
		var wg sync.WaitGroup
		for id := range uint64(32) {
			wg.Go(func() {
				if err := q.MoveToDLQ(deadLetter(id + 1)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, damage, err := q.DeadLetters()
		if err != nil || len(got) != 32 {
			t.Fatalf("round %d: 32 dead letters moved, %d listed (damage %v, %v)", round, len(got), damage, err)
		}
	}
}

// TestDeadLetterCrashAfterCreate cuts the power after the first dead
// letter and the first mark of a queue whose folder and log are durable.
func TestDeadLetterCrashAfterCreate(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: m})
	m.SyncAll()
	moveToDLQ(t, q, 1, 2)
	m.Crash()
	// A new dlq.log (or dlq.log.acked) has its folder synced too, so the
	// acknowledged dead letters survive the power cut.
	checkDeadLetters(t, q, 1, 2)

	// the first mark, of a dead letter that is durable
	moveToDLQ(t, q, 3)
	m.SyncAll()
	if err := q.Mark(3, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	m.Crash()
	got, _, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		if d.ID == 3 {
			t.Errorf("dead letter 3 is pending again after a crash: its mark was lost")
		}
	}
}

// TestReadDeadLetters lists dead letters without opening the queue.
func TestReadDeadLetters(t *testing.T) {
	root := t.TempDir()
	if got, _, err := ReadDeadLetters(root, "nobody", "nothing", nil); err != nil || len(got) != 0 {
		t.Errorf("a queue that does not exist: %v, %v", got, err)
	}
	if _, _, err := ReadDeadLetters(root, "../x", "orders", nil); err == nil {
		t.Errorf("a bad name was accepted")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("listing created %v", entries)
	}
	q, _ := openQueue(t, root, Options{})
	moveToDLQ(t, q, 5, 2)
	if err := q.Mark(5, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	got, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil)
	want := deadLetter(2)
	want.Payload = nil // a listing leaves the bodies on disk
	if err != nil || len(damage) != 0 || len(got) != 1 || !sameDeadLetter(got[0], want) {
		t.Errorf("ReadDeadLetters: %v, %v, %v; want dead letter 2 without its payload", got, damage, err)
	}
}

// checkListed checks that ReadDeadLetters lists the dead letters ids of
// the test queue under root, and returns the damage it reported.
func checkListed(t *testing.T, root string, ids ...uint64) []Damage {
	t.Helper()
	got, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil)
	if err != nil {
		t.Fatal(err)
	}
	var listed []uint64
	for _, d := range got {
		listed = append(listed, d.ID)
	}
	if diff := cmp.Diff(ids, listed); diff != "" {
		t.Errorf("listed ids (-want +got):\n%s", diff)
	}
	return damage
}

// damageSecondDeadLetter dead-letters 1, 2 and 3 in q (under root), flips
// a byte inside 2's record and appends tail to dlq.log; it returns the
// damaged frame's offset.
func damageSecondDeadLetter(t *testing.T, q *Queue, root string, tail []byte) int {
	t.Helper()
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	moveToDLQ(t, q, 1)
	first, _ := os.ReadFile(dlq)
	moveToDLQ(t, q, 2, 3)
	b, _ := os.ReadFile(dlq)
	b[len(first)+headerSize+12] ^= 0xff
	if err := os.WriteFile(dlq, append(b, tail...), 0o600); err != nil {
		t.Fatal(err)
	}
	return len(first)
}

// TestReadDeadLettersReportsDamage: a damaged dead letter in the middle of
// dlq.log is reported, not silently left out of the listing; a torn tail
// (a dead letter being written, or one a crash cut short) is not.
func TestReadDeadLettersReportsDamage(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	torn := appendFrame(nil, appendDeadLetterRecord(nil, ptr(deadLetter(4))))
	first := damageSecondDeadLetter(t, q, root, torn[:len(torn)/2])
	damage := checkListed(t, root, 1, 3)
	if len(damage) != 1 || damage[0].File != dlqFile || damage[0].Offset != int64(first) || damage[0].Torn {
		t.Errorf("damage %+v, want the frame at offset %d of dlq.log, and not the torn tail", damage, first)
	}
}

// TestCompactDLQReportsDamage: the rewrite of dlq.log leaves a damaged
// frame out, and says so, so that a dead letter never leaves the disk
// unreported.
func TestCompactDLQReportsDamage(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	first := damageSecondDeadLetter(t, q, root, nil)
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	applied, damage, err := q.CompactDLQ()
	if err != nil || len(applied) != 1 || applied[0].ID != 1 {
		t.Fatalf("CompactDLQ: %v, %v", applied, err)
	}
	if len(damage) != 1 || damage[0].Offset != int64(first) || damage[0].Torn {
		t.Errorf("damage %+v, want the frame at offset %d", damage, first)
	}
	checkDeadLetters(t, q, 3)
}

// TestDeadLetterAfterADamagedLastOne: a whole last dead letter whose
// checksum fails (damage, not a write a crash cut short) is kept when the
// next dead letter is written after it, so the listing reports it and the
// rewrite drops it with a report. The append once wrote over it as over a
// torn tail: a dead letter vanished with nothing said.
func TestDeadLetterAfterADamagedLastOne(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	moveToDLQ(t, q, 1)
	first, _ := os.ReadFile(dlq)
	moveToDLQ(t, q, 2)
	b, _ := os.ReadFile(dlq)
	b[len(b)-3] ^= 0x10 // inside dead letter 2's record
	if err := os.WriteFile(dlq, b, 0o600); err != nil {
		t.Fatal(err)
	}
	moveToDLQ(t, q, 3)
	damage := checkListed(t, root, 1, 3)
	if len(damage) != 1 || damage[0].Offset != int64(len(first)) || damage[0].ID != 2 || damage[0].Torn {
		t.Errorf("damage %+v, want dead letter 2's frame at offset %d", damage, len(first))
	}
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if _, damage, err := q.CompactDLQ(); err != nil || len(damage) != 1 || damage[0].ID != 2 {
		t.Errorf("CompactDLQ: damage %+v, %v; want dead letter 2's frame reported", damage, err)
	}
	checkDeadLetters(t, q, 3)
}

// TestDeadLetteredTwiceIsOneDeadLetter: a message dead-lettered again
// after a crash (delivered again because the checkpoint had not passed
// it) is one pending dead letter: listed, counted, paged and replayed
// once; a mark hides both entries and the rewrite keeps one. It was
// listed twice, with two Replay buttons that would deliver it twice.
func TestDeadLetteredTwiceIsOneDeadLetter(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	moveToDLQ(t, q, 1, 2, 1)
	checkDeadLetters(t, q, 1, 2)
	if n, err := q.DeadLetterCount(); err != nil || n != 2 {
		t.Errorf("DeadLetterCount = %d, %v; want 2", n, err)
	}
	if page, err := q.DeadLetterPage(0, 10, 100); err != nil || page.Total != 2 || len(page.Entries) != 2 {
		t.Errorf("DeadLetterPage: total %d, %d entries, %v; want 2 and 2", page.Total, len(page.Entries), err)
	}
	if _, err := q.Replay(1, "replay", "c-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Replay(1, "replay", "c-2"); !errors.Is(err, ErrNotPending) {
		t.Errorf("a second replay of id 1: %v, want ErrNotPending", err)
	}
	checkDeadLetters(t, q, 2)
	moveToDLQ(t, q, 2)
	if _, _, err := q.CompactDLQ(); err != nil {
		t.Fatal(err)
	}
	recs, _, err := q.readRecords(dlqFile)
	if err != nil || len(recs) != 1 {
		t.Errorf("dlq.log holds %d records after the rewrite (%v), want dead letter 2 once", len(recs), err)
	}
	checkDeadLetters(t, q, 2)
}

// TestDamagedMarkIsReported: a damaged frame in dlq.log.acked (a replay
// or discard mark that no longer verifies) leaves the dead letter it
// marked pending again; that is said, by the listing and by the worker's
// rewrite, which then clears the marks file even when no other mark is
// in it. (The damage was dropped silently: a discarded dead letter came
// back, and could be replayed, with nothing to say why.)
func TestDamagedMarkIsReported(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	moveToDLQ(t, q, 1, 2)
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	acked := filepath.Join(root, testTenant, testFlow, ackedFile)
	b, err := os.ReadFile(acked)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // inside the mark's record: the frame is whole, its checksum fails
	if err := os.WriteFile(acked, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("ReadDeadLetters: %v, %v; want dead letters 1 and 2 pending", got, err)
	}
	if len(damage) != 1 || damage[0].File != ackedFile || damage[0].Offset != 0 {
		t.Errorf("listing damage %+v, want the mark at offset 0 of %s", damage, ackedFile)
	}
	applied, damage, err := q.CompactDLQ()
	if err != nil || len(applied) != 0 {
		t.Fatalf("CompactDLQ: %v, %v; want no mark applied", applied, err)
	}
	if len(damage) != 1 || damage[0].File != ackedFile {
		t.Errorf("rewrite damage %+v, want the mark of %s", damage, ackedFile)
	}
	if st, err := os.Stat(acked); err != nil || st.Size() != 0 {
		t.Errorf("%s after the rewrite: %v, %v; want it empty", ackedFile, st, err)
	}
	checkDeadLetters(t, q, 1, 2)
}

// The words of a dead letter that is not pending are nexus dlq's, and the
// error is ErrNotPending.
func TestNotPendingError(t *testing.T) {
	var err error = &NotPendingError{Tenant: "acme", Flow: "forward-order", ID: 7}
	if got := err.Error(); got != "no pending dead letter id=7 tenant=acme flow=forward-order" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(err, ErrNotPending) || !errors.Is(fmt.Errorf("replay: %w", err), ErrNotPending) {
		t.Error("a NotPendingError is not ErrNotPending")
	}
}

// TestDeadLetterAfterAFailedFolderSync: when the folder sync of a new
// dlq.log fails, MoveToDLQ fails and cuts its frame, so the next MoveToDLQ
// of the message (delivered again: its checkpoint did not move) syncs the
// folder again rather than taking a file a power cut could lose for
// durable.
func TestDeadLetterAfterAFailedFolderSync(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: m})
	m.SyncAll()
	d := DeadLetter{ID: 1, EnqueuedAt: epoch, FailedAt: epoch, Attempts: 3, LastError: "503", Payload: []byte(`{"n":1}`)}
	m.Fail(opSyncDir, testFlow, 1, syscall.EIO, false) // the folder sync of the new dlq.log, once
	if err := q.MoveToDLQ(d); err == nil {
		t.Fatal("the first MoveToDLQ succeeded despite the failed folder sync")
	}
	if err := q.MoveToDLQ(d); err != nil { // the message delivered again, dead-lettered again
		t.Fatalf("the second MoveToDLQ: %v", err)
	}
	// MoveToDLQ returned nil: the dead letter is durable, the worker moves on
	q.Close()
	m.Crash()
	p, err := Peek(root, testTenant, testFlow, m)
	if err != nil {
		t.Fatal(err)
	}
	dl, _, err := p.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) == 0 {
		t.Error("after a power cut, the dead letter that MoveToDLQ acknowledged is gone: dlq.log's folder entry was never synced")
	}
}

// TestLargeDeadLetterStaysReadable: a message of MaxPayload bytes whose
// last error is longer than what MaxPayload leaves for a record's fields
// (a failed call's error names the URL it called, whose path may carry the
// message's values) is dead-lettered readable: the error is cut to fit.
// The record once went over MaxRecord, so no reader took it, and the next
// append cut it off as a torn tail after the worker had acknowledged it.
func TestLargeDeadLetterStaysReadable(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{GatherWait: -1})
	m, err := q.Append(NewMessage{Source: "enqueue", CorrelationID: "c-1", Payload: bytes.Repeat([]byte("x"), MaxPayload)})
	if err != nil {
		t.Fatal(err)
	}
	lastError := `step 'call': effect handler failed: Post "https://orders.example.com/items/` +
		strings.Repeat("%41", 600) + `": dial tcp 127.0.0.1:1: connect: connection refused`
	err = q.MoveToDLQ(DeadLetter{ID: m.ID, EnqueuedAt: m.EnqueuedAt, FailedAt: epoch.Add(time.Minute), Attempts: 5,
		LastError: lastError, Payload: m.Payload})
	if err != nil {
		t.Fatalf("MoveToDLQ: %v (the worker would fail this round again and again)", err)
	}
	d, err := q.DeadLetter(m.ID)
	if err != nil {
		n, _ := q.DeadLetterCount()
		t.Fatalf("the dead letter MoveToDLQ wrote cannot be read back: %v (%d listed)", err, n)
	}
	if !bytes.Equal(d.Payload, m.Payload) {
		t.Error("the dead letter's payload differs from the message's")
	}
	if !strings.HasPrefix(d.LastError, lastError[:200]) || !strings.HasSuffix(d.LastError, "…") || len(d.LastError) >= len(lastError) {
		t.Errorf("last error %d bytes, want the first part of the %d-byte error, cut with …", len(d.LastError), len(lastError))
	}
}

// TestLastErrorIsCutAtACharacter: a last error over MaxLastError is cut at
// a character boundary and marked; a shorter one is kept whole.
func TestLastErrorIsCutAtACharacter(t *testing.T) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	long := strings.Repeat("é", MaxLastError) // 2 bytes each
	for id, e := range map[uint64]string{1: "HTTP 503", 2: long} {
		d := deadLetter(id)
		d.LastError = e
		if err := q.MoveToDLQ(d); err != nil {
			t.Fatal(err)
		}
	}
	short, _ := q.DeadLetter(1)
	cut, _ := q.DeadLetter(2)
	if short.LastError != "HTTP 503" {
		t.Errorf("a short error became %q", short.LastError)
	}
	if len(cut.LastError) > MaxLastError || !utf8.ValidString(cut.LastError) || !strings.HasSuffix(cut.LastError, "é…") {
		t.Errorf("the long error: %d bytes, valid UTF-8 %v, ends %q", len(cut.LastError), utf8.ValidString(cut.LastError), cut.LastError[len(cut.LastError)-8:])
	}
}
