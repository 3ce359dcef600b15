package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The management UI (/ui/): the login form and its session cookie, the
// forms' token, and the pages.

// loginRequest posts key to /ui/login, with ?next= when next is set.
func loginRequest(key, next string, header ...string) *http.Request {
	path := "/ui/login"
	if next != "" {
		path += "?next=" + url.QueryEscape(next)
	}
	r := newRequest(http.MethodPost, path, url.Values{"key": {key}}.Encode(), header...)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// sessionOf is the nexus_session cookie an answer sets, nil when none.
func sessionOf(w *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range w.Result().Cookies() {
		if c.Name == "nexus_session" {
			return c
		}
	}
	return nil
}

// login logs in with the admin key and returns the session cookie.
func (fx *adminFixture) login(t *testing.T) *http.Cookie {
	t.Helper()
	w := fx.serve(loginRequest(adminKey, ""))
	c := sessionOf(w)
	if w.Code != http.StatusSeeOther || c == nil || c.Value == "" {
		t.Fatalf("logging in: %d %v %s", w.Code, w.Result().Cookies(), w.Body)
	}
	return &http.Cookie{Name: c.Name, Value: c.Value}
}

// get sends GET path with the cookie (when not nil) and the header pairs.
func (fx *adminFixture) get(path string, c *http.Cookie, header ...string) *httptest.ResponseRecorder {
	r := newRequest(http.MethodGet, path, "", header...)
	if c != nil {
		r.AddCookie(c)
	}
	return fx.serve(r)
}

// post sends form to path with the cookie (when not nil) and the header
// pairs.
func (fx *adminFixture) post(path string, c *http.Cookie, form url.Values, header ...string) *httptest.ResponseRecorder {
	r := newRequest(http.MethodPost, path, form.Encode(), header...)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c != nil {
		r.AddCookie(c)
	}
	return fx.serve(r)
}

// wantPage checks an HTML page with status and the UI's headers, and
// returns its body.
func wantPage(t *testing.T, w *httptest.ResponseRecorder, status int) string {
	t.Helper()
	if w.Code != status {
		t.Errorf("status = %d, want %d (body %.300s)", w.Code, status, w.Body)
	}
	h := w.Header()
	for name, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Cache-Control":           "no-store",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if h.Get("X-Correlation-Id") == "" {
		t.Error("no X-Correlation-Id on the answer")
	}
	body := w.Body.String()
	if !strings.HasPrefix(body, "<!doctype html>") || !strings.HasSuffix(strings.TrimSpace(body), "</html>") {
		t.Errorf("not a whole page: %.100s…", body)
	}
	return body
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]*)"`)
	formTag   = regexp.MustCompile(`<form method="post" action="([^"]*)">`)
	flowRow   = regexp.MustCompile(`<tr data-flow="([^"]*)">`)
	queueRow  = regexp.MustCompile(`(?s)<tr data-queue="([^"]*)">(.*?)</tr>`)
	idRow     = regexp.MustCompile(`(?s)<tr data-id="([^"]*)">(.*?)</tr>`)
	numCell   = regexp.MustCompile(`<td class="n">([^<]*)</td>`)
	metaTag   = regexp.MustCompile(`<meta http-equiv="refresh" content="0; url=([^"]*)">`)
)

// csrfOf is the token of a page's forms: every form carries the same.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	ms := csrfField.FindAllStringSubmatch(body, -1)
	if len(ms) == 0 {
		t.Fatalf("no csrf field in the page:\n%s", body)
	}
	for _, m := range ms {
		if m[1] != ms[0][1] {
			t.Fatalf("the forms carry different tokens: %q and %q", ms[0][1], m[1])
		}
	}
	if ms[0][1] == "" {
		t.Fatal("the forms' token is empty")
	}
	return html.UnescapeString(ms[0][1])
}

func TestUIPagesNeedTheAdminKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	good := fx.login(t)
	tampered := &http.Cookie{Name: "nexus_session", Value: good.Value[:len(good.Value)-2] + "xx"}

	for _, rq := range []struct{ method, path, next string }{
		{http.MethodGet, "/ui/", "/ui/"},
		{http.MethodGet, "/ui/queues", "/ui/queues"},
		{http.MethodGet, "/ui/queues/acme/echo?replayed=1&as=2", "/ui/queues/acme/echo?replayed=1&as=2"},
		{http.MethodGet, "/ui/journal?tenant=acme&limit=5", "/ui/journal?tenant=acme&limit=5"},
		{http.MethodPost, "/ui/queues/acme/echo/dlq/1/replay", "/ui/"},
		{http.MethodPost, "/ui/queues/acme/echo/dlq/1/discard", "/ui/"},
		{http.MethodPost, "/ui/logout", "/ui/"},
	} {
		for _, auth := range []struct {
			name   string
			header []string
			cookie *http.Cookie
		}{
			{"nothing", nil, nil},
			{"a wrong Bearer key", []string{"Authorization", "Bearer not-the-admin-key"}, nil},
			{"an access key", []string{"Authorization", "Bearer " + keyAcmeAll}, nil},
			{"a tampered cookie", nil, tampered},
			{"a wrong Bearer key beside a good cookie", []string{"Authorization", "Bearer nope"}, good},
		} {
			t.Run(rq.method+" "+rq.path+" with "+auth.name, func(t *testing.T) {
				r := newRequest(rq.method, rq.path, url.Values{"csrf": {"x"}}.Encode(), auth.header...)
				if rq.method == http.MethodPost {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if auth.cookie != nil {
					r.AddCookie(auth.cookie)
				}
				w := fx.serve(r)
				body := wantPage(t, w, http.StatusUnauthorized)
				loginURL := "/ui/login?next=" + url.QueryEscape(rq.next)
				m := metaTag.FindStringSubmatch(body)
				if m == nil || html.UnescapeString(m[1]) != loginURL {
					t.Errorf("no meta refresh to %s in:\n%s", loginURL, body)
				}
				if !strings.Contains(body, `<a href="`+loginURL+`">`) {
					t.Errorf("no link to %s in:\n%s", loginURL, body)
				}
				if got := w.Header().Get("WWW-Authenticate"); got != "Bearer" {
					t.Errorf("WWW-Authenticate = %q, want Bearer", got)
				}
				for _, secret := range []string{"data-flow", "data-id", fixtureCommit[:12], `"n":1`} {
					if strings.Contains(body, secret) {
						t.Errorf("the refusal shows %q:\n%s", secret, body)
					}
				}
			})
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending dead letters after the refused requests: %v, want [1]", got)
	}

	t.Run("from the refusal to the page", func(t *testing.T) {
		// the browser follows the meta refresh, posts the key to the form's
		// action and lands on the page it asked for
		const want = "/ui/queues/acme/echo?replayed=1&as=2"
		m := metaTag.FindStringSubmatch(wantPage(t, fx.get(want, nil), http.StatusUnauthorized))
		if m == nil {
			t.Fatal("no meta refresh")
		}
		form := wantPage(t, fx.get(html.UnescapeString(m[1]), nil), http.StatusOK)
		a := formTag.FindStringSubmatch(form)
		if a == nil {
			t.Fatalf("no form in:\n%s", form)
		}
		r := newRequest(http.MethodPost, html.UnescapeString(a[1]), "key="+url.QueryEscape(adminKey))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := fx.serve(r)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want || sessionOf(w) == nil {
			t.Fatalf("logging in through %s: %d Location %q cookies %v", a[1], w.Code, w.Header().Get("Location"), w.Result().Cookies())
		}
		c := sessionOf(w)
		body := wantPage(t, fx.get(want, &http.Cookie{Name: c.Name, Value: c.Value}), http.StatusOK)
		if !strings.Contains(body, `<tr data-id="1">`) {
			t.Errorf("the Queue page after logging in:\n%s", body)
		}
	})
}

func TestUILogin(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})

	t.Run("the form", func(t *testing.T) {
		for _, tc := range []struct{ path, action string }{
			{"/ui/login", "/ui/login?next=%2fui%2f"},
			{"/ui/login?next=/ui/queues/acme/echo", "/ui/login?next=%2fui%2fqueues%2facme%2fecho"},
			{"/ui/login?next=https://evil.example/ui/", "/ui/login?next=%2fui%2f"},
			{"/ui/login?key=" + adminKey, "/ui/login?next=%2fui%2f"}, // a key in the query logs nobody in
		} {
			w := fx.get(tc.path, nil)
			body := wantPage(t, w, http.StatusOK)
			if c := w.Result().Cookies(); len(c) > 0 {
				t.Errorf("%s sets cookies: %v", tc.path, c)
			}
			forms := formTag.FindAllStringSubmatch(body, -1)
			if len(forms) != 1 || html.UnescapeString(forms[0][1]) != tc.action {
				t.Errorf("%s: forms %v, want one posting to %s", tc.path, forms, tc.action)
			}
			inputs := regexp.MustCompile(`<input[^>]*>`).FindAllString(body, -1)
			if len(inputs) != 1 || !strings.Contains(inputs[0], `name="key"`) || !strings.Contains(inputs[0], `type="password"`) {
				t.Errorf("%s: inputs %q, want one password field named key", tc.path, inputs)
			}
		}
	})

	t.Run("next", func(t *testing.T) {
		for _, tc := range []struct{ next, location string }{
			{"", "/ui/"},
			{"/ui/", "/ui/"},
			{"/ui/queues/acme/echo", "/ui/queues/acme/echo"},
			{"/ui/journal?tenant=acme&limit=5", "/ui/journal?tenant=acme&limit=5"},
			{`/ui/queues?x=">`, "/ui/queues?x=%22%3E"},
			{"/ui/queues?x=%zz", "/ui/"},
			{"//evil.example", "/ui/"},
			{"//evil.example/ui/", "/ui/"},
			{"https://evil.example", "/ui/"},
			{"https://evil.example/ui/", "/ui/"},
			{"http:/ui/", "/ui/"},
			{"javascript:alert(1)", "/ui/"},
			{"/status", "/ui/"},
			{"/ui", "/ui/"},
			{`/\evil.example`, "/ui/"},
			{`/ui/\evil.example`, "/ui/"},
			{"/ui/\r\nSet-Cookie: a=b", "/ui/"},
			{"ui/queues", "/ui/"},
			{"/ui/../status", "/ui/"},
			{"/ui/./queues", "/ui/"},
			{"/ui/queues/../journal", "/ui/"},
		} {
			t.Run(tc.next, func(t *testing.T) {
				w := fx.serve(loginRequest(adminKey, tc.next))
				if w.Code != http.StatusSeeOther {
					t.Fatalf("%d %s", w.Code, w.Body)
				}
				if got := w.Header().Get("Location"); got != tc.location {
					t.Errorf("Location = %q, want %q", got, tc.location)
				}
				if w.Header().Get("X-Correlation-Id") == "" {
					t.Error("no X-Correlation-Id")
				}
			})
		}
		// whatever next holds, the browser stays on this site
		for _, next := range []string{"/ui//evil.example", "/ui/..//evil.example", "/ui/../..//evil.example", "/ui/%2F%2Fevil.example", "/ui/\t/evil.example"} {
			w := fx.serve(loginRequest(adminKey, next))
			loc := w.Header().Get("Location")
			u, err := url.Parse(strings.Map(func(r rune) rune {
				if r == '\t' || r == '\n' || r == '\r' {
					return -1 // as a browser reads it
				}
				return r
			}, loc))
			if w.Code != http.StatusSeeOther || err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(loc, "/") ||
				strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`) {
				t.Errorf("next=%q: %d Location %q, want a path of this site", next, w.Code, loc)
			}
		}
	})

	t.Run("the cookie", func(t *testing.T) {
		w := fx.serve(loginRequest(adminKey, "/ui/queues"))
		c := sessionOf(w)
		if c == nil {
			t.Fatalf("no session cookie: %v", w.Result().Cookies())
		}
		got := struct {
			Path     string
			HttpOnly bool
			Secure   bool
			SameSite http.SameSite
			Expires  time.Time
			MaxAge   int
		}{c.Path, c.HttpOnly, c.Secure, c.SameSite, c.Expires.UTC(), c.MaxAge}
		want := got
		want.Path, want.HttpOnly, want.Secure, want.SameSite, want.Expires, want.MaxAge = "/", true, false, http.SameSiteStrictMode, t0.Add(12*time.Hour), 0
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("the cookie %q (-want +got):\n%s", w.Header().Get("Set-Cookie"), d)
		}
		if c.Value == "" || strings.Contains(c.Value, adminKey) {
			t.Errorf("the cookie's value %q", c.Value)
		}
		if evs := fx.logs.Events(t, "ui_login"); len(evs) == 0 {
			t.Error("no ui_login log line")
		}

		// blanks around the key are not part of it (a key pasted with
		// its newline), as for the configured key
		if c := sessionOf(fx.serve(loginRequest(" "+adminKey+"\n", "/ui/queues"))); c == nil || c.Value == "" {
			t.Error("the key pasted with blanks around it opened no session")
		}

		// behind a proxy that ends TLS, the cookie is Secure
		w = fx.serve(loginRequest(adminKey, "", "X-Forwarded-Proto", "https"))
		if c := sessionOf(w); c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("behind TLS: %q", w.Header().Get("Set-Cookie"))
		}
	})

	for _, tc := range []struct{ name, key string }{
		{"no key", ""},
		{"a wrong key", "not-the-admin-key"},
		{"the key with a byte more", adminKey + "x"},
		{"the key's prefix", adminKey[:len(adminKey)-1]},
		{"an access key", keyAcmeAll},
		{"the key in upper case", strings.ToUpper(adminKey)},
		{"the key with a space inside", adminKey[:10] + " " + adminKey[10:]},
	} {
		t.Run("401 for "+tc.name, func(t *testing.T) {
			n := len(fx.logs.Events(t, "ui_login_failed"))
			w := fx.serve(loginRequest(tc.key, "/ui/queues"))
			body := wantPage(t, w, http.StatusUnauthorized)
			if c := w.Result().Cookies(); len(c) > 0 {
				t.Errorf("cookies set: %v", c)
			}
			if !strings.Contains(body, `<div class="error" role="alert">That is not the admin key.</div>`) {
				t.Errorf("no error in the page:\n%s", body)
			}
			forms := formTag.FindAllStringSubmatch(body, -1)
			if len(forms) != 1 || forms[0][1] != "/ui/login?next=%2fui%2fqueues" || !strings.Contains(body, `name="key"`) {
				t.Errorf("the form again, posting to the same next: %v", forms)
			}
			if got := len(fx.logs.Events(t, "ui_login_failed")); got != n+1 {
				t.Errorf("%d ui_login_failed log lines, want %d", got, n+1)
			}
		})
	}

	// a form that cannot be read is said as such, not as a wrong key, and
	// is no failed login; a multipart form (a browser's enctype) logs in
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		say                     string
	}{
		{"JSON", "application/json", `{"key":"` + adminKey + `"}`, http.StatusUnsupportedMediaType, "This login was not sent as a form (application/x-www-form-urlencoded): use the login page."},
		{"no content type", "", "key=" + adminKey, http.StatusUnsupportedMediaType, "This login was not sent as a form (application/x-www-form-urlencoded): use the login page."},
		{"over 64 KiB", "application/x-www-form-urlencoded", "key=" + strings.Repeat("a", 70<<10), http.StatusRequestEntityTooLarge, "This form is larger than the 64 KiB a form may hold."},
		{"a broken escape", "application/x-www-form-urlencoded", "key=%zz", http.StatusBadRequest, "This form could not be read (it is not encoded as a form is): use the login page."},
		{"a broken multipart form", "multipart/form-data; boundary=x", "--x\r\nnot a part", http.StatusBadRequest, "This form could not be read (it is not encoded as a form is): use the login page."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(fx.logs.Events(t, "ui_login_failed"))
			r := newRequest(http.MethodPost, "/ui/login", tc.body)
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := fx.serve(r)
			body := wantPage(t, w, tc.status)
			if !strings.Contains(body, `<div class="error" role="alert">`+html.EscapeString(tc.say)+`</div>`) || sessionOf(w) != nil {
				t.Errorf("the page does not say %q, or a session was set:\n%s", tc.say, body)
			}
			if got := len(fx.logs.Events(t, "ui_login_failed")); got != n {
				t.Errorf("%d ui_login_failed lines more, want none", got-n)
			}
		})
	}
	t.Run("a multipart form", func(t *testing.T) {
		body := "--x\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n" + adminKey + "\r\n--x--\r\n"
		r := newRequest(http.MethodPost, "/ui/login", body)
		r.Header.Set("Content-Type", "multipart/form-data; boundary=x")
		if w := fx.serve(r); w.Code != http.StatusSeeOther || sessionOf(w) == nil {
			t.Errorf("%d %s", w.Code, w.Body)
		}
	})

	t.Run("the key as the Bearer token does not log in", func(t *testing.T) {
		w := fx.serve(loginRequest("", "", "Authorization", "Bearer "+adminKey))
		if w.Code != http.StatusUnauthorized || sessionOf(w) != nil {
			t.Errorf("%d %v", w.Code, w.Result().Cookies())
		}
	})
}

// TestUIFailedLoginsAreLimited: anyone may post wrong keys to /ui/login,
// so its ui_login_failed lines are limited as the doors' refusals are (20
// at once, 10 a second after; the next line counts those not logged); a
// flood of 1,000 wrong keys wrote 1,000 lines. Every answer is still 401.
func TestUIFailedLoginsAreLimited(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for range 1000 { // the fixture's clock stands still: one instant
		if w := fx.serve(loginRequest("wrong-guess", "")); w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong key: %d", w.Code)
		}
	}
	if n := len(fx.logs.Events(t, "ui_login_failed")); n != 20 {
		t.Errorf("%d ui_login_failed lines for 1,000 failed logins in one instant, want 20", n)
	}
	fx.clock.Advance(time.Second)
	if w := fx.serve(loginRequest("wrong-guess", "")); w.Code != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %d", w.Code)
	}
	lines := fx.logs.Events(t, "ui_login_failed")
	if len(lines) != 21 || lines[20]["suppressed"] != float64(980) {
		t.Errorf("a second later: %d lines, the last %v; want 21, the last with suppressed 980", len(lines), lines[len(lines)-1])
	}
}

// TestUILoginFormWithASession: the login form sends a browser that holds a
// valid session on to its ?next= (a link from another site comes without
// the SameSite=Strict cookie, and the 401 page's refresh brings it back
// here with the cookie); without one, with a stale one or with the bearer
// key alone, it shows the form.
func TestUILoginFormWithASession(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	c := fx.login(t)
	stale := &http.Cookie{Name: "nexus_session", Value: c.Value + "x"}
	for _, tc := range []struct {
		name   string
		path   string
		cookie *http.Cookie
		header []string
		want   string // the redirect's Location, "" for the form
	}{
		{"a session, to a page", "/ui/login?next=" + url.QueryEscape("/ui/queues/acme/echo?after=3"), c, nil, "/ui/queues/acme/echo?after=3"},
		{"a session, no next", "/ui/login", c, nil, "/ui/"},
		{"a session, next elsewhere", "/ui/login?next=" + url.QueryEscape("https://evil.example/"), c, nil, "/ui/"},
		{"no session", "/ui/login?next=%2Fui%2Fqueues", nil, nil, ""},
		{"a stale session", "/ui/login?next=%2Fui%2Fqueues", stale, nil, ""},
		{"the bearer key", "/ui/login?next=%2Fui%2Fqueues", nil, bearerAdmin, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := fx.get(tc.path, tc.cookie, tc.header...)
			if tc.want == "" {
				if body := wantPage(t, w, http.StatusOK); !strings.Contains(body, `name="key"`) {
					t.Errorf("no login form:\n%s", body)
				}
				return
			}
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != tc.want {
				t.Errorf("GET %s: %d to %q, want 303 to %q (body %.200s)", tc.path, w.Code, w.Header().Get("Location"), tc.want, w.Body)
			}
			if sessionOf(w) != nil {
				t.Error("the redirect sets the session cookie again")
			}
		})
	}
}

func TestUISession(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	c := fx.login(t)

	opens := func(t *testing.T, handler http.Handler, c *http.Cookie) {
		t.Helper()
		for _, path := range []string{"/ui/", "/ui/queues", "/ui/queues/acme/echo", "/ui/journal", "/api/flows", "/api/queues", "/api/queues/acme/echo/dlq", "/api/journal"} {
			r := newRequest(http.MethodGet, path, "")
			r.AddCookie(c)
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Errorf("GET %s with the cookie: %d %.200s", path, w.Code, w.Body)
			}
		}
	}
	closed := func(t *testing.T, handler http.Handler, c *http.Cookie) {
		t.Helper()
		r := newRequest(http.MethodGet, "/ui/", "")
		r.AddCookie(c)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		wantPage(t, w, http.StatusUnauthorized)
		r = newRequest(http.MethodGet, "/api/flows", "")
		r.AddCookie(c)
		w = httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		wantRefusal(t, w, http.StatusUnauthorized, "missing or unknown admin key")
	}

	t.Run("the cookie opens the UI and the API", func(t *testing.T) {
		opens(t, fx.handler, c)
		body := wantPage(t, fx.get("/ui/", c), http.StatusOK)
		if !strings.Contains(body, `<form method="post" action="/ui/logout"><input type="hidden" name="csrf" value="`) {
			t.Errorf("no Log out form on a page seen with the session:\n%s", body)
		}
		csrfOf(t, body)
	})

	// another process over the same state, with its own metrics
	process := func(key string) http.Handler {
		cfg := fx.cfg
		cfg.AdminKey, cfg.Metrics = key, host.NewMetrics()
		return host.New(cfg).Handler()
	}

	t.Run("another process with the same key", func(t *testing.T) {
		opens(t, process(adminKey), c)
	})

	t.Run("a process with another key", func(t *testing.T) {
		h := process("another-admin-key")
		closed(t, h, c)
		// and its own session does not open this one
		other := httptest.NewRecorder()
		h.ServeHTTP(other, loginRequest("another-admin-key", ""))
		oc := sessionOf(other)
		if oc == nil {
			t.Fatalf("logging in with the other key: %d", other.Code)
		}
		closed(t, fx.handler, &http.Cookie{Name: oc.Name, Value: oc.Value})
	})

	t.Run("tampered", func(t *testing.T) {
		parts := strings.Split(c.Value, ".")
		if len(parts) != 3 {
			t.Fatalf("the cookie %q is not v1.EXPIRY.MAC", c.Value)
		}
		flip := func(s string) string {
			b := []byte(s)
			if b[0] == 'A' {
				b[0] = 'B'
			} else {
				b[0] = 'A'
			}
			return string(b)
		}
		for _, v := range []string{
			parts[0] + "." + parts[1] + "." + flip(parts[2]),
			parts[0] + "." + parts[1] + "1." + parts[2],
			parts[0] + ".99999999999." + parts[2],
			"v2." + parts[1] + "." + parts[2],
			parts[0] + "." + parts[1],
			parts[0] + "." + parts[1] + ".",
			c.Value + ".x",
			parts[2],
			"",
			adminKey,
		} {
			t.Run(v, func(t *testing.T) { closed(t, fx.handler, &http.Cookie{Name: "nexus_session", Value: v}) })
		}
	})

	t.Run("expiry", func(t *testing.T) {
		fx.clock.Advance(12*time.Hour - time.Second)
		opens(t, fx.handler, c)
		fx.clock.Advance(time.Second)
		closed(t, fx.handler, c)
		fx.clock.Advance(time.Hour)
		closed(t, fx.handler, c)
	})

	t.Run("logout", func(t *testing.T) {
		c := fx.login(t)
		token := csrfOf(t, wantPage(t, fx.get("/ui/", c), http.StatusOK))
		w := fx.post("/ui/logout", c, url.Values{"csrf": {token}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/login" {
			t.Errorf("logout: %d Location %q", w.Code, w.Header().Get("Location"))
		}
		gone := sessionOf(w)
		if gone == nil || gone.Value != "" || gone.MaxAge >= 0 || gone.Path != "/" || !gone.HttpOnly {
			t.Errorf("logout's Set-Cookie %q does not clear the session", w.Header().Get("Set-Cookie"))
		}
	})
}

