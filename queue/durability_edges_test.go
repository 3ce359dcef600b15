package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOversizedDeadLetterIsNotAcknowledged: a message an older nexus took
// (a payload over MaxPayload, its record within MaxRecord) cannot be a
// dead letter: MoveToDLQ refuses it with ErrTooLarge instead of writing a
// frame over MaxRecord that no reader takes (it answered nil, and the
// message, acknowledged, was lost without a word; the worker now logs it
// as dropped).
func TestOversizedDeadLetterIsNotAcknowledged(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	// the largest payload a message record held before MaxPayload: the
	// record is kind, id, time, source length, correlation length (20 bytes)
	big := bytes.Repeat([]byte("x"), MaxRecord-20)
	err := q.MoveToDLQ(DeadLetter{ID: 9, EnqueuedAt: epoch, FailedAt: epoch.Add(time.Second), Attempts: 3,
		LastError: "HTTP 503", Payload: big})
	big = nil
	if err != nil {
		return // refused: the message stays where it is, not lost
	}
	dl, damage, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].ID != 9 {
		t.Errorf("MoveToDLQ of a %d-byte payload answered nil, but the dead letters are %d (damage %v): the message was acknowledged and lost",
			MaxRecord-20, len(dl), damage)
	}
}

// TestDeadLetterCacheSeesASameSizeRewrite: the Manager's dead-letter count
// is cached under dlq.log's size, mtime and inode, but only once the stamp
// has settled: a dead letter written over a torn tail of the same length,
// within the same mtime tick (Chtimes stands for it), keeps the stamp as
// it was, and a cached count would miss it.
func TestDeadLetterCacheSeesASameSizeRewrite(t *testing.T) {
	root := t.TempDir()
	q, _ := openQueue(t, root, Options{})
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	moveToDLQ(t, q, 1)
	good, err := os.ReadFile(dlq)
	if err != nil {
		t.Fatal(err)
	}
	second := appendFrame(nil, appendDeadLetterRecord(nil, ptr(deadLetter(2))))
	// written but not durable: its last sector never reached the disk
	torn := bytes.Clone(second)
	off, end := len(good), len(good)+len(torn)
	clear(torn[max(off, (end-1)/sectorSize*sectorSize)-off:])
	if err := os.WriteFile(dlq, append(bytes.Clone(good), torn...), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dlq)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour})
	if info, _ := m.Info(testTenant, testFlow); info.DeadLetters != 1 {
		t.Fatalf("dead letters before: %d, want 1", info.DeadLetters)
	}
	moveToDLQ(t, q, 2) // cuts the torn tail, writes the same bytes' length
	after, err := os.Stat(dlq)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() {
		t.Fatalf("setup: size %d, want %d", after.Size(), before.Size())
	}
	// the same mtime tick
	if err := os.Chtimes(dlq, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if n, err := q.DeadLetterCount(); err != nil || n != 2 {
		t.Fatalf("setup: DeadLetterCount = %d, %v; want 2", n, err)
	}
	if info, _ := m.Info(testTenant, testFlow); info.DeadLetters != 2 {
		t.Errorf("Info's dead letters after a second dead letter: %d, want 2 (the cached count was kept: same size, mtime and inode)", info.DeadLetters)
	}
}

// processedQueueMovingOn makes a queue of three processed messages whose
// worker moves on (a message appended and delivered, the checkpoint at the
// new end) when a reader next opens the checkpoint, once armed is set:
// the moment a reader that read the size first would see a checkpoint
// past it.
func processedQueueMovingOn(t *testing.T) (mfs *memFS, root string, armed *atomic.Bool) {
	t.Helper()
	mfs, root = memQueueRoot(t)
	armed = &atomic.Bool{}
	var q *Queue
	mfs.before = func(op, name string) {
		if op != opOpen || filepath.Base(name) != ckptFile || !armed.CompareAndSwap(true, false) {
			return
		}
		if _, err := q.Append(newMessage(9, 40)); err != nil {
			t.Error(err)
			return
		}
		size, err := q.Size()
		if err == nil {
			err = q.SaveCheckpoint(size)
		}
		if err != nil {
			t.Error(err)
		}
	}
	q, _ = openQueue(t, root, Options{FS: mfs})
	appendProcessed(t, q, 3, 40)
	return mfs, root, armed
}

