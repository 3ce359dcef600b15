package host

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/nexushq/nexus/queue"
)

// The management UI (/ui/): pages rendered on the server from the same
// views as the API, with plain HTML forms for logging in and for the
// dead letters' Replay and Discard buttons (no JavaScript). See
// docs/management.md.

//go:embed ui/*.html
var uiFiles embed.FS

var uiTemplates = template.Must(parsePages())

// parsePages parses the UI's page templates.
func parsePages() (*template.Template, error) {
	return template.New("").Funcs(template.FuncMap{
		"short": func(sha optional) string { return string(sha[:min(len(sha), 12)]) },
		"path":  url.PathEscape,
		"last":  func(v []deadLetterEntry) int { return len(v) - 1 },
	}).ParseFS(uiFiles, "ui/*.html")
}

// uiPage is what every page template gets.
type uiPage struct {
	Title   string
	Nav     string // the navigation entry to highlight
	CSRF    string // the forms' token ("" when the request used the bearer key)
	Notice  string // a success to report
	Error   string // a failure to report
	Data    any
	LoginTo string // the login form's destination after login
	Refresh string // a page to send the browser to at once
	Back    string // an error page's way back to its queue ("": to the flows)
}

// render executes a page into a buffer first, so that a failing template
// answers 500 with the UI's error page (pageError) rather than half a
// page; when the error page is what fails, with failedPage.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p uiPage) {
	var b bytes.Buffer
	if err := s.pages.ExecuteTemplate(&b, name, p); err != nil {
		err = fmt.Errorf("the page template %q failed: %w", name, err)
		if name == "error" {
			s.logInternalError(w, r, err)
			writePage(w, http.StatusInternalServerError, []byte(failedPage(w.Header().Get("X-Correlation-Id"))))
		} else {
			s.pageError(w, r, err)
		}
		return
	}
	writePage(w, status, b.Bytes())
}

// writePage answers status with the page, under the UI's headers.
func writePage(w http.ResponseWriter, status int, page []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// no Referer beyond this origin: a page's address holds a queue's or a
	// filter's names (same-origin, not no-referrer, which would make a
	// browser send Origin: null with the forms)
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	w.Write(page)
}

// pageError logs err and answers 500 with the UI's error page, which
// names the request's correlation ID (the log's key to the details), not
// the error. When the error page itself fails, the plain failedPage
// answers, and the one internal_error line names both failures.
func (s *Server) pageError(w http.ResponseWriter, r *http.Request, err error) {
	cid := w.Header().Get("X-Correlation-Id")
	var b bytes.Buffer
	if perr := s.pages.ExecuteTemplate(&b, "error", uiPage{Title: "Internal error", Error: internalErrorText + cid + "."}); perr != nil {
		err = fmt.Errorf("%w; then the page template \"error\" failed: %w", err, perr)
		b.Reset()
		b.WriteString(failedPage(cid))
	}
	s.logInternalError(w, r, err)
	writePage(w, http.StatusInternalServerError, b.Bytes())
}

// logInternalError logs a management request's failure as internal_error,
// with its path and correlation ID.
func (s *Server) logInternalError(w http.ResponseWriter, r *http.Request, err error) {
	s.cfg.Logger.Error("a management request failed", "event", "internal_error", "path", r.URL.Path,
		"correlation_id", w.Header().Get("X-Correlation-Id"), "error", err.Error())
}

// internalErrorText begins what a UI page of an internal error says; the
// correlation ID follows.
const internalErrorText = "Something failed in the host; its log has the details under correlation ID "

// failedPage is the page of a failure when the UI's error page itself
// fails: plain HTML, with no template, naming the correlation ID.
func failedPage(cid string) string {
	return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Internal error · Nexus</title>\n</head>\n<body>\n" +
		"<h1>Internal error</h1>\n<p>" + internalErrorText +
		template.HTMLEscapeString(cid) + ".</p>\n<p><a href=\"/ui/\">Back to the flows</a></p>\n</body>\n</html>\n"
}