func TestUICSRF(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`)
	c := fx.login(t)
	token := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK))
	fx.clock.Advance(time.Second)
	c2 := fx.login(t)
	token2 := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c2), http.StatusOK))
	if c2.Value == c.Value || token2 == token {
		t.Fatalf("two sessions share a cookie or a token: %q %q", c.Value, token)
	}
	before := fx.counts(t, "acme", "echo")

	// a multipart form over 64 KiB is said to be so too
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("csrf", token)
	mw.WriteField("pad", strings.Repeat("x", 64<<10))
	mw.Close()
	r := newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/1/replay", mp.String(), "Content-Type", mw.FormDataContentType())
	r.AddCookie(c)
	wantRefusal(t, fx.serve(r), http.StatusForbidden, "the form is larger than the 64 KiB a form may hold")

	for _, target := range []struct {
		path string
		api  bool
	}{
		{"/ui/queues/acme/echo/dlq/1/replay", false},
		{"/ui/queues/acme/echo/dlq/1/discard", false},
		{"/ui/logout", false},
		{"/api/queues/acme/echo/dlq/1/replay", true},
		{"/api/queues/acme/echo/dlq/1/discard", true},
	} {
		// what each refusal says: reloading the page gets a token, not
		// another site's form or a smaller one
		why := map[string][2]string{ // API, UI page
			"token": {"a request made with the UI's session needs the UI's form token", "This form was not sent from the UI&#39;s own page"},
			"site":  {"a request made with the UI's session must come from the UI's own pages (Sec-Fetch-Site says another site)", "This form was sent from another site"},
			"size":  {"the form is larger than the 64 KiB a form may hold", "This form is larger than the 64 KiB a form may hold."},
		}
		for _, tc := range []struct {
			name   string
			path   string
			form   url.Values
			header []string
			why    string
		}{
			{"no token", target.path, nil, nil, "token"},
			{"an empty token", target.path, url.Values{"csrf": {""}}, nil, "token"},
			{"a wrong token", target.path, url.Values{"csrf": {"x"}}, nil, "token"},
			{"the token with a byte more", target.path, url.Values{"csrf": {token + "x"}}, nil, "token"},
			{"another session's token", target.path, url.Values{"csrf": {token2}}, nil, "token"},
			{"the token in the query", target.path + "?csrf=" + url.QueryEscape(token), nil, nil, "token"},
			{"the token, cross-site", target.path, url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}, "site"},
			{"the token, same-site", target.path, url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "same-site"}, "site"},
			{"the token in a form over 64 KiB", target.path, url.Values{"csrf": {token}, "pad": {strings.Repeat("x", 64<<10)}}, nil, "size"},
		} {
			t.Run(tc.path+" with "+tc.name, func(t *testing.T) {
				w := fx.post(tc.path, c, tc.form, tc.header...)
				if target.api {
					wantRefusal(t, w, http.StatusForbidden, why[tc.why][0])
				} else {
					body := wantPage(t, w, http.StatusForbidden)
					if !strings.Contains(body, why[tc.why][1]) {
						t.Errorf("no explanation (%q) in:\n%s", why[tc.why][1], body)
					}
				}
				if s := sessionOf(w); s != nil {
					t.Errorf("a refused POST set the cookie: %q", w.Header().Get("Set-Cookie"))
				}
			})
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("pending dead letters after the refused POSTs: %v, want [1 2 3 4]", got)
	}
	if got := fx.counts(t, "acme", "echo"); got != before {
		t.Errorf("the log changed: %+v, then %+v", before, got)
	}
	opened := false
	for _, info := range fx.queues.Queues() {
		opened = opened || info.Open
	}
	if opened {
		t.Error("a refused POST started a worker")
	}

	t.Run("with the page's token", func(t *testing.T) {
		w := fx.post("/ui/queues/acme/echo/dlq/1/replay", c, url.Values{"csrf": {token}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/queues/acme/echo?replayed=1&as=5" {
			t.Fatalf("UI replay: %d Location %q %s", w.Code, w.Header().Get("Location"), w.Body)
		}
		w = fx.post("/ui/queues/acme/echo/dlq/2/discard", c, url.Values{"csrf": {token}}, "Sec-Fetch-Site", "same-origin")
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/queues/acme/echo?discarded=2" {
			t.Fatalf("UI discard: %d Location %q %s", w.Code, w.Header().Get("Location"), w.Body)
		}
		w = fx.post("/api/queues/acme/echo/dlq/3/discard", c, url.Values{"csrf": {token}}, "Sec-Fetch-Site", "none")
		wantDocument(t, w, `{"tenant":"acme","flow":"echo","id":3,"discarded":true}`)
		// a Bearer POST needs no token
		w = fx.post("/ui/queues/acme/echo/dlq/4/discard", nil, nil, "Authorization", "Bearer "+adminKey, "Sec-Fetch-Site", "cross-site")
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/queues/acme/echo?discarded=4" {
			t.Fatalf("UI discard with the Bearer key: %d Location %q %s", w.Code, w.Header().Get("Location"), w.Body)
		}
		if got := fx.pendingIDsFromFiles(t, "acme", "echo"); len(got) != 0 {
			t.Errorf("pending: %v, want none", got)
		}
		fx.waitJournal(t, "acme", "echo", 5)
	})

	t.Run("another session's own token", func(t *testing.T) {
		seedDeadLetters(t, fx.root, "acme", "hello", `{"name":"Ada"}`)
		w := fx.post("/ui/queues/acme/hello/dlq/1/discard", c2, url.Values{"csrf": {token2}})
		if w.Code != http.StatusSeeOther {
			t.Errorf("%d %s", w.Code, w.Body)
		}
	})
}

func TestUIFlowsPage(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	body := wantPage(t, fx.admin(http.MethodGet, "/ui/"), http.StatusOK)
	var rows []string
	for _, m := range flowRow.FindAllStringSubmatch(body, -1) {
		rows = append(rows, m[1])
	}
	if want := []string{"acme/echo", "acme/hello", "acme/order-intake", "acme/small", "globex/nightly", "globex/shipment"}; !slices.Equal(rows, want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
	for _, want := range []string{
		"<code>" + fixtureCommit[:12] + "</code>, synced 2026-08-09T14:02:11Z.",
		`<code>0 3 * * *</code> (Europe/Paris), next 2026-08-10T01:00:00Z`,
		`<td>Nightly &lt;b&gt;report&lt;/b&gt; &amp; totals</td>`,
		`<a href="/ui/" class="on">Flows</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if strings.Contains(body, "<b>report</b>") {
		t.Error("the description is not escaped")
	}
	// the access keys, by id (server.md: "named in logs and the UI; never
	// the secret"): the page named none
	for _, want := range []string{
		"<tr data-key=\"acme-all\">\n<td>acme-all</td><td>acme</td><td>*</td>",
		"<tr data-key=\"acme-orders\">\n<td>acme-orders</td><td>acme</td><td>order-intake</td>",
		"<tr data-key=\"acme-slow\">\n<td>acme-slow</td><td>acme</td><td>*</td>\n<td class=\"n\">0.4/s</td><td class=\"n\">1</td>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if sum := sha256.Sum256([]byte(keyAcmeAll)); strings.Contains(body, keyAcmeAll) || strings.Contains(body, hex.EncodeToString(sum[:])) {
		t.Error("the page shows a key or its hash")
	}
	if strings.Contains(body, `name="csrf"`) || strings.Contains(body, "/ui/logout") {
		t.Error("a page seen with the Bearer key shows the session's forms")
	}

	const bad = "badbadbadbadbadbadbadbadbadbadbadbadbadb"
	if err := fx.reg.RecordSyncFailure(context.Background(), bad, []string{`flows/x.md:7: unknown key "endpont" <here>`}, registry.SyncSource{}); err != nil {
		t.Fatal(err)
	}
	body = wantPage(t, fx.admin(http.MethodGet, "/ui/"), http.StatusOK)
	for _, want := range []string{
		`The last sync refused commit <code>badbadbadbad</code>`,
		`<li><code>flows/x.md:7: unknown key &#34;endpont&#34; &lt;here&gt;</code></li>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("after a refused commit, the page has no %q:\n%s", want, body)
		}
	}
	if got := len(flowRow.FindAllString(body, -1)); got != 6 {
		t.Errorf("%d flows after a refused commit, want the 6 live ones", got)
	}

	t.Run("nothing live", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, unloaded: true})
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/"), http.StatusOK)
		if !strings.Contains(body, "No flow is live.") || flowRow.MatchString(body) {
			t.Errorf("the page of an empty live set:\n%s", body)
		}
	})
}

func TestUIQueuesPage(t *testing.T) {
	t.Run("no queue yet", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey})
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues"), http.StatusOK)
		if !strings.Contains(body, "No queue has been used yet.") || queueRow.MatchString(body) {
			t.Errorf("the page without queues:\n%s", body)
		}
	})
	t.Run("no queues on this host", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, noQueues: true})
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues"), http.StatusOK)
		if !strings.Contains(body, "This host runs no queues.") {
			t.Errorf("the page:\n%s", body)
		}
		wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/echo"), http.StatusNotFound)
		wantPage(t, fx.admin(http.MethodPost, "/ui/queues/acme/echo/dlq/1/replay"), http.StatusNotFound)
	})

	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	if _, _, err := fx.queues.Queue("acme", "hello"); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, fx.queues, "acme", "hello")

	body := wantPage(t, fx.admin(http.MethodGet, "/ui/queues"), http.StatusOK)
	type row struct {
		Queue  string
		Counts []string // total, processed, pending, retrying, dead letters
		Link   bool
		Worker string
	}
	var got []row
	for _, m := range queueRow.FindAllStringSubmatch(body, -1) {
		r := row{Queue: m[1]}
		for _, n := range numCell.FindAllStringSubmatch(m[2], -1) {
			r.Counts = append(r.Counts, n[1])
		}
		r.Link = strings.Contains(m[2], `<a href="/ui/queues/`+m[1]+`">`)
		if w := regexp.MustCompile(`<td>([^<]*)</td>\s*$`).FindStringSubmatch(m[2]); w != nil {
			r.Worker = w[1]
		}
		got = append(got, r)
	}
	want := []row{
		{"acme/echo", []string{"4", "2", "2", "1", "2"}, true, "idle"},
		{"acme/hello", []string{"0", "0", "0", "0", "0"}, true, "leading"},
		{"globex/shipment", []string{"1", "1", "0", "0", "0"}, true, "idle"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the queues' rows (-want +got):\n%s\n%s", d, body)
	}
	if !strings.Contains(body, `<a href="/ui/queues" class="on">Queues</a>`) {
		t.Error("the navigation does not highlight Queues")
	}
}

func TestUIQueuePage(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	const xss = "<script>alert(1)</script>"
	seedQueue(t, fx.root, "acme", "echo", fx.clock.Now, func(q *queue.Queue) {
		msgs := appendMessages(t, q, `{"n":1}`, `{"x":"`+xss+`"}`, "\xff\xfe")
		processed(t, q, msgs, 3)
		deadLetter(t, q, msgs[0], t0.Add(time.Minute), 3, "step call: 502 from upstream")
		deadLetter(t, q, msgs[1], t0.Add(2*time.Minute), 2, xss)
		deadLetter(t, q, msgs[2], t0.Add(3*time.Minute), 1, "not JSON")
	})
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`)
	c := fx.login(t)

	body := wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK)
	token := csrfOf(t, body)
	if !strings.Contains(body, `<p id="counts">3 total, 3 processed, 0 pending, 0 retrying, 3 dead letters; worker idle.</p>`) {
		t.Errorf("no counts in:\n%s", body)
	}
	if strings.Contains(body, "<script>") {
		t.Errorf("the page holds a raw <script>:\n%s", body)
	}
	type deadRow struct {
		ID    string
		Cells []string // id, attempts
		Forms []string // action, csrf, button
		Text  []string // what the row must show
	}
	var got []deadRow
	for _, m := range idRow.FindAllStringSubmatch(body, -1) {
		r := deadRow{ID: m[1]}
		for _, n := range numCell.FindAllStringSubmatch(m[2], -1) {
			r.Cells = append(r.Cells, n[1])
		}
		for _, f := range regexp.MustCompile(`<form method="post" action="([^"]*)"><input type="hidden" name="csrf" value="([^"]*)"><button type="submit" name="(\w+)">`).FindAllStringSubmatch(m[2], -1) {
			r.Forms = append(r.Forms, f[1], html.UnescapeString(f[2]), f[3])
		}
		got = append(got, r)
	}
	form := func(id string) []string {
		return []string{"/ui/queues/acme/echo/dlq/" + id + "/replay", token, "replay", "/ui/queues/acme/echo/dlq/" + id + "/discard", token, "discard"}
	}
	want := []deadRow{
		{ID: "1", Cells: []string{"1", "3"}, Forms: form("1")},
		{ID: "2", Cells: []string{"2", "2"}, Forms: form("2")},
		{ID: "3", Cells: []string{"3", "1"}, Forms: form("3")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the dead letters' rows (-want +got):\n%s", d)
	}
	for _, want := range []string{
		`<td class="t">2026-08-09T14:03:11Z</td>`, // failed_at of 1
		"<td>step call: 502 from upstream</td>",
		"<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>",
		`<pre>{&#34;x&#34;:&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;}</pre>`,
		`<pre>(binary, base64) //4=</pre>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %q", want)
		}
	}

	t.Run("a queue without files", func(t *testing.T) {
		body := wantPage(t, fx.get("/ui/queues/acme/hello", c), http.StatusOK)
		if !strings.Contains(body, "This queue has no files.") || !strings.Contains(body, "DLQ is empty") || idRow.MatchString(body) {
			t.Errorf("the page:\n%s", body)
		}
		if d := dirs(t, fx.root); !slices.Equal(d, []string{"acme", "acme/echo", "acme/gone"}) {
			t.Errorf("queue folders: %v", d)
		}
	})

	t.Run("names that break the rule", func(t *testing.T) {
		for _, tc := range []struct{ tenant, flow, want string }{
			{"A", "echo", `invalid name &#34;A&#34; for tenant (flow &#34;echo&#34;): character &#39;A&#39; at position 1 is not allowed`},
			{"acme", "a.b", `invalid name &#34;a.b&#34; for flow (tenant &#34;acme&#34;): character &#39;.&#39; at position 2 is not allowed`},
			{"%3Cscript%3E", "echo", `invalid name &#34;&lt;script&gt;&#34; for tenant (flow &#34;echo&#34;): character &#39;&lt;&#39; at position 1 is not allowed`},
			{"..", "echo", `invalid name &#34;..&#34; for tenant`},
		} {
			for _, w := range []*httptest.ResponseRecorder{
				fx.get("/ui/queues/"+tc.tenant+"/"+tc.flow, c),
				fx.post("/ui/queues/"+tc.tenant+"/"+tc.flow+"/dlq/1/replay", c, url.Values{"csrf": {token}}),
				fx.post("/ui/queues/"+tc.tenant+"/"+tc.flow+"/dlq/1/discard", c, url.Values{"csrf": {token}}),
			} {
				body := wantPage(t, w, http.StatusBadRequest)
				if !strings.Contains(body, `<div class="error" role="alert">`+tc.want) {
					t.Errorf("%s/%s: no error %q in:\n%s", tc.tenant, tc.flow, tc.want, body)
				}
				if strings.Contains(body, "<script>") {
					t.Errorf("a raw <script> in:\n%s", body)
				}
			}
		}
		if d := dirs(t, fx.root); !slices.Equal(d, []string{"acme", "acme/echo", "acme/gone"}) {
			t.Errorf("queue folders: %v", d)
		}
	})

	t.Run("a button that fails", func(t *testing.T) {
		for _, tc := range []struct {
			path   string
			status int
			want   string
		}{
			{"/ui/queues/acme/echo/dlq/99/replay", 404, "no pending dead letter id=99 tenant=acme flow=echo"},
			{"/ui/queues/acme/echo/dlq/99/discard", 404, "no pending dead letter id=99 tenant=acme flow=echo"},
			{"/ui/queues/acme/echo/dlq/abc/replay", 400, `&#34;abc&#34; is not a dead letter&#39;s id (a whole number from the list).`},
			{"/ui/queues/acme/echo/dlq/0/discard", 400, `&#34;0&#34; is not a dead letter&#39;s id (a whole number from the list).`},
			{"/ui/queues/acme/echo/dlq/1/frobnicate", 404, `There is no &#34;frobnicate&#34; action: the buttons are Replay and Discard.`},
			{"/ui/queues/acme/gone/dlq/1/replay", 409, "flow acme/gone is not live: its worker would drop a replayed message; publish the flow first"},
		} {
			body := wantPage(t, fx.post(tc.path, c, url.Values{"csrf": {token}}), tc.status)
			if !strings.Contains(body, `<div class="error" role="alert">`+tc.want+`</div>`) {
				t.Errorf("%s: no error %q in:\n%s", tc.path, tc.want, body)
			}
		}
		if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1, 2, 3}) {
			t.Errorf("pending: %v", got)
		}
		if got := fx.pendingIDsFromFiles(t, "acme", "gone"); !slices.Equal(got, []uint64{1}) {
			t.Errorf("pending in acme/gone: %v", got)
		}
	})

	t.Run("Replay all", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey})
		seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
		c := fx.login(t)
		page := wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK)
		if !strings.Contains(page, `<button type="submit" name="replay-all">Replay all 2</button>`) {
			t.Fatalf("no Replay all button:\n%s", page)
		}
		w := fx.post("/ui/queues/acme/echo/dlq/all/replay", c, url.Values{"csrf": {csrfOf(t, page)}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/queues/acme/echo?replay_all=2" {
			t.Fatalf("Replay all: %d, Location %q", w.Code, w.Header().Get("Location"))
		}
		if got := fx.pendingIDs(t, "acme", "echo"); len(got) != 0 {
			t.Errorf("pending after Replay all: %v", got)
		}
		after := wantPage(t, fx.get(w.Header().Get("Location"), c), http.StatusOK)
		if !strings.Contains(after, "2 dead letters were replayed, each as a new message at the back of the queue.") || strings.Contains(after, `name="replay-all"`) {
			t.Errorf("the page after Replay all:\n%s", after)
		}
		// without the form token, nothing is replayed
		seedDeadLetters(t, fx.root, "acme", "other", `{"n":1}`)
		wantPage(t, fx.post("/ui/queues/acme/other/dlq/all/replay", c, nil), http.StatusForbidden)
	})

	t.Run("Replay all leaves an oversized dead letter", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey})
		seedQueue(t, fx.root, "acme", "echo", func() time.Time { return t0 }, func(q *queue.Queue) {
			msgs := appendMessages(t, q, `{"n":1}`, `{"n":2}`)
			processed(t, q, msgs, len(msgs))
			msgs[0].Payload = bytes.Repeat([]byte("x"), queue.MaxPayload+1) // an older nexus wrote it
			for _, m := range msgs {
				deadLetter(t, q, m, t0.Add(time.Minute), 3, "step call: 502 from upstream")
			}
		})
		c := fx.login(t)
		page := wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK)
		w := fx.post("/ui/queues/acme/echo/dlq/all/replay", c, url.Values{"csrf": {csrfOf(t, page)}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/queues/acme/echo?replay_all=1&skipped=1" {
			t.Fatalf("Replay all: %d, Location %q", w.Code, w.Header().Get("Location"))
		}
		if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
			t.Errorf("pending after Replay all: %v, want [1]", got)
		}
		after := wantPage(t, fx.get(w.Header().Get("Location"), c), http.StatusOK)
		if want := fmt.Sprintf("1 dead letters were replayed, each as a new message at the back of the queue. 1 were left pending: their payloads are over %d bytes, the most a message holds, so they can only be discarded.", queue.MaxPayload); !strings.Contains(after, want) {
			t.Errorf("the page after Replay all does not say %q:\n%.2000s", want, after)
		}
	})

	t.Run("no Replay button for a flow that is not live", func(t *testing.T) {
		gone := wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/gone"), http.StatusOK)
		if strings.Contains(gone, `name="replay"`) || !strings.Contains(gone, `name="discard"`) ||
			!strings.Contains(gone, `<p class="error" id="no-replay">Replay is not offered: flow acme/gone is not live: its worker would drop a replayed message; publish the flow first.</p>`) {
			t.Errorf("the Queue page of a flow that is not live offers Replay, or does not say why not:\n%s", gone)
		}
		if live := wantPage(t, fx.admin(http.MethodGet, "/ui/queues/acme/echo"), http.StatusOK); !strings.Contains(live, `name="replay"`) || strings.Contains(live, `id="no-replay"`) {
			t.Errorf("the Queue page of a live flow:\n%s", live)
		}
	})

	t.Run("replay", func(t *testing.T) {
		w := fx.post("/ui/queues/acme/echo/dlq/1/replay", c, url.Values{"csrf": {token}})
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther || loc != "/ui/queues/acme/echo?replayed=1&as=4" {
			t.Fatalf("%d Location %q %s", w.Code, loc, w.Body)
		}
		body := wantPage(t, fx.get(loc, c), http.StatusOK)
		if !strings.Contains(body, `<div class="notice" role="status">Dead letter 1 was replayed as message 4.</div>`) {
			t.Errorf("no notice in:\n%s", body)
		}
		if strings.Contains(body, `<tr data-id="1">`) || !strings.Contains(body, `<tr data-id="2">`) {
			t.Errorf("the replayed entry is still listed, or the others are not:\n%s", body)
		}
		fx.waitJournal(t, "acme", "echo", 4)
	})

	t.Run("discard", func(t *testing.T) {
		w := fx.post("/ui/queues/acme/echo/dlq/3/discard", c, url.Values{"csrf": {token}})
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther || loc != "/ui/queues/acme/echo?discarded=3" {
			t.Fatalf("%d Location %q %s", w.Code, loc, w.Body)
		}
		body := wantPage(t, fx.get(loc, c), http.StatusOK)
		if !strings.Contains(body, `<div class="notice" role="status">Dead letter 3 was discarded; its body leaves the disk at the queue&#39;s next drain.</div>`) {
			t.Errorf("no notice in:\n%s", body)
		}
		if strings.Contains(body, `<tr data-id="3">`) {
			t.Errorf("the discarded entry is still listed:\n%s", body)
		}
	})

	t.Run("a notice from the query is numbers only", func(t *testing.T) {
		for _, q := range []string{
			"replayed=" + url.QueryEscape(xss) + "&as=" + url.QueryEscape(xss),
			"replayed=1&as=" + url.QueryEscape("now. Your session expired: call 555-0100"),
			"discarded=" + url.QueryEscape("1; call 555-0100"),
		} {
			body := wantPage(t, fx.get("/ui/queues/acme/echo?"+q, c), http.StatusOK)
			if strings.Contains(body, "<script>") || strings.Contains(body, "555-0100") || strings.Contains(body, `class="notice"`) {
				t.Errorf("?%s: the page shows the query's words:\n%s", q, body)
			}
		}
	})
}

