package host_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestUIQueryErrorsReadAsSentences: a page whose query string cannot be
// read says so in one sentence. The Queue page said "The the query string
// cannot be read: …".
func TestUIQueryErrorsReadAsSentences(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	for _, tc := range []struct{ path, want string }{
		{"/ui/queues/acme/echo?after=%zz", "The query string cannot be read: invalid URL escape &#34;%zz&#34;."},
		{"/ui/queues/acme/echo?after=1;x", "The query string cannot be read: invalid semicolon separator in query."},
		{"/ui/queues/acme/echo?limit=0", "The limit &#34;0&#34; is not a number from 1 to 500."},
		{"/ui/queues/acme/echo?after=x", "The after &#34;x&#34; is not a message id."},
		{"/ui/journal?limit=%zz", "The query string cannot be read: invalid URL escape &#34;%zz&#34;."},
		{"/ui/journal?limit=0", "The limit &#34;0&#34; is not a number from 1 to 1000."},
	} {
		body := wantPage(t, fx.admin(http.MethodGet, tc.path), http.StatusBadRequest)
		if want := `role="alert">` + tc.want + `</div>`; !strings.Contains(body, want) {
			i := strings.Index(body, `role="alert">`)
			t.Errorf("%s: the error reads %.160q, want %q", tc.path, body[max(i, 0):], tc.want)
		}
	}
}