// page wraps a UI handler with the admin key check: without the key or a
// session, 401 with a page that sends the browser to the login form; 403
// for a form posted with the session but without its token.
func (s *Server) page(h func(http.ResponseWriter, *http.Request, httprouter.Params, string)) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		auth, session, origin := s.authorizeForm(w, r)
		switch {
		case auth == authNone:
			s.unauthorizedPage(w, r)
		case origin != originOK:
			s.render(w, r, http.StatusForbidden, "error", uiPage{Title: "Forbidden", Error: uiOriginRefusals[origin]})
		default:
			csrf := ""
			if auth == authSession {
				csrf = s.csrfToken(session)
			}
			h(w, r, ps, csrf)
		}
	}
}

// unauthorizedPage answers a request without the admin key or a session:
// 401 with a page that sends the browser to the login form, and back to
// the page it asked for (a GET) once logged in.
func (s *Server) unauthorizedPage(w http.ResponseWriter, r *http.Request) {
	// the same for every path, a page or not: no Allow, and a body left
	// unread closes the connection (closeUnread)
	w.Header().Del("Allow")
	closeUnread(w, r)
	to := "/ui/"
	if r.Method == http.MethodGet {
		to = r.URL.RequestURI()
	}
	w.Header().Set("WWW-Authenticate", "Bearer")
	login := "/ui/login?next=" + url.QueryEscape(to)
	s.render(w, r, http.StatusUnauthorized, "unauthorized", uiPage{Title: "Log in", LoginTo: login, Refresh: login})
}

// uiOriginRefusals are the UI's 403 texts for a form posted with the
// session that is not the UI's own.
var uiOriginRefusals = map[originRefusal]string{
	originOtherSite: "This form was sent from another site, which the UI does not take: use the UI's own pages.",
	originTooLarge:  "This form is larger than the 64 KiB a form may hold.",
	originNoToken:   "This form was not sent from the UI's own page (its token is missing or stale): reload the page and try again.",
}

// localNext is where to go after logging in: a page of the UI, never
// another site or another part of this one (a path that is not clean, such
// as /ui/../status, is refused).
func localNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if clean != u.Path || !strings.HasPrefix(clean, "/ui/") {
		return "/ui/"
	}
	// the query encoded again, in its order: it may hold what a Location
	// header should not carry as it is (quotes, angle brackets)
	var query []string
	for part := range strings.SplitSeq(u.RawQuery, "&") {
		k, v, hasValue := strings.Cut(part, "=")
		k, kerr := url.QueryUnescape(k)
		v, verr := url.QueryUnescape(v)
		if kerr != nil || verr != nil {
			return "/ui/"
		}
		if hasValue {
			query = append(query, url.QueryEscape(k)+"="+url.QueryEscape(v))
		} else if k != "" {
			query = append(query, url.QueryEscape(k))
		}
	}
	u.RawQuery, u.ForceQuery = strings.Join(query, "&"), false
	return u.RequestURI()
}

