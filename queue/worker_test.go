package queue_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/clock/clocktest"
	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
	"github.com/nexushq/nexus/queue"
)

// The queue the worker tests use, and the fake clock's starting time.
const (
	wTenant = "acme"
	wFlow   = "forward-order"
)

var wt0 = time.Date(2026, 8, 9, 14, 2, 11, 0, time.UTC)

// workedPolicy is the worked example of queues-retries-dlq.md.
var workedPolicy = queue.RetryPolicy{MaxAttempts: 5, InitialDelay: 500 * time.Millisecond, BackoffFactor: 3.0, MaxDelay: 10 * time.Second}

const http503 = "step 'forward': effect handler failed: HTTP 503 Service Unavailable"

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ---- the harness ----

// delivery is one call of a recording handler.
type delivery struct {
	Worker  string // which worker's handler saw it
	ID      uint64
	Offset  int64
	Attempt int
	At      time.Duration // fake time since wt0
	Payload string
	Source  string
	Tenant  string
	Flow    string
}

func (d delivery) String() string {
	return fmt.Sprintf("%s#%d/a%d@%v", d.Payload, d.ID, d.Attempt, d.At)
}

// recorder records the deliveries of its handlers, in order.
type recorder struct {
	clk     *clocktest.Fake
	mu      sync.Mutex
	got     []delivery
	changed chan struct{}
}

func newRecorder(clk *clocktest.Fake) *recorder {
	return &recorder{clk: clk, changed: make(chan struct{})}
}

// handler records each delivery, then returns what decide says (decide may
// block or panic: the delivery is recorded first).
func (r *recorder) handler(worker string, decide func(ctx context.Context, d queue.Delivery) queue.Verdict) queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
		r.mu.Lock()
		r.got = append(r.got, delivery{Worker: worker, ID: d.ID, Offset: d.Offset, Attempt: d.Attempt,
			At: r.clk.Now().Sub(wt0), Payload: string(d.Payload), Source: d.Source, Tenant: d.Tenant, Flow: d.Flow})
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		return decide(ctx, d)
	})
}

func (r *recorder) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// wait blocks until at least n deliveries were made and returns them.
func (r *recorder) wait(t testing.TB, n int) []delivery {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got, changed := slices.Clone(r.got), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d deliveries, want %d: %v", len(got), n, got)
		}
	}
}

func ack(context.Context, queue.Delivery) queue.Verdict {
	return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
}

func payloads(ds []delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Payload
	}
	return out
}

// openQ opens the worker tests' queue under root, stamping messages with
// the fake clock, and closes it when the test ends.
func openQ(t testing.TB, root string, clk *clocktest.Fake, fsys queue.FS) *queue.Queue {
	t.Helper()
	q, damage, err := queue.Open(root, wTenant, wFlow, queue.Options{FS: fsys, Now: clk.Now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if len(damage) > 0 {
		t.Fatalf("Open found damage: %v", damage)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func put(t testing.TB, q *queue.Queue, payload string) queue.Message {
	t.Helper()
	m, err := q.Append(queue.NewMessage{Source: "enqueue", CorrelationID: "cid-" + payload, Payload: []byte(payload)})
	if err != nil {
		t.Fatalf("Append(%s): %v", payload, err)
	}
	return m
}

// drainAll moves q's checkpoint to the end of its log, as a worker that
// processed every message would, and drains it: the log is emptied.
func drainAll(t testing.TB, q *queue.Queue) {
	t.Helper()
	size, err := q.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
}

// startWorker starts a worker on q and stops it when the test ends (before
// the queue is closed).
func startWorker(t testing.TB, q *queue.Queue, cfg queue.WorkerConfig) *queue.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 50 * time.Millisecond // handlers here wait on their context
	}
	w := queue.NewWorker(q, cfg)
	w.Start()
	t.Cleanup(w.Stop)
	return w
}

func queueFile(root, name string) string { return filepath.Join(root, wTenant, wFlow, name) }

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func deadLetters(t testing.TB, q *queue.Queue) []queue.DeadLetter {
	t.Helper()
	dl, damage, err := q.DeadLetters()
	if err != nil || len(damage) > 0 {
		t.Fatalf("DeadLetters: %v %v", err, damage)
	}
	return dl
}

func retries(t testing.TB, q *queue.Queue) []queue.Retry {
	t.Helper()
	rs, err := q.Retries()
	if err != nil {
		t.Fatalf("Retries: %v", err)
	}
	return rs
}

// eventually polls cond (a state that is not signalled) for a few seconds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// stepUntil steps the fake clock (see clocktest.Fake.Step) until cond holds,
// at most max times.
func stepUntil(t testing.TB, clk *clocktest.Fake, max int, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == max {
			t.Fatalf("after %d steps of the clock (now +%v), still not %s", max, clk.Now().Sub(wt0), what)
		}
		clk.Step(t)
	}
}

// stepFor steps the fake clock until it has moved on by d.
func stepFor(t testing.TB, clk *clocktest.Fake, d time.Duration) {
	t.Helper()
	end := clk.Now().Add(d)
	stepUntil(t, clk, 100000, "past "+end.String(), func() bool { return !clk.Now().Before(end) })
}

// hookFS is the OS with hooks on segment.log: it lets a test act at a
// precise point of the worker's housekeeping (the hooks run in the worker's
// goroutine).
type hookFS struct {
	queue.OS
	mu         sync.Mutex
	onTruncate func(path string, size int64) // before segment.log is truncated
	onStat     func(path string)             // before segment.log is stat'ed
	failSync   func(path string) error       // a non-nil error fails segment.log's Sync
	onOpen     func(path string, flag int)   // before any file of the queue is opened
}

// failNextSync makes the next Sync of segment.log fail with EIO, once.
func (h *hookFS) failNextSync() {
	var once sync.Once
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failSync = func(string) (err error) {
		once.Do(func() { err = syscall.EIO })
		return err
	}
}

func (h *hookFS) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	h.mu.Lock()
	open := h.onOpen
	h.mu.Unlock()
	if open != nil {
		open(name, flag)
	}
	f, err := h.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "segment.log" {
		return f, err
	}
	return &hookFile{File: f, fs: h, path: name}, nil
}

