package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"syscall"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// enqueue is the /enqueue door: the message is appended to the flow's
// queue and fsynced before the 202; the flow runs later, on its worker.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	sw := &statusWriter{ResponseWriter: w}
	s.serveEnqueue(sw, r, ps.ByName("tenant"), ps.ByName("flow"))
	s.cfg.Metrics.request(engine.DoorEnqueue, sw.status)
}

func (s *Server) serveEnqueue(w *statusWriter, r *http.Request, tenant, flowName string) {
	if s.cfg.Queues == nil {
		correlationID(w, r)
		refuseUnread(w, r, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.EscapedPath())
		return
	}
	a, doc, ok := s.admit(w, r, tenant, flowName)
	if !ok {
		s.logRefusal(engine.DoorEnqueue, w, r, tenant, flowName, a)
		return
	}
	payload := a.rawJSON // as submitted; an empty body or XML as the flow reads it
	if payload == nil {
		payload = flow.AppendJSON(nil, doc)
	}
	msg, err := s.cfg.Queues.Append(tenant, flowName, queue.NewMessage{
		Source: engine.DoorEnqueue, CorrelationID: a.correlationID, Payload: payload,
	})
	if err != nil {
		text := s.enqueueFailed(tenant, flowName, a.correlationID, err)
		if errors.Is(err, queue.ErrTooLarge) {
			// under the flow's max_body_bytes but more than a queued
			// message holds: it never will, so no Retry-After
			writeError(w, http.StatusRequestEntityTooLarge, text)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, text)
		return
	}
	jsonlog.LogAttrs(context.Background(), s.cfg.Logger, slog.LevelInfo, "message queued", slog.String("event", "queue_enqueued"),
		slog.String("tenant", tenant), slog.String("flow", flowName), slog.String("correlation_id", a.correlationID),
		slog.String("key", a.key.ID), slog.Uint64("msg_id", msg.ID), slog.Int64("offset", msg.Offset))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Nexus-Message-Id", strconv.FormatUint(msg.ID, 10))
	w.WriteHeader(http.StatusAccepted)
	b := strconv.AppendInt([]byte(`{"queued":true,"offset":`), msg.Offset, 10)
	b = flow.AppendJSON(append(b, `,"tenant":`...), tenant)
	b = flow.AppendJSON(append(b, `,"flow":`...), flowName)
	w.Write(append(b, '}'))
}

// enqueueFailed logs a message that could not be appended to tenant/flow's
// queue (queue_enqueue_failed, with the whole error) and returns what its
// submitter is told: the system's error without the files it names (see
// appendFailure). Lines are logged at most as refusals are: a full disk
// under load refuses every submission (15,000 lines a second on the log,
// which may be on the disk that is full). A message over queue.MaxPayload
// is logged as a warning: its submitter sent too much, and the queue did
// not fail.
func (s *Server) enqueueFailed(tenant, flowName, correlationID string, err error) string {
	if ok, suppressed := s.enqueueFailures.allow(s.cfg.Now()); ok {
		level := slog.LevelError
		if errors.Is(err, queue.ErrTooLarge) {
			level = slog.LevelWarn
		}
		s.cfg.Logger.Log(context.Background(), level, "a message could not be queued", "event", "queue_enqueue_failed", "tenant", tenant, "flow", flowName,
			"correlation_id", correlationID, "error", err.Error(), "suppressed", suppressed)
	}
	if errors.Is(err, queue.ErrTooLarge) {
		return "the message exceeds " + strconv.Itoa(queue.MaxPayload) + " bytes, the most a queued message holds"
	}
	reason := appendFailure(err)
	if errors.Is(err, queue.ErrBudget) {
		reason = err.Error()
	}
	return fmt.Sprintf("queue %s/%s could not take the message: %s", tenant, flowName, reason)
}

// appendFailure is what the 503 of a failed append says of its error: the
// system's error (disk full, I/O error) without the files it names, which
// the host's log has, or that another process held the append lock too
// long (queue.ErrLockBusy).
func appendFailure(err error) string {
	if errors.Is(err, queue.ErrLockBusy) {
		// nothing failed to be written: another process holds the lock
		return queue.ErrLockBusy.Error()
	}
	const failed = "its log could not be written"
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return failed + ": " + errno.Error()
	}
	return failed + " (the host's log has the details)"
}