// uiLoginForm is the login form; a browser that already holds a session
// is sent on to the page it asked for. The cookie is SameSite=Strict, so
// a link from another site to a page comes without it, and that page's
// 401 sends the browser here: this request, the UI's own navigation,
// carries the cookie, and the operator lands on the page linked rather
// than being asked for the key again.
func (s *Server) uiLoginForm(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	correlationID(w, r)
	next := localNext(r.URL.Query().Get("next"))
	if auth, _ := s.adminAuth(r); auth == authSession {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", uiPage{Title: "Log in", LoginTo: next})
}

// uiLogin checks the key field and sets the session cookie.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	correlationID(w, r)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	next := localNext(r.URL.Query().Get("next"))
	// a form that cannot be read is said as such, not taken for a wrong
	// key (and not logged as a failed login)
	if status, why := loginFormRefusal(r); status != 0 {
		closeUnread(w, r) // the body may be left unread
		s.render(w, r, status, "login", uiPage{Title: "Log in", LoginTo: next, Error: why})
		return
	}
	// trimmed, as the configured key is: a key pasted with its newline
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" || !s.isAdminKey(key) {
		// limited as the doors' refusals are: anyone may post wrong keys
		if ok, suppressed := s.failedLogins.allow(s.cfg.Now()); ok {
			s.cfg.Logger.Warn("a UI login failed", "event", "ui_login_failed", "remote", r.RemoteAddr, "suppressed", suppressed)
		}
		s.render(w, r, http.StatusUnauthorized, "login", uiPage{Title: "Log in", LoginTo: next, Error: "That is not the admin key."})
		return
	}
	now := s.cfg.Now()
	setSession(w, r, s.newSession(now), now.Add(sessionTTL))
	s.cfg.Logger.Info("a UI session started", "event", "ui_login", "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// loginFormRefusal is the status and the text of a login form that cannot
// be read (0 when it can): sent as something other than a form (415), over
// maxFormBytes (413), or not a form's encoding (400).
func loginFormRefusal(r *http.Request) (int, string) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case err != nil || mt != "application/x-www-form-urlencoded" && mt != "multipart/form-data":
		return http.StatusUnsupportedMediaType, "This login was not sent as a form (application/x-www-form-urlencoded): use the login page."
	case mt == "multipart/form-data":
		err = r.ParseMultipartForm(maxFormBytes)
	default:
		err = r.ParseForm()
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, "This form is larger than the 64 KiB a form may hold."
	default:
		return http.StatusBadRequest, "This form could not be read (it is not encoded as a form is): use the login page."
	}
}

