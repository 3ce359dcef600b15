package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/nexushq/nexus/flow"
)

// DedupStore keeps deduplication records per (tenant, flow, key). Its
// signatures use standard-library types only, so the registry implements it
// without importing this package. Answers are opaque bytes to the store.
type DedupStore interface {
	// Claim takes key for one execution. It returns a claim (non-zero) when
	// the caller now holds the key: no record, an expired one, a claim whose
	// lease ran out (its holder died or overran), or, when rerunFailed, a
	// record committed as a failure. It returns the recorded answer when
	// one is to be replayed. It returns neither while another execution
	// holds the key.
	Claim(ctx context.Context, tenant, flow, key string, rerunFailed bool, lease time.Duration) (answer []byte, claim int64, err error)
	// Commit records the answer of the execution holding key by claim,
	// remembered for ttl; failed marks an execution that did not succeed.
	// It does nothing once claim no longer holds the key (its lease ran out
	// and another execution claimed it): an execution that overran its
	// lease cannot overwrite its successor's claim.
	Commit(ctx context.Context, tenant, flow, key string, claim int64, answer []byte, failed bool, ttl time.Duration) error
	// Release gives key up without recording an answer, when claim still
	// holds it (so an execution that overran its lease cannot free the key
	// under its successor).
	Release(ctx context.Context, tenant, flow, key string, claim int64) error
}

// record is a recorded answer as the engine stores it.
type record struct {
	Status  int         `json:"status"`
	Header  http.Header `json:"header"`
	Body    []byte      `json:"body"`
	Outcome Outcome     `json:"outcome"`
	// Message is the queued message whose delivery recorded the answer
	// (Request.Message); absent for a /run's.
	Message string `json:"message,omitempty"`
}

// decodeRecord reads a recorded answer: JSON whose status is one the
// engine answers (100 to 599). A record with another status (a damaged
// or hand-edited row, one of no version's) is an error: replayed, it
// would reach the HTTP door, whose WriteHeader panics below 100.
func decodeRecord(answer []byte) (record, error) {
	var rec record
	if err := json.Unmarshal(answer, &rec); err != nil {
		return record{}, err
	}
	if rec.Status < 100 || rec.Status > 599 {
		return record{}, fmt.Errorf("status %d is not an HTTP status from 100 to 599", rec.Status)
	}
	return rec, nil
}

