package host_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
)

// failingDisk is the OS, except that while failing is set every write to
// a queue's file named file fails with errno.
type failingDisk struct {
	queue.OS
	file    string
	errno   syscall.Errno
	failing atomic.Bool
}

// fullDisk fails the writes of segment.log with ENOSPC.
func fullDisk() *failingDisk { return &failingDisk{file: "segment.log", errno: syscall.ENOSPC} }

func (d *failingDisk) OpenFile(name string, flag int, perm fs.FileMode) (queue.File, error) {
	f, err := d.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != d.file {
		return f, err
	}
	return &failingFile{File: f, disk: d}, nil
}

type failingFile struct {
	queue.File
	disk *failingDisk
}

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.disk.failing.Load() {
		return 0, &fs.PathError{Op: "write", Path: f.disk.file, Err: f.disk.errno}
	}
	return f.File.WriteAt(p, off)
}

// TestAPIReplayWhileTheQueueFails: a replay, or a replay of all, that finds
// the queue's log failing (a full disk) answers 503 with Retry-After and
// the system's error, as /enqueue does, and changes nothing; it was an
// internal error. Once the disk has room a replay goes through (after the
// pause the queue's reopening is held to while its log keeps failing).
func TestAPIReplayWhileTheQueueFails(t *testing.T) {
	disk := fullDisk()
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	if _, _, err := fx.queues.Queue("acme", "echo"); err != nil {
		t.Fatal(err)
	}
	disk.failing.Store(true)
	const refusal = "queue acme/echo could not take the message: its log could not be written: no space left on device"
	for _, path := range []string{
		"/api/queues/acme/echo/dlq/1/replay",
		"/api/queues/acme/echo/dlq/1/replay", // the reopened queue fails again: its next reopening is held back
		"/api/queues/acme/echo/dlq/all/replay",
	} {
		w := fx.admin(http.MethodPost, path)
		wantRefusal(t, w, http.StatusServiceUnavailable, refusal)
		if got := w.Header().Get("Retry-After"); got != "1" {
			t.Errorf("POST %s: Retry-After = %q, want 1", path, got)
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("pending after the refused replays: %v, want [1 2]", got)
	}
	disk.failing.Store(false)
	fx.clock.Advance(10 * time.Second) // past the hold
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay")
		if w.Code == http.StatusOK {
			break
		}
		if w.Code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("a replay once the disk has room: %d %s, want 200", w.Code, w.Body)
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{2}) {
		t.Errorf("pending after the replay: %v, want [2]", got)
	}
}

// TestEnqueueFailuresAreLoggedAtARate: on a full disk every submission is
// refused, and each was logged as queue_enqueue_failed: 15,000 lines a
// second under load, into a log that may be on the full disk. They are
// logged as refusals are, at most a burst at once and a few a second
// after, the next line saying how many were not (suppressed).
func TestEnqueueFailuresAreLoggedAtARate(t *testing.T) {
	disk := fullDisk()
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	disk.failing.Store(true)
	submit := func() {
		t.Helper()
		w := fx.serve(newRequest(http.MethodPost, "/flows/acme/echo/enqueue", `{"n":1}`,
			"Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("enqueue on a full disk: %d %s, want 503", w.Code, w.Body)
		}
	}
	for range 60 {
		submit()
	}
	if n := len(fx.logs.Events(t, "queue_enqueue_failed")); n < 1 || n > 20 {
		t.Errorf("60 refused submissions at once logged %d queue_enqueue_failed lines, want 1 to 20", n)
	}
	fx.clock.Advance(10 * time.Second)
	submit()
	lines := fx.logs.Events(t, "queue_enqueue_failed")
	told := len(lines)
	for _, l := range lines {
		n, _ := l["suppressed"].(float64)
		told += int(n)
	}
	if told != 61 {
		t.Errorf("the queue_enqueue_failed lines and the suppressed counts they carry tell of %d refused submissions, want 61", told)
	}
}

// TestReplayAllWhoseMarksFailSaysTheEntriesAreStillListed: management.md's
// refusals: "a replay appended but its mark could not be written | 500
// naming the new message: the entry is still listed; discard it rather
// than replaying it again". A replay of all whose marks failed said "2
// dead letters were handled, then the rest failed": an operator trusting
// it would replay them again once the disk mends, delivering each twice.
func TestReplayAllWhoseMarksFailSaysTheEntriesAreStillListed(t *testing.T) {
	disk := &failingDisk{file: "dlq.log.acked", errno: syscall.EIO}
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	disk.failing.Store(true)
	w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/replay")
	wantRefusal(t, w, http.StatusInternalServerError, "dead letters 1 to 2 were replayed as messages 3 to 4 but could not be marked replayed, so they are still listed: discard them rather than replaying them again")
	disk.failing.Store(false)
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("pending after the unmarked replays: %v, want [1 2] (still listed)", got)
	}
	fx.waitJournal(t, "acme", "echo", 3) // the replays were appended, and are delivered
	fx.waitJournal(t, "acme", "echo", 4)
}

// TestPublishOnAFullDiskNamesNoFile: a queue_publish whose target's log
// cannot be written fails with what /enqueue's 503 says (the system's
// error, without the files it names) and logs queue_enqueue_failed with
// the whole error, as /enqueue does. Its error was the queue's own, the
// path of the state directory in it, which reaches a caller through a
// fault handler's $.fault_error.
func TestPublishOnAFullDiskNamesNoFile(t *testing.T) {
	disk := fullDisk()
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	if _, _, err := fx.queues.Queue("acme", "echo"); err != nil {
		t.Fatal(err)
	}
	cfg := fx.cfg
	cfg.Metrics = host.NewMetrics() // a server of its own over the same state
	srv := host.New(cfg)
	disk.failing.Store(true)
	err := srv.Publish(context.Background(), "acme", "echo", []byte(`{"n":1}`), "cid-full")
	const want = "queue acme/echo could not take the message: its log could not be written: no space left on device"
	if err == nil || err.Error() != want {
		t.Errorf("Publish on a full disk: %v, want %q", err, want)
	}
	evs := fx.logs.Events(t, "queue_enqueue_failed")
	if len(evs) != 1 || evs[0]["level"] != "ERROR" || evs[0]["tenant"] != "acme" || evs[0]["flow"] != "echo" || evs[0]["correlation_id"] != "cid-full" ||
		!strings.Contains(fmt.Sprint(evs[0]["error"]), "segment.log") {
		t.Errorf("queue_enqueue_failed lines %v, want one at ERROR for acme/echo, cid-full, its error naming segment.log", evs)
	}
}