func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ string) {
	setSession(w, r, "", s.cfg.Now())
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func (s *Server) uiFlows(w http.ResponseWriter, r *http.Request, _ httprouter.Params, csrf string) {
	v, err := s.flowsView(r.Context())
	if err != nil {
		s.pageError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "flows", uiPage{Title: "Flows", Nav: "flows", CSRF: csrf, Data: v})
}

// queuesPage is the Queues page's data.
type queuesPage struct {
	Tenant, Flow string // the filters, as typed ("" for none)
	Filtered     bool   // a filter was given
	Refused      bool   // the filters were refused: nothing was read
	// Keep is what a link to a Queue page adds to keep the filters
	// ("?list_tenant=…&list_flow=…"), "" when there are none
	Keep   string
	Queues []queueEntry
}

// uiQueues is the Queues page: every queue, or those of ?tenant= and
// ?flow= as GET /api/queues takes them (an empty field is no filter, as on
// the Journal page, since the page's form sends its empty fields).
func (s *Server) uiQueues(w http.ResponseWriter, r *http.Request, _ httprouter.Params, csrf string) {
	p := uiPage{Title: "Queues", Nav: "queues", CSRF: csrf}
	q, err := query(r)
	data := queuesPage{Tenant: q.Get("tenant"), Flow: q.Get("flow")}
	data.Filtered = data.Tenant != "" || data.Flow != ""
	p.Data = &data
	if err == nil {
		err = filterError(nil, data.Tenant, data.Flow)
	}
	if err != nil {
		// nothing was read: the page says so, and its form keeps what
		// was typed
		data.Refused = true
		p.Error = querySentence(err)
		s.render(w, r, http.StatusBadRequest, "queues", p)
		return
	}
	if s.cfg.Queues == nil {
		p.Error = "This host runs no queues."
		s.render(w, r, http.StatusOK, "queues", p)
		return
	}
	if keep := listQuery(data.Tenant, data.Flow).Encode(); keep != "" {
		data.Keep = "?" + keep
	}
	data.Queues = s.queueEntries(data.Tenant, data.Flow)
	s.render(w, r, http.StatusOK, "queues", p)
}

// queuePage is the Queue page's data.
type queuePage struct {
	Tenant, Flow string
	Queue        *queueEntry // nil when the queue has no files
	Page         deadLetterPage
	After        uint64 // the page starts after this id (0: the first page)
	Limit        int    // the page size asked for, kept by the page links (0: the default)
	// NoReplay is why its dead letters cannot be replayed now (the flow is
	// not live, or its artifact is corrupt), "" when they can: the page
	// then offers Discard alone, rather than a Replay that answers 409
	NoReplay string
	// ListTenant and ListFlow are the Queues page's filters the operator
	// came from (list_tenant, list_flow): the page's links and buttons
	// keep them, and its link back leads to the list so filtered
	ListTenant, ListFlow string
}

// ListLink is the Queues page as the operator filtered it.
func (d queuePage) ListLink() string {
	if q := (url.Values{"tenant": nonEmpty(d.ListTenant), "flow": nonEmpty(d.ListFlow)}).Encode(); q != "" {
		return "/ui/queues?" + q
	}
	return "/ui/queues"
}

// PageLink is the link to the page of the queue's dead letters after
// after (0: the first), keeping the page size and the list's filters.
func (d queuePage) PageLink(after uint64) string {
	q := listQuery(d.ListTenant, d.ListFlow)
	if after != 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if d.Limit != 0 {
		q.Set("limit", strconv.Itoa(d.Limit))
	}
	link := "/ui/queues/" + url.PathEscape(d.Tenant) + "/" + url.PathEscape(d.Flow)
	if e := q.Encode(); e != "" {
		link += "?" + e
	}
	return link
}

// Keep is what a link from the page adds to keep the list's filters
// ("?list_tenant=…&list_flow=…"), "" when there are none.
func (d queuePage) Keep() string {
	if q := listQuery(d.ListTenant, d.ListFlow).Encode(); q != "" {
		return "?" + q
	}
	return ""
}

// nonEmpty is v as a parameter's values: none when v is "".
func nonEmpty(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// listQuery is the query a Queue page's link adds to keep the Queues
// page's filters tenant and flowName: list_tenant and list_flow, each
// when given.
func listQuery(tenant, flowName string) url.Values {
	return url.Values{"list_tenant": nonEmpty(tenant), "list_flow": nonEmpty(flowName)}
}

// listFilters are the Queues page's filters a request to a Queue page
// keeps (list_tenant and list_flow, of the link's query or a button's
// form); a pair the list would refuse is dropped: it only leads back.
func listFilters(r *http.Request) (tenant, flowName string) {
	tenant, flowName = r.FormValue("list_tenant"), r.FormValue("list_flow")
	if filterError(nil, tenant, flowName) != nil {
		return "", ""
	}
	return tenant, flowName
}

// keepList is what a redirect to a Queue page whose query is not empty
// adds to keep the list's filters of r ("&list_tenant=…"), "" for none.
func keepList(r *http.Request) string {
	if q := listQuery(listFilters(r)).Encode(); q != "" {
		return "&" + q
	}
	return ""
}

// uiQueue is the Queue page: a queue's counts and its pending dead
// letters with Replay and Discard buttons.
func (s *Server) uiQueue(w http.ResponseWriter, r *http.Request, ps httprouter.Params, csrf string) {
	tenant, flowName := ps.ByName("tenant"), ps.ByName("flow")
	p := uiPage{Title: "Queue " + tenant + "/" + flowName, Nav: "queues", CSRF: csrf}
	// the notice of a button's redirect: numbers only, so that a link
	// cannot make the page say anything else
	q := r.URL.Query()
	id, idErr := strconv.ParseUint(q.Get("replayed"), 10, 64)
	as, asErr := strconv.ParseUint(q.Get("as"), 10, 64)
	if idErr == nil && asErr == nil {
		p.Notice = fmt.Sprintf("Dead letter %d was replayed as message %d.", id, as)
	} else if id, err := strconv.ParseUint(q.Get("discarded"), 10, 64); err == nil {
		p.Notice = fmt.Sprintf("Dead letter %d was discarded; its body leaves the disk at the queue's next drain.", id)
	} else if n, err := strconv.ParseUint(q.Get("replay_all"), 10, 64); err == nil {
		p.Notice = fmt.Sprintf("%d dead letters were replayed, each as a new message at the back of the queue.", n)
		if k, err := strconv.ParseUint(q.Get("skipped"), 10, 64); err == nil && k > 0 {
			p.Notice += fmt.Sprintf(" %d were left pending: their payloads are over %d bytes, the most a message holds, so they can only be discarded.", k, queue.MaxPayload)
		}
	} else if n, err := strconv.ParseUint(q.Get("discard_all"), 10, 64); err == nil {
		p.Notice = fmt.Sprintf("%d dead letters were discarded; their bodies leave the disk at the queue's next drain.", n)
	}
	status := http.StatusOK
	after, limit, err := pageQuery(r)
	if err != nil {
		// a bad link: 400, as the Journal page and the API answer, with
		// the first page under the error
		p.Error = querySentence(err)
		after, limit, status = 0, defaultPageSize, http.StatusBadRequest
	}
	s.renderQueue(w, r, status, tenant, flowName, p, after, limit)
}

// renderQueue shows the Queue page: the page of dead letters after after,
// limit to a page.
func (s *Server) renderQueue(w http.ResponseWriter, r *http.Request, status int, tenant, flowName string, p uiPage, after uint64, limit int) {
	if s.cfg.Queues == nil {
		p.Error = "This host runs no queues."
		s.render(w, r, http.StatusNotFound, "error", p)
		return
	}
	if err := nameError(tenant, flowName); err != nil {
		p.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, "error", p)
		return
	}
	data := queuePage{Tenant: tenant, Flow: flowName, After: after}
	data.ListTenant, data.ListFlow = listFilters(r)
	if err := s.cfg.Live.Live().CanReplay(tenant, flowName); err != nil {
		data.NoReplay = err.Error()
	}
	if limit != defaultPageSize {
		data.Limit = limit
	}
	if info, ok := s.cfg.Queues.Info(tenant, flowName); ok {
		e := s.queueEntry(info)
		data.Queue = &e
	}
	data.Page = s.deadLetterPage(tenant, flowName, after, limit) // its Error says what could not be read
	p.Data = data
	s.render(w, r, status, "queue", p)
}

// querySentence is a refused query's error as a page says it: one
// sentence, a parameter's name after "The" ("The limit "0" is not …").
func querySentence(err error) string {
	msg := err.Error()
	for _, param := range []string{"limit ", "after ", "before "} {
		if strings.HasPrefix(msg, param) {
			return "The " + msg + "."
		}
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}

// pageAfterAction is the page a button sends the browser back to: its
// own (after, limit), sent by the form, while it still lists a dead
// letter; else the last page, as the Next page links count the pages
// (limit at a time from the first); the first when none is pending. A
// failure to read keeps after.
func (s *Server) pageAfterAction(r *http.Request, tenant, flowName string) (after uint64, limit int) {
	after, limit, err := pageValues(r.PostFormValue("after"), r.PostFormValue("limit"))
	if err != nil {
		return 0, defaultPageSize // not sent by the page's form: the first page
	}
	if after == 0 {
		return 0, limit
	}
	q, err := s.cfg.Queues.Peek(tenant, flowName)
	if err != nil {
		return after, limit
	}
	// the ids alone, in one scan: what a page lists is known from them
	ids, err := q.PendingIDs()
	switch {
	case err != nil:
		return after, limit
	case len(ids) == 0:
		return 0, limit
	case ids[len(ids)-1] > after:
		return after, limit // the page still lists a dead letter
	}
	first := (len(ids) - 1) / limit * limit // the last page's first entry, counted from 0
	if first == 0 {
		return 0, limit
	}
	return ids[first-1], limit
}

// pageLink is the query of the Queue page at (after, limit), "" for the
// first page at the default size; sep is "?" or "&".
func pageLink(after uint64, limit int, sep string) string {
	v := ""
	if after != 0 {
		v += fmt.Sprintf("%safter=%d", sep, after)
		sep = "&"
	}
	if limit != defaultPageSize {
		v += fmt.Sprintf("%slimit=%d", sep, limit)
	}
	return v
}

// uiDLQAction is a Replay or Discard button: on success it sends the
// browser back to the Queue page (which then reports it), else it shows
// the page again with the error.
func (s *Server) uiDLQAction(w http.ResponseWriter, r *http.Request, ps httprouter.Params, csrf string) {
	tenant, flowName, action := ps.ByName("tenant"), ps.ByName("flow"), ps.ByName("action")
	p := uiPage{Title: "Queue " + tenant + "/" + flowName, Nav: "queues", CSRF: csrf}
	if err := nameError(tenant, flowName); err != nil {
		p.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, "error", p)
		return
	}
	if action != "replay" && action != "discard" {
		p.Error = fmt.Sprintf("There is no %q action: the buttons are Replay and Discard.", action)
		s.render(w, r, http.StatusNotFound, "error", p)
		return
	}
	all := ps.ByName("id") == "all"
	id, err := strconv.ParseUint(ps.ByName("id"), 10, 64)
	if !all && (err != nil || id == 0) {
		p.Error = fmt.Sprintf("%q is not a dead letter's id (a whole number from the list).", ps.ByName("id"))
		s.render(w, r, http.StatusBadRequest, "error", p)
		return
	}
	if s.cfg.Queues == nil {
		p.Error = "This host runs no queues."
		s.render(w, r, http.StatusNotFound, "error", p)
		return
	}
	if all {
		// the Replay all button: every pending dead letter, oldest first
		done, skipped, status, err := s.doDLQActionAll(w, r, action, tenant, flowName)
		after, limit := s.pageAfterAction(r, tenant, flowName)
		if err != nil {
			p.Error = actionError(w, status, err)
			s.renderQueue(w, r, status, tenant, flowName, p, after, limit)
			return
		}
		notice := fmt.Sprintf("?%s_all=%d", action, len(done))
		if len(skipped) > 0 {
			notice += fmt.Sprintf("&skipped=%d", len(skipped))
		}
		http.Redirect(w, r, "/ui/queues/"+url.PathEscape(tenant)+"/"+url.PathEscape(flowName)+notice+pageLink(after, limit, "&")+keepList(r), http.StatusSeeOther)
		return
	}
	newID, status, err := s.doDLQAction(w, r, action, tenant, flowName, id)
	// back to the page the button was on (its form sends after and limit)
	after, limit := s.pageAfterAction(r, tenant, flowName)
	if err != nil {
		p.Error = actionError(w, status, err)
		s.renderQueue(w, r, status, tenant, flowName, p, after, limit)
		return
	}
	back := "/ui/queues/" + url.PathEscape(tenant) + "/" + url.PathEscape(flowName)
	if action == "replay" {
		back += fmt.Sprintf("?replayed=%d&as=%d", id, newID)
	} else {
		back += fmt.Sprintf("?discarded=%d", id)
	}
	http.Redirect(w, r, back+pageLink(after, limit, "&")+keepList(r), http.StatusSeeOther)
}

// actionError is the text a button that failed shows: a failure in the
// host (500) names the request's correlation ID, the key to its
// internal_error line in the log, as pageError does.
func actionError(w http.ResponseWriter, status int, err error) string {
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg += "; the host's log has the details under correlation ID " + w.Header().Get("X-Correlation-Id") + "."
	}
	return msg
}