// TestReadCountsCheckpointBeforeSize: ReadCounts reads the checkpoint, then
// the log's size: a worker moving on between the two reads cannot make the
// checkpoint look past the end (read the other way round, a processed
// queue showed none processed).
func TestReadCountsCheckpointBeforeSize(t *testing.T) {
	mfs, root, armed := processedQueueMovingOn(t)
	armed.Store(true)
	c, err := ReadCounts(root, testTenant, testFlow, mfs)
	if err != nil {
		t.Fatal(err)
	}
	if armed.Load() {
		t.Fatal("setup: the hook did not run")
	}
	if c.Total < 3 || c.Processed != c.Total {
		t.Errorf("ReadCounts = %+v with every message processed; want Processed == Total (>= 3)", c)
	}
}

// TestInfoOnDiskReadsTheCheckpointFirst: the depth of a queue another
// process delivers is read checkpoint first, as ReadCounts and openInfo
// do (a checkpoint moved past the size read made the whole log its depth).
func TestInfoOnDiskReadsTheCheckpointFirst(t *testing.T) {
	mfs, root, armed := processedQueueMovingOn(t)
	m := NewManager(ManagerConfig{Root: root, FS: mfs, Handler: HandlerFunc(nil), Poll: time.Hour})
	armed.Store(true)
	info, ok := m.Info(testTenant, testFlow)
	if armed.Load() {
		t.Fatal("setup: the hook did not run")
	}
	if !ok || info.Depth != 0 {
		t.Errorf("Info = %+v, %v with every message processed; want depth 0", info, ok)
	}
}

// TestJanitorKeepsADamagedDeadLetter: an idle queue whose dlq.log holds a
// damaged dead letter (valid frames after it) is kept for its worker,
// whose rewrite reports it (the janitor deleted it without a word).
func TestJanitorKeepsADamagedDeadLetter(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(deadLetter(1)); err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(deadLetter(2)); err != nil {
		t.Fatal(err)
	}
	if err := q.Mark(2, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	q.Close()
	dlq := filepath.Join(root, testTenant, testFlow, dlqFile)
	b, err := os.ReadFile(dlq)
	if err != nil {
		t.Fatal(err)
	}
	b[headerSize+40] ^= 0xff // inside the first dead letter's record: its CRC fails
	if err := os.WriteFile(dlq, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, damage, err := ReadDeadLetters(root, testTenant, testFlow, nil); err != nil || len(damage) != 1 || damage[0].Torn {
		t.Fatalf("setup: damage %v, %v; want one damaged (not torn) frame", damage, err)
	}
	var logs jsonLog
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour, Logger: logs.Logger()})
	defer m.Stop()
	m.sweepIdle()
	_, statErr := os.Stat(dlq)
	out := logs.String()
	if errors.Is(statErr, fs.ErrNotExist) && !strings.Contains(out, `"queue_damage"`) {
		t.Errorf("the janitor deleted dlq.log holding a damaged dead letter without reporting it; log:\n%s", out)
	}
}

