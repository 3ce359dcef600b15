package engine_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
)

// A non-2xx answer whose body cannot be read (cut short, reset, a
// malformed chunk) fails the step with its status, as any non-2xx answer
// does, and sets ctx.HTTP_SC and ctx.HTTP_RESPONSE_HEADERS; the body that
// could not be read is not kept (ctx.HTTP_RESPONSE_BODY stays unset), and
// why it could not be read is for the log alone. It failed as a
// transport error, without the status, and the handler saw no HTTP_SC.
func TestHTTPEgressNonSuccessWithAnUnreadableBodyKeepsItsStatus(t *testing.T) {
	const head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nX-Partner-Trace: t-9\r\n"
	src := flowSource("unread-failure", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: relay
~~~ntd
{"error": "{{ $.fault_error }}", "sc": {{ ctx.HTTP_SC }}, "trace": "{{ ctx.HTTP_RESPONSE_HEADERS["X-Partner-Trace"] }}", "body": {{ ctx.HTTP_RESPONSE_BODY }}}
~~~
`)
	want := view{Status: 502, Header: jsonHdr("c-1"),
		Body:    `{"error":"effect handler failed: HTTP 503 Service Unavailable","sc":503,"trace":"t-9","body":null}`,
		Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 503 Service Unavailable", ErrKind: engine.KindEffect}
	for _, c := range []struct {
		name    string
		backend func(*testing.T, string) string
		reply   string
		detail  string // how Detail starts: the read's failure, for the log
	}{
		{"a body cut short", rawBackend, head + "Content-Length: 100\r\n\r\n{\"err", "reading the answer: unexpected EOF"},
		{"a connection reset mid-body", resetBackend, head + "Content-Length: 100\r\n\r\n{\"err", "reading the answer: "},
		{"a malformed chunk", rawBackend, head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz" + secret + "\r\n", "reading the answer: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := c.backend(t, c.reply)
			res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", addr), `{}`)
			checkView(t, res, want)
			if res.Err == nil {
				return
			}
			if !strings.HasPrefix(res.Err.Detail, c.detail) {
				t.Errorf("Detail %q: want it to start %q", res.Err.Detail, c.detail)
			}
			if strings.Contains(res.Err.Msg, secret) || strings.Contains(string(res.Body), secret) {
				t.Errorf("the downstream's text travelled: %q, %s", res.Err.Msg, res.Body)
			}
		})
	}
}

// A non-2xx answer whose body stalls past read_timeout_ms is that answer
// too: its status fails the step, and the timeout is for the log.
func TestHTTPEgressNonSuccessWithAStalledBodyKeepsItsStatus(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"err`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	src := flowSource("stalled-failure", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 200

## Fault: relay
~~~ntd
{"error": "{{ $.fault_error }}", "sc": {{ ctx.HTTP_SC }}}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
	checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"),
		Body:    `{"error":"effect handler failed: HTTP 429 Too Many Requests","sc":429}`,
		Outcome: engine.FaultHandled, Err: "step 'forward': effect handler failed: HTTP 429 Too Many Requests", ErrKind: engine.KindEffect})
	host := strings.TrimPrefix(b.URL, "http://")
	if want := "the answer from " + host + " did not arrive within read_timeout_ms (200 ms)"; res.Err != nil && res.Err.Detail != want {
		t.Errorf("Detail %q, want %q", res.Err.Detail, want)
	}
}
