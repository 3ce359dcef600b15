package host_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The UI's own router, its error pages and the page a button returns to.

// routedPage checks wantPage plus X-Content-Type-Options, which wantPage does
// not check.
func routedPage(t *testing.T, w interface {
	Header() http.Header
}, status int, rec func() string) string {
	t.Helper()
	if got := w.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
	}
	return rec()
}

var errorLine = regexp.MustCompile(`<div class="error" role="alert">([^\n<]*)</div>`)

// A method no page takes, whatever its spelling (a lowercase "get", an
// extension method), is answered under /ui/ by the UI's 405 page with the
// page's own Allow, as docs/management.md says of every answer under
// /ui/. The main router forwarded only the nine standard methods to the
// UI's router, so any other method got the main router's JSON 405, whose
// Allow listed methods the page does not take (PUT, PATCH, DELETE,
// CONNECT, TRACE…).
func TestUIOtherMethods(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, tc := range []struct{ method, path, allow string }{
		{"get", "/ui/queues", "GET, HEAD"},
		{"FOO", "/ui/queues", "GET, HEAD"},
		{"PROPFIND", "/ui/", "GET, HEAD"},
		{"post", "/ui/logout", "POST"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := fx.serve(newRequest(tc.method, tc.path, "", bearerAdmin...))
			if ct := w.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q (body %s), want the UI's HTML 405 page", ct, w.Body)
			}
			if w.Code != http.StatusMethodNotAllowed {
				t.Errorf("status %d", w.Code)
			}
			if got := w.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
		})
	}
}