func (h *hookFS) hooks() (func(string, int64), func(string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.onTruncate, h.onStat
}

func (f *hookFile) Sync() error {
	f.fs.mu.Lock()
	fail := f.fs.failSync
	f.fs.mu.Unlock()
	if fail != nil {
		if err := fail(f.path); err != nil {
			return err
		}
	}
	return f.File.Sync()
}

type hookFile struct {
	queue.File
	fs   *hookFS
	path string
}

func (f *hookFile) Truncate(size int64) error {
	if hook, _ := f.fs.hooks(); hook != nil {
		hook(f.path, size)
	}
	return f.File.Truncate(size)
}

func (f *hookFile) Stat() (fs.FileInfo, error) {
	if _, hook := f.fs.hooks(); hook != nil {
		hook(f.path)
	}
	return f.File.Stat()
}

// segmentIDs parses the message ids of segment.log bytes (the frame format
// of the package documentation).
func segmentIDs(b []byte) []uint64 {
	var ids []uint64
	for len(b) >= 12 && string(b[:4]) == "NXQ1" {
		n := int(binary.BigEndian.Uint32(b[4:8]))
		if len(b) < 12+n {
			break
		}
		rec := b[12 : 12+n]
		if len(rec) >= 9 && rec[0] == 1 {
			ids = append(ids, binary.BigEndian.Uint64(rec[1:9]))
		}
		b = b[12+n:]
	}
	return ids
}

// ---- Delay ----

func TestDelayTable(t *testing.T) {
	if want := (queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}); queue.DefaultRetryPolicy != want {
		t.Errorf("DefaultRetryPolicy = %+v, want %+v", queue.DefaultRetryPolicy, want)
	}
	constant := queue.RetryPolicy{MaxAttempts: 10, InitialDelay: 700 * time.Millisecond, BackoffFactor: 1.0, MaxDelay: time.Minute}
	cases := []struct {
		name string
		p    queue.RetryPolicy
		n    int
		want time.Duration
	}{
		// the worked example: 500 × 3^(n−1), capped to 10000 ms
		{"worked/1", workedPolicy, 1, 500 * time.Millisecond},
		{"worked/2", workedPolicy, 2, 1500 * time.Millisecond},
		{"worked/3", workedPolicy, 3, 4500 * time.Millisecond},
		{"worked/4 capped from 13500ms", workedPolicy, 4, 10 * time.Second},
		{"worked/5", workedPolicy, 5, 10 * time.Second},
		// the defaults: 1000 and 2000 ms
		{"default/1", queue.DefaultRetryPolicy, 1, time.Second},
		{"default/2", queue.DefaultRetryPolicy, 2, 2 * time.Second},
		{"default/3", queue.DefaultRetryPolicy, 3, 4 * time.Second},
		{"default/7 capped", queue.DefaultRetryPolicy, 7, time.Minute},
		// factor 1.0 is a fixed delay
		{"constant/1", constant, 1, 700 * time.Millisecond},
		{"constant/2", constant, 2, 700 * time.Millisecond},
		{"constant/huge n", constant, math.MaxInt32, 700 * time.Millisecond},
		// huge n is capped, never an overflow (factor^n is +Inf)
		{"worked/huge n", workedPolicy, 1 << 20, 10 * time.Second},
		{"worked/MaxInt", workedPolicy, math.MaxInt, 10 * time.Second},
		{"default/64", queue.DefaultRetryPolicy, 64, time.Minute},
		{"default/1000", queue.DefaultRetryPolicy, 1000, time.Minute},
		{"max below initial", queue.RetryPolicy{MaxAttempts: 3, InitialDelay: 5 * time.Second, BackoffFactor: 2, MaxDelay: time.Second}, 1, time.Second},
		{"zero initial", queue.RetryPolicy{MaxAttempts: 3, BackoffFactor: 2, MaxDelay: time.Second}, 3, 0},
		// 0 × factor^(n−1) is 0 when the power overflows too (0 × +Inf is NaN)
		{"zero initial, factor^(n-1) overflowing", queue.RetryPolicy{MaxAttempts: 5, BackoffFactor: 1e200, MaxDelay: time.Minute}, 3, 0},
		{"zero initial, n past 2^1024", queue.RetryPolicy{MaxAttempts: 2000, BackoffFactor: 2, MaxDelay: time.Minute}, 1100, 0},
		// a factor with no exact binary form: the formula's whole
		// milliseconds, not a nanosecond short of them (1000 × 1.7² was
		// 2889.9999995 ms, logged as delay_ms 2889)
		{"factor 1.7/3", queue.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Second, BackoffFactor: 1.7, MaxDelay: time.Minute}, 3, 2890 * time.Millisecond},
		{"factor 1.7/4", queue.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Second, BackoffFactor: 1.7, MaxDelay: time.Minute}, 4, 4913 * time.Millisecond},
		{"factor 1.15/2", queue.RetryPolicy{MaxAttempts: 5, InitialDelay: 3 * time.Second, BackoffFactor: 1.15, MaxDelay: time.Minute}, 2, 3450 * time.Millisecond},
		{"huge max", queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 10, MaxDelay: math.MaxInt64}, 30, math.MaxInt64},
	}
	for _, c := range cases {
		got := queue.Delay(c.p, c.n)
		if got != c.want {
			t.Errorf("%s: Delay(%+v, %d) = %v, want %v", c.name, c.p, c.n, got, c.want)
		}
		if got < 0 {
			t.Errorf("%s: negative delay %v", c.name, got)
		}
		// no jitter: the same question always gets the same answer
		for range 100 {
			if again := queue.Delay(c.p, c.n); again != got {
				t.Fatalf("%s: Delay is not deterministic: %v then %v", c.name, got, again)
			}
		}
	}
	// the worked example's total: four delays, 16.5 s of retrying
	var total time.Duration
	for n := 1; n < workedPolicy.MaxAttempts; n++ {
		total += queue.Delay(workedPolicy, n)
	}
	if total != 16500*time.Millisecond {
		t.Errorf("worked example retries for %v, want 16.5s", total)
	}
}

// ---- the worker ----

// TestWorkerWorkedExample is the worked example of queues-retries-dlq.md:
// a downstream refusing every call, policy {5, 500 ms, ×3.0, 10 s}.
func TestWorkerWorkedExample(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	m := put(t, q, `{"orderId":"A-1","total":42}`)
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		return queue.Verdict{Kind: queue.VerdictRetry, Policy: workedPolicy, Error: http503}
	})})
	clk.WaitCalls(t, 1)

	wantAt := []time.Duration{0, 500 * time.Millisecond, 2000 * time.Millisecond, 6500 * time.Millisecond, 16500 * time.Millisecond}
	for n := 1; n <= 5; n++ {
		stepUntil(t, clk, 100, fmt.Sprintf("attempt %d", n), func() bool { return len(rec.all()) >= n })
		got := rec.all()
		if len(got) != n {
			t.Fatalf("after attempt %d: %d deliveries: %v", n, len(got), got)
		}
		d := got[n-1]
		if d.ID != m.ID || d.Offset != m.Offset || d.Attempt != n || d.At != wantAt[n-1] {
			t.Errorf("delivery %d = %v (id %d, offset %d), want attempt %d of id %d at +%v", n, d, d.ID, d.Offset, n, m.ID, wantAt[n-1])
		}
		if d.Tenant != wTenant || d.Flow != wFlow || d.Source != "enqueue" || d.Payload != `{"orderId":"A-1","total":42}` {
			t.Errorf("delivery %d carries %+v", n, d)
		}
		// the schedule is on disk, with the absolute time of the next attempt
		rs := retries(t, q)
		if n < 5 {
			want := []queue.Retry{{ID: m.ID, Offset: m.Offset, Attempt: n + 1, Due: wt0.Add(wantAt[n])}}
			if !slices.EqualFunc(rs, want, func(a, b queue.Retry) bool {
				return a.ID == b.ID && a.Offset == b.Offset && a.Attempt == b.Attempt && a.Due.Equal(b.Due)
			}) {
				t.Errorf("after attempt %d the retry schedule is %+v, want %+v", n, rs, want)
			}
			if st := w.State(); st.RetriesPending != 1 || len(deadLetters(t, q)) != 0 {
				t.Errorf("after attempt %d: state %+v, dead letters %v", n, st, deadLetters(t, q))
			}
		} else if len(rs) != 0 {
			t.Errorf("after the last attempt the retry schedule is %+v, want empty", rs)
		}
	}

	dl := deadLetters(t, q)
	if len(dl) != 1 {
		t.Fatalf("dead letters = %+v, want one", dl)
	}
	want := queue.DeadLetter{ID: m.ID, EnqueuedAt: wt0, FailedAt: wt0.Add(16500 * time.Millisecond), Attempts: 5, LastError: http503, Payload: []byte(`{"orderId":"A-1","total":42}`)}
	if got := dl[0]; got.ID != want.ID || !got.EnqueuedAt.Equal(want.EnqueuedAt) || !got.FailedAt.Equal(want.FailedAt) ||
		got.Attempts != want.Attempts || got.LastError != want.LastError || !bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("dead letter = %+v\nwant          %+v", got, want)
	}
	st := w.State()
	if st.Delivered["dead_lettered"] != 1 || st.RetriesPending != 0 || st.InFlight != 0 || !st.Leading {
		t.Errorf("state = %+v", st)
	}

	// nothing more is delivered
	stepFor(t, clk, time.Minute)
	if got := rec.all(); len(got) != 5 {
		t.Errorf("deliveries after the dead letter: %v", got[5:])
	}
}

func TestWorkerDefaultPolicy(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	m := put(t, q, `{"id":7}`)
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		return queue.Verdict{Kind: queue.VerdictRetry, Policy: queue.DefaultRetryPolicy, Error: "boom"}
	})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, time.Minute)
	got := rec.all()
	want := []time.Duration{0, time.Second, 3 * time.Second} // three attempts, delays 1000 and 2000 ms
	if len(got) != 3 {
		t.Fatalf("deliveries = %v, want 3 attempts", got)
	}
	for i, d := range got {
		if d.Attempt != i+1 || d.At != want[i] || d.ID != m.ID {
			t.Errorf("delivery %d = %v, want attempt %d at +%v", i+1, d, i+1, want[i])
		}
	}
	dl := deadLetters(t, q)
	if len(dl) != 1 || dl[0].Attempts != 3 || dl[0].LastError != "boom" || !dl[0].FailedAt.Equal(wt0.Add(3*time.Second)) {
		t.Errorf("dead letters = %+v", dl)
	}
}