// queuedMaxDepth is the deepest nesting a worker reads in a queued
// message: what a door may store. A JSON body nests up to 64 levels, but an
// XML body of 64 elements flattens deeper, since repeated siblings make an
// array level under each element.
const queuedMaxDepth = 2*flow.XMLMaxDepth + 1

// Handle runs one delivery of a queued message (the queue's handler):
// latest resolved at pick-up, the engine run with the message's door and
// attempt, and the result turned into a verdict.
func (s *Server) Handle(ctx context.Context, d queue.Delivery) queue.Verdict {
	live := s.cfg.Live.Live()
	if why := s.starting(live); why != "" {
		// a host awaiting its repo's first publication has nothing live
		// yet, which says nothing of the message's flow (a registry made
		// anew beside the queues of an earlier one, a dead letter
		// replayed meanwhile): not dropped as withdrawn
		return queue.Verdict{Kind: queue.VerdictRetryLater, Error: why}
	}
	lf, ok := live.Lookup(d.Tenant, d.Flow)
	if !ok {
		return queue.Verdict{Kind: queue.VerdictDrop, Error: fmt.Sprintf("no flow %s/%s is deployed", d.Tenant, d.Flow)}
	}
	if lf.Corrupt != nil {
		// the same bytes will fail the same way: no retries (and a
		// journal row, as for any delivery: it did not run)
		res := corruptResult(lf)
		s.journal(deliveryDoor(d), lf, d.CorrelationID, int64(d.ID), d.Attempt, res, s.cfg.Now(), 0)
		return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: res.Err.Msg, Attrs: executionAttrs(lf, res, 0, nil)}
	}
	doc, err := flow.ParseJSON(d.Payload, queuedMaxDepth)
	if err != nil {
		// only a segment edited by hand holds one (every door stores a
		// JSON document): the same bytes will fail the same way, so no
		// retries, and a journal row, as for any delivery, though it
		// did not run
		res := notJSONResult(err)
		s.journal(deliveryDoor(d), lf, d.CorrelationID, int64(d.ID), d.Attempt, res, s.cfg.Now(), 0)
		return queue.Verdict{Kind: queue.VerdictDeadLetter, Error: res.Err.Msg, Attrs: executionAttrs(lf, res, 0, nil)}
	}
	door := deliveryDoor(d)
	start := s.cfg.Now()
	req := engine.Request{
		Flow: lf.Flow, Version: lf.Version, Doc: doc, CorrelationID: d.CorrelationID,
		Door: door, Attempt: d.Attempt, Retry: d.Attempt > 1, Rerun: d.Source == queue.SourceReplay && d.Attempt == 1, NoBody: true,
	}
	if lf.Flow.Dedup() != nil {
		req.Message = messageName(d) // only a dedup record names it
	}
	res := s.cfg.Engine.Run(ctx, req)
	elapsed := s.cfg.Now().Sub(start)
	if !res.Interrupted {
		// one cut short by the stop did not end: it runs again, with
		// the same attempt, at the next start, which records it
		s.cfg.Metrics.execution(door, elapsed)
		s.journal(door, lf, d.CorrelationID, int64(d.ID), d.Attempt, res, start, elapsed)
	}
	attrs := executionAttrs(lf, res, elapsed, make([]slog.Attr, 0, 5))

	switch {
	case res.Interrupted:
		// the worker's stop cut it short: the engine decided so where it
		// recorded nothing, so the worker does not read its context again
		return queue.Verdict{Kind: queue.VerdictInterrupted, Error: errorText(res), Attrs: attrs}
	case res.Outcome == engine.FaultHandled:
		// the main sequence's failure, which the handler answered: said,
		// as run_completed says it (a replay of such an answer has none)
		if res.Err != nil {
			attrs = append(attrs, slog.String("error", res.Err.Error()))
		}
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: string(res.Outcome), Attrs: attrs}
	case res.Outcome == engine.Succeeded, res.Outcome == engine.Filtered:
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: string(res.Outcome), Attrs: attrs}
	case res.Replay:
		// a duplicate's recorded answer (a failure absorbed by
		// dedup_on_failure: absorb): the message has its answer, as a
		// duplicate on /run does; nothing to retry
		return queue.Verdict{Kind: queue.VerdictAck, Outcome: string(res.Outcome), Attrs: attrs} // replay: in executionAttrs
	}
	text := errorText(res)
	if res.Status == http.StatusServiceUnavailable {
		return queue.Verdict{Kind: queue.VerdictRetryLater, Error: text, Attrs: attrs}
	}
	return queue.Verdict{Kind: queue.VerdictRetry, Error: text, Attrs: attrs, Policy: retryPolicy(lf.Flow)}
}

