package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nexushq/nexus/clock/clocktest"
)

// legacyRetryFile is a schedule in the format older versions wrote (see
// decodeLegacyRetries), built from its description.
func legacyRetryFile(rs []Retry) []byte {
	b := append([]byte("NXR1"), binary.BigEndian.AppendUint32(nil, uint32(len(rs)))...)
	for _, r := range rs {
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Offset))
		b = binary.BigEndian.AppendUint32(b, uint32(r.Attempt))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Due.UnixNano()))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func retryAt(id uint64, attempt int, due time.Duration) Retry {
	return Retry{ID: id, Offset: int64(id-1) * 100, Attempt: attempt, Due: epoch.Add(due)}
}

// retryChange is one change to a schedule: a set, or a clear of id.
type retryChange struct {
	set   *Retry
	clear uint64
}

func setR(r Retry) retryChange       { return retryChange{set: &r} }
func clearR(id uint64) retryChange   { return retryChange{clear: id} }
func (c retryChange) String() string { return fmt.Sprintf("%+v/%d", c.set, c.clear) }

// apply makes the change through the worker's schedule s, and on the
// model (the entries in the order they were set).
func (c retryChange) apply(t testing.TB, s *retrySchedule, model []Retry) []Retry {
	t.Helper()
	if c.set != nil {
		if err := s.set(*c.set); err != nil {
			t.Fatalf("set %+v: %v", *c.set, err)
		}
		model = slices.DeleteFunc(model, func(r Retry) bool { return r.ID == c.set.ID })
		return append(model, *c.set)
	}
	if err := s.clear(c.clear); err != nil {
		t.Fatalf("clear %d: %v", c.clear, err)
	}
	return slices.DeleteFunc(model, func(r Retry) bool { return r.ID == c.clear })
}

// retryQueue is a queue on real files whose schedule the test drives as
// the worker does.
func retryQueue(t *testing.T) (*Queue, string) {
	t.Helper()
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	return q, filepath.Join(root, testTenant, testFlow, retryFile)
}

func mustRetries(t testing.TB, q *Queue) []Retry {
	t.Helper()
	rs, err := q.Retries()
	if err != nil {
		t.Fatalf("Retries: %v", err)
	}
	return rs
}

func mustOpenSchedule(t testing.TB, q *Queue) (*retrySchedule, []Damage) {
	t.Helper()
	s, damage, err := q.openRetrySchedule()
	if err != nil {
		t.Fatalf("openRetrySchedule: %v", err)
	}
	return s, damage
}

// TestRetryLogChanges: each change is one frame appended; the schedule
// read back (by any process, and by the worker as it starts) is the
// changes applied in order, and the earliest due comes first, ties in
// the order set.
func TestRetryLogChanges(t *testing.T) {
	tests := []struct {
		name      string
		changes   []retryChange
		wantFirst uint64 // 0: none
	}{
		{"none", nil, 0},
		{"one set", []retryChange{setR(retryAt(1, 2, time.Second))}, 1},
		{"set, cleared", []retryChange{setR(retryAt(1, 2, time.Second)), clearR(1)}, 0},
		{"clear of nothing", []retryChange{clearR(7)}, 0},
		{"set again replaces", []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 2, 2*time.Second)), setR(retryAt(1, 3, 3*time.Second))}, 2},
		{"earliest first", []retryChange{setR(retryAt(1, 2, time.Hour)), setR(retryAt(2, 2, time.Minute)), setR(retryAt(3, 2, time.Second))}, 3},
		{"ties in the order set", []retryChange{setR(retryAt(3, 2, time.Second)), setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 2, time.Second))}, 3},
		{"tie set again goes last", []retryChange{setR(retryAt(3, 2, time.Second)), setR(retryAt(1, 2, time.Second)), setR(retryAt(3, 2, time.Second))}, 1},
		{"cleared first", []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 2, time.Minute)), clearR(1)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, path := retryQueue(t)
			s, _ := mustOpenSchedule(t, q)
			var model []Retry
			size := int64(0)
			for _, c := range tt.changes {
				model = c.apply(t, s, model)
				want := int64(retrySetFrame)
				if c.set == nil {
					want = headerSize + retryClearRecord
				}
				if got := fileSizeOf(t, path); got != size+want {
					t.Fatalf("after %v the file is %d bytes, want %d (one frame appended)", c, got, size+want)
				}
				size += want
			}
			if diff := cmp.Diff(model, mustRetries(t, q), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Retries (-want +got):\n%s", diff)
			}
			again, damage := mustOpenSchedule(t, q)
			if len(damage) > 0 {
				t.Errorf("damage: %v", damage)
			}
			if diff := cmp.Diff(model, again.list(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the worker's schedule at its start (-want +got):\n%s", diff)
			}
			first, ok := again.first()
			if tt.wantFirst == 0 && ok || tt.wantFirst != 0 && first.ID != tt.wantFirst {
				t.Errorf("first = %+v, %v; want id %d", first, ok, tt.wantFirst)
			}
		})
	}
}

