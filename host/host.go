package host

import (
	"context"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// LiveSource gives the current live set: one snapshot per request.
type LiveSource interface {
	Live() *registry.LiveSet
}

// StatusSource reads what is deployed (GET /status).
type StatusSource interface {
	Status(ctx context.Context) (registry.Status, error)
}

// Journal takes journal entries off the hot path (see
// registry.JournalWriter). One that also has a Dropped() int64 method,
// as registry.JournalWriter does, has the entries it never wrote counted
// in /metrics (nexus_journal_dropped_total).
type Journal interface {
	Append(registry.Entry)
}

// Syncer is the git sync the webhook triggers.
type Syncer interface {
	Trigger()
}

// Config holds a Server's dependencies and settings.
type Config struct {
	Live    LiveSource
	Status  StatusSource
	Engine  *engine.Engine
	Journal Journal // nil: no journal
	Sync    Syncer  // nil: POST /hooks/git answers 404
	Metrics *Metrics
	// Queues holds the queues and their workers; nil: /enqueue answers 404.
	// Wire the Server in as the queues' Handler and the engine's Publisher.
	Queues *queue.Manager
	Logger *slog.Logger
	// MaxBodyBytes is the message-size ceiling of flows that set none.
	MaxBodyBytes int64
	// AdminKey opens /status, the management API (/api/…) and the UI
	// (/ui/); "" closes them (404).
	AdminKey string
	// History reads the journal for the API and the UI; nil: they say the
	// host keeps none.
	History JournalReader
	// Secrets, when any is set, make every door require a signature and the
	// webhook require GitHub's X-Hub-Signature-256. None may be empty (or
	// blank): a signature made with an empty secret is one anyone can
	// make, so New panics on one, as on any misuse of its API (nexus serve
	// refuses a blank part of --secret before it gets here).
	Secrets []string
	// MaxRuns is the most /run executions in progress at once (0:
	// DefaultMaxRuns; negative: no limit). One more is refused with 503
	// and Retry-After: 1 before its body is read, so that a flood of
	// callers of slow flows cannot hold the host's memory.
	MaxRuns int
	// AwaitFirstPublication is set on a host that follows a repo: until
	// the registry holds a first publication (generation 0: a new state
	// directory, the repo's first sync not done), /readyz and the doors
	// answer 503 with Retry-After: 1, as before the live set is loaded,
	// instead of taking traffic with nothing to serve (every key unknown:
	// 401).
	AwaitFirstPublication bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SyncHealth is the git sync's run of rounds that could not run, for
	// /status, /api/flows and the UI; nil: none shown.
	SyncHealth *SyncHealth
	// NextTick gives a schedule's next tick for /status, /api/flows and
	// the UI (the scheduler's, which knows when an @every schedule last
	// ticked); nil: the schedule's own Next(now).
	NextTick registry.NextTick
}

// DefaultMaxBodyBytes is the ceiling when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxRuns is Config.MaxRuns when it is 0: as many requests as
// Envoy lets a cluster have in flight by default.
const DefaultMaxRuns = 1024

// Server is the HTTP side of the host: the doors and the operations
// endpoints.
type Server struct {
	cfg      Config
	router   *httprouter.Router
	ui       *httprouter.Router // the UI's pages; nil without an admin key
	pages    *template.Template // the UI's page templates (uiTemplates)
	limiters sync.Map           // a key's hash ([32]byte) → *limiter
	// limitersFor is the live set whose keys alone have buckets: the
	// gate deletes the others when it first sees a new set (pruneLimiters);
	// it changes, and a bucket is added, under limitersMu
	limitersFor atomic.Pointer[registry.LiveSet]
	limitersMu  sync.Mutex
	refusals    *refusalLog // the doors' request_refused lines
	// enqueueFailures limits the queue_enqueue_failed lines of /enqueue
	// as refusals are
	enqueueFailures *refusalLog
	failedLogins    *refusalLog // the ui_login_failed lines
	// runs is the context of /run executions: not the request's, which
	// ends when the caller hangs up, but one InterruptRuns ends
	runs          context.Context
	interruptRuns context.CancelFunc
	// running counts the /run executions in progress, against MaxRuns
	running atomic.Int64
	// draining is set by Drain: the shutdown has begun
	draining atomic.Bool
}

// Drain tells the server that the shutdown has begun: /readyz answers 503
// (the drain server, DrainHandler, answers the new connections).
func (s *Server) Drain() { s.draining.Store(true) }

// InterruptRuns stops the /run executions still running, when the
// shutdown's grace has ended: each ends at once, answers its caller 503
// (rather than the connection being cut when the process exits), and is
// logged and journaled as failed. Queue deliveries are stopped by their
// workers' own grace. Executions that begin afterwards end at once too.
func (s *Server) InterruptRuns() { s.interruptRuns() }

// New returns a Server for cfg. It panics when cfg.Secrets holds an
// empty or blank secret.
func New(cfg Config) *Server {
	for i, secret := range cfg.Secrets {
		if strings.TrimSpace(secret) == "" {
			panic(fmt.Sprintf("host.New: Config.Secrets[%d] is empty: a signature made with it is one anyone can make", i))
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxRuns == 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	// a key read from a file or a secret store may end in a newline,
	// which no header or password field can carry: trimmed, as callers'
	// keys are
	cfg.AdminKey = strings.TrimSpace(cfg.AdminKey)
	s := &Server{cfg: cfg, pages: uiTemplates, refusals: newRefusalLog(), enqueueFailures: newRefusalLog(), failedLogins: newRefusalLog()}
	s.runs, s.interruptRuns = context.WithCancel(context.Background())
	if cfg.Queues != nil {
		cfg.Metrics.Register(newQueueCollector(cfg.Queues))
	}
	if j, ok := cfg.Journal.(interface{ Dropped() int64 }); ok {
		// the journal_dropped lines counted, for an alert to watch
		cfg.Metrics.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nexus_journal_dropped_total", Help: "Journal entries never written: dropped by a full buffer, refused by the database, or left at shutdown.",
		}, func() float64 { return float64(j.Dropped()) }))
	}
	cfg.Metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nexus_runs_in_progress", Help: "/run executions in progress (at most --max-runs).",
	}, func() float64 { return float64(s.running.Load()) }))
	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	r.HandleOPTIONS = false // an OPTIONS is a 405 like any other method, with our headers
	r.POST("/flows/:tenant/:flow/run", s.run)
	r.POST("/flows/:tenant/:flow/enqueue", s.enqueue)
	get(r, "/healthz", s.healthz)
	get(r, "/readyz", s.readyz)
	metrics := cfg.Metrics.Handler()
	get(r, "/metrics", func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
		correlationID(w, req)
		closeUnread(w, req)
		metrics.ServeHTTP(w, req)
	})
	r.POST("/hooks/git", s.hookGit)
	if cfg.AdminKey != "" {
		// without an admin key these paths do not exist (404 for any method)
		get(r, "/status", s.status)
		s.routeManagement(r)
	}
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		correlationID(w, req)
		if s.apiUnauthorized(w, req) {
			return
		}
		// the path as sent, escapes kept: /flows/a%2Fb/echo/run, not the
		// decoded /flows/a/b/echo/run, which no one sent
		refuseUnread(w, req, http.StatusNotFound, "no such endpoint: "+req.Method+" "+req.URL.EscapedPath())
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		correlationID(w, req)
		if req.URL.Path == "*" && req.Method != http.MethodOptions {
			// the asterisk-form is a server-wide OPTIONS's alone (RFC
			// 9112 §3.2.4): the router would answer 405 with an Allow
			// naming every method, the one refused included
			w.Header().Del("Allow")
			refuseUnread(w, req, http.StatusBadRequest, "the request target * is for OPTIONS only, not "+req.Method)
			return
		}
		if s.apiUnauthorized(w, req) {
			return
		}
		allowWithoutOptions(w.Header())
		refuseUnread(w, req, http.StatusMethodNotAllowed, "method "+req.Method+" is not allowed on "+req.URL.EscapedPath())
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, p any) {
		cfg.Logger.Error("a request failed in the platform", "event", "internal_error", "path", req.URL.Path,
			"correlation_id", w.Header().Get("X-Correlation-Id"), "panic", p)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
	s.router = r
	return s
}