// uiPayload is a dead letter's download link: the payload, or an error
// page (404 for a dead letter that is no longer pending, a stale link;
// 400 for an id that is no message id; 503 for dead-letter files that
// cannot be read), with a link back to the queue. A tenant or flow that
// is no valid name (400) names no queue: its page links to the flows.
func (s *Server) uiPayload(w http.ResponseWriter, r *http.Request, ps httprouter.Params, csrf string) {
	d, status, err := s.findPayload(ps)
	if err == nil {
		s.writePayload(w, ps, d)
		return
	}
	tenant, flowName := ps.ByName("tenant"), ps.ByName("flow")
	p := uiPage{Title: "Queue " + tenant + "/" + flowName, Nav: "queues", CSRF: csrf, Error: oneLine(err.Error())}
	// back to the queue, keeping the list's filters the link carries
	back := queuePage{Tenant: tenant, Flow: flowName}
	back.ListTenant, back.ListFlow = listFilters(r)
	switch {
	case status == http.StatusNotFound && s.cfg.Queues != nil:
		p.Title = "Dead letter not found"
		p.Back = back.PageLink(0)
	case status == http.StatusServiceUnavailable:
		p.Back = back.PageLink(0)
	case status == http.StatusBadRequest && nameError(tenant, flowName) == nil:
		p.Back = back.PageLink(0) // the names are the queue's; the id is not one
	}
	s.render(w, r, status, "error", p)
}

