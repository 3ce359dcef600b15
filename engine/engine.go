package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nexushq/nexus/flow"
)

// The doors an execution can come through (ctx.door).
const (
	DoorRun     = "run"
	DoorEnqueue = "enqueue"
	DoorCron    = "cron"
)

// Outcome is how an execution ended.
type Outcome string

// The outcomes of an execution.
const (
	Succeeded    Outcome = "succeeded"     // the main sequence ran to its end
	Filtered     Outcome = "filtered"      // a condition fence of the main sequence was false
	FaultHandled Outcome = "fault_handled" // the main sequence failed and the fault sequence answered
	Failed       Outcome = "failed"        // the execution failed (no handler, or the handler failed)
)

// HeaderReplay marks an answer replayed from a recorded execution.
const HeaderReplay = "X-Nexus-Idempotent-Replay"

// HeaderCorrelationID carries the correlation ID on every answer and every
// call out.
const HeaderCorrelationID = "X-Correlation-Id"

// DefaultMaxResponseBytes is the ceiling of a response body read by an
// http_egress step.
const DefaultMaxResponseBytes = 10 << 20

// Publisher puts a message on another flow's queue (queue_publish). It must
// refuse, before writing anything, a target that is not live or has no
// worker available.
type Publisher interface {
	Publish(ctx context.Context, tenant, flow string, payload []byte, correlationID string) error
}

// Config holds an Engine's dependencies. Zero fields take the defaults.
type Config struct {
	// Transport makes the calls of http_egress steps; nil means a transport
	// tuned for many concurrent calls to few hosts.
	Transport http.RoundTripper
	// Publisher serves queue_publish steps; nil fails them.
	Publisher Publisher
	// Dedup stores deduplication records; nil fails flows with dedup_key
	// with 503.
	Dedup DedupStore
	// Now is the clock behind now(); nil means time.Now.
	Now func() time.Time
	// MaxResponseBytes caps response bodies; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// DedupPoll is how often a duplicate waiting for the first delivery
	// checks again; 0 means 20 ms.
	DedupPoll time.Duration
	// DedupCommitWait is the longest Dedup may wait to record an answer (a
	// SQLite store waits for another writer's lock up to its busy
	// timeout); a claim's lease outlasts the flow's ceiling by this and
	// 5 s more, so that no duplicate takes the key while the answer
	// waits to be recorded. 0 means 10 s.
	DedupCommitWait time.Duration
}

// Engine runs compiled flows. It is safe for concurrent use.
type Engine struct {
	client    *http.Client
	publisher Publisher
	dedup     DedupStore
	now       func() time.Time
	maxBody   int64
	dedupPoll time.Duration
	// leaseGrace is how long a claim outlasts the flow's ceiling: the time
	// an execution stopped at its ceiling has to record its answer.
	leaseGrace time.Duration
	// releasers bounds the goroutines letting go the keys of executions
	// whose answers could not be recorded (see releaseUntil); releasing
	// counts them for Close, which closes stopping (under relMu, closed)
	releasers chan struct{}
	relMu     sync.Mutex
	closed    bool
	stopping  chan struct{}
	releasing sync.WaitGroup
}

// maxReleasers is how many keys releaseUntil tries to let go at once; past
// it, a key is left to its lease.
const maxReleasers = 32