// get routes GET and HEAD of path to h: a HEAD answers what a GET would,
// without the body (net/http leaves it out), as RFC 9110 asks of every
// server (a load balancer's health check may be a HEAD).
func get(r *httprouter.Router, path string, h httprouter.Handle) {
	r.GET(path, h)
	r.HEAD(path, h)
}

// Handler is the server's HTTP handler: the UI's router for the paths
// under /ui/ (a host with an admin key), the main router for the others.
//
// A path with an encoded slash (%2F) names no endpoint (no name holds a
// slash): it is the router's 404. The routers match the decoded path, so
// /flows/acme%2Fecho/run ran acme/echo, past a proxy rule written for the
// path as sent.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ui := s.ui != nil && strings.HasPrefix(r.URL.Path, "/ui/")
		switch {
		case r.URL.RawPath != "" && encodedSlash(r.URL.RawPath) && ui:
			s.ui.NotFound.ServeHTTP(w, r)
		case r.URL.RawPath != "" && encodedSlash(r.URL.RawPath):
			s.router.NotFound.ServeHTTP(w, r)
		case ui:
			s.ui.ServeHTTP(w, r)
		default:
			s.router.ServeHTTP(w, r)
		}
	})
}

// encodedSlash reports whether an escaped path holds %2F (or %2f).
func encodedSlash(raw string) bool {
	return strings.Contains(raw, "%2F") || strings.Contains(raw, "%2f")
}

