package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/naming"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The management API (/api/…): the JSON of what the UI shows, behind the
// admin key (Authorization: Bearer KEY, or the UI's session cookie). See
// docs/management.md.

// routeManagement adds the UI and the API to r. Only a host with an admin
// key has them: without one, every method on their paths is an unknown
// path (404), as on /status.
func (s *Server) routeManagement(r *httprouter.Router) {
	get(r, "/api/flows", s.api(s.apiFlows))
	get(r, "/api/queues", s.api(s.apiQueues))
	get(r, "/api/queues/:tenant/:flow/dlq", s.api(s.apiDeadLetters))
	get(r, "/api/queues/:tenant/:flow/dlq/:id/payload", s.api(s.payload))
	r.POST("/api/queues/:tenant/:flow/dlq/:id/:action", s.api(s.apiDLQAction))
	get(r, "/api/journal", s.api(s.apiJournal))

	get(r, "/ui", func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
		correlationID(w, req)
		http.Redirect(w, req, "/ui/", http.StatusMovedPermanently)
	})
	// the UI's pages have their own router, which Handler gives every
	// path under /ui/, whatever the method, so that a path or a method
	// it does not answer gets an HTML page (404, 405), not the API's
	// JSON: a browser shows it in the UI's layout
	ui := httprouter.New()
	ui.RedirectTrailingSlash = false
	ui.RedirectFixedPath = false
	ui.HandleMethodNotAllowed = true
	ui.HandleOPTIONS = false
	ui.NotFound = http.HandlerFunc(s.uiNotFound)
	ui.MethodNotAllowed = http.HandlerFunc(s.uiMethodNotAllowed)
	get(ui, "/ui/login", s.uiLoginForm)
	ui.POST("/ui/login", s.uiLogin)
	ui.POST("/ui/logout", s.page(s.uiLogout))
	get(ui, "/ui/", s.page(s.uiFlows))
	get(ui, "/ui/queues", s.page(s.uiQueues))
	get(ui, "/ui/queues/:tenant/:flow", s.page(s.uiQueue))
	get(ui, "/ui/queues/:tenant/:flow/dlq/:id/payload", s.page(s.uiPayload))
	ui.POST("/ui/queues/:tenant/:flow/dlq/:id/:action", s.page(s.uiDLQAction))
	get(ui, "/ui/journal", s.page(s.uiJournal))
	ui.PanicHandler = func(w http.ResponseWriter, req *http.Request, p any) {
		s.pageError(w, req, fmt.Errorf("panic: %v", p))
	}
	s.ui = ui
}

// api wraps an API handler with the admin key check: 401 without it, 403
// for a POST made with the session cookie but without the UI's token.
func (s *Server) api(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		// every answer, refusals included: their bodies may echo a name
		hdr := w.Header()
		hdr.Set("Cache-Control", "no-store")
		hdr.Set("X-Content-Type-Options", "nosniff")
		auth, _, origin := s.authorizeForm(w, r)
		switch {
		case auth == authNone:
			// before its body is read, as the answer to a path that is no
			// endpoint (apiUnauthorized), which it must not differ from
			w.Header().Set("WWW-Authenticate", "Bearer")
			refuseUnread(w, r, http.StatusUnauthorized, "missing or unknown admin key")
		case origin != originOK:
			writeError(w, http.StatusForbidden, apiOriginRefusals[origin])
		default:
			h(w, r, ps)
		}
	}
}

// apiOriginRefusals are the API's 403 texts for a request made with the
// UI's session that is not the UI's own.
var apiOriginRefusals = map[originRefusal]string{
	originOtherSite: "a request made with the UI's session must come from the UI's own pages (Sec-Fetch-Site says another site)",
	originTooLarge:  "the form is larger than the 64 KiB a form may hold",
	originNoToken:   "a request made with the UI's session needs the UI's form token",
}

// writeJSON writes v as the answer's JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // dead letters' payloads may be personal data
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// internalError logs err and answers 500 without its text.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	s.logInternalError(w, r, err)
	writeError(w, http.StatusInternalServerError, "internal error")
}