func TestWorkerFIFOOnFirstDelivery(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	var want []string
	for i := range 10 {
		p := fmt.Sprintf(`{"n":%d}`, i)
		m := put(t, q, p)
		if m.ID != uint64(i+1) {
			t.Fatalf("message %d got id %d", i, m.ID)
		}
		want = append(want, p)
	}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	got := rec.all()
	if !slices.Equal(payloads(got), want) {
		t.Fatalf("delivered %v, want %v", payloads(got), want)
	}
	for i, d := range got {
		if d.ID != uint64(i+1) || d.Attempt != 1 || d.At != 0 {
			t.Errorf("delivery %d = %v", i, d)
		}
	}
	if st := w.State(); st.Delivered["succeeded"] != 10 || len(st.Delivered) != 1 {
		t.Errorf("Delivered = %v, want succeeded: 10", st.Delivered)
	}
}

// The worker reads the log ahead in large reads: messages that straddle
// its buffer, one larger than the buffer, and a frame damaged after Open
// (skipped, and the frames after it delivered) all come out in order.
func TestWorkerReadsAheadAcrossFramesOfEverySize(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	var want []string
	var damaged queue.Message
	for i := range 300 {
		size := 1000 + i*7 // frames end at every offset modulo the buffer
		if i == 150 {
			size = 200 << 10 // larger than the read-ahead buffer
		}
		p := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", size))
		m, err := q.Append(queue.NewMessage{Source: "enqueue", CorrelationID: fmt.Sprint("cid-", i), Payload: []byte(p)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 77 {
			damaged = m
			continue
		}
		want = append(want, p)
	}
	// flip a byte of message 77's payload: its CRC no longer matches
	f, err := os.OpenFile(queueFile(root, "segment.log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := damaged.Offset + 200
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()

	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	if got := payloads(rec.all()); !slices.Equal(got, want) {
		t.Fatalf("delivered %d messages, want %d in order (all but the damaged one)", len(got), len(want))
	}
}

func TestWorkerRescheduledMessageLosesItsPlace(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	for _, p := range []string{"first", "second", "third"} {
		put(t, q, p)
	}
	policy := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "first" && d.Attempt == 1 {
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "503"}
		}
		return ack(ctx, d)
	})})
	clk.WaitCalls(t, 1)
	// submitted later, before the retry is due: it goes first
	n := clk.Calls()
	put(t, q, "fourth")
	w.Wake()
	clk.WaitCalls(t, n+1)
	clk.Step(t)
	got := rec.all()
	want := []string{"first#1/a1@0s", "second#2/a1@0s", "third#3/a1@0s", "fourth#4/a1@0s", "first#1/a2@1s"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries = %v\nwant         %v", got, want)
	}
}

func TestWorkerAckOutcomesCounted(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	for _, p := range []string{"succeeded", "filtered", "fault_handled", "succeeded", "drop", "dead"} {
		put(t, q, p)
	}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(_ context.Context, d queue.Delivery) queue.Verdict {
		switch p := string(d.Payload); p {
		case "drop":
			return queue.Verdict{Kind: queue.VerdictDrop, Error: "no such flow"}
		case "dead":
			return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "corrupt artifact"}
		default:
			return queue.Verdict{Kind: queue.VerdictAck, Outcome: p}
		}
	})})
	clk.WaitCalls(t, 1)
	st := w.State()
	want := map[string]int64{"succeeded": 2, "filtered": 1, "fault_handled": 1, "dropped": 1, "dead_lettered": 1}
	if fmt.Sprint(st.Delivered) != fmt.Sprint(want) {
		t.Errorf("Delivered = %v, want %v", st.Delivered, want)
	}
	if st.InFlight != 0 || st.RetriesPending != 0 || !st.Leading {
		t.Errorf("state = %+v", st)
	}
	// State is a copy
	st.Delivered["succeeded"] = 99
	if w.State().Delivered["succeeded"] != 2 {
		t.Error("State() shares its Delivered map with the worker")
	}
	if dl := deadLetters(t, q); len(dl) != 1 || string(dl[0].Payload) != "dead" {
		t.Errorf("dead letters = %+v, want only the dead-lettered one", dl)
	}
}

// A retry-later verdict comes back after one second with the same attempt
// number: it does not use up an attempt.
func TestWorkerRetryLater(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	m := put(t, q, "x")
	policy := queue.RetryPolicy{MaxAttempts: 2, InitialDelay: 5 * time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	calls := 0
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		calls++
		if calls <= 3 {
			return queue.Verdict{Kind: queue.VerdictRetryLater, Error: "reading the registry: database is locked"}
		}
		return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "503"}
	})})
	clk.WaitCalls(t, 1)
	rs := retries(t, q)
	if len(rs) != 1 || rs[0].Attempt != 1 || !rs[0].Due.Equal(wt0.Add(queue.RetryLaterDelay)) || rs[0].ID != m.ID {
		t.Errorf("after a retry-later the schedule is %+v, want attempt 1 due at +1s", rs)
	}
	if w.State().RetriesPending != 1 {
		t.Errorf("state = %+v", w.State())
	}
	stepFor(t, clk, time.Minute)
	// three retry-laters at 0, 1 s, 2 s, all attempt 1; then the two real
	// attempts of MaxAttempts 2, 5 s apart
	want := []string{"x#1/a1@0s", "x#1/a1@1s", "x#1/a1@2s", "x#1/a1@3s", "x#1/a2@8s"}
	if got := rec.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries = %v\nwant         %v", got, want)
	}
	dl := deadLetters(t, q)
	if len(dl) != 1 || dl[0].Attempts != 2 || dl[0].LastError != "503" {
		t.Errorf("dead letters = %+v, want one with 2 attempts", dl)
	}
}

func TestWorkerDeadLetterVerdictAtFirstAttempt(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	m := put(t, q, "x")
	const corrupt = "artifact acme/forward-order v3 failed its integrity check"
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		return queue.Verdict{Kind: queue.VerdictDeadLetter, Policy: workedPolicy, Error: corrupt}
	})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, time.Minute)
	if got := rec.all(); len(got) != 1 {
		t.Errorf("deliveries = %v, want one", got)
	}
	dl := deadLetters(t, q)
	if len(dl) != 1 || dl[0].ID != m.ID || dl[0].Attempts != 1 || dl[0].LastError != corrupt || !dl[0].FailedAt.Equal(wt0) {
		t.Errorf("dead letters = %+v", dl)
	}
	if st := w.State(); st.Delivered["dead_lettered"] != 1 || st.RetriesPending != 0 {
		t.Errorf("state = %+v", st)
	}
}

func TestWorkerDropVerdict(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, "x")
	put(t, q, "y")
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "x" {
			return queue.Verdict{Kind: queue.VerdictDrop, Error: "no such flow acme/forward-order"}
		}
		return ack(ctx, d)
	})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, 10*time.Second)
	if got := payloads(rec.all()); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("deliveries = %v, want x once then y", got)
	}
	if dl := deadLetters(t, q); len(dl) != 0 {
		t.Errorf("a dropped message is in the DLQ: %+v", dl)
	}
	if st := w.State(); st.Delivered["dropped"] != 1 || st.Delivered["succeeded"] != 1 || st.RetriesPending != 0 {
		t.Errorf("state = %+v", st)
	}
	// acknowledged: the log was drained
	if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
		t.Errorf("segment.log is %d bytes after the drop was acknowledged", size)
	}
}

// A delivery is one log line: the handler's attributes join the worker's
// event line, whatever the verdict.
func TestWorkerLogLineCarriesHandlerAttrs(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	put(t, q, "ok")
	put(t, q, "fail")
	policy := queue.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo),
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict {
			attrs := []slog.Attr{slog.Int("version", 7), slog.String("step", string(d.Payload))}
			if string(d.Payload) == "fail" {
				return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "HTTP 503", Attrs: attrs}
			}
			return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded", Attrs: attrs}
		})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, 10*time.Second)
	check := func(event string, n int, want map[string]any) {
		t.Helper()
		evs := logs.Events(t, event)
		if len(evs) != n {
			t.Fatalf("%d %s events, want %d: %v", len(evs), event, n, evs)
		}
		for k, v := range want {
			if evs[0][k] != v {
				t.Errorf("%s: %s = %v, want %v (%v)", event, k, evs[0][k], v, evs[0])
			}
		}
	}
	check("queue_processed", 1, map[string]any{"version": float64(7), "step": "ok", "outcome": "succeeded", "msg_id": float64(1), "tenant": wTenant})
	check("queue_retry_scheduled", 1, map[string]any{"version": float64(7), "step": "fail", "error": "HTTP 503", "attempt": float64(1)})
	check("dlq_moved", 1, map[string]any{"version": float64(7), "step": "fail", "last_error": "HTTP 503", "attempts": float64(2)})
}

