package host_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAPIMalformedQueryIsRefused: a query string that cannot be decoded
// (a bad %-escape, a semicolon) is a 400 naming it. The parameters it
// held were dropped silently: a correlation_id or tenant filter with a
// stray % answered the whole journal, a limit the default page.
func TestAPIMalformedQueryIsRefused(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	entries, _ := testJournal()
	writeJournal(t, fx.reg, entries...)
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	for _, tc := range []struct{ path, want string }{
		{"/api/journal?correlation_id=corr-2%zz", `the query string cannot be read: invalid URL escape "%zz"`},
		{"/api/journal?tenant=acme;flow=echo", `the query string cannot be read: invalid semicolon separator in query`},
		{"/api/queues/acme/echo/dlq?limit=1%", `the query string cannot be read: invalid URL escape "%"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			wantRefusal(t, fx.admin(http.MethodGet, tc.path), http.StatusBadRequest, tc.want)
		})
	}
}

// TestAPIQueuesFilters: GET /api/queues takes tenant and flow as
// /api/journal does. They were ignored: /api/queues?tenant=acme answered
// every tenant's queues.
func TestAPIQueuesFilters(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	seedDeadLetters(t, fx.root, "acme", "hello", `{"n":1}`)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"acme/echo", "acme/hello", "globex/shipment"}},
		{"tenant=acme", []string{"acme/echo", "acme/hello"}},
		{"flow=shipment", []string{"globex/shipment"}},
		{"tenant=acme&flow=hello", []string{"acme/hello"}},
		{"tenant=globex&flow=hello", []string{}},
		{"tenant=nobody", []string{}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			w := fx.admin(http.MethodGet, "/api/queues?"+tc.query)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d %s, want 200", w.Code, w.Body)
			}
			var doc struct {
				Queues []struct{ Tenant, Flow string } `json:"queues"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc.Queues == nil {
				t.Fatalf("body %s: %v, want a list of queues", w.Body, err)
			}
			got := []string{}
			for _, q := range doc.Queues {
				got = append(got, q.Tenant+"/"+q.Flow)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("queues (-want +got):\n%s", diff)
			}
		})
	}
	for _, tc := range []struct{ query, want string }{
		{"tenant=", "tenant is empty: give one, or leave it out"},
		{"tenant=acme&flow=", "flow is empty: give one, or leave it out"},
		{"tenant=Bad", `invalid name "Bad" for tenant (any flow): character 'B' at position 1 is not allowed`},
		{"tenant=acme&flow=a.b", `invalid name "a.b" for flow (tenant "acme"): character '.' at position 2 is not allowed`},
		{"tenant=acme&tenant=globex", `tenant is given twice ("acme", then "globex"): give it once`},
	} {
		t.Run("400 for "+tc.query, func(t *testing.T) {
			wantRefusal(t, fx.admin(http.MethodGet, "/api/queues?"+tc.query), http.StatusBadRequest, tc.want)
		})
	}
}