// Paths and methods that try to reach a page around the admin key or the
// form token: none acts, none answers anything but 401, 403, 404 or 405,
// and the refusals without a key are the same for a queue that exists and
// one that does not.
func TestUIRoutingBypass(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"secret":"s3cr3t-payload"}`, `{"n":2}`)
	c := fx.login(t)
	token := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK))

	paths := []string{
		"/ui/queues/acme/echo/dlq/1/discard",
		"/ui//queues/acme/echo/dlq/1/discard",
		"/ui/queues/acme/echo/dlq/1/discard/",
		"/ui/queues/acme/echo/dlq/1/./discard",
		"/ui/queues/acme/echo/dlq/2/../1/discard",
		"/ui/queues/acme%2Fecho/dlq/1/discard",
		"/ui/queues/acme/echo%2Fdlq%2F1%2Fdiscard",
		"/ui/queues/acme/echo/dlq/1/DISCARD",
		"/ui/QUEUES/acme/echo/dlq/1/discard",
		"/UI/queues/acme/echo/dlq/1/discard",
		"/ui/../ui/queues/acme/echo/dlq/1/discard",
		"/api/../ui/queues/acme/echo/dlq/1/discard",
		"/ui/queues/acme/echo/dlq/01/discard",
		"/ui/queues/acme/echo/dlq/+1/discard",
	}
	methods := []string{"POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT", "HEAD", "GET", "post", "Post"}
	for _, p := range paths {
		for _, m := range methods {
			for _, who := range []string{"none", "cookie without token", "cookie cross-site"} {
				r := newRequest(m, p, "csrf=x")
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				switch who {
				case "cookie without token":
					r.AddCookie(c)
				case "cookie cross-site":
					r = newRequest(m, p, url.Values{"csrf": {token}}.Encode(), "Sec-Fetch-Site", "cross-site")
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					r.AddCookie(c)
				}
				w := fx.serve(r)
				switch w.Code {
				case 401, 403, 404, 405:
				default:
					t.Errorf("%s %s (%s): %d %.200s", m, p, who, w.Code, w.Body)
				}
				if strings.Contains(w.Body.String(), "s3cr3t") {
					t.Errorf("%s %s (%s) shows the payload", m, p, who)
				}
				if w.Header().Get("X-Correlation-Id") == "" {
					t.Errorf("%s %s (%s): no X-Correlation-Id", m, p, who)
				}
			}
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("pending after the refused requests: %v, want [1 2]", got)
	}

	// without a key, an existing queue and a missing one look the same
	norm := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	for _, m := range []string{"GET", "PUT", "POST", "OPTIONS"} {
		for _, suffix := range []string{"", "/dlq/1/payload", "/dlq/1/discard", "/more"} {
			a := fx.serve(newRequest(m, "/ui/queues/acme/echo"+suffix, ""))
			b := fx.serve(newRequest(m, "/ui/queues/zeta/nosuch"+suffix, ""))
			ab := strings.ReplaceAll(a.Body.String(), "acme/echo", "X")
			bb := strings.ReplaceAll(b.Body.String(), "zeta/nosuch", "X")
			ab = strings.ReplaceAll(ab, "acme%2Fecho", "X")
			bb = strings.ReplaceAll(bb, "zeta%2Fnosuch", "X")
			if a.Code != b.Code || norm.ReplaceAllString(ab, "") != norm.ReplaceAllString(bb, "") || a.Header().Get("Allow") != b.Header().Get("Allow") {
				t.Errorf("%s …%s: %d vs %d:\n%s\n---\n%s", m, suffix, a.Code, b.Code, ab, bb)
			}
		}
	}
}

// The new error pages escape what they echo (a path, a name) and carry
// the UI's headers, X-Content-Type-Options included; TRACE does not echo
// the request's headers (the cookie).
func TestUIErrorPagesEscapeAndHeaders(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	c := fx.login(t)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/ui/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404},
		{"GET", `/ui/%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E`, 404},
		{"PUT", "/ui/queues/%3Cb%3E/x", 405},
		{"GET", "/ui/queues/%3Cscript%3E/echo/dlq/1/payload", 400},
		{"GET", "/ui/queues/acme/%3Cscript%3E/dlq/1/payload", 400},
		{"GET", "/ui/queues/acme/echo/dlq/%3Cscript%3E/payload", 400},
		{"GET", "/ui/queues/acme/echo/dlq/9/payload", 404},
		{"TRACE", "/ui/", 405},
		{"GET", "/ui/queues/acme/echo?after=%3Cscript%3E", 400},
		{"GET", "/ui/queues/acme/echo?limit=%22%3E%3Cscript%3E", 400},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := newRequest(tc.method, tc.path, "")
			r.AddCookie(c)
			w := fx.serve(r)
			body := routedPage(t, w, tc.status, func() string { return wantPage(t, w, tc.status) })
			lower := strings.ToLower(body)
			for _, bad := range []string{"<script", "<img", "<b>", "onerror=alert"} {
				if strings.Contains(lower, bad) && !strings.Contains(bad, "onerror") {
					t.Errorf("the page holds %q unescaped:\n%s", bad, body)
				}
			}
			if strings.Contains(body, `"><img`) {
				t.Errorf("attribute injection:\n%s", body)
			}
			if strings.Contains(body, c.Value) {
				t.Errorf("the page echoes the session cookie")
			}
			// a bad id under valid names links back to their queue
			badID := strings.HasPrefix(tc.path, "/ui/queues/acme/echo/dlq/")
			if strings.Contains(body, "<a href=\"/ui/queues/%3C") || strings.Contains(body, "Back to the queue") && tc.status != 404 && !badID {
				t.Errorf("a back link for a bad name:\n%s", body)
			}
			if badID && !strings.Contains(body, `<a href="/ui/queues/acme/echo">Back to the queue</a>`) {
				t.Errorf("no link back to the queue:\n%s", body)
			}
		})
	}
}

