package host

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/naming"
)

// A door's refusals (401, 403, 404, 413, 415, 429, …) are logged as
// request_refused, so that a caller's correlation ID can be traced, at
// most refusalBurst at once and refusalRate a second after: a flood of
// refused requests (an attack, a client retrying without pause) must not
// flood the log. The line after a pause says how many were not logged
// (suppressed).
const (
	refusalRate  = 10
	refusalBurst = 20
)

// refusalLog rate-limits one kind of line a caller can cause at will
// (request_refused, queue_enqueue_failed, ui_login_failed). x/time/rate
// takes a time before an earlier one as where it now stands, so a clock
// set back, or a reading older than another request's, would count the
// same span twice once the clock is back: the mutex and the monotonic
// clamp keep time moving forward, as a key's bucket does (limiter).
type refusalLog struct {
	mu         sync.Mutex
	lim        *rate.Limiter
	last       time.Time // the latest time given to lim (under mu)
	suppressed atomic.Int64
}

func newRefusalLog() *refusalLog {
	return &refusalLog{lim: rate.NewLimiter(refusalRate, refusalBurst)}
}

// allow tells whether a line may be logged at now, and if so how many
// were not since the last one (its suppressed attribute).
func (l *refusalLog) allow(now time.Time) (ok bool, suppressed int64) {
	l.mu.Lock()
	if now.Before(l.last) {
		now = l.last
	}
	l.last = now
	ok = l.lim.AllowN(now, 1)
	l.mu.Unlock()
	if !ok {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}

// logRefusal logs a door's refusal written to w (a *statusWriter that
// remembers its status and text), unless the rate is spent. The names are
// cut as errors cut them: a refusal may come before the name rule, and a
// caller without a key must not write a line as long as a request line.
func (s *Server) logRefusal(door string, w *statusWriter, r *http.Request, tenant, flowName string, a admission) {
	if w.status < http.StatusBadRequest {
		return
	}
	ok, suppressed := s.refusals.allow(s.cfg.Now())
	if !ok {
		return
	}
	keyID := ""
	if a.key != nil {
		keyID = a.key.ID
	}
	jsonlog.LogAttrs(context.Background(), s.cfg.Logger, slog.LevelInfo, "request refused",
		slog.String("event", "request_refused"), slog.String("door", door), slog.String("tenant", naming.Shorten(tenant)), slog.String("flow", naming.Shorten(flowName)),
		slog.Int("status", w.status), slog.String("error", w.refusal), slog.String("correlation_id", a.correlationID),
		slog.String("key", keyID), slog.String("remote", r.RemoteAddr), slog.Int64("suppressed", suppressed))
}