// New returns an Engine.
func New(cfg Config) *Engine {
	e := &Engine{
		publisher: cfg.Publisher,
		dedup:     cfg.Dedup,
		now:       cfg.Now,
		maxBody:   cfg.MaxResponseBytes,
		dedupPoll: cfg.DedupPoll,
		releasers: make(chan struct{}, maxReleasers),
		stopping:  make(chan struct{}),
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.maxBody <= 0 {
		e.maxBody = DefaultMaxResponseBytes
	}
	if e.dedupPoll <= 0 {
		e.dedupPoll = 20 * time.Millisecond
	}
	e.leaseGrace = cfg.DedupCommitWait
	if e.leaseGrace <= 0 {
		e.leaseGrace = DefaultDedupCommitWait
	}
	e.leaseGrace += 5 * time.Second
	tr := cfg.Transport
	if tr == nil {
		tr = NewTransport()
	}
	e.client = &http.Client{
		Transport: tr,
		// A flow talks to the endpoint it names: a redirect is an answer
		// like any other non-2xx, not an instruction to call elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return e
}

// Request is one execution to run.
type Request struct {
	Flow    *flow.Flow
	Version int // the flow's published version (ctx.version)
	// Doc is the parsed message, taken as it is: nil is the JSON null. The
	// {} of an empty body is the door's to make (server.md): here a
	// missing document and a null one would look alike.
	Doc           any
	CorrelationID string // ctx.correlation_id
	Door          string // ctx.door: DoorRun, DoorEnqueue or DoorCron
	Attempt       int    // ctx.attempt, 1-based; 0 is taken as 1
	// Retry is set for a later attempt of a queued message: it passed the
	// dedup check at its first attempt, so it skips the check: it runs
	// whatever its key holds, and its answer is recorded when it could hold
	// the key (see runDeduplicated).
	Retry bool
	// Rerun is set for the first attempt of a dead letter's replay: a
	// failure its dedup key holds does not answer it, it runs again (as
	// under dedup_on_failure: rerun, whatever the flow says); a success
	// the key holds still does.
	Rerun bool
	// Message names the queued message a delivery is of, the same at each
	// of its deliveries and no other message's (the host's is its queue's
	// id and enqueue time); "" for a /run. A failure its dedup key holds
	// that this message's own delivery recorded does not answer its first
	// attempt: it was delivered again (its process died after the failure
	// was recorded, before its retry was scheduled), and it runs as its
	// retry would.
	Message string
	// NoBody is set when nobody reads the answer (a queued delivery): a
	// successful execution's Result then has no Body or Header, unless
	// the flow deduplicates (the answer is recorded for replay).
	NoBody bool
	// Caller, when set, is the context of whoever waits for the answer (a
	// /run caller), where Run's own context outlives it: a duplicate's
	// wait for the first delivery of its key ends when the caller is gone.
	Caller context.Context
}

// Error is the failure of an execution: its kind, the step and the text.
type Error struct {
	Kind Kind
	// Step is the step that failed ("" for a failure before any step).
	Step string
	// Msg is the full text, e.g. "effect handler failed: HTTP 503 Service
	// Unavailable" or "validation failed (Semantic): total must be positive".
	Msg string
	// Rule is a failed validate rule's MESSAGE, which is what $.fault_error
	// and the answer without a handler show.
	Rule string
	// Detail is what only the operational log may show: a downstream's
	// error body, a panic's stack. Never part of an answer.
	Detail string
}

// Error is the text the dead-letter queue keeps as last_error:
// "step 'STEP': MSG".
func (e *Error) Error() string {
	if e.Step == "" {
		return e.Msg
	}
	return "step '" + e.Step + "': " + e.Msg
}

// FaultError is $.fault_error: a validate rule's MESSAGE alone, otherwise
// the platform's own text.
func (e *Error) FaultError() string {
	if e.Rule != "" {
		return e.Rule
	}
	return e.Msg
}

// Result is the answer of an execution.
type Result struct {
	Status int
	// Header holds the answer's headers: those the flow set, Content-Type,
	// X-Correlation-Id, and X-Nexus-Idempotent-Replay on a replay.
	Header http.Header
	// Body is the answer's body; nil for 204 and 304.
	Body    []byte
	Outcome Outcome
	// Err is the failure of the main sequence (also when a fault handler
	// answered), nil when the main sequence succeeded or was filtered.
	Err *Error
	// HandlerErr is the failure of the fault sequence itself.
	HandlerErr *Error
	// Step is the step whose condition fence filtered the message.
	Step string
	// Replay is true when the answer is a recorded one (deduplication).
	Replay bool
	// Interrupted is true when the execution failed because its runner's
	// context ended (a queue worker stopping past its grace), not the
	// flow's own ceiling: it did not end, and nothing of it was recorded
	// as a dedup key's answer. It is decided once, where the answer is
	// recorded or not, so that a runner reading its context a moment
	// later cannot disagree with the dedup store.
	Interrupted bool
}

// Run executes req and returns its answer. It never panics: a panic in a
// step becomes an internal error.
func (e *Engine) Run(ctx context.Context, req Request) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = e.errorResult(req, &Error{Kind: KindInternal, Msg: "internal error", Detail: panicDetail(p)}, nil)
		}
	}()
	if req.Attempt <= 0 {
		req.Attempt = 1
	}
	if !waitsOnContext(req.Flow) {
		res = e.execute(&deadlineCtx{Context: ctx, deadline: time.Now().Add(req.Flow.Timeout())}, req)
		res.Interrupted = cutShort(ctx, res)
		return res
	}
	if d := req.Flow.Dedup(); d != nil {
		return e.runDeduplicated(ctx, req, d) // the ceiling counts from the claim
	}
	ectx, cancel := context.WithTimeout(ctx, req.Flow.Timeout())
	defer cancel()
	res = e.execute(ectx, req)
	res.Interrupted = cutShort(ctx, res)
	return res
}

