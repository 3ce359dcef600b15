package queue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/naming"
)

// appendN appends n messages of 40-byte payloads and returns them.
func appendN(t testing.TB, q *Queue, from, n int) []Message {
	t.Helper()
	var out []Message
	for i := range n {
		m, err := q.Append(newMessage(from+i, 40))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func checkpoint(t testing.TB, q *Queue) int64 {
	t.Helper()
	c, err := q.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func size(t testing.TB, q *Queue) int64 {
	t.Helper()
	s, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckpoint(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if c := checkpoint(t, q); c != 0 {
		t.Errorf("a new queue's checkpoint is %d, want 0", c)
	}
	msgs := appendN(t, q, 0, 3)
	for _, off := range []int64{0, msgs[1].Offset, size(t, q)} {
		if err := q.SaveCheckpoint(off); err != nil {
			t.Fatal(err)
		}
		if c := checkpoint(t, q); c != off {
			t.Errorf("SaveCheckpoint(%d), then Checkpoint() = %d", off, c)
		}
	}
	q.Close()
	q, _ = openQueue(t, root, Options{})
	if c := checkpoint(t, q); c != size(t, q) {
		t.Errorf("after reopening, Checkpoint() = %d, want %d", c, size(t, q))
	}

	t.Run("PastEOF", func(t *testing.T) {
		// the log was emptied after the checkpoint was written: what it
		// holds came after, and is all to deliver
		if err := q.SaveCheckpoint(size(t, q) + 1000); err != nil {
			t.Fatal(err)
		}
		if c := checkpoint(t, q); c != 0 {
			t.Errorf("a checkpoint past the end reads %d, want 0", c)
		}
	})
	t.Run("Corrupt", func(t *testing.T) {
		if err := q.SaveCheckpoint(msgs[2].Offset); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, testTenant, testFlow, ckptFile)
		b, _ := os.ReadFile(path)
		b[7] ^= 1
		os.WriteFile(path, b, 0o644)
		if c := checkpoint(t, q); c != 0 {
			t.Errorf("a checkpoint that does not verify reads %d, want 0 (deliver everything again)", c)
		}
	})
}

// TestCheckpointPastEOFAfterCrash: the worker reads a frame whose
// fdatasync has not returned, processes it and saves its checkpoint; the
// power fails before the fdatasync. The checkpoint now points past the end
// of the log, and the next acknowledged message must still be delivered.
func TestCheckpointPastEOFAfterCrash(t *testing.T) {
	m, root := settledMemQueue(t)
	var armed atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	m.before = func(op, name string) {
		if op == opSync && filepath.Base(name) == segmentFile && armed.CompareAndSwap(true, false) {
			close(reached)
			<-release
		}
	}
	q, _ := openQueue(t, root, Options{FS: m})
	appendN(t, q, 0, 1)

	armed.Store(true)
	errc := make(chan error)
	go func() {
		_, err := q.Append(newMessage(1, 40))
		errc <- err
	}()
	<-reached
	// the worker reads while the second frame is written but not synced:
	// it must not be delivered before it is durable
	got := readAll(t, q)
	if len(got) != 1 {
		t.Fatalf("the worker read %d messages before the second was synced, want 1", len(got))
	}
	_, end, err := q.Read(got[0].Offset)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(end); err != nil {
		t.Fatal(err)
	}
	m.Fail("", "", 1, syscall.EIO, true) // the power cut
	close(release)
	if err := <-errc; err == nil {
		t.Fatal("the append whose fdatasync failed was acknowledged")
	}
	q.Close()
	m.Crash()

	q, _ = openQueue(t, root, Options{FS: m})
	next, err := q.Append(newMessage(2, 40))
	if err != nil {
		t.Fatal(err)
	}
	// the checkpoint is at or before the new message: it will be delivered
	if c := checkpoint(t, q); c > next.Offset {
		t.Errorf("the checkpoint is %d after reopening, past the new message at %d: it will never be delivered", c, next.Offset)
	}
}

func TestRetries(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if rs, err := q.Retries(); err != nil || len(rs) != 0 {
		t.Errorf("a new queue's retries: %v, %v; want none", rs, err)
	}
	want := []Retry{
		{ID: 1, Offset: 0, Attempt: 2, Due: epoch.Add(1500 * time.Millisecond)},
		{ID: 9, Offset: 4096, Attempt: 3, Due: epoch.Add(time.Hour + 7)},
		{ID: 1 << 40, Offset: 1 << 33, Attempt: 5, Due: time.Unix(0, 1).UTC()},
	}
	for _, rs := range [][]Retry{want, nil, want[1:2]} {
		if err := q.SaveRetries(rs); err != nil {
			t.Fatal(err)
		}
		got, err := q.Retries()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(rs) {
			t.Fatalf("saved %d retries, read %d", len(rs), len(got))
		}
		for i := range rs {
			if got[i].ID != rs[i].ID || got[i].Offset != rs[i].Offset || got[i].Attempt != rs[i].Attempt || !got[i].Due.Equal(rs[i].Due) {
				t.Errorf("retry %d: %+v, want %+v", i, got[i], rs[i])
			}
		}
	}

	// a schedule of the format older versions wrote (one record, rewritten
	// whole), as an upgraded process finds it: any damage is an error (the
	// log format's own damage: TestRetryLogDamage, TestRetryLogTornTail)
	t.Run("CorruptOldFormat", func(t *testing.T) {
		path := filepath.Join(root, testTenant, testFlow, retryFile)
		good := legacyRetryFile(want)
		damaged := map[string][]byte{
			"truncated":      good[:len(good)-1],
			"trailing bytes": append(append([]byte{}, good...), 0),
			"header only":    good[:8],
		}
		for i := range good {
			b := append([]byte{}, good...)
			b[i] ^= 0x10
			damaged["byte "+strconv.Itoa(i)+" flipped"] = b
		}
		for name, b := range damaged {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if rs, err := q.Retries(); err == nil {
				t.Errorf("%s: Retries() = %v, want an error", name, rs)
			}
		}
	})
}

// TestSideFilesOldOrNewAfterCrash cuts the power at each operation of
// SaveCheckpoint and SaveRetries (RELIABILITY A.2): the file holds the old
// value or the new one, and the new one once the call returned nil.
func TestSideFilesOldOrNewAfterCrash(t *testing.T) {
	oldRetries := []Retry{{ID: 1, Offset: 0, Attempt: 2, Due: epoch}}
	newRetries := []Retry{{ID: 2, Offset: 100, Attempt: 3, Due: epoch.Add(time.Minute)}, oldRetries[0]}
	for k := 1; k <= 8; k++ {
		m, root := settledMemQueue(t)
		q, _ := openQueue(t, root, Options{FS: m})
		appendN(t, q, 0, 3)
		if err := q.SaveCheckpoint(10); err != nil {
			t.Fatal(err)
		}
		if err := q.SaveRetries(oldRetries); err != nil {
			t.Fatal(err)
		}

		m.Fail("", "", k, syscall.EIO, true)
		ckptErr := q.SaveCheckpoint(20)
		m.Crash()
		m.Fail("", "", k, syscall.EIO, true)
		retryErr := q.SaveRetries(newRetries)
		m.Crash()

		c := checkpoint(t, q)
		if c != 10 && c != 20 || ckptErr == nil && c != 20 {
			t.Errorf("crash at operation %d of SaveCheckpoint (%v): the checkpoint is %d, want 10 or 20", k, ckptErr, c)
		}
		rs, err := q.Retries()
		if err != nil {
			t.Errorf("crash at operation %d of SaveRetries: %v", k, err)
		} else if len(rs) != 1 && len(rs) != 2 || retryErr == nil && len(rs) != 2 {
			t.Errorf("crash at operation %d of SaveRetries (%v): %d retries, want 1 or 2", k, retryErr, len(rs))
		}
	}
}

func TestDrain(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	if err := q.Drain(); err != nil {
		t.Errorf("draining an empty log: %v", err)
	}
	msgs := appendN(t, q, 0, 3)
	end := size(t, q)

	if err := q.SaveCheckpoint(msgs[2].Offset); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); !errors.Is(err, ErrNotDrained) {
		t.Errorf("draining with an unprocessed message: %v, want ErrNotDrained", err)
	}
	if err := q.SaveCheckpoint(end); err != nil {
		t.Fatal(err)
	}
	if err := q.SaveRetries([]Retry{{ID: 2, Offset: msgs[1].Offset, Attempt: 2, Due: epoch}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); !errors.Is(err, ErrNotDrained) {
		t.Errorf("draining with a pending retry: %v, want ErrNotDrained", err)
	}
	if s := size(t, q); s != end {
		t.Errorf("a refused drain changed the size from %d to %d", end, s)
	}
	checkMessages(t, readAll(t, q), msgs)

	if err := q.SaveRetries(nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); err != nil {
		t.Fatalf("draining a processed log: %v", err)
	}
	if s, c := size(t, q), checkpoint(t, q); s != 0 || c != 0 {
		t.Errorf("after a drain: size %d, checkpoint %d; want 0, 0", s, c)
	}
	next, err := q.Append(newMessage(3, 40))
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != 4 || next.Offset != 0 {
		t.Errorf("the first append after a drain: id %d at %d, want id 4 at 0", next.ID, next.Offset)
	}

	// ids keep counting across a drain and a reopening
	if err := q.SaveCheckpoint(size(t, q)); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	q.Close()
	q, _ = openQueue(t, root, Options{})
	next, err = q.Append(newMessage(4, 40))
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != 5 || next.Offset != 0 {
		t.Errorf("the first append after a drain and a reopening: id %d at %d, want id 5 at 0", next.ID, next.Offset)
	}
	checkMessages(t, readAll(t, q), []Message{next})
}

// TestDrainCrash cuts the power at each operation of a drain (RELIABILITY
// A.8): no id is reissued, and the messages processed before it are not
// delivered again.
func TestDrainCrash(t *testing.T) {
	var redelivered []int
	for k := 1; k <= 30; k++ {
		m, root := settledMemQueue(t)
		q, _ := openQueue(t, root, Options{FS: m})
		msgs := appendN(t, q, 0, 3)
		if err := q.SaveCheckpoint(size(t, q)); err != nil {
			t.Fatal(err)
		}
		m.SyncAll()
		m.Fail("", "", k, syscall.EIO, true)
		drainErr := q.Drain()
		q.Close()
		m.Crash()

		q, _ = openQueue(t, root, Options{FS: m})
		if s := size(t, q); drainErr == nil && s != 0 {
			t.Errorf("crash at operation %d after a drain that returned nil: the log holds %d bytes", k, s)
		}
		if c, s := checkpoint(t, q), size(t, q); c < s {
			redelivered = append(redelivered, k)
		}
		next, err := q.Append(newMessage(9, 40))
		if err != nil {
			t.Fatal(err)
		}
		if next.ID <= msgs[2].ID {
			t.Errorf("crash at operation %d of a drain: id %d reissued", k, next.ID)
		}
	}
	if len(redelivered) > 0 {
		// Drain marks itself in the checkpoint (durably) before it
		// empties the log, so a crash at any point leaves a checkpoint
		// that still covers the processed messages (resolveCheckpoint).
		t.Errorf("a crash at operations %v of a drain delivers the processed messages again", redelivered)
	}
}

// TestTakeoverAfterHousekeepingCutShort: the leader's drain, or the
// janitor's deletion of an idle queue's files, stops at each of its file
// operations in turn (as when the process dies there). Another process's
// handle, opened before, then appends messages, more bytes of them than
// the log held, and takes the queue over: every one of them is at or
// after its checkpoint, so it is delivered, and none of the processed ones
// is, unless the cut tore the checkpoint's own write. (A drain that emptied the log before resetting the checkpoint left a
// checkpoint inside the new messages, and the takeover skipped them.)
func TestTakeoverAfterHousekeepingCutShort(t *testing.T) {
	for _, step := range []string{"drain", "janitor"} {
		t.Run(step, func(t *testing.T) {
			for k := 1; ; k++ {
				m, root := settledMemQueue(t)
				leader, _ := openQueue(t, root, Options{FS: m})
				standby, _ := openQueue(t, root, Options{FS: m})
				appendN(t, leader, 0, 3)
				if err := leader.SaveCheckpoint(size(t, leader)); err != nil {
					t.Fatal(err)
				}
				m.Fail("", "", k, syscall.EIO, false)
				if step == "drain" {
					leader.Drain()
				} else {
					leader.Close()
					deleteIdleQueue(root, testTenant, testFlow, m)
				}
				if !m.Fired() {
					if k == 1 {
						t.Fatalf("the %s did no file operation", step)
					}
					break // the step ran to its end: every cut was tried
				}
				var want []Message
				for i := range 6 {
					msg, err := standby.Append(newMessage(10+i, 200))
					if err != nil {
						t.Fatalf("cut at operation %d of the %s: append: %v", k, step, err)
					}
					want = append(want, msg)
				}
				c, err := standby.Checkpoint()
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for _, msg := range readAll(t, standby) {
					if msg.Offset >= c {
						got = append(got, msg.ID)
					}
				}
				wantIDs := make([]uint64, len(want))
				for i, msg := range want {
					wantIDs[i] = msg.ID
				}
				// none skipped; the processed ones delivered again only when
				// the cut tore the checkpoint's own write (which reads as 0)
				torn := false
				if b, err := readFile(m, filepath.Join(root, testTenant, testFlow, ckptFile)); err == nil && len(b) > 0 {
					_, plain := decodeValue(ckptMagic, b)
					_, marker := decodeValue(drainMagic, b)
					torn = !plain && !marker
				}
				if !slices.Equal(got, wantIDs) && !(torn && slices.Equal(got[max(len(got)-len(wantIDs), 0):], wantIDs)) {
					t.Errorf("cut at operation %d of the %s: from the takeover's checkpoint %d the ids %v are to deliver, want the %v appended since (none skipped, none processed again)", k, step, c, got, wantIDs)
				}
			}
		})
	}
}

// TestDrainConcurrentAppends drains the log whenever everything is
// processed, while 64 goroutines append 32 messages each (RELIABILITY
// A.8): every acknowledged message is processed or still in the log, and
// no id is issued twice. The race depends on timing: 5 rounds, 10,240
// messages in all (500 rounds, a million messages, with NEXUS_SOAK).
func TestDrainConcurrentAppends(t *testing.T) {
	for round := 1; round <= figure(5, 5, 500); round++ {
		lost, reissued, acked := drainWhileAppending(t)
		if lost > 0 || reissued > 0 {
			t.Fatalf("round %d: of %d acknowledged messages, %d were drained away unprocessed and %d got an id already issued",
				round, acked, lost, reissued)
		}
	}
}

// drainWhileAppending runs one round of TestDrainConcurrentAppends.
func drainWhileAppending(t *testing.T) (lost, reissued, acked int) {
	q, _ := openQueue(t, t.TempDir(), Options{})
	var mu sync.Mutex
	ids := map[uint64]int{} // acknowledged ids, with how many messages got each
	var sent []string       // correlation IDs of the acknowledged messages
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 32 {
				m, err := q.Append(newMessage(g*32+i, 40))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids[m.ID]++
				sent = append(sent, m.CorrelationID)
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	processed := map[string]bool{} // by correlation ID
	work := func() {
		c := checkpoint(t, q)
		for {
			m, next, err := q.Read(c)
			if err != nil {
				break
			}
			processed[m.CorrelationID] = true
			c = next
		}
		if err := q.SaveCheckpoint(c); err != nil {
			t.Fatal(err)
		}
		if err := q.Drain(); err != nil && !errors.Is(err, ErrNotDrained) {
			t.Fatal(err)
		}
	}
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		work()
	}
	work()
	for _, c := range sent {
		if !processed[c] {
			lost++
		}
	}
	for _, n := range ids {
		reissued += n - 1
	}
	q.Close()
	return lost, reissued, len(sent)
}

// TestOpenRefusesBadNames: a pair that breaks the name rule is refused
// naming the pair and the character at fault, and nothing is created.
func TestOpenRefusesBadNames(t *testing.T) {
	for _, tc := range []struct{ tenant, flow, char string }{
		{"../x", "orders", "'.'"},
		{"acme", "../x", "'.'"},
		{"A", "orders", "'A'"},
		{"acme", "A", "'A'"},
		{"a.b", "orders", "'.'"},
		{"acme", "a.b", "'.'"},
		{"", "orders", ""},
		{"acme", "a/b", "'/'"},
	} {
		root := t.TempDir()
		q, _, err := Open(root, tc.tenant, tc.flow, Options{})
		if err == nil {
			q.Close()
			t.Errorf("Open(%q, %q) succeeded", tc.tenant, tc.flow)
			continue
		}
		var nerr *naming.Error
		msg := err.Error()
		if !errors.As(err, &nerr) || !strings.Contains(msg, strconv.Quote(tc.tenant)) ||
			!strings.Contains(msg, strconv.Quote(tc.flow)) || !strings.Contains(msg, tc.char) {
			t.Errorf("Open(%q, %q): %v; want the name rule's error naming both and %s", tc.tenant, tc.flow, err, tc.char)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("Open(%q, %q) created %v under the root", tc.tenant, tc.flow, entries)
		}
		if _, err := Dir(root, tc.tenant, tc.flow); err == nil {
			t.Errorf("Dir(%q, %q) succeeded", tc.tenant, tc.flow)
		}
	}
}

// TestDrainMarkerReadEverywhere: a drain stopped after its marker, with a
// message appended since, reads the same to every reader of the
// checkpoint: the worker's Checkpoint, a reopening's recovery, the
// management counts and the listing of a queue this process has not
// opened. The processed messages are behind it, the new one in front.
func TestDrainMarkerReadEverywhere(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	appendN(t, q, 0, 3)
	processed := size(t, q)
	if err := q.SaveCheckpoint(processed); err != nil {
		t.Fatal(err)
	}
	next, err := q.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.markDrain(next); err != nil { // the drain stops here
		t.Fatal(err)
	}
	if _, err := q.Append(newMessage(9, 40)); err != nil {
		t.Fatal(err)
	}
	if c := checkpoint(t, q); c != processed {
		t.Errorf("Checkpoint() = %d, want %d (the first message appended since the marker)", c, processed)
	}
	counts, err := ReadCounts(root, testTenant, testFlow, nil)
	if err != nil || counts.Total != 4 || counts.Processed != 3 {
		t.Errorf("ReadCounts = %+v, %v; want 4 in all, 3 processed", counts, err)
	}
	q.Close()
	m := NewManager(ManagerConfig{Root: root})
	if info, ok := m.Info(testTenant, testFlow); !ok || info.Depth != 1 {
		t.Errorf("Info of the queue on disk: %+v, %v; want depth 1 (the message appended since the marker)", info, ok)
	}
	openQueue(t, root, Options{}) // recovery rewrites the marker
	if b := fileBytes(t, OS{}, root, ckptFile); !bytes.Equal(b, encodeValue(ckptMagic, uint64(processed))) {
		t.Errorf("after reopening, segment.log.ckpt holds % x, want the plain checkpoint %d", b, processed)
	}
}

// TestCheckpointPastTheLargestOffset: a checkpoint whose value does not fit
// an offset (2^63 and more: a CRC-valid file no version writes) reads as
// past the end, so 0, and never as a negative offset.
func TestCheckpointPastTheLargestOffset(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	appendN(t, q, 0, 2)
	if err := os.WriteFile(filepath.Join(root, testTenant, testFlow, ckptFile), encodeValue(ckptMagic, 1<<63+5), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Checkpoint(); err != nil || c != 0 {
		t.Errorf("Checkpoint = %d, %v; want 0", c, err)
	}
	if c, err := ReadCounts(root, testTenant, testFlow, nil); err != nil || c.Processed != 0 || c.Total != 2 {
		t.Errorf("ReadCounts = %+v, %v; want 2 messages, none processed", c, err)
	}
}
