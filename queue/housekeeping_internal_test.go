package queue

import (
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// TestHousekeepingFailuresBackOff: an idle worker whose housekeeping fails
// (dlq.log cannot be rewritten to apply a discard: a full disk) tries it
// again after a pause that doubles from Poll up to 30 s, and logs
// housekeeping_failed at the 1st, 2nd, 4th and 8th failure in a row, not
// at every Poll (every idle queue of a process logged the same line twice
// a second for as long as the disk stayed full). Once the disk has room,
// the next try applies the discard and says so once.
func TestHousekeepingFailuresBackOff(t *testing.T) {
	const poll = 10 * time.Second
	mfs, root := memQueueRoot(t)
	clk := clocktest.New(epoch)
	var (
		mu    sync.Mutex
		tries []time.Duration // when dlq.log's rewrite was tried, from the first
		first time.Time
	)
	mfs.before = func(op, name string) {
		if op == opSync && filepath.Base(name) == dlqFile+".tmp" {
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() {
				first = clk.Now()
			}
			tries = append(tries, clk.Now().Sub(first))
		}
	}
	var logs jsonlogtest.Buffer
	rec := &idRecorder{}
	handler := rec.handler(func(Delivery) Verdict { return Verdict{Kind: VerdictDeadLetter, Error: "corrupt"} })
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: handler, Clock: clk, Logger: logs.Logger(0), Poll: poll, Now: clk.Now, StopGrace: 50 * time.Millisecond})
	t.Cleanup(m.Stop)
	// the worker started and idle (housekept, waiting for the next Poll)
	// before the message comes, so that its wait after dead-lettering it is
	// the second on that Poll: a worker that found the message at its start
	// waited once, and a test waiting for any wait on the Poll could
	// discard before the worker's idle pass after dead-lettering (taken
	// late, across the clock's advance, it tried the rewrite a Poll late)
	boundary := epoch.Truncate(poll).Add(poll)
	if _, _, err := m.Queue(testTenant, testFlow); err != nil {
		t.Fatal(err)
	}
	clk.WaitDeadline(t, boundary)
	msg, err := m.Append(testTenant, testFlow, NewMessage{Source: "enqueue", Payload: []byte("bad")})
	if err != nil {
		t.Fatal(err)
	}
	// dead-lettered, then idle until the next Poll (housekept already in
	// this Poll)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if dl, _, err := ReadDeadLetters(root, testTenant, testFlow, mfs); err == nil && len(dl) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message was not dead-lettered within 10 s")
		}
	}
	clk.WaitDeadlines(t, boundary, 2)
	// until healed; the rewrite has nothing to write (its one dead letter
	// discarded), and a full disk's delayed allocation fails the sync
	mfs.Fail(opSync, dlqFile+".tmp", 1, syscall.ENOSPC, true)
	if err := m.Discard(testTenant, testFlow, msg.ID); err != nil {
		t.Fatal(err)
	}
	step := func(k int) {
		t.Helper()
		at := boundary.Add(time.Duration(k) * poll)
		clk.WaitDeadline(t, at)
		clk.AdvanceTo(at)
	}
	for k := range 22 { // up to 210 s after the first try
		step(k)
	}
	clk.WaitDeadline(t, boundary.Add(22*poll))
	mu.Lock()
	got := slices.Clone(tries)
	mu.Unlock()
	want := []time.Duration{0, 10 * time.Second, 30 * time.Second, 60 * time.Second, 90 * time.Second,
		120 * time.Second, 150 * time.Second, 180 * time.Second, 210 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dlq.log's rewrite was tried at (-want +got):\n%s", diff)
	}
	var failures []any
	for _, e := range logs.Events(t, "housekeeping_failed") {
		failures = append(failures, e["failures"])
	}
	if diff := cmp.Diff([]any{1.0, 2.0, 4.0, 8.0}, failures); diff != "" {
		t.Errorf("housekeeping_failed lines, by their failures (-want +got):\n%s", diff)
	}
	if n := len(logs.Events(t, "dlq_discarded")); n != 0 {
		t.Fatalf("%d dlq_discarded lines while dlq.log could not be rewritten", n)
	}

	mfs.Heal()
	for k := 22; k <= 24; k++ { // the next try, 240 s after the first
		step(k)
	}
	clk.WaitDeadline(t, boundary.Add(25*poll))
	if evs := logs.Events(t, "housekeeping_resumed"); len(evs) != 1 || evs[0]["failures"] != 9.0 {
		t.Errorf("housekeeping_resumed lines %v, want one saying 9 failures", evs)
	}
	if evs := logs.Events(t, "dlq_discarded"); len(evs) != 1 || evs[0]["msg_id"] != float64(msg.ID) {
		t.Errorf("dlq_discarded lines %v, want one for message %d", evs, msg.ID)
	}
	if n := len(logs.Events(t, "housekeeping_failed")); n != 4 {
		t.Errorf("%d housekeeping_failed lines after the disk healed, want still 4", n)
	}
}
