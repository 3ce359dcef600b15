package engine_test

import (
	"strconv"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// A JSON answer that begins with a UTF-8 byte order mark is JSON (RFC 8259
// lets a parser ignore the mark; the doors drop it from a request's body,
// and XML takes one too): the mark is dropped and the rest parsed. It was
// read as a string, the mark in it, and a flow reading $.id found null.
func TestHTTPEgressJSONAnswerWithAByteOrderMark(t *testing.T) {
	const src = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: answer
` + "```ntd\n" + `{"id": {{ $.id }}, "body": {{ ctx.HTTP_RESPONSE_BODY }}}` + "\n```\n"
	const bom = "\xef\xbb\xbf"
	for _, c := range []struct {
		name, contentType, body string
		want                    view
	}{
		{"application/json", "application/json", bom + `{"id":7}`,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"id":7,"body":{"id":7}}`, Outcome: engine.Succeeded}},
		{"+json", "application/vnd.acme+json; charset=utf-8", bom + "\n {\"id\":7}",
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"id":7,"body":{"id":7}}`, Outcome: engine.Succeeded}},
		// the mark is a character of a text answer, as it came
		{"text keeps it", "text/plain", bom + `{"id":7}`,
			view{Status: 200, Header: jsonHdr("c-1"), Body: `{"id":null,"body":"` + "\ufeff" + `{\"id\":7}"}`, Outcome: engine.Succeeded}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(200, c.contentType, c.body))
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("bom", "", src), "BACKEND", b.URL), `{}`)
			checkView(t, res, c.want)
		})
	}
	// no Content-Type at all (net/http's server would sniff one: the
	// answer is written by hand)
	t.Run("no type", func(t *testing.T) {
		body := bom + `{"id":7}`
		addr := rawBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		res := run(t, engine.New(engine.Config{}), compile(t, flowSource("bom", "", src), "BACKEND", addr), `{}`)
		checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"id":7,"body":{"id":7}}`, Outcome: engine.Succeeded})
	})
}

// A non-2xx answer's JSON body with a byte order mark is the document a
// fault handler reads in ctx.HTTP_RESPONSE_BODY.
func TestHTTPEgressJSONErrorBodyWithAByteOrderMark(t *testing.T) {
	b := newBackend(t, answer(422, "application/json", "\xef\xbb\xbf"+`{"code":"E42"}`))
	src := flowSource("bom-error", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: relay
~~~ntd
{"code": "{{ ctx.HTTP_RESPONSE_BODY.code }}"}
~~~
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`)
	checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"), Body: `{"code":"E42"}`, Outcome: engine.FaultHandled,
		Err: "step 'forward': effect handler failed: HTTP 422 Unprocessable Entity", ErrKind: engine.KindEffect})
}
