package engine_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// recordedAnswer is a store whose every key holds the recorded answer
// answer (what a damaged or hand-edited registry row holds).
type recordedAnswer struct {
	*enginetest.Dedup
	answer []byte
}

func (s *recordedAnswer) Claim(context.Context, string, string, string, bool, time.Duration) ([]byte, int64, error) {
	return s.answer, 0, nil
}

// TestDedupRecordWithNoHTTPStatusIsUnavailable: a recorded answer whose
// status is no status code the engine answers (100 to 599) does not
// decode: the duplicate is answered 503, as a record that is not JSON is,
// and the flow does not run. Replayed, status 0 made the HTTP door's
// WriteHeader panic.
func TestDedupRecordWithNoHTTPStatusIsUnavailable(t *testing.T) {
	var calls atomic.Int32
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		answer(200, "application/json", `{"status":200}`)(w, r)
	})
	f := forwardingFlow(t, "dedup-record-status", b.URL)
	for _, rec := range []string{
		`{"status":0,"outcome":"succeeded"}`,
		`{"outcome":"succeeded","body":"e30="}`,
		`{"status":99,"outcome":"succeeded"}`,
		`{"status":600,"outcome":"succeeded"}`,
		`{"status":-200,"outcome":"succeeded"}`,
		`not json`,
	} {
		store := &recordedAnswer{Dedup: &enginetest.Dedup{}, answer: []byte(rec)}
		e := engine.New(engine.Config{Dedup: store, DedupPoll: 5 * time.Millisecond})
		res := run(t, e, f, `{"orderId":"A-1"}`)
		if res.Status != http.StatusServiceUnavailable || res.Replay {
			t.Errorf("record %s: answered %d (replay %v) %s; want 503", rec, res.Status, res.Replay, res.Body)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("the flow ran %d times; want none (the key holds a record)", calls.Load())
	}
}