// A panicking handler is a failed attempt (retried with the default policy
// when the worker has no Policy, dead-lettered with the panic's location), never a dead worker.
func TestWorkerHandlerPanic(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	logs := &jsonlogtest.Buffer{}
	put(t, q, "bomb")
	put(t, q, "fine")
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo),
		Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
			if string(d.Payload) == "bomb" {
				panic("boom")
			}
			return ack(ctx, d)
		})})
	clk.WaitCalls(t, 1)
	if !w.State().Leading {
		t.Fatal("the worker does not lead after a panic")
	}
	stepFor(t, clk, time.Minute)
	want := []string{"bomb#1/a1@0s", "fine#2/a1@0s", "bomb#1/a2@1s", "bomb#1/a3@3s"}
	if got := rec.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries = %v\nwant         %v", got, want)
	}
	dl := deadLetters(t, q)
	if len(dl) != 1 || dl[0].Attempts != 3 {
		t.Fatalf("dead letters = %+v, want the panicking message after 3 attempts", dl)
	}
	if le := dl[0].LastError; !strings.HasPrefix(le, "internal error: panic at ") || !strings.Contains(le, "worker_test.go:") {
		t.Errorf("last error %q does not name the panic's location in the handler", le)
	}
	if ev := logs.Events(t, "handler_panic"); len(ev) != 3 || ev[0]["msg_id"] != float64(1) || ev[0]["panic"] != "boom" || ev[2]["attempt"] != float64(3) {
		t.Errorf("handler_panic events = %v", ev)
	} else if ev[0]["correlation_id"] != "cid-bomb" {
		// the trace of the delivery that panicked is found by it
		t.Errorf("handler_panic's correlation_id = %v, want cid-bomb (%v)", ev[0]["correlation_id"], ev[0])
	}
	// the worker survived: a message appended now is delivered
	n := clk.Calls()
	put(t, q, "after")
	w.Wake()
	clk.WaitCalls(t, n+1)
	if got := rec.all(); got[len(got)-1].Payload != "after" {
		t.Errorf("the message after the panics was not delivered: %v", got)
	}
	if st := w.State(); st.InFlight != 0 || st.Delivered["succeeded"] != 2 || st.Delivered["dead_lettered"] != 1 {
		t.Errorf("state = %+v", st)
	}
}

// nilMap hides a nil map from static checks: writing to it panics.
func nilMap() map[string]int { return nil }

// A panic raised inside the Go runtime on the handler's behalf (here a
// write to a nil map) must be located in the handler too, not in the
// runtime's own sources.
func TestWorkerHandlerRuntimePanicLocation(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, "bomb")
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		m := nilMap()
		m["boom"]++ // panics in the runtime's map code
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
	})})
	clk.WaitCalls(t, 1)
	stepFor(t, clk, time.Minute)
	dl := deadLetters(t, q)
	if len(dl) != 1 || dl[0].Attempts != 3 {
		t.Fatalf("dead letters = %+v, want the panicking message after 3 attempts", dl)
	}
	// A map panic is raised inside Go's runtime (internal/runtime/maps): the
	// error names the first frame outside it, the handler's own line.
	if le := dl[0].LastError; !strings.Contains(le, "worker_test.go:") {
		t.Errorf("last error %q does not name the panic's location in the handler", le)
	}
}

// Wake delivers a message appended in this process at once, whatever Poll.
func TestWorkerWakeDeliversAtOnce(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	put(t, q, "now")
	w.Wake()
	got := rec.wait(t, 1)
	if got[0].Payload != "now" || got[0].At != 0 {
		t.Errorf("delivery = %v, want it at once", got[0])
	}
	if !clk.Now().Equal(wt0) {
		t.Errorf("the clock moved to %v", clk.Now())
	}
	// Wake never blocks, also when nobody listens
	for range 10 {
		w.Wake()
	}
}

// A message appended through another handle of the queue (another process
// sharing the state directory, which cannot Wake this worker) is picked up
// within Poll.
func TestWorkerPicksUpOtherProcessAppendWithinPoll(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	other := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	const poll = 500 * time.Millisecond
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: poll, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	m := put(t, other, "elsewhere")
	if got := rec.all(); len(got) != 0 {
		t.Fatalf("delivered before the poll: %v", got)
	}
	clk.Step(t)
	got := rec.wait(t, 1)
	if got[0].ID != m.ID || got[0].Payload != "elsewhere" || got[0].At > poll {
		t.Errorf("delivery = %v, want it within %v", got[0], poll)
	}
}

// ---- restart ----

// After a restart only what was not processed is delivered, in order; a
// pending retry keeps its absolute time.
func TestRestartDeliversOnlyUnprocessed(t *testing.T) {
	queue.RetriesInLog(t)
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	slow := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Hour, BackoffFactor: 2, MaxDelay: 2 * time.Hour}
	decide := func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "slow" && d.Attempt == 1 {
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: slow, Error: "503"}
		}
		return ack(ctx, d)
	}
	for _, p := range []string{"slow", "b", "c"} {
		put(t, q1, p)
	}
	w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w1", decide)})
	clk.WaitCalls(t, 1)
	// the pending retry keeps the log from being drained (it reads its
	// message there, as older versions' did); everything in it is
	// processed
	size, _ := q1.Size()
	if ckpt, _ := q1.Checkpoint(); size == 0 || ckpt != size {
		t.Fatalf("idle with a pending retry: checkpoint %d, size %d", ckpt, size)
	}
	w1.Stop()
	put(t, q1, "d")
	put(t, q1, "e")
	q1.Close()

	// the next process
	q2 := openQ(t, root, clk, nil)
	n := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w2", decide)})
	clk.WaitCalls(t, n+1)
	// the retry's time (the idle polls on the way, on the hour, fire too)
	for clk.Now().Before(wt0.Add(time.Hour)) {
		clk.Step(t) // (w1's waits, abandoned, stay pending)
	}
	var second []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		second = second[:0]
		for _, d := range rec.all() {
			if d.Worker == "w2" {
				second = append(second, d.String())
			}
		}
		if len(second) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	want := []string{"d#4/a1@0s", "e#5/a1@0s", "slow#1/a2@1h0m0s"}
	if fmt.Sprint(second) != fmt.Sprint(want) {
		t.Errorf("after the restart: %v\nwant                %v", second, want)
	}
}

// Stop lets the delivery in progress finish and writes the checkpoint: the
// next worker starts after it.
func TestRestartStopFinishesDeliveryAndSavesCheckpoint(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	var msgs []queue.Message
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		msgs = append(msgs, put(t, q, p))
	}
	w1 := startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "c" {
			<-ctx.Done() // in flight until the worker is stopped
		}
		return ack(ctx, d)
	})})
	rec.wait(t, 3)
	if st := w1.State(); st.InFlight != 1 {
		t.Errorf("state while c runs = %+v", st)
	}
	w1.Stop()
	if got := payloads(rec.all()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("first worker delivered %v", got)
	}
	if ckpt, _ := q.Checkpoint(); ckpt != msgs[3].Offset {
		t.Errorf("checkpoint after Stop = %d, want %d (after c)", ckpt, msgs[3].Offset)
	}
	n := clk.Calls()
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w2", ack)})
	clk.WaitCalls(t, n+1)
	if got := payloads(rec.all()); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("deliveries = %v, want a..e once each", got)
	}
}

// TestCheckpointAfterASlowDelivery: while the queue stays busy, a
// message that took longer than CheckpointAfter has the checkpoint passed
// over it at once, not after CheckpointEvery (64) messages: a process
// killed during the next delivery does not deliver it again. Fast
// messages still wait for the 64.
func TestCheckpointAfterASlowDelivery(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	var msgs []queue.Message
	for i := 1; i <= 4; i++ {
		msgs = append(msgs, put(t, q, fmt.Sprintf("m%d", i)))
	}
	parked := make(chan string)
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		switch string(d.Payload) {
		case "m2":
			clk.Advance(2 * time.Second) // a slow backend
		case "m3", "m4":
			parked <- string(d.Payload)
			<-parked
		}
		return ack(ctx, d)
	})})
	// m2 was slow: the checkpoint passed m1 and m2 before m3 began
	if got := <-parked; got != "m3" {
		t.Fatalf("parked at %s", got)
	}
	if ckpt, _ := q.Checkpoint(); ckpt != msgs[2].Offset {
		t.Errorf("checkpoint while m3 runs = %d, want %d (after the slow m2)", ckpt, msgs[2].Offset)
	}
	parked <- ""
	// m3 was fast: the checkpoint stays after m2 while m4 runs
	if got := <-parked; got != "m4" {
		t.Fatalf("parked at %s", got)
	}
	if ckpt, _ := q.Checkpoint(); ckpt != msgs[2].Offset {
		t.Errorf("checkpoint while m4 runs = %d, want %d (after m2: m3 was fast)", ckpt, msgs[2].Offset)
	}
	parked <- ""
}