// cutShort reports whether res, an answer nothing recorded, is an
// execution its runner's context (ctx, not the ceiling's) cut short.
func cutShort(ctx context.Context, res Result) bool {
	return ctx.Err() != nil && res.Outcome == Failed && !res.Replay
}

// waitsOnContext reports whether an execution of f hands its context to
// something that may wait on it: an effect (a call out, a publish) or the
// wait for a duplicate's first delivery.
func waitsOnContext(f *flow.Flow) bool {
	if f.Dedup() != nil {
		return true
	}
	for _, s := range f.Steps() {
		if s.Effect() != "" {
			return true
		}
	}
	for _, s := range f.Faults() {
		if s.Effect() != "" {
			return true
		}
	}
	return false
}

// deadlineCtx is the context of an execution that nothing waits on: the
// steps only ask Err between them, so the duration ceiling is read from the
// clock then, instead of being kept by a timer that every execution would
// start and stop. Done is the caller's: it does not close at the ceiling.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func panicDetail(p any) string {
	buf := make([]byte, 4096)
	buf = buf[:runtime.Stack(buf, false)]
	return fmt.Sprintf("panic: %v\n%s", p, buf)
}

// execution is the state of one run of a flow.
type execution struct {
	e    *Engine
	req  Request
	vars map[string]any // ctx, made on first use (see Ctx)
	// varsOut is set when Ctx handed vars out (an expression may keep the
	// map itself: {{ ctx }} in a document): the next write copies it
	// first, so what was handed out never changes, and never holds itself
	varsOut bool
	last    string      // the last step that ran to its end, "" before any
	status  int         // the declared status, 0 when none
	header  http.Header // response headers collected from the steps that ran
	envBuf  flow.Env    // what env returns, reused from one expression to the next
}

// Ctx returns the ctx variables, making them on first use: an execution
// whose expressions never name ctx never builds them (x is the flow.Env's
// LazyCtx). The map handed out is never written again (see setVar).
func (x *execution) Ctx() any {
	x.varsOut = true
	return x.ctxVars()
}

func (x *execution) ctxVars() map[string]any {
	if x.vars == nil {
		x.vars = newVars(x.req)
	}
	return x.vars
}

// setVar sets the ctx variable name to v (a JSON null too). A map Ctx
// handed out is copied first: a document holding {{ ctx }} keeps the
// variables as they were (a save_body of it once made the map hold
// itself, and encoding it overflowed the stack).
func (x *execution) setVar(name string, v any) { x.writableVars()[name] = v }

// unsetVar removes the ctx variable name, as setVar writes.
func (x *execution) unsetVar(name string) { delete(x.writableVars(), name) }

// writableVars is the variable map, copied first when Ctx handed it out.
func (x *execution) writableVars() map[string]any {
	vars := x.ctxVars()
	if x.varsOut {
		vars = maps.Clone(vars)
		x.vars, x.varsOut = vars, false
	}
	return vars
}

// stepError is how a step reports a failure, or a filter (fence false).
type stepError struct {
	err      *Error
	filtered bool
}