// uiNotFound answers a path under /ui/ that is no page with the UI's 404
// page (the API's paths keep their JSON).
func (s *Server) uiNotFound(w http.ResponseWriter, r *http.Request) {
	s.uiRefusal(w, r, http.StatusNotFound, "Page not found", "There is no page at "+r.URL.EscapedPath()+".")
}

// uiMethodNotAllowed answers a method a page of the UI does not take
// (GET /ui/logout, a form posted to a page) with the UI's 405 page; Allow
// names the methods it takes.
func (s *Server) uiMethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allow := allowWithoutOptions(w.Header())
	s.uiRefusal(w, r, http.StatusMethodNotAllowed, "Method not allowed",
		"The page "+r.URL.EscapedPath()+" does not answer "+r.Method+" (it answers "+allow+").")
}

// uiRefusal is the UI's error page for a request no page takes, made
// before its body is read (the connection closes after it when it has
// one: closeUnread). The navigation has its Log out button when
// the request came with a session.
func (s *Server) uiRefusal(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	correlationID(w, r)
	closeUnread(w, r)
	auth, session := s.adminAuth(r)
	if auth == authNone {
		// which pages exist is not told before the key is shown
		s.unauthorizedPage(w, r)
		return
	}
	p := uiPage{Title: title, Error: oneLine(msg)}
	if auth == authSession {
		p.CSRF = s.csrfToken(session)
	}
	s.render(w, r, status, "error", p)
}