func (s *Server) apiFlows(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if _, ok := apiQuery(w, r, "/api/flows"); !ok {
		return
	}
	v, err := s.flowsView(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// apiQueues lists the queues, those of ?tenant= and ?flow= when given
// (as /api/journal takes them: given empty or breaking the name rule, they
// are refused).
func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !s.hasQueues(w, r) {
		return
	}
	q, ok := apiQuery(w, r, "/api/queues", "tenant", "flow")
	if !ok {
		return
	}
	tenant, flowName := q.Get("tenant"), q.Get("flow")
	if err := filterError(q, tenant, flowName); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := struct {
		Queues []queueEntry `json:"queues"`
	}{[]queueEntry{}}
	// the queues kept alone are read: the others' files are not counted
	out.Queues = append(out.Queues, s.queueEntries(tenant, flowName)...)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiDeadLetters(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	tenant, flowName := ps.ByName("tenant"), ps.ByName("flow")
	if !s.hasQueues(w, r) || !validQueueName(w, tenant, flowName) {
		return
	}
	if _, ok := apiQuery(w, r, "/api/queues/{tenant}/{flow}/dlq", "after", "limit"); !ok {
		return
	}
	after, limit, err := pageQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// dead letters that cannot be read are said in the page's error, as
	// GET /api/queues says them
	writeJSON(w, http.StatusOK, s.deadLetterPage(tenant, flowName, after, limit))
}

// pageQuery reads a dead-letter listing's ?after=ID&limit=N.
func pageQuery(r *http.Request) (after uint64, limit int, err error) {
	q, err := query(r)
	if err != nil {
		return 0, 0, err
	}
	return pageValues(q.Get("after"), q.Get("limit"))
}

// query reads r's query string, refusing one that cannot be decoded (a bad
// %-escape, a semicolon) rather than leaving out the parameters it holds,
// as URL.Query does: a filter left out would widen the listing.
func query(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query string cannot be read: %v", err)
	}
	return q, nil
}

// apiQuery reads r's query string as query does for an API endpoint
// (route, its path as docs/management.md gives it) that takes the
// parameters known, answering 400 itself for one it does not take (a
// misspelt filter would widen the answer without a word) or one given
// twice (the second would be dropped), naming them. A GET (or HEAD) may
// add one cacheBuster parameter, which is ignored: it is not in the
// values returned.
func apiQuery(w http.ResponseWriter, r *http.Request, route string, known ...string) (url.Values, bool) {
	q, err := query(r)
	if err == nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		err = queryNames(url.Values{cacheBuster: q[cacheBuster]}, "", []string{cacheBuster})
		delete(q, cacheBuster)
	}
	if err == nil {
		err = queryNames(q, r.Method+" "+route, known)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return q, true
}

// queryNames is the error of a query q holding a parameter that is not
// known to what (a method and a route), or one of them twice; nil when it
// holds neither. It names the first maxNamed unknown parameters, by name.
func queryNames(q url.Values, what string, known []string) error {
	var unknown []string
	for name := range q {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		quoted := make([]string, 0, maxNamed+1)
		for _, name := range unknown[:min(len(unknown), maxNamed)] {
			quoted = append(quoted, naming.Quote(name))
		}
		if len(unknown) > maxNamed {
			// one line, whatever the query holds
			quoted = append(quoted, fmt.Sprintf("… (%d in all)", len(unknown)))
		}
		takes := "none"
		if n := len(known); n > 0 {
			takes = strings.Join(known[:n-1], ", ") + " and " + known[n-1]
			if n == 1 {
				takes = known[0]
			}
		}
		noun := "parameter"
		if len(unknown) > 1 {
			noun = "parameters"
		}
		return fmt.Errorf("unknown query %s %s: %s takes %s", noun, strings.Join(quoted, ", "), what, takes)
	}
	for _, name := range known {
		if vs := q[name]; len(vs) > 1 {
			return fmt.Errorf("%s is given twice (%s, then %s): give it once", name, naming.Quote(vs[0]), naming.Quote(vs[1]))
		}
	}
	return nil
}

// cacheBuster is the parameter a GET of the API may add once and is
// ignored: jQuery's ?_=<time> against caches, which dashboards and
// proxies add. Any other parameter an endpoint does not take is refused.
const cacheBuster = "_"

// maxNamed is how many unknown query parameters a refusal names.
const maxNamed = 5

// pageValues reads a dead-letter listing's after and limit ("" for their
// defaults: 0 and defaultPageSize).
func pageValues(a, l string) (after uint64, limit int, err error) {
	limit = defaultPageSize
	if a != "" {
		if after, err = strconv.ParseUint(a, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("after %q is not a message id", a)
		}
	}
	if l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > maxPageSize {
			return 0, 0, fmt.Errorf("limit %q is not a number from 1 to %d", l, maxPageSize)
		}
	}
	return after, limit, nil
}