func (e *Engine) execute(ctx context.Context, req Request) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = e.errorResult(req, &Error{Kind: KindInternal, Msg: "internal error", Detail: panicDetail(p)}, nil)
		}
	}()
	x := &execution{e: e, req: req, header: http.Header{}}
	f := req.Flow
	doc, stop := x.sequence(ctx, f.Steps(), req.Doc)
	switch {
	case stop == nil:
		return x.answer(doc, Succeeded, nil)
	case stop.filtered:
		return e.filteredResult(req, stop.err.Step)
	}
	failure := stop.err
	if !f.HasFaults() || failure.Kind == KindDeadline || failure.Kind == KindInternal {
		return e.errorResult(req, failure, nil)
	}

	// The fault sequence: the status starts again from the failure's own,
	// the headers collected so far stay.
	x.status = Status(failure.Kind)
	desc := flow.NewObject(
		[]string{"fault_step", "fault_error", "fault_correlation_id"},
		[]any{failure.Step, failure.FaultError(), req.CorrelationID},
	)
	x.setVar("input", desc)
	doc, stop = x.faultSequence(ctx, f.Faults(), desc)
	switch {
	case stop == nil || stop.filtered:
		// a condition fence in the fault sequence ends it as handled
		return x.answer(doc, FaultHandled, failure)
	case stop.err.Kind == KindDeadline || stop.err.Kind == KindInternal:
		// the answer of the ceiling (or the platform's failure), but the
		// delivery's error stays the main sequence's
		res := e.errorResult(req, stop.err, nil)
		res.Err, res.HandlerErr = failure, stop.err
		return res
	}
	return e.errorResult(req, &Error{Kind: KindHandlerFailed, Msg: "fault handler failed"}, &handlerFailure{main: failure, handler: stop.err})
}

// faultSequence is sequence for the fault steps: a panic in one is the
// platform's failure of the handler (KindInternal), so the delivery keeps
// the main sequence's error instead of losing it to the panic.
func (x *execution) faultSequence(ctx context.Context, steps []*flow.Step, doc any) (out any, stop *stepError) {
	defer func() {
		if p := recover(); p != nil {
			out, stop = doc, &stepError{err: &Error{Kind: KindInternal, Msg: "internal error", Detail: panicDetail(p)}}
		}
	}()
	return x.sequence(ctx, steps, doc)
}

// sequence runs steps in order on doc and returns the last document, or
// what stopped it.
func (x *execution) sequence(ctx context.Context, steps []*flow.Step, doc any) (any, *stepError) {
	last := "" // the last step run (or whose when: was evaluated)
	for _, s := range steps {
		if ctx.Err() != nil {
			return doc, &stepError{err: x.deadline(s.Name())}
		}
		if w := s.When(); w != nil {
			run, err := w.EvalBool(x.env(doc))
			if err != nil {
				return doc, x.pastCeiling(ctx, s, &stepError{err: &Error{Kind: KindDefect, Step: s.Name(), Msg: "when: " + err.Error()}})
			}
			if !run {
				last = s.Name() // its when: ran, and may have run past the ceiling
				continue
			}
		}
		out, serr := x.step(ctx, s, doc)
		if serr != nil {
			if serr.filtered {
				// the document the fence read: a call's answer, when the
				// step called out first (a fault sequence answers with it)
				doc = out
			}
			return doc, x.pastCeiling(ctx, s, serr)
		}
		last, x.last = s.Name(), s.Name()
		if err := x.collect(s, out); err != nil {
			return doc, x.pastCeiling(ctx, s, &stepError{err: err})
		}
		if name := s.SaveBody(); name != "" {
			x.setVar(name, out)
		}
		doc = out
	}
	// a step that ran past the ceiling (a slow match, rules checked
	// between) fails it as one that began after it does; not a runner's
	// cancellation after the work was done, which is no ceiling
	if last != "" && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return doc, &stepError{err: x.deadline(last)}
	}
	return doc, nil
}

// pastCeiling is how step s stops with serr (a failure, a filter): as the
// ceiling, naming s, when s ran past it. The ceiling came first, so the
// answer is the ceiling's, as it is for a step that runs past it and
// succeeds; a failure after timeout_ms was answered as the step's own.
func (x *execution) pastCeiling(ctx context.Context, s *flow.Step, serr *stepError) *stepError {
	if serr.err != nil && serr.err.Kind == KindDeadline || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return serr
	}
	return &stepError{err: x.deadline(s.Name())}
}

// env is what the expressions of one step see. It is the same Env each
// time, its document replaced: each caller is done with it before the next
// call.
func (x *execution) env(doc any) *flow.Env {
	x.envBuf = flow.Env{Doc: doc, Ctx: x, Now: x.e.now}
	return &x.envBuf
}

func (x *execution) deadline(step string) *Error {
	return &Error{Kind: KindDeadline, Step: step,
		Msg: fmt.Sprintf("duration ceiling of %d ms reached", x.req.Flow.Timeout().Milliseconds())}
}

