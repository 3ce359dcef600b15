package queue

import (
	"os"
	"testing"
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