// payload answers a pending dead letter's whole payload as a download
// (GET /api/…/dlq/{id}/payload): the bytes as stored, never rendered by
// the browser. The UI's link is uiPayload.
func (s *Server) payload(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	if !s.hasQueues(w, r) {
		return
	}
	if _, ok := apiQuery(w, r, "/api/queues/{tenant}/{flow}/dlq/{id}/payload"); !ok {
		return
	}
	d, status, err := s.findPayload(ps)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	s.writePayload(w, ps, d)
}

// findPayload finds the pending dead letter of a payload's download,
// saying which status refuses it and why: 404 when this host runs no
// queues or the id is not pending (the CLI's text), 400 for a bad name or
// id, 503 when the queue's dead-letter files cannot be read (an I/O
// error: the listing says it in its "error"; the error names the queue
// and the system's error).
func (s *Server) findPayload(ps httprouter.Params) (queue.DeadLetter, int, error) {
	tenant, flowName := ps.ByName("tenant"), ps.ByName("flow")
	if s.cfg.Queues == nil {
		return queue.DeadLetter{}, http.StatusNotFound, errors.New("this host runs no queues")
	}
	if err := nameError(tenant, flowName); err != nil {
		return queue.DeadLetter{}, http.StatusBadRequest, err
	}
	id, err := strconv.ParseUint(ps.ByName("id"), 10, 64)
	if err != nil || id == 0 {
		return queue.DeadLetter{}, http.StatusBadRequest, fmt.Errorf("%q is not a message id (a whole number from the dead letters' list)", ps.ByName("id"))
	}
	q, err := s.cfg.Queues.Peek(tenant, flowName)
	var d queue.DeadLetter
	if err == nil {
		d, err = q.DeadLetter(id)
	}
	switch {
	case errors.Is(err, queue.ErrNotPending):
		return d, http.StatusNotFound, errNotPending(tenant, flowName, id)
	case err != nil:
		// the files the listing could not read either (a folder or a
		// disk that fails, a permission): no fault of the host, and it
		// may pass once the operator sees to them
		return d, http.StatusServiceUnavailable, fmt.Errorf("queue %s/%s: the payload of dead letter %d could not be read: %w",
			tenant, flowName, id, err)
	}
	return d, http.StatusOK, nil
}

