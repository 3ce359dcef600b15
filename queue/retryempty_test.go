package queue

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A frame of segment.log.retry that verifies but holds an empty record
// (no kind byte: no version writes one) is a record this version does not
// know, an error for every reader, as one of an unknown kind is. Every
// reader panicked on it (index out of range): the janitor's pass, which
// reads every idle queue's schedule, took the server down with it.
func TestRetryLogEmptyRecordIsAnError(t *testing.T) {
	q, path := retryQueue(t)
	b := appendRetryFrame(nil, retryAt(1, 2, 0))
	b = appendFrame(b, nil)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if rs, err := q.Retries(); err == nil {
		t.Errorf("Retries() = %+v, want an error", rs)
	}
	if _, _, err := q.openRetrySchedule(); err == nil {
		t.Errorf("the worker's open succeeded, want an error")
	}
	if got, _ := os.ReadFile(path); string(got) != string(b) {
		t.Errorf("the file was changed")
	}
}

// A worker that finds a damaged frame in segment.log.retry as it starts
// and cannot rewrite the file without it (a disk that fails) fails to
// start with an error that names the damage, so that worker_failed says
// what was found, not only that a rewrite failed; the next start finds it
// again and reports it. The error named the failed rewrite alone.
func TestRetryLogDamageNamedWhenTheRewriteFails(t *testing.T) {
	m, q := twoRetriesOneByteChanged(t, retrySetFrame-1, func(byte) byte { return 0xff })
	m.Fail(opRename, "", 1, syscall.EIO, false)
	_, _, err := q.openRetrySchedule()
	if err == nil || !strings.Contains(err.Error(), "at offset 0 (41 bytes, id=1 as the damaged frame holds it): a CRC that does not match") {
		t.Errorf("the worker's open with the rewrite failing: %v, want an error naming the damaged frame", err)
	}
	m.Heal()
	_, damage, err := q.openRetrySchedule()
	if err != nil || len(damage) != 1 || damage[0].Offset != 0 {
		t.Errorf("the next start: damage %+v, %v; want the frame at 0", damage, err)
	}
}

// twoRetriesOneByteChanged is a queue on a memFS whose retry schedule
// holds retries of messages 1 and 2, the byte at off of its file then
// replaced by change of it.
func twoRetriesOneByteChanged(t *testing.T, off int64, change func(byte) byte) (*memFS, *Queue) {
	t.Helper()
	m, root := settledMemQueue(t)
	q, _ := openQueue(t, root, Options{FS: m})
	s, _ := mustOpenSchedule(t, q)
	for _, c := range []retryChange{setR(retryAt(1, 2, time.Second)), setR(retryAt(2, 2, time.Minute))} {
		c.apply(t, s, nil)
	}
	f, err := m.OpenFile(q.path(retryFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{change(b[0])}, off); err != nil {
		t.Fatal(err)
	}
	return m, q
}