// At-least-once: a crash after a message ran but before the checkpoint
// passed it delivers it again.
//
// The crash is simulated by copying the queue's folder aside while the
// worker is parked inside the handler: every file the worker writes is
// appended with fdatasync or replaced atomically, so the copy is exactly
// what the disk holds if the process died at that moment. A new worker is
// then started on the copy; the original is stopped normally and ignored.
func TestRestartAtLeastOnceAfterCrash(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	var msgs []queue.Message
	for i := 1; i <= 5; i++ {
		msgs = append(msgs, put(t, q, fmt.Sprintf("m%d", i)))
	}
	parked := make(chan struct{})
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, CheckpointEvery: 2, Handler: rec.handler("w1", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "m4" {
			close(parked)
			<-ctx.Done()
		}
		return ack(ctx, d)
	})})
	<-parked
	// m1, m2 are behind the checkpoint (CheckpointEvery 2); m3 ran but the
	// checkpoint has not passed it; m4 is running
	if ckpt, _ := q.Checkpoint(); ckpt != msgs[2].Offset {
		t.Fatalf("checkpoint while m4 runs = %d, want %d (after m2)", ckpt, msgs[2].Offset)
	}
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	w.Stop()

	q2 := openQ(t, crashed, clk, nil)
	n := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w2", ack)})
	clk.WaitCalls(t, n+1)
	var again []string
	for _, d := range rec.all() {
		if d.Worker == "w2" {
			again = append(again, d.String())
		}
	}
	if want := []string{"m3#3/a1@0s", "m4#4/a1@0s", "m5#5/a1@0s"}; fmt.Sprint(again) != fmt.Sprint(want) {
		t.Errorf("after the crash: %v\nwant              %v (m3 and m4 a second time)", again, want)
	}
}

// A retry that came due while no worker ran fires as soon as the next one
// starts; one not yet due keeps its absolute time.
func TestRestartRetryDueDuringDowntime(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	decide := func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if d.Attempt == 1 {
			delay := 10 * time.Second
			if string(d.Payload) == "later" {
				delay = 2 * time.Minute
			}
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: delay, BackoffFactor: 2, MaxDelay: time.Hour}, Error: "503"}
		}
		return ack(ctx, d)
	}
	put(t, q1, "soon")
	put(t, q1, "later")
	w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w1", decide)})
	clk.WaitCalls(t, 1)
	w1.Stop()
	q1.Close()
	clk.Advance(30 * time.Second) // the downtime

	q2 := openQ(t, root, clk, nil)
	n := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w2", decide)})
	clk.WaitCalls(t, n+1)
	clk.Step(t)
	var after []string
	for _, d := range rec.all() {
		if d.Worker == "w2" {
			after = append(after, d.String())
		}
	}
	if want := []string{"soon#1/a2@30s", "later#2/a2@2m0s"}; fmt.Sprint(after) != fmt.Sprint(want) {
		t.Errorf("after the restart: %v\nwant                %v", after, want)
	}
}

// ---- election ----

// Two workers on one queue (two handles, as two processes would have): one
// delivers, the other stands by and takes over within Poll when the leader
// stops, delivering the rest.
func TestElectionOneLeaderThenTakeover(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q1 := openQ(t, root, clk, nil)
	q2 := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	for i := 1; i <= 5; i++ {
		put(t, q1, fmt.Sprintf("m%d", i))
	}
	const poll = 500 * time.Millisecond
	w1 := startWorker(t, q1, queue.WorkerConfig{Clock: clk, Poll: poll, Handler: rec.handler("one", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "m2" {
			<-ctx.Done() // still running m2 when it is stopped
		}
		return ack(ctx, d)
	})})
	rec.wait(t, 2)
	eventually(t, "the first worker leads", func() bool { return w1.State().Leading })
	w2 := startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: poll, Handler: rec.handler("two", ack)})
	clk.WaitCalls(t, 1) // the standby waits for its next try
	if w2.State().Leading {
		t.Fatal("both workers lead")
	}
	// the standby's own process got a submission: it tries again, and stands by
	n := clk.Calls()
	w2.Wake()
	clk.WaitCalls(t, n+1)
	if w2.State().Leading {
		t.Fatal("the standby took the lock from a running leader")
	}
	if got := rec.all(); len(got) != 2 || got[0].Worker != "one" || got[1].Worker != "one" {
		t.Fatalf("deliveries = %v", got)
	}

	w1.Stop()
	if w1.State().Leading {
		t.Error("a stopped worker still reports Leading")
	}
	stopped := clk.Now()
	clk.Advance(poll)
	got := rec.wait(t, 5)
	eventually(t, "the standby leads", func() bool { return w2.State().Leading })
	want := []string{"one:m1", "one:m2", "two:m3", "two:m4", "two:m5"}
	var seen []string
	for _, d := range got {
		seen = append(seen, d.Worker+":"+d.Payload)
		if d.Worker == "two" && clk.Now().Sub(stopped) > poll {
			t.Errorf("the takeover took %v, more than Poll", clk.Now().Sub(stopped))
		}
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("deliveries = %v, want %v", seen, want)
	}
}

// ---- housekeeping ----

func TestHousekeepingDrainsWhenIdle(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	for _, p := range []string{"a", "b", "c"} {
		put(t, q, p)
	}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
		t.Errorf("segment.log is %d bytes with everything delivered, want 0", size)
	}
	if ckpt, _ := q.Checkpoint(); ckpt != 0 {
		t.Errorf("checkpoint after the drain = %d, want 0", ckpt)
	}
	if next, _ := q.NextID(); next != 4 {
		t.Errorf("NextID after the drain = %d, want 4", next)
	}
	// ids keep counting; offsets start again
	n := clk.Calls()
	m := put(t, q, "d")
	if m.ID != 4 || m.Offset != 0 {
		t.Errorf("the first message after a drain: id %d offset %d, want id 4 offset 0", m.ID, m.Offset)
	}
	w.Wake()
	clk.WaitCalls(t, n+1)
	got := rec.all()
	if last := got[len(got)-1]; last.ID != 4 || last.Payload != "d" || last.Offset != 0 {
		t.Errorf("deliveries = %v", got)
	}
	// housekeeping runs at most once per Poll: not right after d
	size := fileSize(t, queueFile(root, "segment.log"))
	if size == 0 {
		t.Error("segment.log was emptied again less than a Poll after the first drain")
	}
	// but the checkpoint is written whenever the worker goes idle
	if ckpt, _ := q.Checkpoint(); ckpt != size {
		t.Errorf("checkpoint of the idle worker = %d, want the log's end %d", ckpt, size)
	}
	clk.Step(t)
	if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
		t.Errorf("segment.log is %d bytes a Poll after the second delivery, want 0", size)
	}
}

// A retry that reads its message in segment.log (as older versions
// scheduled them) keeps the log from being emptied.
func TestHousekeepingKeepsLogWithPendingRetry(t *testing.T) {
	queue.RetriesInLog(t)
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, "retry-me")
	put(t, q, "fine")
	policy := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: 2 * time.Second, BackoffFactor: 2, MaxDelay: time.Minute}
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "retry-me" && d.Attempt == 1 {
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "503"}
		}
		return ack(ctx, d)
	})})
	clk.WaitCalls(t, 1)
	full := fileSize(t, queueFile(root, "segment.log"))
	if full == 0 {
		t.Fatal("segment.log was emptied with a retry pending")
	}
	clk.Step(t) // a poll, still not due
	if size := fileSize(t, queueFile(root, "segment.log")); size != full {
		t.Errorf("segment.log changed from %d to %d bytes with a retry pending", full, size)
	}
	stepUntil(t, clk, 100, "the retry delivered", func() bool { return len(rec.all()) == 3 })
	if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
		t.Errorf("segment.log is %d bytes once the retry succeeded, want 0", size)
	}
}

