package host_test

import (
	"net/http"
	"testing"
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