func TestUIJournalPage(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal"), http.StatusOK)
	if !strings.Contains(body, "The journal is empty.") {
		t.Errorf("the empty journal:\n%s", body)
	}
	entries, _ := testJournal()
	writeJournal(t, fx.reg, entries...)
	corrs := regexp.MustCompile(`<td class="t"><code>([^<]*)</code></td>`)
	rows := func(body string) []string {
		var out []string
		for _, m := range corrs.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"corr-3", "corr-2", "corr-1"}},
		{"?tenant=acme", []string{"corr-2", "corr-1"}},
		{"?tenant=acme&flow=echo", []string{"corr-1"}},
		{"?correlation_id=corr-2", []string{"corr-2"}},
		{"?limit=1", []string{"corr-3"}},
		{"?tenant=nobody", nil},
	} {
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal"+tc.query), http.StatusOK)
		if got := rows(body); !slices.Equal(got, tc.want) {
			t.Errorf("%s: rows %v, want %v", tc.query, got, tc.want)
		}
	}
	body = wantPage(t, fx.admin(http.MethodGet, "/ui/journal?tenant=acme&limit=7"), http.StatusOK)
	for _, want := range []string{
		`<input name="tenant" value="acme"`, `<input name="limit" value="7"`,
		`<td class="t">2026-08-09T14:02:13Z</td><td>enqueue</td><td class="t">acme/hello</td>`,
		"<td>step call: 502 &lt;from&gt; upstream</td>",
		`<td class="n">2250</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %q:\n%s", want, body)
		}
	}

	// a full page links to the older one, keeping the filters given
	body = wantPage(t, fx.admin(http.MethodGet, "/ui/journal?tenant=acme&limit=1"), http.StatusOK)
	older := regexp.MustCompile(`<a href="(/ui/journal\?[^"]*)" rel="next">Older entries</a>`).FindStringSubmatch(body)
	if older == nil {
		t.Fatalf("no link to the older entries:\n%s", body)
	}
	link := html.UnescapeString(older[1])
	if got := rows(wantPage(t, fx.admin(http.MethodGet, link), http.StatusOK)); !slices.Equal(got, []string{"corr-1"}) || strings.Contains(link, "correlation_id") {
		t.Errorf("the older page %s: rows %v, want corr-1 (and no empty filter in the link)", link, got)
	}
	if body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal?tenant=acme"), http.StatusOK); strings.Contains(body, "Older entries") {
		t.Errorf("a page that is not full links to an older one:\n%s", body)
	}
	// a page that lists nothing says why, not that the journal is empty
	last := regexp.MustCompile(`<a href="(/ui/journal\?[^"]*)" rel="next">`).FindStringSubmatch(wantPage(t, fx.admin(http.MethodGet, link), http.StatusOK))
	if last == nil {
		t.Fatalf("the older page %s, full, has no link to the next", link)
	}
	unfiltered := regexp.MustCompile(`<a href="(/ui/journal\?[^"]*)" rel="next">`).FindStringSubmatch(wantPage(t, fx.admin(http.MethodGet, "/ui/journal?limit=3"), http.StatusOK))
	if unfiltered == nil {
		t.Fatal("a full page of 3 has no link to the older entries")
	}
	for _, tc := range []struct{ query, want string }{
		{"/ui/journal?tenant=nobody", "No entry matches these filters."},
		{html.UnescapeString(last[1]), "No older entries match these filters."},
		{html.UnescapeString(unfiltered[1]), "No older entries."},
	} {
		body := wantPage(t, fx.admin(http.MethodGet, tc.query), http.StatusOK)
		if !strings.Contains(body, `<td colspan="11" class="muted">`+tc.want+`</td>`) || strings.Contains(body, "The journal is empty.") {
			t.Errorf("%s: the page does not say %q:\n%s", tc.query, tc.want, body)
		}
	}

	for _, limit := range []string{"0", "abc", "1001"} {
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal?limit="+limit), http.StatusBadRequest)
		if want := `<div class="error" role="alert">The limit &#34;` + limit + `&#34; is not a number from 1 to 1000.</div>`; !strings.Contains(body, want) {
			t.Errorf("limit=%s: no %q in:\n%s", limit, want, body)
		}
	}
	body = wantPage(t, fx.admin(http.MethodGet, "/ui/journal?tenant=Bad&limit=5"), http.StatusBadRequest)
	if !strings.Contains(body, `<input name="limit" value="5"`) {
		t.Errorf("tenant=Bad&limit=5: the form forgot the limit:\n%s", body)
	}
	if want := `<div class="error" role="alert">Invalid name &#34;Bad&#34; for tenant (any flow): character &#39;B&#39; at position 1 is not allowed.</div>`; !strings.Contains(body, want) {
		t.Errorf("tenant=Bad: no %q in:\n%s", want, body)
	}

	t.Run("no journal on this host", func(t *testing.T) {
		fx := newAdminFixture(t, adminOptions{key: adminKey, noHistory: true})
		body := wantPage(t, fx.admin(http.MethodGet, "/ui/journal"), http.StatusOK)
		if !strings.Contains(body, "This host keeps no journal.") {
			t.Errorf("the page:\n%s", body)
		}
	})
}