func fileSizeOf(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestRetryLogTornTail cuts the log at each byte of its last frame, and
// grows it with zeros (a size that reached the disk before the data):
// every reader reads the state before that change; the worker, as it
// starts, cuts the tail, reports it, and appends after it.
func TestRetryLogTornTail(t *testing.T) {
	for _, last := range []retryChange{setR(retryAt(3, 4, time.Minute)), clearR(1)} {
		t.Run(fmt.Sprintf("last %v", last), func(t *testing.T) {
			q, path := retryQueue(t)
			s, _ := mustOpenSchedule(t, q)
			var before []Retry
			for _, c := range []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 3, time.Hour))} {
				before = c.apply(t, s, before)
			}
			prefix, _ := os.ReadFile(path)
			last.apply(t, s, slices.Clone(before))
			whole, _ := os.ReadFile(path)

			type tail struct {
				name string
				b    []byte
			}
			var tails []tail
			for cut := len(prefix); cut < len(whole); cut++ {
				tails = append(tails, tail{fmt.Sprintf("cut at %d", cut), whole[:cut]})
			}
			tails = append(tails,
				tail{"a zeroed frame", append(slices.Clone(prefix), make([]byte, len(whole)-len(prefix))...)},
				tail{"zeros past the end", append(slices.Clone(prefix), make([]byte, 100)...)})
			for _, tt := range tails {
				if err := os.WriteFile(path, tt.b, 0o600); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(before, mustRetries(t, q)); diff != "" {
					t.Errorf("%s: Retries (-want +got):\n%s", tt.name, diff)
				}
				w, damage := mustOpenSchedule(t, q)
				wantDamage := []Damage{{File: retryFile, Offset: int64(len(prefix)), Length: int64(len(tt.b) - len(prefix)), Torn: true}}
				if len(tt.b) == len(prefix) {
					wantDamage = nil
				}
				if diff := cmp.Diff(wantDamage, damage, cmpIgnoreReasonAndID); diff != "" {
					t.Errorf("%s: damage reported (-want +got):\n%s", tt.name, diff)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, prefix) {
					t.Errorf("%s: the worker left %d bytes, want the %d before the torn frame", tt.name, len(got), len(prefix))
				}
				// the next change goes where the tail was
				want := setR(retryAt(9, 2, time.Second)).apply(t, w, slices.Clone(before))
				if diff := cmp.Diff(want, mustRetries(t, q)); diff != "" {
					t.Errorf("%s: after a change (-want +got):\n%s", tt.name, diff)
				}
			}
		})
	}
}

var cmpIgnoreReasonAndID = cmp.Comparer(func(a, b Damage) bool {
	return a.File == b.File && a.Offset == b.Offset && a.Length == b.Length && a.Torn == b.Torn
})