// runDeduplicated runs an execution of a flow with dedup_key: the first
// delivery of a key runs, a duplicate receives its recorded answer, a
// concurrent duplicate waits for the first. A later attempt of a queued
// message skips the check (its first attempt passed it): it runs in any
// case, holding the key when the key is free or holds a failure (so that a
// duplicate waits for it, and its answer is recorded); a success another
// delivery recorded, or another execution holding the key, stands. A first
// attempt whose key holds a failure its own message recorded (it was
// delivered again: its process died before its retry was scheduled) is
// no duplicate: it claims the key as a retry does, and runs.
func (e *Engine) runDeduplicated(ctx context.Context, req Request, d *flow.Dedup) Result {
	f := req.Flow
	key, filled, err := d.Key.RenderKey(&flow.Env{Doc: req.Doc, Ctx: newVars(req), Now: e.now})
	if err != nil {
		return e.errorResult(req, &Error{Kind: KindDefect, Msg: "dedup_key: " + err.Error()}, nil)
	}
	if !filled {
		// every hole blank: what is left is the literal text around them
		// ("order-" of "order-{{ $.id }}"), which every message without
		// an id would share
		return e.errorResult(req, &Error{Kind: KindDedupKey, Msg: "dedup_key produced nothing from this message"}, nil)
	}
	unavailable := func(what string, err error) Result {
		msg := "flow state is unavailable: " + what
		if err != nil {
			msg += ": " + err.Error()
		}
		res := e.errorResult(req, &Error{Kind: KindStateUnavailable, Msg: msg}, nil)
		res.Interrupted = cutShort(ctx, res) // nothing of it was recorded
		return res
	}
	if e.dedup == nil {
		return unavailable("no dedup store is configured", nil)
	}
	// A duplicate waits for the first delivery up to the flow's ceiling;
	// the execution, once it holds the key, has a whole ceiling of its own.
	// Its lease outlasts the ceiling by e.leaseGrace, so that an execution
	// stopped at its ceiling can still record its answer (waiting for the
	// store's lock, if need be) before a duplicate may take the key.
	waitCtx, cancelWait := context.WithTimeout(ctx, f.Timeout())
	defer cancelWait()
	if req.Caller != nil {
		// a caller who hangs up ends the wait (nothing was claimed or
		// run yet), though not an execution that holds the key
		stop := context.AfterFunc(req.Caller, cancelWait)
		defer stop()
	}
	var claim int64
	own := false // the key holds a failure this message recorded
	for {
		var err error
		var answer []byte
		answer, claim, err = e.dedup.Claim(waitCtx, f.Tenant(), f.Name(), key, !d.Absorb || req.Retry || req.Rerun || own, f.Timeout()+e.leaseGrace)
		if err != nil {
			return unavailable("reading the dedup store", err)
		}
		if req.Retry {
			break // it runs, holding the key or not
		}
		if answer != nil {
			rec, err := decodeRecord(answer)
			if err != nil {
				return unavailable("a dedup record does not decode", err)
			}
			if rec.Outcome == Failed && req.Message != "" && rec.Message == req.Message && !own {
				// its own first attempt's failure, the retry never
				// scheduled: claimed over, as the retry would
				own = true
				continue
			}
			h := rec.Header
			if h == nil {
				h = http.Header{}
			}
			h.Set(HeaderReplay, "true")
			if h.Get(HeaderCorrelationID) == "" {
				// the platform's own, which the record leaves out
				h.Set(HeaderCorrelationID, req.CorrelationID)
			}
			return Result{Status: rec.Status, Header: h, Body: rec.Body, Outcome: rec.Outcome, Replay: true}
		}
		if claim != 0 {
			break
		}
		select {
		case <-waitCtx.Done():
			if req.Caller != nil && req.Caller.Err() != nil {
				return unavailable("the caller went away while the first delivery of this key ran", nil)
			}
			return unavailable("the first delivery of this key is still running", nil)
		case <-time.After(e.dedupPoll):
		}
	}

	// when the claim's lease ends, near enough (the store counted it from
	// its own clock, a moment ago): releaseUntil tries no longer
	leaseEnd := time.Now().Add(f.Timeout() + e.leaseGrace)
	ectx, cancel := context.WithTimeout(ctx, f.Timeout())
	defer cancel()
	res := e.execute(ectx, req)
	if claim == 0 {
		// a retry that could not hold the key: what holds it stands
		res.Interrupted = cutShort(ctx, res)
		return res
	}
	// The record outlives this execution's deadline: write it even when the
	// ceiling was reached.
	wctx := context.WithoutCancel(ectx)
	// An execution its runner cut short (a worker stopping past its grace:
	// ctx cancelled, not the flow's own ceiling) did not end: the key is
	// released, so that the delivery made again at the next start runs,
	// rather than finding a failure recorded (replayed under absorb, and
	// the message lost). A success or a handled fault stands: the worker
	// acknowledges it. This is the one read of ctx that decides it:
	// res.Interrupted tells the runner, which must not read its context
	// again (ended a moment later, it would disagree with the record).
	res.Interrupted = cutShort(ctx, res)
	platform := res.Err != nil && res.Err.Kind == KindInternal || res.HandlerErr != nil && res.HandlerErr.Kind == KindInternal
	if res.Interrupted || res.Status == http.StatusServiceUnavailable || platform && res.Outcome == Failed {
		if err := e.dedup.Release(wctx, f.Tenant(), f.Name(), key, claim); err != nil {
			// let go in the background, as when the answer cannot be
			// recorded: the execution is over, and its key held to the
			// end of the lease made every duplicate wait its ceiling
			e.releaseUntil(f.Tenant(), f.Name(), key, claim, leaseEnd)
			return unavailable("releasing a dedup key", err)
		}
		return res
	}
	rec, _ := json.Marshal(record{Status: res.Status, Header: withoutCorrelation(res.Header, req.CorrelationID), Body: res.Body, Outcome: res.Outcome, Message: req.Message})
	failed := res.Outcome == Failed || res.Outcome == FaultHandled
	if err := e.dedup.Commit(wctx, f.Tenant(), f.Name(), key, claim, rec, failed, d.TTL); err != nil {
		// the answer is not recorded: the key is let go, so that the next
		// delivery runs (as it would once the lease ended) rather than
		// waiting its whole ceiling for an execution that is over and
		// answering 503, until the lease ends
		e.releaseUntil(f.Tenant(), f.Name(), key, claim, leaseEnd)
		return unavailable("recording the answer", err)
	}
	return res
}

