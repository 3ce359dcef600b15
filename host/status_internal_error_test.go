package host_test

import (
	"net/http"
	"testing"

	"github.com/nexushq/nexus/registry"
)

// TestStatusInternalErrorLogsCorrelationID: a /status that cannot read the
// registry answers 500 "internal error" and logs internal_error with the
// request's correlation ID and path, as the API's failures are logged: the
// answer's X-Correlation-Id is the operator's one key to the details. Its
// line had neither.
func TestStatusInternalErrorLogsCorrelationID(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.cfg.Journal.(*registry.JournalWriter).Stop()
	fx.reg.Close() // every read of the registry fails
	r := newRequest(http.MethodGet, "/status", "", bearerAdmin...)
	r.Header.Set("X-Correlation-ID", "trace-status-500")
	w := fx.serve(r)
	wantRefusal(t, w, http.StatusInternalServerError, "internal error")
	evs := fx.logs.Events(t, "internal_error")
	if len(evs) != 1 || evs[0]["correlation_id"] != "trace-status-500" || evs[0]["path"] != "/status" {
		t.Errorf("internal_error events %v, want one with correlation_id trace-status-500 and path /status", evs)
	}
}