func TestUIRedirectsToTheSlash(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	w := fx.get("/ui", nil)
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d Location %q, want 301 /ui/", w.Code, w.Header().Get("Location"))
	}
	// every answer carries X-Correlation-Id, this redirect too
	if w.Header().Get("X-Correlation-Id") == "" {
		t.Error("no X-Correlation-Id on the redirect")
	}
}

// TestManagementCorrelationID sends an X-Correlation-ID with every kind of
// management request and expects it back on every answer.
func TestManagementCorrelationID(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	closedFx := newAdminFixture(t, adminOptions{})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	seedDeadLetters(t, fx.root, "acme", "gone", `{"n":1}`)
	c := fx.login(t)
	token := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK))

	form := func(method, path string, values url.Values, header ...string) *http.Request {
		r := newRequest(method, path, values.Encode(), header...)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	withCookie := func(r *http.Request) *http.Request { r.AddCookie(c); return r }
	for _, tc := range []struct {
		name    string
		handler http.Handler
		r       *http.Request
		status  int
	}{
		{"API 200", fx.handler, newRequest(http.MethodGet, "/api/flows", "", bearerAdmin...), 200},
		{"API 200 queues", fx.handler, newRequest(http.MethodGet, "/api/queues", "", bearerAdmin...), 200},
		{"API 200 journal", fx.handler, newRequest(http.MethodGet, "/api/journal", "", bearerAdmin...), 200},
		{"API 401", fx.handler, newRequest(http.MethodGet, "/api/flows", ""), 401},
		{"API 403", fx.handler, withCookie(form(http.MethodPost, "/api/queues/acme/echo/dlq/1/discard", nil)), 403},
		{"API 400 name", fx.handler, newRequest(http.MethodGet, "/api/queues/A/echo/dlq", "", bearerAdmin...), 400},
		{"API 400 id", fx.handler, newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/x/replay", "", bearerAdmin...), 400},
		{"API 400 limit", fx.handler, newRequest(http.MethodGet, "/api/journal?limit=0", "", bearerAdmin...), 400},
		{"API 404 id", fx.handler, newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/9/replay", "", bearerAdmin...), 404},
		{"API 409", fx.handler, newRequest(http.MethodPost, "/api/queues/acme/gone/dlq/1/replay", "", bearerAdmin...), 409},
		{"API 200 discard", fx.handler, newRequest(http.MethodPost, "/api/queues/acme/echo/dlq/2/discard", "", bearerAdmin...), 200},
		{"API 404 closed", closedFx.handler, newRequest(http.MethodGet, "/api/flows", "", bearerAdmin...), 404},
		{"API 405", fx.handler, newRequest(http.MethodDelete, "/api/flows", "", bearerAdmin...), 405},
		{"UI 200", fx.handler, newRequest(http.MethodGet, "/ui/", "", bearerAdmin...), 200},
		{"UI 200 cookie", fx.handler, withCookie(newRequest(http.MethodGet, "/ui/journal", "")), 200},
		{"UI 401", fx.handler, newRequest(http.MethodGet, "/ui/queues", ""), 401},
		{"UI 403", fx.handler, withCookie(form(http.MethodPost, "/ui/queues/acme/echo/dlq/1/replay", nil)), 403},
		{"UI 400", fx.handler, newRequest(http.MethodGet, "/ui/queues/A/echo", "", bearerAdmin...), 400},
		{"UI 404 action", fx.handler, newRequest(http.MethodPost, "/ui/queues/acme/echo/dlq/9/replay", "", bearerAdmin...), 404},
		{"UI 409", fx.handler, newRequest(http.MethodPost, "/ui/queues/acme/gone/dlq/1/replay", "", bearerAdmin...), 409},
		{"UI 303 action", fx.handler, withCookie(form(http.MethodPost, "/ui/queues/acme/echo/dlq/1/discard", url.Values{"csrf": {token}})), 303},
		{"UI 404 closed", closedFx.handler, newRequest(http.MethodGet, "/ui/", ""), 404},
		{"login form", fx.handler, newRequest(http.MethodGet, "/ui/login", ""), 200},
		{"login 303", fx.handler, loginRequest(adminKey, ""), 303},
		{"login 401", fx.handler, loginRequest("nope", ""), 401},
		{"login 404 closed", closedFx.handler, loginRequest(adminKey, ""), 404},
		{"logout 303", fx.handler, withCookie(form(http.MethodPost, "/ui/logout", url.Values{"csrf": {token}})), 303},
		{"/ui 301", fx.handler, newRequest(http.MethodGet, "/ui", ""), 301},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "corr-" + strings.ReplaceAll(tc.name, " ", "_")
			tc.r.Header.Set("X-Correlation-ID", id)
			w := httptest.NewRecorder()
			tc.handler.ServeHTTP(w, tc.r)
			if w.Code != tc.status {
				t.Errorf("status %d, want %d (%.300s)", w.Code, tc.status, w.Body)
			}
			if got := w.Header().Get("X-Correlation-Id"); got != id {
				t.Errorf("X-Correlation-Id = %q, want %q", got, id)
			}
		})
	}
}