// TestAPIUnknownQueryParametersAreRefused: every API endpoint refuses a
// query parameter it does not take with 400 naming it, and a parameter it
// takes given twice: a misspelt filter (?tennant=acme) answered as if
// there were none, a wider listing than asked for, and a second value was
// dropped.
func TestAPIUnknownQueryParametersAreRefused(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedTwoQueues(t, fx)
	long := strings.Repeat("x", 300)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/api/flows?tenant=acme", `unknown query parameter "tenant": GET /api/flows takes none`},
		{"GET", "/api/queues?tennant=acme", `unknown query parameter "tennant": GET /api/queues takes tenant and flow`},
		{"GET", "/api/queues?b=1&a=2&tenant=acme", `unknown query parameters "a", "b": GET /api/queues takes tenant and flow`},
		{"GET", "/api/queues?g&f&e&d&c&b&a", `unknown query parameters "a", "b", "c", "d", "e", … (7 in all): GET /api/queues takes tenant and flow`},
		{"GET", "/api/queues?" + long + "=1", `unknown query parameter "` + strings.Repeat("x", 64) + `"…: GET /api/queues takes tenant and flow`},
		{"GET", "/api/queues/acme/echo/dlq?afterr=1", `unknown query parameter "afterr": GET /api/queues/{tenant}/{flow}/dlq takes after and limit`},
		{"GET", "/api/queues/acme/echo/dlq?limit=1&limit=2", `limit is given twice ("1", then "2"): give it once`},
		{"GET", "/api/queues/acme/echo/dlq/1/payload?x", `unknown query parameter "x": GET /api/queues/{tenant}/{flow}/dlq/{id}/payload takes none`},
		{"POST", "/api/queues/acme/echo/dlq/1/discard?id=2", `unknown query parameter "id": POST /api/queues/{tenant}/{flow}/dlq/{id}/{action} takes none`},
		{"POST", "/api/queues/acme/echo/dlq/all/discard?tenant=acme", `unknown query parameter "tenant": POST /api/queues/{tenant}/{flow}/dlq/{id}/{action} takes none`},
		{"GET", "/api/journal?tenat=acme", `unknown query parameter "tenat": GET /api/journal takes tenant, flow, correlation_id, limit and before`},
		{"GET", "/api/journal?flow=echo&flow=hello", `flow is given twice ("echo", then "hello"): give it once`},
	} {
		t.Run(tc.method+" "+tc.path[:min(len(tc.path), 60)], func(t *testing.T) {
			wantRefusal(t, fx.admin(tc.method, tc.path), http.StatusBadRequest, tc.want)
		})
	}
	// nothing was discarded
	if q := listedQueues(t, fx)["acme/echo"]; q["dead_letters"] != 2.0 {
		t.Errorf("acme/echo: %v, want its 2 dead letters still pending", q)
	}
}

// TestAPICacheBustingParameter: a GET (or HEAD) of the API takes one `_`
// parameter and ignores it (jQuery's cache-busting ?_=1700000000, which
// dashboards and proxies add); it was refused as an unknown parameter.
// Everything else is still refused: `_` twice, `_` beside an unknown
// parameter (named alone), and `_` on a POST.
func TestAPICacheBustingParameter(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	entries, _ := testJournal()
	writeJournal(t, fx.reg, entries...)
	seedTwoQueues(t, fx)
	seedDeadLetters(t, fx.root, "acme", "hello", `{"n":1}`)
	for _, path := range []string{
		"/api/flows",
		"/api/queues",
		"/api/queues?tenant=acme",
		"/api/queues/acme/hello/dlq",
		"/api/queues/acme/hello/dlq?limit=1",
		"/api/queues/acme/hello/dlq/1/payload",
		"/api/journal",
		"/api/journal?tenant=acme&limit=2",
	} {
		busted := path + "?_=1700000000"
		if strings.Contains(path, "?") {
			busted = path + "&_=1700000000"
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			t.Run(method+" "+busted, func(t *testing.T) {
				want := fx.admin(method, path)
				if want.Code != http.StatusOK {
					t.Fatalf("%s %s: %d %s", method, path, want.Code, want.Body)
				}
				got := fx.admin(method, busted)
				if got.Code != http.StatusOK {
					t.Fatalf("%d %s, want 200", got.Code, got.Body)
				}
				if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
					t.Errorf("the answer with _ differs (-without +with):\n%s", diff)
				}
			})
		}
	}
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/api/queues?_=1&_=2", `_ is given twice ("1", then "2"): give it once`},
		{"GET", "/api/queues?_=1&tennant=acme", `unknown query parameter "tennant": GET /api/queues takes tenant and flow`},
		{"GET", "/api/flows?_=1&x", `unknown query parameter "x": GET /api/flows takes none`},
		{"POST", "/api/queues/acme/hello/dlq/1/discard?_=1", `unknown query parameter "_": POST /api/queues/{tenant}/{flow}/dlq/{id}/{action} takes none`},
		{"POST", "/api/queues/acme/hello/dlq/all/replay?_=1", `unknown query parameter "_": POST /api/queues/{tenant}/{flow}/dlq/{id}/{action} takes none`},
	} {
		t.Run("400 for "+tc.method+" "+tc.path, func(t *testing.T) {
			wantRefusal(t, fx.admin(tc.method, tc.path), http.StatusBadRequest, tc.want)
		})
	}
	if q := listedQueues(t, fx)["acme/hello"]; q["dead_letters"] != 1.0 {
		t.Errorf("acme/hello: %v, want its dead letter still pending", q)
	}
}