// TestRetryLogDamage flips each bit of a log of three frames: damage that
// is no torn write (in the middle, or a whole last frame) is an error for
// every reader but the worker, which leaves the file as it is. The worker,
// as it starts, loses the damaged change only, reports it, and rewrites
// the file with the entries that verified: a set lost drops its retry
// (lost, for the worker to report), a clear lost keeps the retry it
// cleared (delivered again, never lost).
func TestRetryLogDamage(t *testing.T) {
	q, path := retryQueue(t)
	s, _ := mustOpenSchedule(t, q)
	var model []Retry
	for _, c := range []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 3, time.Hour)), clearR(1)} {
		model = c.apply(t, s, model)
	}
	good, _ := os.ReadFile(path)
	// the frames: where each starts, what the worker keeps and loses when
	// it is damaged
	frames := []struct {
		at   int
		want []Retry
		lost []uint64
	}{
		{0, []Retry{retryAt(2, 3, time.Hour)}, nil},                                             // set 1, cleared after it
		{retrySetFrame, nil, []uint64{2}},                                                       // set 2
		{2 * retrySetFrame, []Retry{retryAt(1, 2, time.Second), retryAt(2, 3, time.Hour)}, nil}, // clear 1
	}
	for i := range good {
		f := len(frames) - 1
		for frames[f].at > i {
			f--
		}
		idByte := i-frames[f].at >= headerSize+1 && i-frames[f].at < headerSize+9
		for bit := range 8 {
			what := fmt.Sprintf("byte %d bit %d flipped", i, bit)
			b := slices.Clone(good)
			b[i] ^= 1 << bit
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if rs, err := q.Retries(); err == nil {
				t.Errorf("%s: Retries() = %v, want an error", what, rs)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
				t.Fatalf("%s: the damaged file was changed by a reader", what)
			}
			w, damage, err := q.openRetrySchedule()
			if err != nil {
				t.Fatalf("%s: the worker's open: %v", what, err)
			}
			if len(damage) != 1 || damage[0].Torn || damage[0].Offset != int64(frames[f].at) {
				t.Errorf("%s: damage %+v, want the frame at %d", what, damage, frames[f].at)
			}
			rs := mustRetries(t, q) // the file rewritten: it verifies
			if diff := cmp.Diff(w.list(), rs); diff != "" {
				t.Errorf("%s: the file rewritten holds (-worker +file):\n%s", what, diff)
			}
			if idByte {
				continue // the id read from the damaged frame is not its own
			}
			if diff := cmp.Diff(frames[f].want, rs); diff != "" {
				t.Errorf("%s: the entries kept (-want +got):\n%s", what, diff)
			}
			var lost []uint64
			for _, x := range w.takeLost() {
				lost = append(lost, x.Retry.ID)
			}
			if diff := cmp.Diff(frames[f].lost, lost); diff != "" {
				t.Errorf("%s: the retries lost (-want +got):\n%s", what, diff)
			}
		}
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(model, mustRetries(t, q)); diff != "" {
		t.Errorf("undamaged again (-want +got):\n%s", diff)
	}
}