// journalPage is the Journal page's data.
type journalPage struct {
	Tenant, Flow  string
	CorrelationID string
	Limit         string // as the form shows it: the number read, or what was typed when it is refused
	Entries       []journalEntry
	Older         string // the link to the older page, "" when there is none
	// Filtered: a filter was given; Paged: the page is an older one (a
	// page that lists nothing says which, not that the journal is empty);
	// Refused: the filters were refused, so the journal was not read
	Filtered, Paged, Refused bool
}

func (s *Server) uiJournal(w http.ResponseWriter, r *http.Request, _ httprouter.Params, csrf string) {
	p := uiPage{Title: "Journal", Nav: "journal", CSRF: csrf}
	jq, err := journalQuery(r, true) // the page's form sends its empty fields
	data := journalPage{Tenant: jq.Tenant, Flow: jq.Flow, CorrelationID: jq.CorrelationID, Limit: strconv.Itoa(jq.Limit),
		Filtered: jq.Tenant != "" || jq.Flow != "" || jq.CorrelationID != "", Paged: r.URL.Query().Get("before") != ""}
	p.Data = &data
	if err != nil {
		// nothing was read: the page says so, not that nothing matched,
		// and its form keeps the limit typed, which the error names
		data.Refused = true
		if l := r.URL.Query().Get("limit"); l != "" {
			data.Limit = l
		}
		p.Error = querySentence(err)
		s.render(w, r, http.StatusBadRequest, "journal", p)
		return
	}
	if s.cfg.History == nil {
		p.Error = "This host keeps no journal."
		s.render(w, r, http.StatusOK, "journal", p)
		return
	}
	var next string
	if data.Entries, next, err = s.journalEntries(r.Context(), jq); err != nil {
		s.pageError(w, r, err)
		return
	}
	if next != "" {
		// the filters as they were, and only those given
		q := url.Values{"limit": {strconv.Itoa(jq.Limit)}, "before": {next}}
		for k, v := range map[string]string{"tenant": jq.Tenant, "flow": jq.Flow, "correlation_id": jq.CorrelationID} {
			if v != "" {
				q.Set(k, v)
			}
		}
		data.Older = "/ui/journal?" + q.Encode()
	}
	s.render(w, r, http.StatusOK, "journal", p)
}