// A refusal made before the body is read under /ui/ closes the connection
// (a body announced but not sent would otherwise be waited for): 404 and
// 405, chunked or with a length.
func TestUIRefusalsCloseWithBody(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/ui/queues"},
		{"PUT", "/ui/"},
		{"POST", "/ui/nope"},
		{"DELETE", "/ui/queues/acme/echo"},
	} {
		for _, chunked := range []bool{false, true} {
			r := newRequest(tc.method, tc.path, "", "Authorization", "Bearer "+adminKey)
			b := hugeBody(r, 1<<20)
			if chunked {
				r.ContentLength = -1
				r.Header.Del("Content-Length")
				r.TransferEncoding = []string{"chunked"}
			}
			w := fx.serve(r)
			if w.Code != 404 && w.Code != 405 {
				t.Errorf("%s %s: %d", tc.method, tc.path, w.Code)
			}
			if w.Header().Get("Connection") != "close" {
				t.Errorf("%s %s (chunked %v): Connection %q, want close", tc.method, tc.path, chunked, w.Header().Get("Connection"))
			}
			if b.reads.Load() != 0 {
				t.Errorf("%s %s: %d bytes of the body read", tc.method, tc.path, b.reads.Load())
			}
		}
	}
	// a GET with no body keeps its connection
	if w := fx.serve(newRequest("GET", "/ui/nope", "")); w.Header().Get("Connection") != "" {
		t.Errorf("GET /ui/nope: Connection %q", w.Header().Get("Connection"))
	}
}

// The API's answers are as before the UI got its router.
func TestAPIBesideTheUIRouter(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	wantRefusal(t, fx.admin("GET", "/api/nope"), 404, "no such endpoint: GET /api/nope")
	wantRefusal(t, fx.admin("GET", "/api/flows/"), 404, "no such endpoint: GET /api/flows/")
	w := fx.admin("PUT", "/api/flows")
	wantRefusal(t, w, 405, "method PUT is not allowed on /api/flows")
	if got := w.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("Allow %q", got)
	}
	w = fx.admin("GET", "/api/queues/acme/echo/dlq/1/replay")
	wantRefusal(t, w, 405, "method GET is not allowed on /api/queues/acme/echo/dlq/1/replay")
	if got := w.Header().Get("Allow"); got != "POST" {
		t.Errorf("Allow %q", got)
	}
	wantRefusal(t, fx.admin("GET", "/api/queues/acme/echo/dlq/x/payload"), 400, `"x" is not a message id (a whole number from the dead letters' list)`)
	wantRefusal(t, fx.admin("GET", "/api/queues/A/echo/dlq/1/payload"), 400, `invalid name "A" for tenant (flow "echo"): character 'A' at position 1 is not allowed`)
	wantRefusal(t, fx.admin("GET", "/api/queues/acme/echo/dlq/2/payload"), 404, "no pending dead letter id=2 tenant=acme flow=echo")
	wantRefusal(t, fx.serve(newRequest("GET", "/api/queues/acme/echo/dlq/1/payload", "")), 401, "missing or unknown admin key")
	w = fx.admin("GET", "/api/queues/acme/echo/dlq/1/payload")
	if w.Code != 200 || w.Body.String() != `{"n":1}` || w.Header().Get("Content-Disposition") != `attachment; filename="acme-echo-1.payload"` {
		t.Errorf("payload: %d %q %q", w.Code, w.Body, w.Header().Get("Content-Disposition"))
	}
	// a queue with no files: the same 404, for the API and the UI
	wantRefusal(t, fx.admin("GET", "/api/queues/acme/nosuch/dlq/1/payload"), 404, "no pending dead letter id=1 tenant=acme flow=nosuch")
	c := fx.login(t)
	body := wantPage(t, fx.get("/ui/queues/acme/nosuch/dlq/1/payload", c), 404)
	if m := errorLine.FindStringSubmatch(body); m == nil || m[1] != "no pending dead letter id=1 tenant=acme flow=nosuch" {
		t.Errorf("UI: %v", m)
	}
	if got := dirs(t, fx.root); slices.Contains(got, "acme/nosuch") {
		t.Errorf("a queue folder was created: %v", got)
	}
	// without an admin key, /ui/… is the router's JSON 404 for any method
	closed := newAdminFixture(t, adminOptions{})
	for _, m := range []string{"GET", "POST", "OPTIONS", "TRACE"} {
		w := closed.serve(newRequest(m, "/ui/queues", "", bearerAdmin...))
		if w.Code != 404 {
			t.Errorf("no admin key: %s /ui/queues: %d", m, w.Code)
		}
	}
}

