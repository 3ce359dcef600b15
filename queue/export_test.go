package queue

import "testing"

// Figure is figure (helpers_test.go) for the tests of package queue_test.
var Figure = figure

// RetriesInLog has the test's workers schedule retries that read their
// message in segment.log, as older versions did: a pending retry then
// keeps the log from being emptied. Not for parallel tests.
func RetriesInLog(t testing.TB) {
	carryRetries = false
	t.Cleanup(func() { carryRetries = true })
}

// HeldRetryPayload is how many payload bytes the running worker's retry
// schedule holds in memory (0: every pending retry keeps where its message
// is in segment.log.retry). Call it while the worker waits.
func HeldRetryPayload(w *Worker) int {
	s := w.sched.Load()
	if s == nil {
		return 0
	}
	return s.heldPayload()
}