// A discarded dead letter leaves dlq.log at the worker's next idle loop.
func TestHousekeepingCompactsMarkedDeadLetters(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	secret := put(t, q, `{"card":"4111-1111-1111-1111"}`)
	kept := put(t, q, `{"keep":true}`)
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
		return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "corrupt"}
	})})
	clk.WaitCalls(t, 1)
	dlqPath := queueFile(root, "dlq.log")
	before, err := os.ReadFile(dlqPath)
	if err != nil || !bytes.Contains(before, []byte("4111-1111")) {
		t.Fatalf("dlq.log = %q, %v", before, err)
	}
	// nexus dlq discard, from another process
	other := openQ(t, root, clk, nil)
	if err := other.Mark(secret.ID, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dlqPath); !bytes.Contains(b, []byte("4111-1111")) {
		t.Fatal("dlq.log was rewritten by Mark itself")
	}
	if dl := deadLetters(t, q); len(dl) != 1 || dl[0].ID != kept.ID {
		t.Errorf("pending dead letters after the mark = %+v", dl)
	}
	clk.Step(t) // the next idle loop
	after, err := os.ReadFile(dlqPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(after, []byte("4111-1111")) {
		t.Error("the discarded body is still in dlq.log after the idle loop")
	}
	if !bytes.Contains(after, []byte(`{"keep":true}`)) {
		t.Error("the unmarked dead letter left dlq.log")
	}
	if size := fileSize(t, queueFile(root, "dlq.log.acked")); size != 0 {
		t.Errorf("dlq.log.acked is %d bytes after the rewrite, want 0", size)
	}
	if dl := deadLetters(t, q); len(dl) != 1 || dl[0].ID != kept.ID {
		t.Errorf("pending dead letters after the rewrite = %+v", dl)
	}
}

// Whether a delivery was cut short is the handler's to say, not a second
// read of the context: a handler that recorded its failure (a dedup key's
// answer) as the stop's grace ran out returns VerdictRetry, and the
// failure is an attempt like any other, though the context had ended when
// the worker looked. (The worker once read its context again and called it
// interrupted: delivered again, the message found the recorded failure.)
func TestStopGraceKeepsAFailureTheHandlerRecorded(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	rec := newRecorder(clk)
	policy := queue.RetryPolicy{MaxAttempts: 3, InitialDelay: 0, BackoffFactor: 2, MaxDelay: time.Minute}
	m := put(t, q, "recorded")
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), StopGrace: 50 * time.Millisecond,
		Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
			<-ctx.Done() // the failure was recorded just before
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "HTTP 500"}
		})})
	rec.wait(t, 1)
	w.Stop()
	if evs := logs.Events(t, "queue_interrupted"); len(evs) != 0 {
		t.Errorf("a failure the handler stood by was logged as interrupted: %v", evs)
	}
	if evs := logs.Events(t, "queue_retry_scheduled"); len(evs) != 1 || evs[0]["next_attempt"] != float64(2) {
		t.Errorf("queue_retry_scheduled events %v, want one for attempt 2", evs)
	}
	again := newRecorder(clk)
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: again.handler("w2", ack)})
	if got := again.wait(t, 1); got[0].ID != m.ID || got[0].Attempt != 2 {
		t.Errorf("after a restart: %+v, want message %d at attempt 2", got, m.ID)
	}
}

// A handler that answers VerdictInterrupted while the worker runs on (a
// context of its own ended, not the worker's) does not stop the worker:
// the message comes back after RetryLaterDelay without using an attempt.
func TestInterruptedVerdictWithoutAStopRetriesLater(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	m := put(t, q, "own context")
	calls := 0
	startWorker(t, q, queue.WorkerConfig{Clock: clk,
		Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
			if calls++; calls == 1 {
				return queue.Verdict{Kind: queue.VerdictInterrupted, Error: "context canceled"}
			}
			return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
		})})
	clk.WaitCalls(t, 1)
	if rs := retries(t, q); len(rs) != 1 || rs[0].Attempt != 1 || !rs[0].Due.Equal(wt0.Add(queue.RetryLaterDelay)) || rs[0].ID != m.ID {
		t.Errorf("after the verdict the schedule is %+v, want attempt 1 due at +1s", rs)
	}
	stepFor(t, clk, queue.RetryLaterDelay)
	if got := rec.wait(t, 2); got[1].ID != m.ID || got[1].Attempt != 1 || got[1].At != queue.RetryLaterDelay {
		t.Errorf("deliveries %+v, want message %d again at attempt 1, 1 s later", got, m.ID)
	}
}

// A delivery still running when the stop's grace runs out is cut short:
// that is neither the message's failure nor an attempt. No retry is
// scheduled and nothing is dead-lettered; the checkpoint stays before the
// message (and a retry keeps its attempt), so the next start delivers it
// again, as after a kill.
func TestStopGraceCutsADeliveryShortWithoutAnAttempt(t *testing.T) {
	for _, retry := range []bool{false, true} {
		root, clk := t.TempDir(), clocktest.New(wt0)
		q := openQ(t, root, clk, nil)
		logs := &jsonlogtest.Buffer{}
		rec := newRecorder(clk)
		// the retry is due at once
		policy := queue.RetryPolicy{MaxAttempts: 2, InitialDelay: 0, BackoffFactor: 2, MaxDelay: time.Minute}
		m := put(t, q, "slow")
		w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo), StopGrace: 50 * time.Millisecond,
			Handler: rec.handler("w", func(ctx context.Context, d queue.Delivery) queue.Verdict {
				if retry && d.Attempt == 1 {
					return queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "HTTP 503"}
				}
				<-ctx.Done() // a backend that never answers; the last attempt
				return queue.Verdict{Kind: queue.VerdictInterrupted, Error: "context canceled"}
			})})
		want := 1
		if retry {
			want = 2
		}
		rec.wait(t, want)
		w.Stop()
		if evs := logs.Events(t, "queue_interrupted"); len(evs) != 1 || evs[0]["msg_id"] != float64(m.ID) {
			t.Errorf("retry=%v: queue_interrupted events %v, want one for message %d", retry, evs, m.ID)
		}
		// the first attempt's retry (retry=true) and nothing more
		if evs := logs.Events(t, "queue_retry_scheduled"); len(evs) != want-1 || len(logs.Events(t, "dlq_moved")) != 0 {
			t.Errorf("retry=%v: the delivery cut short was counted: retries %v, dlq_moved %v", retry, evs, logs.Events(t, "dlq_moved"))
		}
		if dl := deadLetters(t, q); len(dl) != 0 {
			t.Errorf("retry=%v: dead letters %v", retry, dl)
		}
		// the next start delivers it again, with the same attempt number
		again := newRecorder(clk)
		startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: again.handler("w2", ack)})
		if got := again.wait(t, 1); got[0].ID != m.ID || got[0].Attempt != want {
			t.Errorf("retry=%v: after a restart: %+v, want message %d at attempt %d", retry, got, m.ID, want)
		}
	}
}

