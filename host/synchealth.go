package host

import (
	"sync"
	"time"
)

// SyncHealth records the git sync's rounds that could not run (the repo
// unreachable, the registry unwritable) for /status, /api/flows and the
// UI, which show a run of them as sync_error: without it a host that had
// stopped following git looked healthy there (a refused commit is the
// registry's last_error). Observe it from the sync loop
// (gitsync.Config.Observe); the zero value is ready.
type SyncHealth struct {
	mu       sync.Mutex
	since    time.Time // the first failed round of the current run
	failures int
	err      string
}

// Observe records the outcome of a round at at: err nil ends a run of
// failures. A round this process did not run (ran false: another process
// held the sync lock) changes nothing: it says nothing of this process's
// sync.
func (h *SyncHealth) Observe(ran bool, err error, at time.Time) {
	if !ran {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.since, h.failures, h.err = time.Time{}, 0, ""
		return
	}
	if h.failures == 0 {
		h.since = at
	}
	h.failures++
	h.err = err.Error()
}

// syncFailure is the current run of failed rounds: sync_error in /status
// and /api/flows.
type syncFailure struct {
	Since    string `json:"since"`
	Failures int    `json:"failures"`
	Error    string `json:"error"`
}

// failure is the current run of failed rounds, nil when the last round
// ran (or h is nil: no git sync).
func (h *SyncHealth) failure() *syncFailure {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures == 0 {
		return nil
	}
	return &syncFailure{Since: h.since.UTC().Format(time.RFC3339), Failures: h.failures, Error: h.err}
}