// retryPolicy is f's queue_* keys as the queue's retry policy.
func retryPolicy(f *flow.Flow) queue.RetryPolicy {
	rp := f.Retry()
	return queue.RetryPolicy{MaxAttempts: rp.MaxAttempts, InitialDelay: rp.InitialDelay, BackoffFactor: rp.BackoffFactor, MaxDelay: rp.MaxDelay}
}

// RetryPolicy is the retry policy of the live flow tenant/flow, false when
// none is live (or its artifact is corrupt): the queue's
// ManagerConfig.Policy, for a delivery whose handler panicked.
func (s *Server) RetryPolicy(tenant, flowName string) (queue.RetryPolicy, bool) {
	live := s.cfg.Live.Live()
	if live == nil {
		return queue.RetryPolicy{}, false
	}
	lf, ok := live.Lookup(tenant, flowName)
	if !ok || lf.Corrupt != nil || lf.Flow == nil {
		return queue.RetryPolicy{}, false
	}
	return retryPolicy(lf.Flow), true
}

// messageName is the engine's Request.Message for a delivery: its id and
// its enqueue time, in nanoseconds. The id alone may not be the message's
// only: a queue whose id counter is lost (its folder removed, a damaged
// counter beside an empty log) counts its ids from 1 again while the dedup
// store keeps its records. The correlation ID is no part of it: a caller
// may send two messages with the same one.
func messageName(d queue.Delivery) string {
	return strconv.FormatUint(d.ID, 10) + "@" + strconv.FormatInt(d.EnqueuedAt.UnixNano(), 10)
}

// deliveryDoor is the door a queued message came in by: cron for a tick,
// enqueue for the rest (a replay, a queue_publish).
func deliveryDoor(d queue.Delivery) string {
	if d.Source == engine.DoorCron {
		return engine.DoorCron
	}
	return engine.DoorEnqueue
}

// errorText is the error a failed execution's verdict carries.
func errorText(res engine.Result) string {
	if res.Err != nil {
		return res.Err.Error()
	}
	return "internal error"
}