// releaseUntil lets go, in the background, the key held by claim: the
// answer does not wait for the store (a locked registry makes a write wait
// its busy timeout). While the store refuses (the write that recorded
// nothing may fail again: a full disk, a lock), it tries again after pauses
// from 100 ms doubling to 5 s, until it works or the lease ends at
// leaseEnd, when the key is free anyway. At most maxReleasers keys are let
// go at once; past them, a key is left to its lease, as it is once Close
// was called.
func (e *Engine) releaseUntil(tenant, flowName, key string, claim int64, leaseEnd time.Time) {
	e.relMu.Lock()
	defer e.relMu.Unlock()
	if e.closed {
		return
	}
	select {
	case e.releasers <- struct{}{}:
	default:
		return
	}
	e.releasing.Add(1)
	go func() {
		defer e.releasing.Done()
		defer func() { <-e.releasers }()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			ctx, cancel := context.WithDeadline(context.Background(), leaseEnd)
			err := e.dedup.Release(ctx, tenant, flowName, key, claim)
			cancel()
			if err == nil || time.Until(leaseEnd) <= 0 {
				return
			}
			t := time.NewTimer(min(pause, max(time.Until(leaseEnd), 0)))
			select {
			case <-t.C:
			case <-e.stopping:
				t.Stop()
				return // the key is left to its lease
			}
			select {
			case <-e.stopping: // closed as the pause ended
				return
			default:
			}
		}
	}()
}

// Close stops letting go keys in the background (see releaseUntil): a
// release under way ends (the store's own wait bounds it), the others are
// left to their leases. It waits for them, so that the store can be closed
// after it; executions still running may call the engine meanwhile, and
// no key is let go in the background from then on. Safe to call more than
// once.
func (e *Engine) Close() {
	e.relMu.Lock()
	if !e.closed {
		e.closed = true
		close(e.stopping)
	}
	e.relMu.Unlock()
	e.releasing.Wait()
}

// DefaultDedupCommitWait is Config.DedupCommitWait's default.
const DefaultDedupCommitWait = 10 * time.Second

// withoutCorrelation is the header set an answer is recorded with: the
// platform's X-Correlation-Id (the execution's own correlation ID) is left
// out, so that a replay carries its own request's; one the flow set
// (response_header_x_correlation_id) is part of the answer and stays.
func withoutCorrelation(h http.Header, platform string) http.Header {
	c := h.Clone()
	if c.Get(HeaderCorrelationID) == platform {
		c.Del(HeaderCorrelationID)
	}
	return c
}

// newVars returns the ctx variables an execution starts with.
func newVars(req Request) map[string]any {
	f := req.Flow
	return map[string]any{
		"input":          req.Doc,
		"correlation_id": req.CorrelationID,
		"tenant":         f.Tenant(),
		"flow":           f.Name(),
		"version":        req.Version,
		"door":           req.Door,
		"attempt":        req.Attempt,
	}
}
