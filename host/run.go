package host

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/registry"
)

// run is the /run door: the caller waits for the flow's answer.
func (s *Server) run(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	start := s.cfg.Now()
	sw := &statusWriter{ResponseWriter: w}
	s.serveRun(sw, r, ps.ByName("tenant"), ps.ByName("flow"), start)
	s.cfg.Metrics.request(engine.DoorRun, sw.status)
}

// statusWriter remembers the status written, for the metrics, and a
// refusal's text, for its log line.
type statusWriter struct {
	http.ResponseWriter
	status  int
	refusal string // what writeError wrote
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection, and readBody
// the server's writer (see serverWriter).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serveRun(w *statusWriter, r *http.Request, tenant, flowName string, start time.Time) {
	a, ok := s.gate(w, r, tenant, flowName)
	if ok {
		if ok = s.takeRun(w, r); ok {
			defer s.running.Add(-1)
		}
	}
	var doc any
	if ok {
		doc, ok = s.admitBody(w, r, &a)
	}
	if !ok {
		s.logRefusal(engine.DoorRun, w, r, tenant, flowName, a)
		return
	}
	lf := a.flow
	if lf.Corrupt != nil {
		// logged and journaled as any failed run (the registry's
		// artifact_corrupt line, once per version, is the alarm)
		writeError(w, http.StatusInternalServerError, "internal error")
		s.record(lf, a.correlationID, a.key.ID, corruptResult(lf), start, s.cfg.Now().Sub(start))
		return
	}
	// The execution outlives a caller who hangs up (its ceiling still
	// bounds it): effects are not cut off half-way, and the answer a
	// deduplicating flow records is the flow's, not a cancellation's.
	// Only the end of the shutdown's grace stops it (InterruptRuns).
	res := s.cfg.Engine.Run(s.runs, engine.Request{
		Flow: lf.Flow, Version: lf.Version, Doc: doc, CorrelationID: a.correlationID, Door: engine.DoorRun, Attempt: 1,
		Caller: r.Context(), // a duplicate's wait ends with its caller
	})
	if res.Interrupted {
		res = interruptedRun(res)
		w.Header().Set("Retry-After", "1")
		writeError(w, res.Status, "the server stopped this execution: it is shutting down")
	} else {
		writeResult(w, res)
	}
	elapsed := s.cfg.Now().Sub(start)
	s.cfg.Metrics.execution(engine.DoorRun, elapsed)
	s.record(lf, a.correlationID, a.key.ID, res, start, elapsed)
}

// interruptedRun is res, an execution InterruptRuns stopped, as it is
// logged and journaled: failed, 503, its error saying why it ended.
func interruptedRun(res engine.Result) engine.Result {
	e := engine.Error{Kind: engine.KindInternal, Msg: "stopped at the end of the shutdown's grace"}
	if res.Err != nil {
		e.Step, e.Detail = res.Err.Step, res.Err.Msg
	}
	res.Outcome, res.Status, res.Err = engine.Failed, http.StatusServiceUnavailable, &e
	return res
}

// admit runs everything a door does before the flow: the gate, the body
// under the flow's ceiling, the signature, the parse. It answers a refusal
// itself and returns false.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, tenant, flowName string) (admission, any, bool) {
	a, ok := s.gate(w, r, tenant, flowName)
	if !ok {
		return a, nil, false
	}
	doc, ok := s.admitBody(w, r, &a)
	return a, doc, ok
}

// admitBody is admit after the gate: the body, the signature, the parse.
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request, a *admission) (any, bool) {
	body, ok := readBody(w, r, s.bodyLimit(a.flow))
	if !ok || !s.checkSignature(w, r, body) {
		return nil, false
	}
	doc, rawJSON, ok := parseBody(w, r, body)
	a.rawJSON = rawJSON
	return doc, ok
}