// step runs one step: its effect first, then its block.
func (x *execution) step(ctx context.Context, s *flow.Step, doc any) (any, *stepError) {
	switch s.Effect() {
	case flow.EffectHTTPEgress:
		out, err := x.httpEgress(ctx, s, doc)
		if err != nil {
			return nil, &stepError{err: err}
		}
		doc = out
	case flow.EffectQueuePublish:
		if err := x.publish(ctx, s, doc); err != nil {
			return nil, &stepError{err: err}
		}
	}
	switch s.Block() {
	case flow.BlockNTD:
		out, err := s.NTD().RenderLimit(x.env(doc), x.docLimit())
		if err != nil {
			return nil, &stepError{err: &Error{Kind: KindDefect, Step: s.Name(), Msg: "ntd: " + err.Error()}}
		}
		return out, nil
	case flow.BlockValidate:
		env := x.env(doc)
		for _, r := range s.Rules() {
			// each rule is bounded (a match's cost is), not the step's
			// many: the ceiling is looked at between them
			if ctx.Err() != nil {
				return nil, &stepError{err: x.deadline(s.Name())}
			}
			ok, err := r.Expr.EvalBool(env)
			if err != nil {
				// a rule that cannot be evaluated fails as semantic, with the
				// evaluation error as its message (flow-file.md)
				return nil, &stepError{err: &Error{Kind: KindSemantic, Step: s.Name(),
					Msg: "validation failed (Semantic): " + err.Error(), Rule: err.Error()}}
			}
			if !ok {
				kind := KindSemantic
				if r.Kind == flow.Syntactic {
					kind = KindSyntactic
				}
				return nil, &stepError{err: &Error{Kind: kind, Step: s.Name(),
					Msg: "validation failed (" + r.Kind.String() + "): " + r.Message, Rule: r.Message}}
			}
		}
	case flow.BlockCondition:
		ok, err := s.Condition().EvalBool(x.env(doc))
		if err != nil {
			return nil, &stepError{err: &Error{Kind: KindDefect, Step: s.Name(), Msg: "condition: " + err.Error()}}
		}
		if !ok {
			return doc, &stepError{filtered: true, err: &Error{Step: s.Name()}}
		}
	}
	return doc, nil
}

// docLimit is the most bytes of JSON a document a step renders, and the
// answer, may hold: the ceiling of a call's answer (DefaultMaxResponseBytes
// unless configured), or the flow's max_body_bytes when that is larger, so
// that a flow can answer with the message it takes. A template that
// repeats its document doubled it at each step: 16 steps made a 1 KB
// message a 64 MB answer.
func (x *execution) docLimit() int {
	return int(max(x.e.maxBody, x.req.Flow.MaxBodyBytes()))
}

// collect takes the step's declared status and headers, once it ran.
func (x *execution) collect(s *flow.Step, out any) *Error {
	if st := s.Status(); st != nil {
		code := st.Code
		if st.Template != nil {
			text, err := st.Template.Render(x.env(out))
			if err != nil {
				return &Error{Kind: KindDefect, Step: s.Name(), Msg: "response_status: " + err.Error()}
			}
			n, ok := flow.ParseStatus(strings.TrimSpace(text))
			if !ok {
				// cut: the text may be a message's 1 MiB number or string
				return &Error{Kind: KindDefect, Step: s.Name(), Msg: fmt.Sprintf("response_status rendered %q, which is not a status code", excerpt([]byte(text)))}
			}
			code = n
		}
		if code < 200 {
			return &Error{Kind: KindDefect, Step: s.Name(), Msg: fmt.Sprintf("response_status %d is below 200: an answer cannot be informational", code)}
		}
		x.status = code
	}
	for h := range s.Headers() {
		if h.Remove {
			x.header.Del(h.Name)
		} else {
			x.header.Set(h.Name, h.Value)
		}
	}
	return nil
}