// jsonLog is a JSON log the code under test writes while the test reads it.
type jsonLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Logger is a logger writing to l.
func (l *jsonLog) Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// String is what was logged so far.
func (l *jsonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Events are the lines logged so far whose event is event.
func (l *jsonLog) Events(event string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []map[string]any
	for line := range bytes.Lines(l.b.Bytes()) {
		var e map[string]any
		if json.Unmarshal(line, &e) == nil && e["event"] == event {
			found = append(found, e)
		}
	}
	return found
}

// TestDeadLetterFileOfADeadProcessMadeDurable: a process that died in the
// middle of a queue's first MoveToDLQ leaves dlq.log created (its folder
// entry never synced) with part of a frame; the next dead letter, written
// by another process after it cuts the torn tail, syncs the folder too,
// so a power cut does not take the file away (the folder was synced only
// for a file found empty).
func TestDeadLetterFileOfADeadProcessMadeDurable(t *testing.T) {
	m, root := memQueueRoot(t)
	q, _ := openQueue(t, root, Options{FS: m})
	m.SyncAll()
	// the dead leader's half-written first dead letter: the file created,
	// part of a frame written, nothing synced
	f, err := m.OpenFile(filepath.Join(root, testTenant, testFlow, dlqFile), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		t.Fatal(err)
	}
	frame := appendFrame(nil, appendDeadLetterRecord(nil, ptr(deadLetter(1))))
	if _, err := f.WriteAt(frame[:len(frame)/2], 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// the standby, leading now: message 2 dead-lettered, acknowledged
	if err := q.MoveToDLQ(deadLetter(2)); err != nil {
		t.Fatal(err)
	}
	m.Crash()
	got, _, err := q.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != 2 {
		t.Errorf("after a power cut, dead letters %v; want the acknowledged dead letter 2", got)
	}
}

// TestJanitorLeavesMarksToTheWorker: an idle queue with a dead letter
// discarded by nexus dlq discard, its mark not applied yet, is kept for
// its worker, which logs dlq_discarded as it applies the mark (the janitor
// deleted the files, and the operator's action had no audit line).
func TestJanitorLeavesMarksToTheWorker(t *testing.T) {
	root := t.TempDir()
	q, _, err := Open(root, testTenant, testFlow, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.MoveToDLQ(deadLetter(1)); err != nil {
		t.Fatal(err)
	}
	if err := q.Mark(1, MarkDiscarded); err != nil {
		t.Fatal(err)
	}
	q.Close()
	var logs jsonLog
	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour, Logger: logs.Logger()})
	defer m.Stop()
	m.sweepIdle()
	_, statErr := os.Stat(filepath.Join(root, testTenant, testFlow, dlqFile))
	out := logs.String()
	if errors.Is(statErr, fs.ErrNotExist) && !strings.Contains(out, `"dlq_discarded"`) {
		t.Errorf("the janitor deleted a discarded dead letter without its dlq_discarded line; log:\n%s", out)
	}
}

// TestStandbyInfoShowsRetries: with two servers on one state directory,
// the one whose worker stands by reads the queue's pending retries from
// its files, as for a queue it has not opened (its worker's state, which
// never loaded the schedule, said 0).
func TestStandbyInfoShowsRetries(t *testing.T) {
	root := t.TempDir()
	other, _ := openQueue(t, root, Options{})
	msg, err := other.Append(newMessage(1, 40))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.SaveRetries([]Retry{{ID: msg.ID, Offset: msg.Offset, Attempt: 2, Due: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	size, _ := other.Size()
	if err := other.SaveCheckpoint(size); err != nil {
		t.Fatal(err)
	}
	// the other server's worker leads
	lk := NewFileLock(filepath.Join(root, testTenant, testFlow, workerLockFile))
	if ok, err := lk.TryLock(); !ok || err != nil {
		t.Fatalf("worker lock: %v, %v", ok, err)
	}
	defer lk.Unlock()

	m := NewManager(ManagerConfig{Root: root, Handler: HandlerFunc(nil), Poll: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	defer m.Stop()
	if info, _ := m.Info(testTenant, testFlow); info.State.RetriesPending != 1 {
		t.Fatalf("setup: not opened here, retries pending %d, want 1", info.State.RetriesPending)
	}
	if _, _, err := m.Queue(testTenant, testFlow); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // its worker tried the lock and stands by
	info, _ := m.Info(testTenant, testFlow)
	if info.State.Leading {
		t.Fatal("setup: this process's worker leads")
	}
	if info.State.RetriesPending != 1 {
		t.Errorf("opened here, worker standing by: retries pending %d, want 1 (segment.log.retry holds one)", info.State.RetriesPending)
	}
}