// writePayload writes d's payload as a download.
func (s *Server) writePayload(w http.ResponseWriter, ps httprouter.Params, d queue.DeadLetter) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s-%d.payload"`, ps.ByName("tenant"), ps.ByName("flow"), d.ID))
	h.Set("Content-Length", strconv.Itoa(len(d.Payload)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(d.Payload)
}

// dlqActionAnswer is the answer of a replay or a discard, its keys in the
// order docs/management.md gives.
type dlqActionAnswer struct {
	Tenant    string `json:"tenant"`
	Flow      string `json:"flow"`
	ID        uint64 `json:"id"`
	Replayed  bool   `json:"replayed,omitempty"`
	MessageID uint64 `json:"message_id,omitempty"`
	Discarded bool   `json:"discarded,omitempty"`
}

func (s *Server) apiDLQAction(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	tenant, flowName, action := ps.ByName("tenant"), ps.ByName("flow"), ps.ByName("action")
	if !s.hasQueues(w, r) || !validQueueName(w, tenant, flowName) {
		return
	}
	if _, ok := apiQuery(w, r, "/api/queues/{tenant}/{flow}/dlq/{id}/{action}"); !ok {
		return
	}
	if ps.ByName("id") == "all" {
		s.apiDLQActionAll(w, r, action, tenant, flowName)
		return
	}
	id, ok := dlqRequest(w, action, ps.ByName("id"))
	if !ok {
		return
	}
	newID, status, err := s.doDLQAction(w, r, action, tenant, flowName, id)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	out := dlqActionAnswer{Tenant: tenant, Flow: flowName, ID: id, Discarded: action == "discard"}
	if action == "replay" {
		out.Replayed, out.MessageID = true, newID
	}
	writeJSON(w, http.StatusOK, out)
}

// dlqAllAnswer is the answer of a replay or discard of every pending dead
// letter of a queue: what was done, oldest first.
type dlqAllAnswer struct {
	Tenant    string            `json:"tenant"`
	Flow      string            `json:"flow"`
	Replayed  []dlqActionAnswer `json:"replayed,omitzero"`
	Discarded []uint64          `json:"discarded,omitzero"`
	// Skipped are the dead letters a replay left pending because they
	// cannot be replayed (a payload over queue.MaxPayload); left out when
	// none was
	Skipped []dlqSkippedAnswer `json:"skipped,omitempty"`
}

// dlqSkippedAnswer is a dead letter a replay of all left pending: its id,
// its payload's size and why.
type dlqSkippedAnswer struct {
	ID          uint64 `json:"id"`
	PayloadSize int    `json:"payload_size"`
	Error       string `json:"error"`
}

// apiDLQActionAll replays or discards every dead letter pending in the
// queue (POST …/dlq/all/replay), oldest first, as one button each would.
func (s *Server) apiDLQActionAll(w http.ResponseWriter, r *http.Request, action, tenant, flowName string) {
	if !dlqActionKnown(w, action) {
		return
	}
	done, skipped, status, err := s.doDLQActionAll(w, r, action, tenant, flowName)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	// the one list of the action, empty rather than left out
	out := dlqAllAnswer{Tenant: tenant, Flow: flowName}
	for _, k := range skipped {
		out.Skipped = append(out.Skipped, dlqSkippedAnswer{ID: k.ID, PayloadSize: k.PayloadSize, Error: k.Err.Error()})
	}
	if action == "replay" {
		out.Replayed = make([]dlqActionAnswer, 0, len(done))
		for _, d := range done {
			out.Replayed = append(out.Replayed, dlqActionAnswer{Tenant: tenant, Flow: flowName, ID: d[0], Replayed: true, MessageID: d[1]})
		}
	} else {
		out.Discarded = make([]uint64, 0, len(done))
		for _, d := range done {
			out.Discarded = append(out.Discarded, d[0])
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// doDLQActionAll replays or discards every dead letter pending in the
// queue when it begins, oldest first, in chunks that let the doors'
// appends through between them, and returns the (id, new message id)
// pairs done, and the dead letters a replay left pending because they
// cannot be replayed (queue.Skipped). The statuses are doDLQAction's: 409
// for a replay into a flow that is not live, 503 when no worker can be
// started, 500 for a failure (its error names how many were done before
// it, which stand), 503 when the request ends during the run (it stops
// between two chunks: those done stand, the rest stay pending). It is logged as one admin_action line, and each dead
// letter left pending as a dlq_replay_skipped warning.
func (s *Server) doDLQActionAll(w http.ResponseWriter, r *http.Request, action, tenant, flowName string) ([][2]uint64, []queue.Skipped, int, error) {
	if err := s.cfg.Live.Live().CanReplay(tenant, flowName); action == "replay" && err != nil {
		// nothing to replay is said as nothing, as nexus dlq replay --all
		// says it, whether the flow is live or not
		if q, perr := s.cfg.Queues.Peek(tenant, flowName); perr == nil {
			if ids, perr := q.PendingIDs(); perr == nil && len(ids) == 0 {
				return [][2]uint64{}, nil, http.StatusOK, nil
			}
		}
		return nil, nil, http.StatusConflict, err
	}
	done := [][2]uint64{}
	var unmarked [][2]uint64 // replayed, but still listed (ErrNotMarked)
	var skipped []queue.Skipped
	var err error
	if action == "replay" {
		var rs []queue.Replayed
		rs, skipped, err = s.cfg.Queues.ReplayAllContext(r.Context(), tenant, flowName, queue.SourceReplay, flow.NewUUID)
		for _, r := range rs {
			if r.Unmarked {
				unmarked = append(unmarked, [2]uint64{r.ID, r.Message.ID})
			} else {
				done = append(done, [2]uint64{r.ID, r.Message.ID})
			}
		}
	} else {
		var ids []uint64
		ids, err = s.cfg.Queues.DiscardAllContext(r.Context(), tenant, flowName)
		for _, id := range ids {
			done = append(done, [2]uint64{id, 0})
		}
	}
	auth, _ := s.adminAuth(r)
	if len(done) > 0 {
		s.cfg.Logger.Info("dead letters were handled through the management API", "event", "admin_action", "action", "dlq_"+action+"_all",
			"tenant", tenant, "flow", flowName, "count", len(done), "first_msg_id", done[0][0], "last_msg_id", done[len(done)-1][0],
			"auth", auth.String(), "remote", r.RemoteAddr)
	}
	for _, k := range skipped {
		s.cfg.Logger.Warn("a dead letter was left pending: it cannot be replayed", "event", "dlq_replay_skipped",
			"tenant", tenant, "flow", flowName, "msg_id", k.ID, "payload_size", k.PayloadSize, "auth", auth.String(), "remote", r.RemoteAddr, "error", k.Err.Error())
	}
	switch {
	case err == nil:
		return done, skipped, http.StatusOK, nil
	case errors.Is(err, queue.ErrBudget):
		w.Header().Set("Retry-After", "1")
		return nil, nil, http.StatusServiceUnavailable, fmt.Errorf("%s/%s: %v", tenant, flowName, err)
	case errors.Is(err, queue.ErrPoisoned), errors.Is(err, queue.ErrLockBusy):
		status, err := s.queueUnavailable(w, "dlq_"+action+"_all", tenant, flowName, err)
		if len(done) > 0 {
			err = fmt.Errorf("%d dead letters were handled, then %w", len(done), err)
		}
		return nil, nil, status, err
	case r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// the request ended (its client gone): the run stopped between
		// two chunks, those done stand (logged above), the rest pending
		if len(done) > 0 {
			return nil, nil, http.StatusServiceUnavailable, fmt.Errorf("%d dead letters were handled, then the request ended: the rest are still pending", len(done))
		}
		return nil, nil, http.StatusServiceUnavailable, errors.New("the request ended before any dead letter was handled: nothing was written")
	}
	s.cfg.Logger.Error("dead letters could not be handled", "event", "internal_error", "action", "dlq_"+action+"_all",
		"tenant", tenant, "flow", flowName, "done", len(done), "unmarked", len(unmarked), "auth", auth.String(), "remote", r.RemoteAddr,
		"correlation_id", w.Header().Get("X-Correlation-Id"), "error", err.Error())
	if len(unmarked) > 0 {
		// the operator must know, as for one (doDLQAction): replaying
		// them again would deliver their messages twice
		first, last := unmarked[0], unmarked[len(unmarked)-1]
		msg := fmt.Sprintf("dead letter %d was replayed as message %d but could not be marked replayed, so it is still listed: discard it rather than replaying it again", first[0], first[1])
		if len(unmarked) > 1 {
			msg = fmt.Sprintf("dead letters %d to %d were replayed as messages %d to %d but could not be marked replayed, so they are still listed: discard them rather than replaying them again", first[0], last[0], first[1], last[1])
		}
		if len(done) > 0 {
			msg = fmt.Sprintf("%d dead letters were handled, then %s", len(done), msg)
		}
		return nil, nil, http.StatusInternalServerError, errors.New(msg)
	}
	if len(done) == 0 {
		return nil, nil, http.StatusInternalServerError, errors.New("internal error")
	}
	return nil, nil, http.StatusInternalServerError, fmt.Errorf("%d dead letters were handled, then the rest failed (internal error)", len(done))
}

// queueUnavailable answers a dead-letter action that found the queue's log
// failing (a full disk; the queue is being reopened) or its append lock
// held too long by another process (queue.ErrLockBusy): 503 with
// Retry-After, as /enqueue answers, rather than an internal error.
func (s *Server) queueUnavailable(w http.ResponseWriter, action, tenant, flowName string, err error) (int, error) {
	msg := "a dead-letter action could not be done: the queue's log could not be written"
	if errors.Is(err, queue.ErrLockBusy) {
		msg = "a dead-letter action could not be done: another process holds the queue's append lock"
	}
	s.cfg.Logger.Error(msg, "event", "queue_enqueue_failed",
		"action", action, "tenant", tenant, "flow", flowName, "correlation_id", w.Header().Get("X-Correlation-Id"), "error", err.Error())
	w.Header().Set("Retry-After", "1")
	return http.StatusServiceUnavailable, fmt.Errorf("queue %s/%s could not take the message: %s", tenant, flowName, appendFailure(err))
}

// doDLQAction runs a replay or a discard and says which status answers
// it, with the text to show: 404 for an id that is not pending, 409 for a
// replay into a flow that is not live (its worker would drop the message)
// or of a dead letter whose payload is over the limit of a message,
// 503 when no worker can be started or the queue's log fails (it sets
// Retry-After on w), 500 for a
// failure, logged here and shown as "internal error" unless the operator
// must know (a replay appended but not marked). Each action is logged as
// admin_action with how the request proved the admin key and where it came
// from.
func (s *Server) doDLQAction(w http.ResponseWriter, r *http.Request, action, tenant, flowName string, id uint64) (uint64, int, error) {
	if err := s.cfg.Live.Live().CanReplay(tenant, flowName); action == "replay" && err != nil {
		// an id that is not pending is a 404 first, as it would be once
		// the flow is published
		if q, err := s.cfg.Queues.Peek(tenant, flowName); err == nil {
			if _, err := q.DeadLetter(id); errors.Is(err, queue.ErrNotPending) {
				return 0, http.StatusNotFound, errNotPending(tenant, flowName, id)
			}
		}
		return 0, http.StatusConflict, err
	}
	newID, err := s.dlqAction(r.Context(), action, tenant, flowName, id)
	auth, _ := s.adminAuth(r)
	switch {
	case err == nil:
		s.cfg.Logger.Info("a dead letter was handled through the management API", "event", "admin_action", "action", "dlq_"+action,
			"tenant", tenant, "flow", flowName, "msg_id", id, "replay_msg_id", newID, "auth", auth.String(), "remote", r.RemoteAddr)
		return newID, http.StatusOK, nil
	case errors.Is(err, queue.ErrNotPending):
		return 0, http.StatusNotFound, errNotPending(tenant, flowName, id)
	case errors.Is(err, queue.ErrBudget):
		w.Header().Set("Retry-After", "1")
		return 0, http.StatusServiceUnavailable, fmt.Errorf("%s/%s: %v", tenant, flowName, err)
	case errors.Is(err, queue.ErrPoisoned), errors.Is(err, queue.ErrLockBusy):
		status, err := s.queueUnavailable(w, "dlq_"+action, tenant, flowName, err)
		return 0, status, err
	case errors.Is(err, queue.ErrTooLarge):
		// a payload over the limit of a message (an older nexus wrote
		// it): it never will be replayed, only discarded
		return 0, http.StatusConflict, err
	case r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// the request ended (its client gone) before anything was
		// written: no one's failure, and no one to answer
		return 0, http.StatusServiceUnavailable, err
	}
	s.cfg.Logger.Error("a dead letter could not be handled", "event", "internal_error", "action", "dlq_"+action,
		"tenant", tenant, "flow", flowName, "msg_id", id, "replay_msg_id", newID, "auth", auth.String(), "remote", r.RemoteAddr, "correlation_id", w.Header().Get("X-Correlation-Id"), "error", err.Error())
	if errors.Is(err, queue.ErrNotMarked) {
		return newID, http.StatusInternalServerError, fmt.Errorf("dead letter %d was replayed as message %d but could not be marked replayed, so it is still listed: discard it rather than replaying it again", id, newID)
	}
	return 0, http.StatusInternalServerError, errors.New("internal error")
}

// dlqRequest checks a replay or discard's action and id, answering 400 or
// 404 itself.
func dlqRequest(w http.ResponseWriter, action, idText string) (uint64, bool) {
	if !dlqActionKnown(w, action) {
		return 0, false
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a message id (a whole number from the dead letters' list)", idText))
		return 0, false
	}
	return id, true
}

// dlqActionKnown answers 404 for an action other than replay or discard.
func dlqActionKnown(w http.ResponseWriter, action string) bool {
	if action != "replay" && action != "discard" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such action %q: replay or discard", action))
		return false
	}
	return true
}

// validQueueName applies the name rule to a queue's tenant and flow before
// anything is read, answering 400 naming the pair and the fault.
func validQueueName(w http.ResponseWriter, tenant, flowName string) bool {
	if err := nameError(tenant, flowName); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// nameError is the name rule's error for a queue's tenant or flow, nil
// when both pass.
func nameError(tenant, flowName string) error {
	if err := naming.Check(tenant, naming.Tenant(flowName)); err != nil {
		return err
	}
	return naming.Check(flowName, naming.Flow(tenant))
}

// hasQueues answers 404 when this host runs no queues.
func (s *Server) hasQueues(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Queues == nil {
		writeError(w, http.StatusNotFound, "this host runs no queues: no such endpoint: "+r.Method+" "+r.URL.EscapedPath())
		return false
	}
	return true
}

// journalQuery reads ?tenant=&flow=&correlation_id=&limit=&before= (limit
// 1 to 1000, default 100; before, the next_before of the page before).
// A tenant or flow the name rule refuses is an error, as nexus journal
// says it: no flow could match it, and an empty journal would hide the
// mistake. An empty tenant, flow or correlation_id is an error too (a
// script's unset variable: not the whole journal), but for a form (the
// UI's Journal page), which sends its every field, the ones left empty too.
func journalQuery(r *http.Request, form bool) (registry.JournalQuery, error) {
	jq := registry.JournalQuery{Limit: 100}
	q, err := query(r)
	if err != nil {
		return jq, err
	}
	jq.Tenant, jq.Flow, jq.CorrelationID = q.Get("tenant"), q.Get("flow"), q.Get("correlation_id")
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return jq, fmt.Errorf("limit %q is not a number from 1 to 1000", l)
		}
		jq.Limit = n
	}
	if c := q.Get("before"); c != "" {
		b, err := journalCursor(c)
		if err != nil {
			return jq, err
		}
		jq.Before = b
	}
	if !form {
		// an unset variable in a script: not the whole journal
		if err := emptyError(q, "tenant", "flow", "correlation_id"); err != nil {
			return jq, err
		}
	}
	return jq, filterError(nil, jq.Tenant, jq.Flow)
}

// emptyError is the error of the first of params that q gives empty (a
// script's unset variable: taken as no filter, it would widen the answer),
// nil when none is.
func emptyError(q url.Values, params ...string) error {
	for _, param := range params {
		if q.Has(param) && q.Get(param) == "" {
			return fmt.Errorf("%s is empty: give one, or leave it out", param)
		}
	}
	return nil
}

// filterError is the error of a listing's tenant and flow filters ("" for
// none): the name rule's, as nexus journal says it (no flow could match a
// name it refuses, and an empty answer would hide the mistake), or, when q
// is not nil, emptyError's for one q gives empty.
func filterError(q url.Values, tenant, flowName string) error {
	if q != nil {
		if err := emptyError(q, "tenant", "flow"); err != nil {
			return err
		}
	}
	if tenant != "" {
		field := naming.Tenant(flowName)
		field.Alone = flowName == ""
		if err := naming.Check(tenant, field); err != nil {
			return err
		}
	}
	if flowName != "" {
		field := naming.Flow(tenant)
		field.Alone = tenant == ""
		if err := naming.Check(flowName, field); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) apiJournal(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if _, ok := apiQuery(w, r, "/api/journal", "tenant", "flow", "correlation_id", "limit", "before"); !ok {
		return
	}
	jq, err := journalQuery(r, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.History == nil {
		writeError(w, http.StatusNotFound, "this host keeps no journal: no such endpoint: "+r.Method+" "+r.URL.EscapedPath())
		return
	}
	entries, next, err := s.journalEntries(r.Context(), jq)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := struct {
		Entries    []journalEntry `json:"entries"`
		NextBefore *string        `json:"next_before"` // the next page's ?before=, null after the last
	}{Entries: entries}
	if next != "" {
		out.NextBefore = &next
	}
	writeJSON(w, http.StatusOK, out)
}
