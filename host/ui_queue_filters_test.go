package host_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestQueuePagesKeepTheListsFilters: an operator who filtered the Queues
// page (?tenant=, ?flow=) and opens a queue comes back to the filtered
// list: the Queues page's links to a Queue page carry the filters
// (list_tenant, list_flow), and the Queue page's link back to the list,
// its page links, its buttons and the page a button sends back to keep
// them. The links named the queue alone, and the way back was the whole
// list.
func TestQueuePagesKeepTheListsFilters(t *testing.T) {
	do := func(t *testing.T, srv *httptest.Server, cookie *http.Cookie, method, path string, form url.Values) (*http.Response, string) {
		t.Helper()
		if method == http.MethodPost && form == nil {
			form = url.Values{}
		}
		return sendWithCookie(t, srv, cookie, method, path, form)
	}
	for _, tc := range []struct {
		name, list string // the Queues page's query
		keep       string // what the Queue page's links add
		back       string // the Queue page's link back to the list
	}{
		{"no filter", "", "", "/ui/queues"},
		{"a tenant", "?tenant=acme", "list_tenant=acme", "/ui/queues?tenant=acme"},
		{"a flow", "?flow=echo", "list_flow=echo", "/ui/queues?flow=echo"},
		{"both", "?tenant=acme&flow=echo", "list_flow=echo&list_tenant=acme", "/ui/queues?flow=echo&tenant=acme"},
		{"empty fields, as the form sends them", "?tenant=&flow=", "", "/ui/queues"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newAdminFixture(t, adminOptions{key: adminKey})
			seedTwoQueues(t, fx)
			srv := httptest.NewServer(fx.handler)
			defer srv.Close()
			cookie := fx.login(t)
			q := ""
			if tc.keep != "" {
				q = "?" + strings.ReplaceAll(tc.keep, "&", "&amp;")
			}
			_, body := do(t, srv, cookie, http.MethodGet, "/ui/queues"+tc.list, nil)
			if want := `<a href="/ui/queues/acme/echo` + q + `">echo</a>`; !strings.Contains(body, want) {
				t.Errorf("the Queues page does not link the queue as %s:\n%s", want, body)
			}

			page := "/ui/queues/acme/echo?limit=1"
			if tc.keep != "" {
				page += "&" + tc.keep
			}
			res, body := do(t, srv, cookie, http.MethodGet, page, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", page, res.StatusCode)
			}
			amp := ""
			if tc.keep != "" {
				amp = "&amp;" + strings.ReplaceAll(tc.keep, "&", "&amp;")
			}
			for _, want := range []string{
				`<a href="` + strings.ReplaceAll(tc.back, "&", "&amp;") + `" id="back-to-queues">`,
				`<a href="/ui/queues/acme/echo?after=1&amp;limit=1` + amp + `" rel="next">Next page</a>`,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("the Queue page does not hold %s:\n%s", want, body)
				}
			}
			// a stale payload link: its page leads back to the queue, kept so
			_, body404 := do(t, srv, cookie, http.MethodGet, "/ui/queues/acme/echo/dlq/99/payload"+q2(tc.keep), nil)
			if want := `<a href="/ui/queues/acme/echo` + q + `">Back to the queue</a>`; !strings.Contains(body404, want) {
				t.Errorf("the stale payload link's page does not hold %s:\n%s", want, body404)
			}

			form := url.Values{"csrf": {csrfOf(t, body)}, "limit": {"1"}}
			for k, v := range mustQuery(t, tc.keep) {
				form[k] = v
				for _, val := range v {
					if want := `<input type="hidden" name="` + k + `" value="` + val + `">`; !strings.Contains(body, want) {
						t.Errorf("the Queue page's buttons do not send %s", want)
					}
				}
			}
			res, _ = do(t, srv, cookie, http.MethodPost, "/ui/queues/acme/echo/dlq/1/replay", form)
			loc := res.Header.Get("Location")
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("Replay: %d", res.StatusCode)
			}
			u, err := url.Parse(loc)
			if err != nil {
				t.Fatal(err)
			}
			got := u.Query()
			for _, k := range []string{"list_tenant", "list_flow"} {
				if g, w := got.Get(k), mustQuery(t, tc.keep).Get(k); g != w {
					t.Errorf("Replay sends back to %s: %s %q, want %q", loc, k, g, w)
				}
			}
		})
	}
}

// mustQuery parses the query s.
func mustQuery(t *testing.T, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// q2 is the query keep as a link's: "" or "?keep".
func q2(keep string) string {
	if keep == "" {
		return ""
	}
	return "?" + keep
}