// The fields a Replay or Discard form posts back (after, limit) only ever
// make a redirect to the same queue's page with numbers: no other site, no
// other page, whatever they hold.
func TestUIRedirectAfterActionIsLocal(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	var payloads []string
	for i := 1; i <= 12; i++ {
		payloads = append(payloads, fmt.Sprintf(`{"n":%d}`, i))
	}
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	c := fx.login(t)
	token := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK))
	want := regexp.MustCompile(`^/ui/queues/acme/echo\?discarded=\d+(&after=\d+)?(&limit=\d+)?$`)
	id := 0
	for _, f := range []url.Values{
		{"after": {"//evil.example"}},
		{"after": {"18446744073709551615"}},
		{"after": {"18446744073709551616"}},
		{"after": {"-1"}},
		{"after": {"1e3"}},
		{"limit": {"0"}},
		{"limit": {"501"}},
		{"limit": {"500"}, "after": {"3"}},
		{"limit": {"1\r\nLocation: http://evil.example"}},
		{"after": {"3", "https://evil.example"}},
		{"limit": {" 5"}},
	} {
		id++
		f.Set("csrf", token)
		w := fx.post("/ui/queues/acme/echo/dlq/"+strconv.Itoa(id)+"/discard", c, f)
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther || !want.MatchString(loc) {
			t.Errorf("fields %v: %d Location %q", f, w.Code, loc)
			continue
		}
		// and the page it sends to answers 200
		wantPage(t, fx.get(loc, c), http.StatusOK)
	}
}

// pageRows are the ids of a Queue page's rows.
func pageRows(body string) []uint64 {
	var ids []uint64
	for _, m := range idRow.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		ids = append(ids, n)
	}
	return ids
}

var nextPageLink = regexp.MustCompile(`<a href="([^"]*)" rel="next">Next page</a>`)

// lastPageAfter follows the Next page links from the first page at limit and
// returns the last page's after (0 for the first).
func lastPageAfter(t *testing.T, fx *adminFixture, c *http.Cookie, base string, limit int) uint64 {
	t.Helper()
	page := base + "?limit=" + strconv.Itoa(limit)
	var after uint64
	for range 100 {
		body := wantPage(t, fx.get(page, c), http.StatusOK)
		m := nextPageLink.FindStringSubmatch(body)
		if m == nil {
			return after
		}
		page = html.UnescapeString(m[1])
		u, _ := url.Parse(page)
		after, _ = strconv.ParseUint(u.Query().Get("after"), 10, 64)
	}
	t.Fatal("no last page")
	return 0
}

// With ids not contiguous and the largest page (500), a button on the last
// page whose entries another process removed meanwhile lands on the last
// page as the Next page links count it, both when it succeeds and when it
// fails (its dead letter gone too).
func TestUIButtonOnEmptiedLastPageAtMaxLimit(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	const n = 1120
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = strconv.Itoa(i + 1)
	}
	seedDeadLetters(t, fx.root, "acme", "many", payloads...)
	// holes: ids not contiguous (pending 1100)
	var holes []uint64
	for id := uint64(3); len(holes) < 20; id += 37 {
		holes = append(holes, id)
	}
	discard := func(id uint64) {
		t.Helper()
		if w := fx.admin(http.MethodPost, fmt.Sprintf("/api/queues/acme/many/dlq/%d/discard", id)); w.Code != 200 {
			t.Fatalf("discard %d: %d %s", id, w.Code, w.Body)
		}
	}
	for _, id := range holes {
		discard(id)
	}
	c := fx.login(t)
	base := "/ui/queues/acme/many"
	last := lastPageAfter(t, fx, c, base, 500)
	page := fmt.Sprintf("%s?after=%d&limit=500", base, last)
	body := wantPage(t, fx.get(page, c), http.StatusOK)
	token := csrfOf(t, body)
	rows := pageRows(body)
	if len(rows) != 100 {
		t.Fatalf("the last page has %d rows, want 100", len(rows))
	}
	// another process empties the last page but two entries
	for _, id := range rows[:98] {
		discard(id)
	}
	// the user discards one of the two: the page still lists one
	form := url.Values{"csrf": {token}, "after": {strconv.FormatUint(last, 10)}, "limit": {"500"}}
	w := fx.post(fmt.Sprintf("%s/dlq/%d/discard", base, rows[98]), c, form)
	if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != fmt.Sprintf("%s?discarded=%d&after=%d&limit=500", base, rows[98], last) {
		t.Errorf("%d Location %q", w.Code, loc)
	}
	// then the last: back to the page before, as the Next links count it
	w = fx.post(fmt.Sprintf("%s/dlq/%d/discard", base, rows[99]), c, form)
	wantLast := lastPageAfter(t, fx, c, base, 500)
	if wantLast == 0 || wantLast == last {
		t.Fatalf("the last page after %d", wantLast)
	}
	if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != fmt.Sprintf("%s?discarded=%d&after=%d&limit=500", base, rows[99], wantLast) {
		t.Errorf("%d Location %q, want after=%d", w.Code, loc, wantLast)
	} else {
		got := pageRows(wantPage(t, fx.get(loc, c), http.StatusOK))
		if len(got) != 500 {
			t.Errorf("the page it lands on has %d rows", len(got))
		}
	}
	// a second click on the same button (its dead letter gone): the same
	// last page with the error
	w = fx.post(fmt.Sprintf("%s/dlq/%d/discard", base, rows[99]), c, form)
	body = wantPage(t, w, http.StatusNotFound)
	if !strings.Contains(body, fmt.Sprintf("<input type=\"hidden\" name=\"after\" value=\"%d\"><input type=\"hidden\" name=\"limit\" value=\"500\">", wantLast)) {
		t.Errorf("the error page's buttons do not carry the last page")
	}
	if got := pageRows(body); len(got) != 500 {
		t.Errorf("the error page lists %d rows", len(got))
	}
}

