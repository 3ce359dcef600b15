package host_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestUIButtonFailureNamesTheCorrelationID: management.md, Pages: "A
// failure shows an error page naming the request's correlation ID; the
// details are in the log (internal_error)". A Replay or Discard button
// that failed inside the host showed the Queue page with "internal
// error" alone: nothing to find its log line by.
func TestUIButtonFailureNamesTheCorrelationID(t *testing.T) {
	for _, path := range []string{
		"/ui/queues/acme/echo/dlq/1/discard",
		"/ui/queues/acme/echo/dlq/all/discard",
	} {
		t.Run(path, func(t *testing.T) {
			disk := &failingDisk{file: "dlq.log.acked", errno: syscall.EIO}
			fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
			seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
			disk.failing.Store(true)
			const cid = "button-failure-1"
			w := fx.serve(newRequest(http.MethodPost, path, "", append([]string{"X-Correlation-ID", cid}, bearerAdmin...)...))
			if w.Code != http.StatusInternalServerError {
				t.Fatalf("POST %s on a failing disk: %d, want 500\n%s", path, w.Code, w.Body)
			}
			if body := w.Body.String(); !strings.Contains(body, cid) {
				t.Errorf("POST %s: the page does not name the correlation ID %s:\n%s", path, cid, body)
			}
			lines := fx.logs.Events(t, "internal_error")
			if len(lines) == 0 || lines[len(lines)-1]["correlation_id"] != cid {
				t.Errorf("POST %s: internal_error lines %v, want the last with correlation_id %s", path, lines, cid)
			}
		})
	}
}

// TestAPIAllThatFailsAtOnceSaysInternalError: a replay or discard of all
// that fails before it has handled any dead letter answers 500 "internal
// error", as one does; it said "0 dead letters were handled, then the rest
// failed (internal error)", a count of nothing before a failure.
func TestAPIAllThatFailsAtOnceSaysInternalError(t *testing.T) {
	disk := &failingDisk{file: "dlq.log.acked", errno: syscall.EIO}
	fx := newAdminFixture(t, adminOptions{key: adminKey, fs: disk})
	seedDeadLetters(t, fx.root, "acme", "echo", `{"n":1}`, `{"n":2}`)
	disk.failing.Store(true)
	w := fx.admin(http.MethodPost, "/api/queues/acme/echo/dlq/all/discard")
	wantRefusal(t, w, http.StatusInternalServerError, "internal error")
}
