package host_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
)

// TestUITemplateFailureAnswersAnErrorPage: a page whose template fails as
// it executes answers 500 with the UI's error page (the layout, naming the
// request's correlation ID), never the half of the page written before
// the failure, and logs internal_error. It answered the API's JSON
// ({"ok":false,"error":"internal error"}), which a browser shows as text.
// The error page failing too answers a plain HTML page, 500 all the same,
// and the request logs one internal_error line naming both failures (it
// logged two, one for each).
func TestUITemplateFailureAnswersAnErrorPage(t *testing.T) {
	for _, tc := range []struct {
		broken []string // the templates made to fail
		path   string
		layout bool // the answer is the UI's error page (else the plain one)
	}{
		{[]string{"queues"}, "/ui/queues", true},
		{[]string{"flows"}, "/ui/", true},
		{[]string{"error"}, "/ui/no-such-page", false},
		{[]string{"queues", "error"}, "/ui/queues", false},
	} {
		t.Run(strings.Join(tc.broken, "+"), func(t *testing.T) {
			fx := newAdminFixture(t, adminOptions{key: adminKey})
			cfg := fx.cfg
			cfg.Metrics = host.NewMetrics() // its own: a registry takes a collector once
			s := host.New(cfg)
			for _, name := range tc.broken {
				host.BreakPage(s, name)
			}
			const cid = "template-failure-1"
			r := newRequest(http.MethodGet, tc.path, "", append([]string{"X-Correlation-ID", cid}, bearerAdmin...)...)
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, r)
			body := wantPage(t, w, http.StatusInternalServerError)
			if !strings.Contains(body, cid) {
				t.Errorf("the page does not name the correlation ID %s:\n%s", cid, body)
			}
			if strings.Contains(body, "half a page") {
				t.Errorf("the answer holds the part written before the failure:\n%s", body)
			}
			if got := strings.Contains(body, "<header>"); got != tc.layout {
				t.Errorf("the answer has the UI's layout: %v, want %v:\n%s", got, tc.layout, body)
			}
			lines := fx.logs.Events(t, "internal_error")
			if len(lines) != 1 || lines[0]["correlation_id"] != cid || !strings.Contains(lines[0]["error"].(string), "the template is broken") {
				t.Fatalf("internal_error lines %v, want one with correlation_id %s and the template's error", lines, cid)
			}
			for _, name := range tc.broken {
				if msg := lines[0]["error"].(string); !strings.Contains(msg, `the page template "`+name+`" failed`) {
					t.Errorf("the internal_error line %q does not name the failure of the template %s", msg, name)
				}
			}
		})
	}
}