// The Queue page shows the dead letters 50 at a time with a link to the
// next page, and links a cut payload's download, which the session opens.
func TestUIQueuePages(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	payloads := make([]string, 120)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n":%d}`, i+1)
	}
	payloads[0] = `{"big":"` + strings.Repeat("x", 5000) + `"}`
	seedDeadLetters(t, fx.root, "acme", "echo", payloads...)
	c := fx.login(t)
	rows := regexp.MustCompile(`<tr data-id="(\d+)">`)
	ids := func(body string) (first, last string, n int) {
		m := rows.FindAllStringSubmatch(body, -1)
		if len(m) == 0 {
			return "", "", 0
		}
		return m[0][1], m[len(m)-1][1], len(m)
	}
	body := wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK)
	if first, last, n := ids(body); first != "1" || last != "50" || n != 50 {
		t.Errorf("first page: ids %s to %s, %d rows", first, last, n)
	}
	if !strings.Contains(body, `<a href="/ui/queues/acme/echo?after=50" rel="next">Next page</a>`) || !strings.Contains(body, "120 pending") {
		t.Errorf("first page without its count or its next link:\n%.2000s", body)
	}
	if !strings.Contains(body, fmt.Sprintf(`<a href="/ui/queues/acme/echo/dlq/1/payload" download>the whole payload (%d bytes)</a>`, len(payloads[0]))) {
		t.Errorf("the cut payload has no download link")
	}
	body = wantPage(t, fx.get("/ui/queues/acme/echo?after=100", c), http.StatusOK)
	if first, last, n := ids(body); first != "101" || last != "120" || n != 20 {
		t.Errorf("last page: ids %s to %s, %d rows", first, last, n)
	}
	if strings.Contains(body, "Next page") || !strings.Contains(body, `<a href="/ui/queues/acme/echo">First page</a>`) {
		t.Errorf("last page: a next link, or no first-page link")
	}
	// a bad link is 400, as on the Journal page and the API, with the first
	// page under the error
	for _, q := range []string{"after=x", "after=-1", "limit=0", "limit=501"} {
		body = wantPage(t, fx.get("/ui/queues/acme/echo?"+q, c), http.StatusBadRequest)
		if first, _, n := ids(body); first != "1" || n != 50 {
			t.Errorf("?%s: first id %s, %d rows; want the first page", q, first, n)
		}
	}
	w := fx.get("/ui/queues/acme/echo/dlq/1/payload", c)
	if w.Code != http.StatusOK || w.Body.String() != payloads[0] || w.Header().Get("Content-Disposition") != `attachment; filename="acme-echo-1.payload"` {
		t.Errorf("download with the session: %d, %d bytes, %q", w.Code, w.Body.Len(), w.Header().Get("Content-Disposition"))
	}
	if w := fx.get("/ui/queues/acme/echo/dlq/1/payload", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("download without a session: %d", w.Code)
	}
}

// A POST with the session is read only up to 64 KiB: a larger form is
// refused (its token is not read) and nothing is done.
func TestUIFormSizeBound(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	c := fx.login(t)
	token := csrfOf(t, wantPage(t, fx.get("/ui/queues/acme/echo", c), http.StatusOK))
	w := fx.post("/ui/queues/acme/echo/dlq/1/discard", c, url.Values{"pad": {strings.Repeat("x", 70<<10)}, "csrf": {token}})
	if w.Code != http.StatusForbidden {
		t.Errorf("a 70 KiB form: %d, want 403", w.Code)
	}
	if got := fx.pendingIDs(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending after the refused form: %v", got)
	}
	if w := fx.post("/ui/queues/acme/echo/dlq/1/discard", c, url.Values{"csrf": {token}}); w.Code != http.StatusSeeOther {
		t.Errorf("the same form, small: %d", w.Code)
	}
}
