package engine_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
)

// A 2xx answer whose body cannot be read (cut short, reset, a malformed
// chunk, stalled past read_timeout_ms) fails the step with why the body
// could not be read, and, as for a non-2xx answer whose body could not be
// read, ctx.HTTP_SC and ctx.HTTP_RESPONSE_HEADERS describe the answer as
// far as it arrived: the status and headers did, the body did not
// (ctx.HTTP_RESPONSE_BODY stays unset). A fault handler can so tell a call
// the backend answered, and most likely acted on, from one that reached
// nobody (a refused connection leaves all three unset).
func TestHTTPEgressSuccessWithAnUnreadableBodyKeepsItsStatus(t *testing.T) {
	const head = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Partner-Trace: t-9\r\n"
	src := flowSource("unread-success", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 300

## Fault: relay
~~~ntd
{"sc": {{ ctx.HTTP_SC }}, "trace": "{{ ctx.HTTP_RESPONSE_HEADERS["X-Partner-Trace"] }}", "body": {{ ctx.HTTP_RESPONSE_BODY }}}
~~~
`)
	stalled := func(t *testing.T, _ string) string {
		b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Partner-Trace", "t-9")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		return b.URL
	}
	for _, c := range []struct {
		name    string
		backend func(*testing.T, string) string
		reply   string
		err     string // how the step's error starts
	}{
		{"a body cut short", rawBackend, head + "Content-Length: 100\r\n\r\n{\"id", "step 'forward': effect handler failed: reading the answer: unexpected EOF"},
		{"a connection reset mid-body", resetBackend, head + "Content-Length: 100\r\n\r\n{\"id", "step 'forward': effect handler failed: reading the answer: "},
		{"a malformed chunk", rawBackend, head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n", "step 'forward': effect handler failed: reading the answer: "},
		{"a body stalled past read_timeout_ms", stalled, "", "step 'forward': effect handler failed: the answer from "},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := c.backend(t, c.reply)
			res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", addr), `{}`)
			got := viewOf(res)
			got.Err = "" // its start is checked below: a reset names the addresses
			if diff := cmp.Diff(view{Status: 502, Header: jsonHdr("c-1"), Body: `{"sc":201,"trace":"t-9","body":null}`,
				Outcome: engine.FaultHandled, ErrKind: engine.KindEffect}, got); diff != "" {
				t.Errorf("result mismatch (-want +got):\n%s", diff)
			}
			if res.Err == nil || !strings.HasPrefix(res.Err.Error(), c.err) {
				t.Errorf("error %v: want it to start %q", res.Err, c.err)
			}
		})
	}
}