// A damaged frame in dlq.log leaves the disk when the idle loop rewrites
// the file for a discard; the worker logs queue_damage for it, so that no
// dead letter goes unreported.
func TestHousekeepingReportsDamagedDeadLetter(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	logs := &jsonlogtest.Buffer{}
	rec := newRecorder(clk)
	first := put(t, q, `{"n":1}`)
	put(t, q, `{"n":2}`)
	put(t, q, `{"n":3}`)
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Logger: logs.Logger(slog.LevelInfo),
		Handler: rec.handler("w", func(context.Context, queue.Delivery) queue.Verdict {
			return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "corrupt"}
		})})
	clk.WaitCalls(t, 1)
	dlqPath := queueFile(root, "dlq.log")
	b, err := os.ReadFile(dlqPath)
	if err != nil || len(deadLetters(t, q)) != 3 {
		t.Fatalf("dlq.log: %v, %d dead letters", err, len(deadLetters(t, q)))
	}
	second := bytes.Index(b, []byte(`{"n":2}`))
	b[second] ^= 0xff // dead letter 2's payload
	if err := os.WriteFile(dlqPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := openQ(t, root, clk, nil).Mark(first.ID, queue.MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	clk.Step(t) // the next idle loop rewrites dlq.log
	evs := logs.Events(t, "queue_damage")
	if len(evs) != 1 || evs[0]["file"] != "dlq.log" || evs[0]["torn"] != false || evs[0]["flow"] != q.Flow {
		t.Errorf("queue_damage events %v, want one for the damaged frame of dlq.log", evs)
	}
	// each key once: a JSON line with a duplicate key is refused by strict readers
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"queue_damage"`) && strings.Count(line, `"flow":`) != 1 {
			t.Errorf("the queue_damage line names its flow %d times: %s", strings.Count(line, `"flow":`), line)
		}
	}
	if dl := deadLetters(t, q); len(dl) != 1 || string(dl[0].Payload) != `{"n":3}` {
		t.Errorf("pending dead letters after the rewrite = %+v, want the third", dl)
	}
}

// Another process appends right after the worker emptied the log (between
// Drain and the worker's look at the log's size). The new message sits at
// offset 0, and must be delivered.
func TestHousekeepingAppendRightAfterDrain(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	hooks := &hookFS{}
	q := openQ(t, root, clk, hooks)
	other := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	put(t, q, "a")
	var once sync.Once
	truncated := false
	hooks.mu.Lock()
	hooks.onTruncate = func(_ string, size int64) { truncated = truncated || size == 0 }
	hooks.onStat = func(string) {
		if truncated {
			once.Do(func() { put(t, other, `{"late":"a longer message, appended by another process"}`) })
		}
	}
	hooks.mu.Unlock()
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Handler: rec.handler("w", ack)})
	clk.WaitCalls(t, 1)
	put(t, other, "later")
	stepFor(t, clk, 5*time.Second)
	// The worker resets its cursor to 0 whenever Drain succeeds, so a
	// message another process appends right after the drain (at offset 0)
	// is delivered.
	if got := payloads(rec.all()); !slices.Contains(got, `{"late":"a longer message, appended by another process"}`) || !slices.Contains(got, "later") {
		t.Errorf("deliveries = %q, want a, the late message, later (segment.log is now %d bytes, %d dead letters)",
			got, fileSize(t, queueFile(root, "segment.log")), len(deadLetters(t, q)))
	}
}

// An /enqueue in this process (Manager.Append from another goroutine) that
// lands while the worker's idle loop is draining the log must not be
// emptied away with the processed messages.
//
// The worker is parked inside Drain, between its two looks at the log's
// size (the hook on the checkpoint read), while another goroutine appends.
// If the append lock excluded that goroutine, the append would wait for the
// drain; the hook then gives up after a bounded wait and lets Drain finish.
// At the end the manager is stopped and a worker of the next process looks
// at what is left, so whatever happened, b must have been delivered.
func TestHousekeepingInProcessAppendDuringDrain(t *testing.T) {
	clk := clocktest.New(wt0)
	rec := newRecorder(clk)
	hooks := &hookFS{}
	var armed, draining, started atomic.Bool
	pastLock, done := make(chan struct{}), make(chan struct{})
	var appendErr error
	var m *queue.Manager
	var root string
	m, root = newManager(t, clk, rec.handler("m", func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if string(d.Payload) == "a" {
			armed.Store(true)
		}
		return ack(ctx, d)
	}), 0, hooks)
	var signalled sync.Once
	hooks.onOpen = func(path string, flag int) {
		// Drain reads the checkpoint, then looks at the log's size again
		if armed.Load() && filepath.Base(path) == "segment.log.ckpt" && flag == os.O_RDONLY {
			draining.Store(true)
		}
	}
	hooks.onStat = func(string) {
		if !draining.Load() {
			return
		}
		if !started.CompareAndSwap(false, true) {
			// a Stat by the appending goroutine: it got past the lock
			signalled.Do(func() { close(pastLock) })
			return
		}
		go func() {
			defer close(done)
			_, appendErr = m.Append("acme", "orders", enqueue("b"))
		}()
		select {
		case <-pastLock: // the append runs beside the drain: let it finish
			<-done
		case <-time.After(500 * time.Millisecond): // it waits for Drain
		}
		draining.Store(false)
	}
	if _, _, err := m.Queue("acme", "orders"); err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, 1)
	n := clk.Calls()
	if _, err := m.Append("acme", "orders", enqueue("a")); err != nil {
		t.Fatal(err)
	}
	clk.WaitCalls(t, n+1) // a delivered
	clk.Step(t)           // a poll later, the idle worker drains the log
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("b's Append did not return")
	}
	if appendErr != nil {
		t.Fatalf("Append(b): %v", appendErr)
	}
	m.Stop()
	q := openQueueAt(t, root, "acme", "orders", clk)
	size, _ := q.Size()
	n = clk.Calls()
	startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("next", ack)})
	clk.WaitCalls(t, n+1)
	// The append lock excludes goroutines of one process too, so the
	// worker's Drain cannot truncate an append acknowledged meanwhile.
	if got := payloads(rec.all()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("deliveries = %q, want a then b: b's Append was acknowledged (segment.log held %d bytes after the drain)", got, size)
	}
}

// ---- property: random interleavings ----

// propMsg is the model of one appended message: the verdicts its
// deliveries get, and what became of it.
type propMsg struct {
	payload    string
	id         uint64
	plan       []queue.Verdict // verdict of delivery k; the last one repeats
	deliveries int
	attempts   []int
	next       int    // the attempt number the next delivery must carry
	terminal   string // "", "delivered" (ack or drop), "dlq"
}

type propModel struct {
	mu         sync.Mutex
	byPayload  map[string]*propMsg
	order      []*propMsg
	violations []string
}

func (m *propModel) violate(format string, args ...any) {
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

func (m *propModel) handle(_ context.Context, d queue.Delivery) queue.Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := m.byPayload[string(d.Payload)]
	if msg == nil {
		m.violate("delivery of an unknown message %q (id %d)", d.Payload, d.ID)
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"}
	}
	if msg.terminal != "" {
		m.violate("message %d delivered again after it was %s", d.ID, msg.terminal)
	}
	if d.ID != msg.id || d.Attempt != msg.next {
		m.violate("message %s delivered as id %d attempt %d, want id %d attempt %d", msg.payload, d.ID, d.Attempt, msg.id, msg.next)
	}
	msg.attempts = append(msg.attempts, d.Attempt)
	v := msg.plan[min(msg.deliveries, len(msg.plan)-1)]
	msg.deliveries++
	switch v.Kind {
	case queue.VerdictAck, queue.VerdictDrop:
		msg.terminal = "delivered"
	case queue.VerdictDeadLetter:
		msg.terminal = "dlq"
	case queue.VerdictRetry:
		if d.Attempt >= v.Policy.MaxAttempts {
			msg.terminal = "dlq"
		} else {
			msg.next = d.Attempt + 1
		}
	}
	return v
}

func randomPlan(rng *rand.Rand) []queue.Verdict {
	policy := queue.RetryPolicy{
		MaxAttempts:   1 + rng.IntN(4),
		InitialDelay:  []time.Duration{0, 100 * time.Millisecond, time.Second, 3 * time.Second}[rng.IntN(4)],
		BackoffFactor: 1 + 2*rng.Float64(),
		MaxDelay:      5 * time.Second,
	}
	fail := queue.Verdict{Kind: queue.VerdictRetry, Policy: policy, Error: "503"}
	var plan []queue.Verdict
	for range rng.IntN(5) {
		if rng.IntN(4) == 0 {
			plan = append(plan, queue.Verdict{Kind: queue.VerdictRetryLater, Error: "registry unavailable"})
		} else {
			plan = append(plan, fail)
		}
	}
	switch rng.IntN(6) {
	case 0, 1:
		plan = append(plan, queue.Verdict{Kind: queue.VerdictAck, Outcome: "succeeded"})
	case 2:
		plan = append(plan, queue.Verdict{Kind: queue.VerdictAck, Outcome: "filtered"})
	case 3:
		plan = append(plan, queue.Verdict{Kind: queue.VerdictDrop, Error: "no such flow"})
	case 4:
		plan = append(plan, queue.Verdict{Kind: queue.VerdictDeadLetter, Error: "corrupt artifact"})
	default:
		plan = append(plan, fail) // fails until its attempts are spent
	}
	return plan
}

// TestPropertyNoLostMessage drives one worker through random interleavings
// of appends (woken or found by polling), deliveries that ack, fail, retry
// later, dead-letter or drop, discards of dead letters, clock moves and
// restarts. The worker is at rest on the fake clock between operations.
// Whatever the order: every appended message is delivered at least once
// and ends acknowledged or in the DLQ, nothing is delivered after it ended,
// attempt numbers follow the verdicts, ids keep counting, and segment.log
// is never emptied while a message in it is unfinished, unless a retry
// that carries it is pending, nor while a retry reads its message there.
func TestPropertyNoLostMessage(t *testing.T) {
	runs := queue.Figure(200, 30, 5000)
	// The runs wait on fdatasync far more than they compute: run 16 at a
	// time whatever -parallel says (t.Run may be called concurrently).
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for seed := 1; seed <= runs; seed++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { propertyRun(t, uint64(seed)) })
		}()
	}
	wg.Wait()
}

func propertyRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6e657875))
	root, clk := t.TempDir(), clocktest.New(wt0)
	model := &propModel{byPayload: map[string]*propMsg{}}
	hooks := &hookFS{}
	q := openQ(t, root, clk, hooks)
	other := openQ(t, root, clk, nil) // another process: appends and dlq discards
	hooks.onTruncate = func(path string, size int64) {
		if size != 0 {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("reading segment.log at the drain: %v", err)
			return
		}
		rs, err := q.Retries()
		model.mu.Lock()
		defer model.mu.Unlock()
		carried := map[uint64]bool{}
		for _, r := range rs {
			if r.Message == nil {
				model.violate("segment.log emptied with a retry pending that reads its message there: %+v", r)
			}
			carried[r.ID] = true
		}
		if err != nil {
			model.violate("segment.log emptied with a retry schedule that does not read: %v", err)
		}
		byID := map[uint64]*propMsg{}
		for _, m := range model.order {
			byID[m.id] = m
		}
		for _, id := range segmentIDs(b) {
			if m := byID[id]; m == nil || m.terminal == "" && !carried[id] {
				model.violate("segment.log emptied while message %d is unfinished (no retry carries it)", id)
			}
		}
	}
	cfg := queue.WorkerConfig{Clock: clk, Handler: queue.HandlerFunc(model.handle), Logger: quietLog()}
	w := queue.NewWorker(q, cfg)
	w.Start()
	defer func() { w.Stop() }()
	clk.WaitCalls(t, 1)

	var marked []uint64
	var trace []string
	seq := 0
	for range 15 + rng.IntN(20) {
		switch r := rng.IntN(100); {
		case r < 30: // enqueue
			via, wake := q, rng.IntN(2) == 0
			if rng.IntN(3) == 0 {
				via, wake = other, false
			}
			for range 1 + rng.IntN(3) {
				seq++
				msg := &propMsg{payload: fmt.Sprintf(`{"n":%d}`, seq), plan: randomPlan(rng), next: 1}
				model.mu.Lock()
				model.byPayload[msg.payload] = msg
				model.order = append(model.order, msg)
				model.mu.Unlock()
				m := put(t, via, msg.payload)
				model.mu.Lock()
				msg.id = m.ID
				model.mu.Unlock()
			}
			trace = append(trace, fmt.Sprintf("enqueue(wake=%v)", wake))
			if wake {
				n := clk.Calls()
				w.Wake()
				clk.WaitCalls(t, n+1)
			}
		case r < 65: // time passes until the worker's next wake-up
			clk.Step(t)
			trace = append(trace, "step")
		case r < 80: // time passes by some amount
			d := time.Duration(rng.IntN(4000)) * time.Millisecond
			n := clk.Calls()
			due, ok := clk.LastDeadline()
			clk.Advance(d)
			if ok && !clk.Now().Before(due) {
				clk.WaitCalls(t, n+1)
			}
			trace = append(trace, fmt.Sprintf("advance(%v)", d))
		case r < 92: // nexus dlq discard
			dl := deadLetters(t, other)
			if len(dl) == 0 {
				continue
			}
			id := dl[rng.IntN(len(dl))].ID
			if err := other.Mark(id, queue.MarkDiscarded); err != nil {
				t.Fatalf("Mark(%d): %v", id, err)
			}
			marked = append(marked, id)
			trace = append(trace, fmt.Sprintf("discard(%d)", id))
		default: // restart
			w.Stop()
			n := clk.Calls()
			w = queue.NewWorker(q, cfg)
			w.Start()
			clk.WaitCalls(t, n+1)
			trace = append(trace, "restart")
		}
	}

	// let everything finish, then one more idle loop
	finished := func() bool {
		model.mu.Lock()
		defer model.mu.Unlock()
		for _, m := range model.order {
			if m.terminal == "" {
				return false
			}
		}
		return true
	}
	for i := 0; !finished() || len(retries(t, q)) > 0; i++ {
		if i == 5000 {
			t.Fatalf("seed %d: not finished after %d steps; trace %v", seed, i, trace)
		}
		clk.Step(t)
	}
	clk.Step(t)

	model.mu.Lock()
	defer model.mu.Unlock()
	for _, v := range model.violations {
		t.Errorf("seed %d: %s", seed, v)
	}
	wantDLQ := map[uint64]bool{}
	for i, m := range model.order {
		if m.id != uint64(i+1) {
			t.Errorf("seed %d: message %d got id %d: ids do not keep counting", seed, i+1, m.id)
		}
		if m.deliveries == 0 || m.terminal == "" {
			t.Errorf("seed %d: message %d lost: %d deliveries, state %q", seed, m.id, m.deliveries, m.terminal)
		}
		if m.terminal == "dlq" && !slices.Contains(marked, m.id) {
			wantDLQ[m.id] = true
		}
	}
	for _, id := range marked {
		if m := model.order[id-1]; m.terminal != "dlq" {
			t.Errorf("seed %d: discarded %d, which is not a dead letter", seed, id)
		}
	}
	gotDLQ := map[uint64]bool{}
	for _, d := range deadLetters(t, q) {
		gotDLQ[d.ID] = true
		if m := model.order[d.ID-1]; d.Attempts != m.attempts[len(m.attempts)-1] || string(d.Payload) != m.payload {
			t.Errorf("seed %d: dead letter %+v does not match %+v", seed, d, m)
		}
	}
	if fmt.Sprint(gotDLQ) != fmt.Sprint(wantDLQ) {
		t.Errorf("seed %d: pending dead letters %v, want %v", seed, gotDLQ, wantDLQ)
	}
	if size := fileSize(t, queueFile(root, "segment.log")); size != 0 {
		t.Errorf("seed %d: segment.log is %d bytes with nothing left to do", seed, size)
	}
	if len(marked) > 0 {
		if size := fileSize(t, queueFile(root, "dlq.log.acked")); size != 0 {
			t.Errorf("seed %d: dlq.log.acked is %d bytes after the idle loop", seed, size)
		}
	}
	if st := w.State(); st.RetriesPending != 0 || st.InFlight != 0 {
		t.Errorf("seed %d: state at rest = %+v", seed, st)
	}
	if t.Failed() {
		t.Logf("seed %d: trace %v", seed, trace)
	}
}

// A wall clock set back by an hour while retries wait (an NTP step, an
// operator's mistake) neither fires them at once (no retry storm) nor
// loses one: across a restart, each is delivered when the clock reaches
// its absolute due time again, an hour later than it would have been.
func TestRetriesSurviveBackwardClockJump(t *testing.T) {
	root, clk := t.TempDir(), clocktest.New(wt0)
	q := openQ(t, root, clk, nil)
	rec := newRecorder(clk)
	decide := func(ctx context.Context, d queue.Delivery) queue.Verdict {
		if d.Attempt == 1 {
			return queue.Verdict{Kind: queue.VerdictRetry, Policy: queue.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Minute, BackoffFactor: 2, MaxDelay: time.Hour}, Error: "503"}
		}
		return ack(ctx, d)
	}
	const n = 20
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("m%d", i+1)
		put(t, q, want[i])
	}
	w := startWorker(t, q, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w1", decide)})
	clk.WaitCalls(t, 1) // the first attempts made, the retries due at +1m
	clk.Advance(30 * time.Second)
	clk.Advance(-time.Hour) // the jump: the clock reads wt0-59m30s
	w.Stop()
	q.Close()

	q2 := openQ(t, root, clk, nil)
	calls := clk.Calls()
	startWorker(t, q2, queue.WorkerConfig{Clock: clk, Poll: time.Hour, Handler: rec.handler("w2", decide)})
	clk.WaitCalls(t, calls+1)
	if got := rec.all()[n:]; len(got) != 0 {
		t.Fatalf("delivered at once after the clock went back: %v", got)
	}
	// the new worker's waits (its Poll, then up to the due time); the old
	// worker's abandoned wait is not stepped to
	for clk.Now().Before(wt0.Add(time.Minute)) {
		if at := clk.Step(t); at.Before(wt0.Add(time.Minute)) && len(rec.all()) > n {
			t.Fatalf("retries delivered at %v, before their due time: %v", at.Sub(wt0), rec.all()[n:])
		}
	}
	var retried []string
	for _, d := range rec.all()[n:] {
		if d.Attempt != 2 || d.At != time.Minute {
			t.Errorf("retry %v, want attempt 2 at 1m0s (its absolute due time)", d)
		}
		retried = append(retried, d.Payload)
	}
	slices.Sort(retried)
	slices.Sort(want)
	if !slices.Equal(want, retried) {
		t.Errorf("retried %v, want every message once: %v", retried, want)
	}
}