// TestRetryLogFromTheOldFormat: a schedule of the old format is read as it
// is by any process, and carried over to the log by the worker as it
// starts, with the same entries.
func TestRetryLogFromTheOldFormat(t *testing.T) {
	for _, rs := range [][]Retry{
		nil,
		{retryAt(1, 2, time.Second)},
		{retryAt(5, 2, time.Hour), retryAt(1, 3, time.Second), {ID: 1 << 40, Offset: 1 << 33, Attempt: 5, Due: time.Unix(0, 1).UTC()}},
	} {
		t.Run(fmt.Sprint(len(rs)), func(t *testing.T) {
			q, path := retryQueue(t)
			if err := os.WriteFile(path, legacyRetryFile(rs), 0o600); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rs, mustRetries(t, q)); diff != "" {
				t.Errorf("the old format, read (-want +got):\n%s", diff)
			}
			s, damage := mustOpenSchedule(t, q)
			if len(damage) > 0 {
				t.Errorf("damage: %v", damage)
			}
			if diff := cmp.Diff(rs, s.list()); diff != "" {
				t.Errorf("the worker's schedule (-want +got):\n%s", diff)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, encodeRetryLog(rs)) {
				t.Errorf("carried over: the file holds\n%x\nwant the log of the same entries\n%x", got, encodeRetryLog(rs))
			}
			want := setR(retryAt(9, 2, time.Minute)).apply(t, s, slices.Clone(rs))
			if diff := cmp.Diff(want, mustRetries(t, q)); diff != "" {
				t.Errorf("after a change (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRetryLogCarriedOverCutAtEveryStep cuts the power at each operation
// of the carrying over: the schedule that survives holds the same entries,
// in either format, and the next start carries it over.
func TestRetryLogCarriedOverCutAtEveryStep(t *testing.T) {
	rs := []Retry{retryAt(1, 2, time.Second), retryAt(2, 3, time.Hour)}
	for k := 1; ; k++ {
		m, root := settledMemQueue(t)
		q, _ := openQueue(t, root, Options{FS: m})
		if err := WriteAtomic(m, q.path(retryFile), legacyRetryFile(rs)); err != nil {
			t.Fatal(err)
		}
		m.Fail("", "", k, syscall.EIO, true)
		_, _, err := q.openRetrySchedule()
		fired := m.Fired()
		m.Crash()
		got, rerr := q.Retries()
		if rerr != nil || !cmp.Equal(rs, got) {
			t.Errorf("cut at operation %d (%v): Retries() = %v, %v; want %v", k, err, got, rerr, rs)
		}
		s, _ := mustOpenSchedule(t, q)
		if diff := cmp.Diff(rs, s.list()); diff != "" {
			t.Errorf("cut at operation %d, started again (-want +got):\n%s", k, diff)
		}
		if !fired {
			if err != nil {
				t.Errorf("no fault, yet: %v", err)
			}
			break
		}
	}
}

// TestRetryLogCompaction: whatever the changes, the log stays within twice
// its live entries plus the slack (and a frame); compacted, it holds the
// live entries only, in the order set, and reads back the same.
func TestRetryLogCompaction(t *testing.T) {
	for _, slack := range []int64{0, retryCompactSlack} {
		t.Run(fmt.Sprint(slack), func(t *testing.T) {
			defer func(s int64) { retryCompactSlack = s }(retryCompactSlack)
			retryCompactSlack = slack
			q, path := retryQueue(t)
			s, _ := mustOpenSchedule(t, q)
			var model []Retry
			changes := 0
			step := func(c retryChange) {
				t.Helper()
				model = c.apply(t, s, model)
				changes++
				if size, bound := fileSizeOf(t, path), 2*int64(len(model))*retrySetFrame+slack+retrySetFrame; size > bound {
					t.Fatalf("after %d changes, %d live: the log is %d bytes, over %d", changes, len(model), size, bound)
				}
			}
			for i := uint64(1); i <= 300; i++ {
				step(setR(retryAt(i, 2, time.Duration(i)*time.Second)))
			}
			for round := range 3 {
				for i := uint64(1); i <= 300; i++ {
					switch {
					case i%3 == 0:
						step(clearR(i))
					case i%3 == 1:
						step(setR(retryAt(i, 3+round, time.Duration(300-i)*time.Second)))
					}
				}
			}
			if diff := cmp.Diff(model, mustRetries(t, q)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if err := s.compact(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, encodeRetryLog(model)) {
				t.Errorf("compacted: %d bytes, want the %d live entries' %d", len(got), len(model), len(encodeRetryLog(model)))
			}
			if diff := cmp.Diff(model, mustRetries(t, q)); diff != "" {
				t.Errorf("compacted (-want +got):\n%s", diff)
			}
			// idle: nothing to gain, nothing written
			before := fileSizeOf(t, path)
			if err := s.tidy(); err != nil {
				t.Fatal(err)
			}
			for _, r := range slices.Clone(model) {
				step(clearR(r.ID))
			}
			if err := s.tidy(); err != nil {
				t.Fatal(err)
			}
			if size := fileSizeOf(t, path); size != 0 {
				t.Errorf("the schedule empty, the idle compaction left %d bytes (%d before the clears)", size, before)
			}
		})
	}
}

// TestRetryLogCompactionCutAtEveryStep cuts the power at each operation of
// a compaction, and of the change after a compaction that failed: the
// schedule that survives is the live entries, and the change once it
// returned.
func TestRetryLogCompactionCutAtEveryStep(t *testing.T) {
	for k := 1; ; k++ {
		m, root := settledMemQueue(t)
		q, _ := openQueue(t, root, Options{FS: m})
		s, _ := mustOpenSchedule(t, q)
		var model []Retry
		for _, c := range []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 2, time.Minute)), clearR(1),
			setR(retryAt(3, 2, time.Hour)), setR(retryAt(2, 3, time.Hour))} {
			model = c.apply(t, s, model)
		}
		m.Fail("", "", k, syscall.EIO, true)
		cerr := s.compact()
		fired := m.Fired()
		m.Crash()
		if diff := cmp.Diff(model, mustRetries(t, q)); diff != "" {
			t.Errorf("cut at operation %d of the compaction (%v) (-want +got):\n%s", k, cerr, diff)
		}
		if !fired {
			break
		}
		// the process goes on after the failed compaction: the next
		// change rewrites the log whole, and is durable once it returned
		m.Heal()
		for j := 1; j <= 6; j++ {
			m.Fail("", "", j, syscall.EIO, true)
			err := s.set(retryAt(4, 2, time.Second))
			m.Crash()
			got := mustRetries(t, q)
			want := append(slices.Clone(model), retryAt(4, 2, time.Second))
			if !cmp.Equal(got, model) && !cmp.Equal(got, want) || err == nil && !cmp.Equal(got, want) {
				t.Errorf("cut at operation %d of the compaction, then %d of the next change (%v): %v, want %v (or without the change, which failed)", k, j, err, got, want)
			}
			m.Heal()
		}
		if err := s.set(retryAt(4, 2, time.Second)); err != nil {
			t.Fatal(err)
		}
		if want := append(slices.Clone(model), retryAt(4, 2, time.Second)); !cmp.Equal(mustRetries(t, q), want) {
			t.Errorf("k=%d: at the end %v, want %v", k, mustRetries(t, q), want)
		}
	}
}

// TestRetryLogFailedAppend: a change whose write or fdatasync failed is
// made again by rewriting the log whole (its bytes may be in the file, or
// a failed fdatasync may have dropped them), never by appending after
// them.
func TestRetryLogFailedAppend(t *testing.T) {
	for _, op := range []string{opWrite, opSync, opOpen} {
		t.Run(op, func(t *testing.T) {
			m, root := settledMemQueue(t)
			q, _ := openQueue(t, root, Options{FS: m})
			s, _ := mustOpenSchedule(t, q)
			model := setR(retryAt(1, 2, time.Second)).apply(t, s, nil)
			m.Fail(op, retryFile, 1, syscall.EIO, false)
			if err := s.set(retryAt(2, 2, time.Second)); err == nil || !errors.Is(err, syscall.EIO) {
				t.Fatalf("set with a failing %s: %v", op, err)
			}
			model = setR(retryAt(2, 2, time.Second)).apply(t, s, model) // persist's next try
			m.Crash()
			if diff := cmp.Diff(model, mustRetries(t, q)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := fileBytes(t, m, root, retryFile); !bytes.Equal(got, encodeRetryLog(model)) {
				t.Errorf("the log after the try again: %x, want it rewritten whole %x", got, encodeRetryLog(model))
			}
		})
	}
}

// TestWorkerCarriesOverAnOldSchedule: a process upgraded with retries
// pending in the old format makes them at their time, at their attempt,
// and the schedule is a log from then on.
func TestWorkerCarriesOverAnOldSchedule(t *testing.T) {
	root := t.TempDir()
	clk := clocktest.New(epoch)
	q, _ := openQueue(t, root, Options{Now: clk.Now})
	msgs := appendN(t, q, 0, 2)
	size, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	old := []Retry{{ID: msgs[0].ID, Offset: msgs[0].Offset, Attempt: 2, Due: epoch.Add(time.Minute)},
		{ID: msgs[1].ID, Offset: msgs[1].Offset, Attempt: 3, Due: epoch.Add(30 * time.Second)}}
	path := filepath.Join(root, testTenant, testFlow, retryFile)
	if err := os.WriteFile(path, legacyRetryFile(old), 0o600); err != nil {
		t.Fatal(err)
	}
	type got struct {
		ID      uint64
		Attempt int
		After   time.Duration
	}
	deliveries := make(chan got, 4)
	w := NewWorker(q, WorkerConfig{Clock: clk, Logger: quietLog, Poll: time.Hour, StopGrace: 50 * time.Millisecond,
		Handler: HandlerFunc(func(_ context.Context, d Delivery) Verdict {
			deliveries <- got{d.ID, d.Attempt, clk.Now().Sub(epoch)}
			return Verdict{Kind: VerdictAck, Outcome: "succeeded"}
		})})
	w.Start()
	defer w.Stop()
	clk.WaitCalls(t, 1)
	if st := w.State(); st.RetriesPending != 2 {
		t.Errorf("RetriesPending = %d, want 2", st.RetriesPending)
	}
	if b, _ := os.ReadFile(path); !bytes.HasPrefix(b, frameMagic[:]) {
		t.Errorf("the schedule is not a log once the worker started: %x", b)
	}
	var all []got
	for i := 0; len(all) < 2; i++ {
		if i == 10 {
			t.Fatalf("deliveries %v, want 2", all)
		}
		clk.Step(t) // to the next due time, until the worker waits again
		for len(deliveries) > 0 {
			all = append(all, <-deliveries)
		}
	}
	want := []got{{msgs[1].ID, 3, 30 * time.Second}, {msgs[0].ID, 2, time.Minute}}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		rs, err := q.Retries()
		if err == nil && len(rs) == 0 && w.State().RetriesPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule does not empty: %v, %v, RetriesPending %d", rs, err, w.State().RetriesPending)
		}
	}
}

// BenchmarkRetrySchedule: n failed first attempts, each one change to the
// schedule (bytes and syncs per change on real files).
func BenchmarkRetrySchedule(b *testing.B) {
	root := b.TempDir()
	cfs := &countFS{prefix: retryFile}
	q, _ := openQueue(b, root, Options{FS: cfs})
	s, _, err := q.openRetrySchedule()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		id := uint64(i + 1)
		if err := s.set(Retry{ID: id, Offset: int64(i) * 64, Attempt: 2, Due: epoch.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	written, syncs, _ := cfs.totals()
	b.ReportMetric(float64(written)/float64(b.N), "B/change")
	b.ReportMetric(float64(syncs)/float64(b.N), "syncs/change")
}

// A reader in another process (a standby's Info) that took the schedule's
// size before a starting worker cut its torn tail reads the entries before
// the tail, as it would have a moment earlier or later, not EOF.
func TestRetriesWhileTheWorkerCutsATornTail(t *testing.T) {
	m, root := settledMemQueue(t)
	q, _ := openQueue(t, root, Options{FS: m})
	s, _ := mustOpenSchedule(t, q)
	want := []Retry{retryAt(1, 2, time.Second), retryAt(2, 3, time.Hour)}
	for _, r := range want {
		if err := s.set(r); err != nil {
			t.Fatal(err)
		}
	}
	// a torn tail: a whole header, its record cut short
	path := filepath.Join(root, testTenant, testFlow, retryFile)
	f, err := m.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	frame := encodeRetryLog([]Retry{retryAt(3, 2, time.Minute)})
	if _, err := f.WriteAt(frame[:20], int64(len(want))*retrySetFrame); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if rs, err := q.Retries(); err != nil || len(rs) != 2 {
		t.Fatalf("before the cut: %v, %v", rs, err)
	}
	// the worker starts, and cuts the tail, between the reader's fstat and
	// its first read
	var armed, fired atomic.Bool
	m.before = func(op, name string) {
		if op == opRead && filepath.Base(name) == retryFile && armed.Load() && fired.CompareAndSwap(false, true) {
			if _, _, err := q.openRetrySchedule(); err != nil {
				t.Errorf("the worker's open: %v", err)
			}
		}
	}
	armed.Store(true)
	rs, err := q.Retries()
	if !fired.Load() {
		t.Fatal("the worker's open did not run")
	}
	if diff := cmp.Diff(want, rs); err != nil || diff != "" {
		t.Errorf("Retries() while the worker cut the torn tail: %v, entries (-want +got):\n%s", err, diff)
	}
}

// TestLargestCarriedRetryReadsBack: a retry carrying the largest message
// a segment.log frame held (a record of MaxRecord bytes, as an older
// version took it) is a record 20 bytes longer; it is written, and read
// back by every reader of the schedule, rather than refused as a length
// over the limit, which would stop the worker on a schedule that "does
// not verify".
func TestLargestCarriedRetryReadsBack(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	source, cid := strings.Repeat("s", 255), strings.Repeat("c", maxCorrelationID)
	m := Message{ID: 7, Offset: 40, EnqueuedAt: epoch, Source: source, CorrelationID: cid}
	m.Payload = bytes.Repeat([]byte("x"), MaxRecord-len(appendMessageRecord(nil, &m)))
	if n := len(appendMessageRecord(nil, &m)); n != MaxRecord {
		t.Fatalf("setup: a record of %d bytes", n)
	}
	r := Retry{ID: m.ID, Offset: m.Offset, Attempt: 2, Due: epoch.Add(time.Minute), Message: &m}
	s, _, err := q.openRetrySchedule()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.set(r); err != nil {
		t.Fatal(err)
	}
	if size := fileSizeOf(t, filepath.Join(root, testTenant, testFlow, retryFile)); size != headerSize+MaxRecord+retryCopyExtra {
		t.Errorf("segment.log.retry holds %d bytes, want a frame of %d", size, headerSize+MaxRecord+retryCopyExtra)
	}
	rs, err := q.Retries()
	if err != nil || len(rs) != 1 || rs[0].Message == nil || rs[0].Message.Payload != nil ||
		rs[0].Message.Source != source || rs[0].Message.CorrelationID != cid {
		t.Fatalf("read back: %d retries, %v", len(rs), err)
	}
	again, damage, err := q.openRetrySchedule()
	if err != nil || len(damage) > 0 || again.Len() != 1 || !again.carried() || again.heldPayload() != 0 {
		t.Fatalf("the worker's read: %v %v", damage, err)
	}
	got, carried, bad, err := again.message(rs[0])
	if err != nil || !carried || bad != nil || !bytes.Equal(got.Payload, m.Payload) || got.Source != source || got.CorrelationID != cid {
		t.Fatalf("the worker's read back when due: carried %v, damage %v, %v", carried, bad, err)
	}
}