// takeRun counts one more /run in progress, or refuses it (503,
// Retry-After: 1, before its body is read) when MaxRuns are.
func (s *Server) takeRun(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.MaxRuns < 0 {
		s.running.Add(1)
		return true
	}
	for {
		// never counted past the most, even for a moment: a refusal
		// counted and taken back could refuse another caller meanwhile
		n := s.running.Load()
		if n >= int64(s.cfg.MaxRuns) {
			w.Header().Set("Retry-After", "1")
			refuseUnread(w, r, http.StatusServiceUnavailable, "too many runs in progress (at most "+strconv.Itoa(s.cfg.MaxRuns)+"): try again")
			return false
		}
		if s.running.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// bodyLimit is the message-size ceiling of lf: its max_body_bytes, or the
// host's.
func (s *Server) bodyLimit(lf *registry.LiveFlow) int64 {
	if f := lf.Flow; f != nil && f.MaxBodyBytes() > 0 {
		return f.MaxBodyBytes()
	}
	return s.cfg.MaxBodyBytes
}

// writeResult writes an engine result as the HTTP answer.
func writeResult(w http.ResponseWriter, res engine.Result) {
	h := w.Header()
	for k, v := range res.Header {
		h[k] = v
	}
	w.WriteHeader(res.Status)
	if res.Body != nil {
		w.Write(res.Body)
	}
}

// record logs a /run execution (run_completed), naming the key that
// called (its id: server.md's "named in logs"), and appends its journal
// entry. A queued delivery is logged by its worker instead, in one line
// that carries executionAttrs.
func (s *Server) record(lf *registry.LiveFlow, correlationID, keyID string, res engine.Result, start time.Time, elapsed time.Duration) {
	level := slog.LevelInfo
	attrs := executionAttrs(lf, res, elapsed, []slog.Attr{
		slog.String("event", "run_completed"), slog.String("tenant", lf.Tenant), slog.String("flow", lf.Name),
		slog.String("correlation_id", correlationID), slog.Int("attempt", 1), slog.String("key", keyID), slog.String("outcome", string(res.Outcome)),
	})
	if res.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", res.Err.Error()))
	}
	jsonlog.LogAttrs(context.Background(), s.cfg.Logger, level, "execution completed", attrs...)
	s.journal(engine.DoorRun, lf, correlationID, 0, 1, res, start, elapsed)
}

// executionAttrs appends to attrs what the log says of an execution: the
// version, status and duration and, when it failed, the step (when one
// failed) and what only the log may show.
func executionAttrs(lf *registry.LiveFlow, res engine.Result, elapsed time.Duration, attrs []slog.Attr) []slog.Attr {
	attrs = append(attrs, slog.Int("version", lf.Version), slog.Int("status", res.Status),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000))
	if res.Err != nil {
		if res.Err.Step != "" {
			// a failure before any step (a dedup_key, a corrupt
			// artifact) has none to name
			attrs = append(attrs, slog.String("step", res.Err.Step))
		}
		if res.Err.Detail != "" {
			attrs = append(attrs, slog.String("detail", res.Err.Detail))
		}
	}
	if res.HandlerErr != nil {
		attrs = append(attrs, slog.String("handler_error", res.HandlerErr.Error()))
	}
	if res.Replay {
		attrs = append(attrs, slog.Bool("replay", true))
	}
	return attrs
}

// corruptResult is the journal's record of a delivery of lf, a corrupt
// artifact, which did not run: a failure of the platform (500).
func corruptResult(lf *registry.LiveFlow) engine.Result {
	return engine.Result{Status: http.StatusInternalServerError, Outcome: engine.Failed,
		Err: &engine.Error{Kind: engine.KindInternal, Msg: lf.Corrupt.Error()}}
}

// notJSONResult is the journal's record of a delivery whose stored
// message is not a JSON document (err says why), which did not run: the
// stored bytes are not what a door stored, a failure of the platform
// (500), as a corrupt artifact's is.
func notJSONResult(err error) engine.Result {
	return engine.Result{Status: http.StatusInternalServerError, Outcome: engine.Failed,
		Err: &engine.Error{Kind: engine.KindInternal, Msg: "the stored message is not a JSON document: " + err.Error()}}
}

// journal appends an execution's journal entry.
func (s *Server) journal(door string, lf *registry.LiveFlow, correlationID string, msgID int64, attempt int, res engine.Result, start time.Time, elapsed time.Duration) {
	if s.cfg.Journal == nil {
		return
	}
	errText := ""
	if res.Err != nil {
		errText = res.Err.Error()
	}
	s.cfg.Journal.Append(registry.Entry{
		At: start, Door: door, Tenant: lf.Tenant, Flow: lf.Name, Version: lf.Version,
		CorrelationID: correlationID, MsgID: msgID, Attempt: attempt, Outcome: string(res.Outcome),
		Status: res.Status, Duration: elapsed, Error: errText,
	})
}