// Publish puts a message on another flow's queue for queue_publish: same
// tenant, refused before anything is written when the target is not live
// (not deployed, or its artifact corrupt) or no worker can be started for
// it. A failed append is said as /enqueue's answer says it, without the
// files it names, and logged as one. When ctx
// (the execution's, ending at its ceiling) ends while the append waits for
// the queue, nothing is written and the error wraps context.Cause(ctx).
func (s *Server) Publish(ctx context.Context, tenant, flowName string, payload []byte, correlationID string) error {
	if s.cfg.Queues == nil {
		return errors.New("this host has no queues")
	}
	live := s.cfg.Live.Live()
	if why := s.starting(live); why != "" {
		return errors.New(why)
	}
	lf, ok := live.Lookup(tenant, flowName)
	if !ok {
		return fmt.Errorf("no flow %s/%s is deployed", tenant, flowName)
	}
	if lf.Flow == nil {
		// deployed, but its stored artifact cannot run: every message of
		// it would be dead-lettered unrun while the publisher answered as
		// if it were delivered (registry.LiveSet.CanReplay refuses it as
		// not live too)
		why := "its artifact failed its integrity check"
		if errors.Is(lf.Corrupt, registry.ErrNoLongerCompiles) {
			why = "its stored version does not compile under this build"
		}
		return fmt.Errorf("flow %s/%s is not live: %s", tenant, flowName, why)
	}
	// the target's ceiling holds for a message whatever door it comes by
	if limit := s.bodyLimit(lf); int64(len(payload)) > limit {
		return fmt.Errorf("the message for %s/%s is %d bytes, over its ceiling of %d", tenant, flowName, len(payload), limit)
	}
	if err := s.cfg.Queues.Has(tenant, flowName); err != nil {
		return fmt.Errorf("queue %s/%s: %w", tenant, flowName, err)
	}
	// the target's worker reads the message as a door reads a body (its
	// nesting limit included): what it could not read is refused here,
	// before anything is written, rather than dead-lettered there
	if _, err := flow.ParseJSON(payload, queuedMaxDepth); err != nil {
		return fmt.Errorf("the message for %s/%s is not a document its worker can read: %w", tenant, flowName, err)
	}
	// the append gives up at the execution's ceiling while it waits for
	// the queue (its opening, its append lock), having written nothing:
	// the engine answers the ceiling; a message being written when it
	// comes is waited for (its fdatasync), and the ceiling answered too
	msg, err := s.cfg.Queues.AppendContext(ctx, tenant, flowName, queue.NewMessage{Source: engine.DoorEnqueue, CorrelationID: correlationID, Payload: payload})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
			// not the queue's failure: nothing to log as one
			return fmt.Errorf("queue %s/%s did not take the message: %w", tenant, flowName, context.Cause(ctx))
		}
		// what /enqueue answers: the queue's error names the files of
		// the state directory, and the step's error may reach a caller
		// through a fault handler's $.fault_error; the log has it whole
		return errors.New(s.enqueueFailed(tenant, flowName, correlationID, err))
	}
	s.cfg.Logger.Info("message queued", "event", "queue_enqueued", "tenant", tenant, "flow", flowName,
		"correlation_id", correlationID, "msg_id", msg.ID, "offset", msg.Offset, "by", "queue_publish")
	return nil
}

// queueCollector exports the queues' state as the nexus_queue_* metrics.
type queueCollector struct {
	m                                         *queue.Manager
	depth, inFlight, retries, dead, delivered *prometheus.Desc
	workers, budget                           *prometheus.Desc
}

func newQueueCollector(m *queue.Manager) *queueCollector {
	l := []string{"tenant", "flow"}
	return &queueCollector{
		m:         m,
		depth:     prometheus.NewDesc("nexus_queue_depth", "Messages of the queue's log not yet processed (those waiting for a retry are nexus_queue_retries_pending).", l, nil),
		inFlight:  prometheus.NewDesc("nexus_queue_in_flight", "Deliveries running now.", l, nil),
		retries:   prometheus.NewDesc("nexus_queue_retries_pending", "Messages waiting for a retry.", l, nil),
		dead:      prometheus.NewDesc("nexus_queue_dead_letters", "Dead letters not yet replayed or discarded.", l, nil),
		delivered: prometheus.NewDesc("nexus_queue_delivered_total", "Deliveries finished, by outcome.", append(l, "outcome"), nil),
		workers:   prometheus.NewDesc("nexus_queue_workers", "Queues this process holds open, each with its worker: the part of the budget spent.", nil, nil),
		budget:    prometheus.NewDesc("nexus_queue_worker_budget", "The most queues this process holds open (--max-workers); past it, /enqueue answers 503.", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.inFlight
	ch <- c.retries
	ch <- c.dead
	ch <- c.delivered
	ch <- c.workers
	ch <- c.budget
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	taken, budget := c.m.Budget()
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(taken))
	ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(budget))
	for _, q := range c.m.Queues() {
		// a count that could not be read is left out, not exported as 0:
		// an alert on it would keep quiet, and absent() could not tell
		if q.CountsErr == nil {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(q.Depth), q.Tenant, q.Flow)
		}
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(q.State.InFlight), q.Tenant, q.Flow)
		if q.RetriesErr == nil {
			ch <- prometheus.MustNewConstMetric(c.retries, prometheus.GaugeValue, float64(q.State.RetriesPending), q.Tenant, q.Flow)
		}
		if q.DeadLettersErr == nil {
			ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(q.DeadLetters), q.Tenant, q.Flow)
		}
		for outcome, n := range q.State.Delivered {
			ch <- prometheus.MustNewConstMetric(c.delivered, prometheus.CounterValue, float64(n), q.Tenant, q.Flow, outcome)
		}
	}
}