// apiUnauthorized answers a request under /api/ that no endpoint takes as
// the API answers one: with no-store, and 401 without the admin key
// (which it reports), so that which paths exist is not told before the
// key is shown. Elsewhere, or without an admin key, it does nothing.
func (s *Server) apiUnauthorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.AdminKey == "" || !strings.HasPrefix(r.URL.Path, "/api/") {
		return false
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if auth, _ := s.adminAuth(r); auth != authNone {
		return false
	}
	// as an endpoint's 401 answers (api): without the Allow the router
	// set for a path that takes other methods
	h.Del("Allow")
	h.Set("WWW-Authenticate", "Bearer")
	refuseUnread(w, r, http.StatusUnauthorized, "missing or unknown admin key")
	return true
}

// refuseUnread writes a refusal made before the request's body was read,
// the connection closing after it when the request has one (closeUnread;
// server.md: the gate runs "before one byte of the body is read").
func refuseUnread(w http.ResponseWriter, r *http.Request, status int, msg string) {
	closeUnread(w, r)
	writeError(w, status, msg)
}

// closeUnread sets Connection: close on the answer to a request whose body
// (a length, or chunked) its handler does not read: net/http would
// otherwise read up to 256 KiB of the body first to keep the connection,
// so a caller that announced a body and has not sent it would wait for
// the answer, and the body would be pulled off the socket after all.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// writeError writes the platform's refusal body {"ok":false,"error":"…"}.
func writeError(w http.ResponseWriter, status int, msg string) {
	msg = oneLine(msg)
	if sw, ok := w.(*statusWriter); ok {
		sw.refusal = msg // for the door's request_refused line
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// a refusal may echo what the caller sent (a path, a name): never
	// read as anything but JSON
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	b := flow.AppendJSON([]byte(`{"ok":false,"error":`), msg)
	w.Write(append(b, '}'))
}

// oneLine writes msg's control characters escaped: an error is one line,
// whatever it echoes (a path's decoded %0A).
func oneLine(msg string) string {
	if !strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return msg
	}
	q := strconv.Quote(msg)
	return q[1 : len(q)-1]
}

// allowWithoutOptions sets the Allow header a router wrote for a 405 to
// the same methods less OPTIONS, which the routers do not answer, and
// returns them.
func allowWithoutOptions(h http.Header) string {
	allow := strings.Join(slices.DeleteFunc(strings.Split(h.Get("Allow"), ", "), func(m string) bool { return m == http.MethodOptions }), ", ")
	h.Set("Allow", allow)
	return allow
}

// nosniff is the value of X-Content-Type-Options, shared (never modified).
var nosniff = []string{"nosniff"}