// answer builds the answer from the final document.
func (x *execution) answer(doc any, outcome Outcome, failure *Error) Result {
	status := x.status
	if status == 0 {
		status = http.StatusOK
	}
	if x.req.NoBody && x.req.Flow.Dedup() == nil {
		return Result{Status: status, Outcome: outcome, Err: failure}
	}
	h := x.header
	// h[k] stands for h.Get(k) and h.Set(k, v): both keys are canonical
	cid, ct := h[HeaderCorrelationID], h["Content-Type"]
	var body []byte
	contentType := "application/json"
	switch d := doc.(type) {
	case *flow.XMLDocument:
		body, contentType = d.Raw(), "application/xml"
	case string:
		body, contentType = []byte(d), "text/plain; charset=utf-8"
	default:
		var ok bool
		if body, ok = flow.AppendJSONLimit(make([]byte, 0, 256), doc, x.docLimit()); !ok {
			// the document came whole from a door or a call, or its
			// strings' escapes took it past the limit: the last step
			// that ran fails
			over := &Error{Kind: KindDefect, Step: x.last, Msg: "answer: " + (&flow.LimitError{Limit: x.docLimit()}).Error()}
			res := x.e.errorResult(x.req, over, nil)
			if failure != nil {
				// the main sequence's failure stays the delivery's
				res.Err, res.HandlerErr = failure, over
			}
			return res
		}
	}
	noBody := status == http.StatusNoContent || status == http.StatusNotModified
	// an answer without a body has no type of its own to carry (one the
	// flow sets, it carries)
	switch needCID, needCT := len(cid) == 0 || cid[0] == "", !noBody && (len(ct) == 0 || ct[0] == ""); {
	case needCID && needCT:
		v := []string{x.req.CorrelationID, contentType} // one allocation for both
		h[HeaderCorrelationID], h["Content-Type"] = v[0:1:1], v[1:2:2]
	case needCID:
		h[HeaderCorrelationID] = []string{x.req.CorrelationID}
	case needCT:
		h["Content-Type"] = []string{contentType}
	}
	if noBody {
		body = nil
	}
	return Result{Status: status, Header: h, Body: body, Outcome: outcome, Err: failure}
}

func (e *Engine) filteredResult(req Request, step string) Result {
	body := flow.AppendJSON([]byte(`{"filtered":true,"step":`), step)
	return Result{Status: http.StatusOK, Header: platformHeader(req), Body: append(body, '}'), Outcome: Filtered, Step: step}
}

type handlerFailure struct{ main, handler *Error }

// errorResult is the answer to a failure that no fault handler answered:
// the status of the table and the platform's own body.
func (e *Engine) errorResult(req Request, failure *Error, hf *handlerFailure) Result {
	res := Result{Status: Status(failure.Kind), Header: platformHeader(req), Outcome: Failed, Err: failure}
	if hf != nil {
		// last_error is the main sequence's error
		res.Err, res.HandlerErr = hf.main, hf.handler
	}
	res.Body = errorBody(failure)
	if failure.Kind == KindStateUnavailable {
		res.Header.Set("Retry-After", "1")
	}
	return res
}

// errorBody is the body of a failure without a handler. A validate rule's
// message is the flow author's and reaches the caller; any other step
// failure loses its message, since a downstream's text must not travel.
func errorBody(failure *Error) []byte {
	var b []byte
	switch failure.Kind {
	case KindSyntactic, KindSemantic:
		b = flow.AppendJSON([]byte(`{"error":`), failure.Rule)
		b = flow.AppendJSON(append(b, `,"step":`...), failure.Step)
		return append(b, '}')
	case KindDeadline:
		b = flow.AppendJSON([]byte(`{"ok":false,"error":`), failure.Msg)
		b = flow.AppendJSON(append(b, `,"step":`...), failure.Step)
		return append(b, '}')
	case KindHandlerFailed:
		return []byte(`{"ok":false,"error":"fault handler failed"}`)
	case KindInternal:
		return []byte(`{"ok":false,"error":"internal error"}`)
	case KindDedupKey:
		return []byte(`{"ok":false,"error":"dedup_key produced nothing from this message"}`)
	case KindStateUnavailable:
		return []byte(`{"ok":false,"error":"flow state is unavailable; try again"}`)
	}
	return []byte(`{"ok":false,"error":"flow execution failed"}`)
}

func platformHeader(req Request) http.Header {
	return http.Header{
		"Content-Type":      {"application/json"},
		HeaderCorrelationID: {req.CorrelationID},
	}
}

// errDeadline reports whether the execution's own ceiling ended err.
func errDeadline(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded) && err != nil
}
