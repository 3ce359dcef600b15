package host_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A dead letter's payload link whose id is no message id (not a whole
// number, or 0) answers 400 with a link back to the queue its path names,
// keeping the list's filters, as a stale link (404) does; it linked back
// to the flows. A path whose tenant or flow is no valid name names no
// queue, and keeps the link to the flows.
func TestPayloadLinkWithABadIDLinksBackToTheQueue(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`)
	srv := httptest.NewServer(fx.handler)
	defer srv.Close()
	cookie := fx.login(t)
	for _, tc := range []struct {
		name, path, back string
	}{
		{"an id that is no number", "/ui/queues/acme/echo/dlq/x/payload", `<a href="/ui/queues/acme/echo">Back to the queue</a>`},
		{"id 0", "/ui/queues/acme/echo/dlq/0/payload", `<a href="/ui/queues/acme/echo">Back to the queue</a>`},
		{"a negative id", "/ui/queues/acme/echo/dlq/-1/payload", `<a href="/ui/queues/acme/echo">Back to the queue</a>`},
		{"an id past 2^64", "/ui/queues/acme/echo/dlq/18446744073709551616/payload", `<a href="/ui/queues/acme/echo">Back to the queue</a>`},
		{"a queue with no files", "/ui/queues/acme/other/dlq/x/payload", `<a href="/ui/queues/acme/other">Back to the queue</a>`},
		{"the list's filters kept", "/ui/queues/acme/echo/dlq/0/payload?list_tenant=acme&list_flow=echo",
			`<a href="/ui/queues/acme/echo?list_flow=echo&amp;list_tenant=acme">Back to the queue</a>`},
		{"a tenant that is no name", "/ui/queues/A/echo/dlq/x/payload", `<a href="/ui/">Back to the flows</a>`},
		{"a flow that is no name", "/ui/queues/acme/-echo/dlq/0/payload", `<a href="/ui/">Back to the flows</a>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := sendWithCookie(t, srv, cookie, http.MethodGet, tc.path, nil)
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("GET %s: %d, want 400", tc.path, res.StatusCode)
			}
			if got := strings.Count(body, "Back to the"); got != 1 || !strings.Contains(body, tc.back) {
				t.Errorf("GET %s: %d back links, want one, %s:\n%s", tc.path, got, tc.back, body)
			}
		})
	}
}
