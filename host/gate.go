package host

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/registry"
)

// correlationID takes the request's X-Correlation-ID (else X-Request-ID)
// when it is 1–128 visible ASCII characters, or makes a new one, and sets
// it on the answer. Every answer carries it, refusals included.
func correlationID(w http.ResponseWriter, r *http.Request) string {
	id := headerValue(r, "X-Correlation-Id")
	if !validCorrelationID(id) {
		id = headerValue(r, "X-Request-Id")
		if !validCorrelationID(id) {
			id = flow.NewUUID()
		}
	}
	w.Header()["X-Correlation-Id"] = []string{id}
	return id
}

// headerValue is r.Header.Get(name) for a name already in canonical form,
// without canonicalising it again.
func headerValue(r *http.Request, name string) string {
	if v := r.Header[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func validCorrelationID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// admission is a request that passed the gate.
type admission struct {
	correlationID string
	key           *access.Key
	flow          *registry.LiveFlow
	live          *registry.LiveSet
	// rawJSON is the body as received when it is a JSON document (admit
	// parsed it): what /enqueue stores, so that a message, and its dead
	// letter, keep the payload as submitted (a whole number past 64 bits
	// would lose digits re-encoded)
	rawJSON []byte
}

// gate runs the access gate, in order, before one byte of the body is read:
// the key (401), the name rule (400), the tenant and the allowlist (403),
// the flow's existence (404), the key's rate (429). It answers a refusal
// itself and returns false.
func (s *Server) gate(w http.ResponseWriter, r *http.Request, tenant, flowName string) (admission, bool) {
	a := admission{correlationID: correlationID(w, r)}
	a.live = s.cfg.Live.Live()
	if why := s.starting(a.live); why != "" {
		w.Header().Set("Retry-After", "1") // the live set loads in moments
		refuseUnread(w, r, http.StatusServiceUnavailable, why)
		return a, false
	}
	s.pruneLimiters(a.live)
	presented, ok := bearer(r)
	if ok {
		a.key, ok = a.live.Access().Lookup(presented)
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", "Bearer")
		refuseUnread(w, r, http.StatusUnauthorized, "missing or unknown API key")
		return a, false
	}
	if err := naming.Check(tenant, naming.Tenant(flowName)); err != nil {
		refuseUnread(w, r, http.StatusBadRequest, err.Error())
		return a, false
	}
	if err := naming.Check(flowName, naming.Flow(tenant)); err != nil {
		refuseUnread(w, r, http.StatusBadRequest, err.Error())
		return a, false
	}
	if a.key.Tenant != tenant || !a.key.Allows(flowName) {
		refuseUnread(w, r, http.StatusForbidden, "key "+a.key.ID+" may not call "+tenant+"/"+flowName)
		return a, false
	}
	a.flow, ok = a.live.Lookup(tenant, flowName)
	if !ok {
		refuseUnread(w, r, http.StatusNotFound, "no flow "+tenant+"/"+flowName+" is deployed")
		return a, false
	}
	if wait, ok := s.allow(a.key); !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		refuseUnread(w, r, http.StatusTooManyRequests, "rate limit exceeded")
		return a, false
	}
	return a, true
}

// MaxRetryAfter is the longest wait a 429's Retry-After advertises. A key's
// bucket may refill slower than that (a rate of 1e-320 is a valid
// access.yaml rate): the client is told to come back within the hour,
// and is refused again then if its token has not come.
const MaxRetryAfter = 3600 * time.Second

// retryAfter is the Retry-After value for a wait: whole seconds rounded
// up, at least 1, at most MaxRetryAfter. A wait that is negative or
// overflowed is written as the ceiling, never as a wrapped number.
func retryAfter(wait time.Duration) string {
	secs := math.Ceil(wait.Seconds())
	switch {
	case !(secs <= MaxRetryAfter.Seconds()) || wait < 0:
		secs = MaxRetryAfter.Seconds()
	case secs < 1:
		secs = 1
	}
	return strconv.Itoa(int(secs))
}

// bearer returns the key of an Authorization: Bearer header. A request with
// more than one Authorization header presents none: which one counts is
// not the same for every proxy in front (the first, the last, one it added).
func bearer(r *http.Request) (string, bool) {
	if len(r.Header["Authorization"]) > 1 {
		return "", false
	}
	h := headerValue(r, "Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	key := strings.TrimSpace(h[7:])
	return key, key != ""
}

// limiter is one key's token bucket. x/time/rate reads the clock before it
// locks, so a stale timestamp could mint tokens: the mutex and the
// monotonic clamp keep time moving forward for each bucket.
type limiter struct {
	mu    sync.Mutex
	rate  float64 // the key's rate and burst the bucket runs at (under mu)
	burst int
	lim   *rate.Limiter
	last  time.Time
}

// allow takes a token from the key's bucket; it returns false and the wait
// until the next token when there is none. Buckets exist only for
// authenticated keys, one per key (by its hash) of the live access set, so
// the map holds no more buckets than live keys used. A key whose rate or
// burst changes keeps its bucket and the tokens it holds, under the new
// rate and burst: a new commit gives a key that spent its bucket no
// tokens. A key withdrawn loses its bucket (pruneLimiters), and starts
// with a full one if a later commit adds it again.
func (s *Server) allow(k *access.Key) (time.Duration, bool) {
	if k.Rate <= 0 {
		return 0, true
	}
	v, ok := s.limiters.Load(k.Hash)
	if !ok {
		v = s.addLimiter(k)
	}
	l := v.(*limiter)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.cfg.Now()
	if now.Before(l.last) {
		now = l.last
	}
	l.last = now
	if l.rate != k.Rate || l.burst != k.Burst {
		// the tokens held so far, counted at the old rate, carry over; a
		// smaller burst caps them
		l.lim.SetLimitAt(now, rate.Limit(k.Rate))
		l.lim.SetBurstAt(now, k.Burst)
		l.rate, l.burst = k.Rate, k.Burst
	}
	if l.lim.AllowN(now, 1) {
		return 0, true
	}
	res := l.lim.ReserveN(now, 1)
	wait := res.DelayFrom(now)
	res.CancelAt(now)
	if wait < time.Second {
		wait = time.Second
	}
	return wait, false
}

// addLimiter returns k's bucket, made full if it has none. The bucket is
// kept unless the access set the buckets were last pruned by no longer
// holds k: a request admitted by an older set, answered after a newer one
// withdrew its key, would otherwise leave a bucket no prune deletes until
// the next set, and a key added again in that one would find it spent.
func (s *Server) addLimiter(k *access.Key) *limiter {
	l := &limiter{rate: k.Rate, burst: k.Burst, lim: rate.NewLimiter(rate.Limit(k.Rate), k.Burst)}
	s.limitersMu.Lock()
	defer s.limitersMu.Unlock()
	if live := s.limitersFor.Load(); live != nil && !live.Access().Holds(k.Hash) {
		return l
	}
	v, _ := s.limiters.LoadOrStore(k.Hash, l)
	return v.(*limiter)
}

// pruneLimiters deletes the buckets of the keys live does not hold, once
// for each live set, when live is still the current one (a request that
// read a set before a newer one came must not prune by the older). The
// cost, a pass over the buckets, is paid once a commit.
func (s *Server) pruneLimiters(live *registry.LiveSet) {
	if s.limitersFor.Load() == live {
		return
	}
	s.limitersMu.Lock()
	defer s.limitersMu.Unlock()
	if s.limitersFor.Load() == live || s.cfg.Live.Live() != live {
		return
	}
	keys := live.Access()
	s.limiters.Range(func(h, _ any) bool {
		if !keys.Holds(h.([32]byte)) {
			s.limiters.Delete(h)
		}
		return true
	})
	s.limitersFor.Store(live)
}
