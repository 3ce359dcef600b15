package host_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
)

// publicRoutes are the routes that answer without the admin key: the
// doors (their access keys), the probes, the metrics, the git hook (its
// secret), the login form and the redirect of /ui to /ui/.
var publicRoutes = []host.Route{
	{http.MethodPost, "/flows/:tenant/:flow/enqueue"},
	{http.MethodPost, "/flows/:tenant/:flow/run"},
	{http.MethodGet, "/healthz"},
	{http.MethodHead, "/healthz"},
	{http.MethodPost, "/hooks/git"},
	{http.MethodGet, "/metrics"},
	{http.MethodHead, "/metrics"},
	{http.MethodGet, "/readyz"},
	{http.MethodHead, "/readyz"},
	{http.MethodGet, "/ui"},
	{http.MethodHead, "/ui"},
	{http.MethodGet, "/ui/login"},
	{http.MethodHead, "/ui/login"},
	{http.MethodPost, "/ui/login"},
}

// TestEveryRouteNeedsTheAdminKey takes the routes from the server's
// routers, not from a list kept by hand: every route but publicRoutes
// answers 401 without the admin key (and with a wrong one, an access key
// or a forged cookie), changes nothing, and shows nothing.
func TestEveryRouteNeedsTheAdminKey(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	cfg := fx.cfg
	cfg.Metrics = host.NewMetrics() // a server of its own, to list its routes
	routes := host.Routes(host.New(cfg))

	var guarded []host.Route
	for _, r := range routes {
		if !slices.Contains(publicRoutes, r) {
			guarded = append(guarded, r)
		}
	}
	for _, p := range publicRoutes {
		if !slices.Contains(routes, p) {
			t.Errorf("publicRoutes names %s %s, which the server does not route", p.Method, p.Path)
		}
	}
	if len(guarded) < 10 {
		t.Fatalf("only %d routes need the admin key (%v): the listing is broken", len(guarded), guarded)
	}

	// a path of each pattern, its parameters filled with a live queue's
	// names and its pending dead letter
	params := strings.NewReplacer(":tenant", "acme", ":flow", "echo", ":id", "1", ":action", "discard")
	forged := &http.Cookie{Name: "nexus_session", Value: "v1.99999999999.forged"}
	for _, rt := range guarded {
		if !strings.HasPrefix(rt.Path, "/ui/") && !strings.HasPrefix(rt.Path, "/api/") && rt.Path != "/status" {
			t.Errorf("%s %s is neither public nor a management path: add it to publicRoutes or guard it", rt.Method, rt.Path)
		}
		path := params.Replace(rt.Path)
		for _, auth := range []struct {
			name   string
			header []string
			cookie *http.Cookie
		}{
			{"nothing", nil, nil},
			{"a wrong Bearer key", []string{"Authorization", "Bearer not-the-admin-key"}, nil},
			{"an access key", []string{"Authorization", "Bearer " + keyAcmeAll}, nil},
			{"a forged cookie", nil, forged},
		} {
			t.Run(rt.Method+" "+rt.Path+" with "+auth.name, func(t *testing.T) {
				r := newRequest(rt.Method, path, url.Values{"csrf": {"x"}, "key": {"x"}}.Encode(), auth.header...)
				if rt.Method == http.MethodPost {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if auth.cookie != nil {
					r.AddCookie(auth.cookie)
				}
				w := fx.serve(r)
				if w.Code != http.StatusUnauthorized {
					t.Errorf("status = %d, want 401 (body %.300s)", w.Code, w.Body)
				}
				if c := w.Result().Cookies(); len(c) > 0 {
					t.Errorf("cookies set: %v", c)
				}
				for _, secret := range []string{"data-flow", "data-id", fixtureCommit[:12], `"n":1`, `\"n\":1`} {
					if strings.Contains(w.Body.String(), secret) {
						t.Errorf("the refusal shows %q:\n%s", secret, w.Body)
					}
				}
			})
		}
	}
	if got := fx.pendingIDsFromFiles(t, "acme", "echo"); !slices.Equal(got, []uint64{1}) {
		t.Errorf("pending dead letters after the refused requests: %v, want [1]", got)
	}
}

// TestAsteriskTargetIsForOptionsOnly: the request target "*" is for a
// server-wide OPTIONS alone (RFC 9112 §3.2.4). OPTIONS * is a 405 as every
// OPTIONS is, its Allow the methods the server answers; any other method
// with it is a malformed request, 400, with no Allow: it was a 405 whose
// Allow named the very method refused (GET * "not allowed", Allow: GET,
// HEAD, POST).
func TestAsteriskTargetIsForOptionsOnly(t *testing.T) {
	fx := newFixture(t, nil)
	srv := httptest.NewUnstartedServer(fx.handler)
	srv.Config.DisableGeneralOptionsHandler = true // as nexus serve's server
	srv.Start()
	defer srv.Close()
	ask := func(method string) (status int, allow, cid, body string) {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s * HTTP/1.1\r\nHost: nexus.test\r\nConnection: close\r\n\r\n", method)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("X-Correlation-Id"), string(b)
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		status, allow, cid, body := ask(m)
		if status != http.StatusBadRequest || allow != "" || cid == "" ||
			body != `{"ok":false,"error":"the request target * is for OPTIONS only, not `+m+`"}` {
			t.Errorf("%s *: %d, Allow %q, X-Correlation-Id %q, %s; want 400 naming the method, no Allow", m, status, allow, cid, body)
		}
	}
	if status, allow, cid, _ := ask(http.MethodOptions); status != http.StatusMethodNotAllowed || allow != "GET, HEAD, POST" || cid == "" {
		t.Errorf("OPTIONS *: %d, Allow %q, X-Correlation-Id %q; want 405, Allow: GET, HEAD, POST", status, allow, cid)
	}
}
