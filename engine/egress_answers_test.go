package engine_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
)

// TestHTTPEgressSwitchingProtocolsIsAFailedAnswer: a backend that answers
// 101 Switching Protocols (to a call that asked for no upgrade) fails the
// step with its status at once. net/http hands the connection itself over
// as the answer's body, which neither read_timeout_ms nor the flow's
// ceiling ends: reading it held the execution, its worker and the
// connection for as long as the backend kept the connection open.
func TestHTTPEgressSwitchingProtocolsIsAFailedAnswer(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(http.StatusSwitchingProtocols)
		// the server keeps the connection open for a next request
	})
	f := compile(t, flowSource("upgrade", "timeout_ms: 2000\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 1000
`), "BACKEND", b.URL)
	done := make(chan engine.Result, 1)
	req := newRequest(t, f, `{}`)
	go func() { done <- engine.New(engine.Config{}).Run(context.Background(), req) }()
	select {
	case res := <-done:
		checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
			Err: "step 'forward': effect handler failed: HTTP 101 Switching Protocols", ErrKind: engine.KindEffect})
	case <-time.After(30 * time.Second):
		// far past read_timeout_ms and the ceiling: the call never ended
		t.Fatal("the call answered 101 did not end within read_timeout_ms or the flow's ceiling")
	}
}

// gzipped returns s compressed with gzip.
func gzipped(t *testing.T, s []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestHTTPEgressGzipAnswerTheFlowAskedFor: a flow that sends its own
// Accept-Encoding: gzip reads a gzipped answer as the transport reads one it
// asked for itself: decoded, under the answer ceiling counted in decoded
// bytes, without Content-Encoding among its headers. net/http decodes only
// what it asked for, so the flow's answer was the compressed bytes, as a
// text/plain string.
func TestHTTPEgressGzipAnswerTheFlowAskedFor(t *testing.T) {
	const src = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
headers: {"Accept-Encoding": "gzip"}

## Step: answer
` + "```ntd\n" + `{"body": {{ $ }}, "encoding": {{ ctx.HTTP_RESPONSE_HEADERS["Content-Encoding"] }}}` + "\n```\n"
	big := gzipped(t, make([]byte, 4<<20)) // 4 MiB of zeros in about 4 KiB
	for _, c := range []struct {
		name    string
		coding  string
		body    []byte
		maxBody int64
		want    view
	}{
		{"decoded", "gzip", gzipped(t, []byte(`{"a":1}`)), 0,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"body":{"a":1},"encoding":null}`, Outcome: engine.Succeeded}},
		{"x-gzip is gzip", "x-gzip", gzipped(t, []byte(`{"a":1}`)), 0,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"body":{"a":1},"encoding":null}`, Outcome: engine.Succeeded}},
		{"empty", "gzip", nil, 0,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"body":"","encoding":null}`, Outcome: engine.Succeeded}},
		{"over the ceiling once decoded", "gzip", big, 1 << 20,
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
				Err: "step 'forward': effect handler failed: the answer's body exceeds 1048576 bytes", ErrKind: engine.KindEffect}},
		{"not gzip", "gzip", []byte("plain words, not gzip"), 0,
			view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
				Err: "step 'forward': effect handler failed: reading the answer: gzip: invalid header", ErrKind: engine.KindEffect}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", c.coding)
				w.Write(c.body)
			})
			res := run(t, engine.New(engine.Config{MaxResponseBytes: c.maxBody}), compile(t, flowSource("gzip", "", src), "BACKEND", b.URL), `{}`)
			checkView(t, res, c.want)
			if got := b.requests()[0].Header.Get("Accept-Encoding"); got != "gzip" {
				t.Errorf("the call's Accept-Encoding is %q, want the flow's gzip", got)
			}
		})
	}
}

// TestHTTPEgressTextAnswerIsUTF8: an answer kept as a string holds UTF-8
// only: a byte of a body that is not UTF-8 (a backend's Latin-1, a JSON
// body refused for it) reads as U+FFFD, as JSON writes it. The bytes went
// out as they came in an answer that says charset=utf-8, while the same
// string written as JSON (a template, a queue message) had U+FFFD.
func TestHTTPEgressTextAnswerIsUTF8(t *testing.T) {
	const src = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
`
	const templated = src + `
## Step: answer
` + "```ntd\n" + `{"body": {{ $ }}, "len": {{ len($) }}}` + "\n```\n"
	text := hdr("Content-Type", "text/plain; charset=utf-8", "X-Correlation-Id", "c-1")
	for _, c := range []struct {
		name, flow, contentType, body string
		want                          view
	}{
		{"Latin-1 text", src, "text/plain; charset=iso-8859-1", "caf\xe9 cr\xe8me",
			view{Status: 200, Header: text, Body: "caf\uFFFD cr\uFFFDme", Outcome: engine.Succeeded}},
		{"JSON that is not UTF-8", src, "application/json", "{\"a\":\"\xff\xfe\"}",
			view{Status: 200, Header: text, Body: "{\"a\":\"\uFFFD\uFFFD\"}", Outcome: engine.Succeeded}},
		{"in a template", templated, "text/plain", "caf\xe9",
			view{Status: 200, Header: jsonHdr("c-1"), Body: "{\"body\":\"caf\uFFFD\",\"len\":4}", Outcome: engine.Succeeded}},
		{"UTF-8 is kept", src, "text/plain", "café ✓",
			view{Status: 200, Header: text, Body: "café ✓", Outcome: engine.Succeeded}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(200, c.contentType, c.body))
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("text", "", c.flow), "BACKEND", b.URL), `{}`)
			checkView(t, res, c.want)
		})
	}
}