var (
	prevPageLink = regexp.MustCompile(`<a href="([^"]*)" rel="prev">Previous page</a>`)
	lastPageLink = regexp.MustCompile(`<a href="([^"]*)">Last page</a>`)
)

// TestUIQueuePagesBackwards: the Queue page links to the last page (as the
// Next links count the pages) and back, page by page: from the last page
// the Previous links walk every pending dead letter once, to the first
// page, which has no Previous link. The page had First and Next only.
func TestUIQueuePagesBackwards(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	payloads := make([]string, 23)
	for i := range payloads {
		payloads[i] = strconv.Itoa(i + 1)
	}
	seedDeadLetters(t, fx.root, "acme", "many", payloads...)
	for _, id := range []uint64{4, 9, 10} { // holes
		if w := fx.admin(http.MethodPost, fmt.Sprintf("/api/queues/acme/many/dlq/%d/discard", id)); w.Code != 200 {
			t.Fatalf("discard %d: %d %s", id, w.Code, w.Body)
		}
	}
	c := fx.login(t)
	const base = "/ui/queues/acme/many"
	follow := func(link *regexp.Regexp, body string) (string, bool) {
		m := link.FindStringSubmatch(body)
		if m == nil {
			return "", false
		}
		return html.UnescapeString(m[1]), true
	}
	first := wantPage(t, fx.get(base+"?limit=5", c), http.StatusOK)
	if _, ok := follow(prevPageLink, first); ok {
		t.Errorf("the first page links to a previous one")
	}
	page, ok := follow(lastPageLink, first)
	if !ok {
		t.Fatalf("the first page has no Last page link:\n%s", first)
	}
	u, _ := url.Parse(page)
	if got, want := u.Query().Get("after"), strconv.FormatUint(lastPageAfter(t, fx, c, base, 5), 10); got != want || u.Query().Get("limit") != "5" {
		t.Errorf("the Last page link %q: after=%s, want %s (where the Next links end) and limit=5", page, got, want)
	}
	var seen []uint64
	for range 10 {
		body := wantPage(t, fx.get(page, c), http.StatusOK)
		seen = append(pageRows(body), seen...)
		if page, ok = follow(prevPageLink, body); !ok {
			break
		}
	}
	var want []uint64
	for id := uint64(1); id <= 23; id++ {
		if id != 4 && id != 9 && id != 10 {
			want = append(want, id)
		}
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("the pages walked back from the last (-want +got):\n%s", diff)
	}
}
