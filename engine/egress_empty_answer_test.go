package engine_test

import (
	"net/http"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// A 2xx answer with no body becomes the empty string as the step's output
// and as ctx.HTTP_RESPONSE_BODY, whatever type it declares: flow-file.md,
// HTTP requests, "A 2xx answer's body becomes the step's output (JSON
// parsed; XML kept as an XML document; anything else a string)", and an
// empty body is neither JSON nor XML. Not null (a whole-value hole would
// insert null, indistinguishable from a backend answering null) and not
// the document the step was given (the call answered; its answer is the
// output). A flow ending on it answers an empty text/plain body.
func TestHTTPEgressEmptySuccessIsTheEmptyString(t *testing.T) {
	const src = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: after
~~~ntd
{"out": {{ $ }}, "body": {{ ctx.HTTP_RESPONSE_BODY }}, "sc": {{ ctx.HTTP_SC }}, "len": {{ len($) }}}
~~~
`
	const last = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
`
	for _, c := range []struct {
		name string
		be   http.HandlerFunc
		sc   string
	}{
		{"200 JSON with no body", answer(200, "application/json", ""), "200"},
		{"200 with no type and no body", answer(200, "", ""), "200"},
		{"200 XML with no body", answer(200, "application/xml", ""), "200"},
		{"201 text with no body", answer(201, "text/plain", ""), "201"},
		{"204 No Content", answer(204, "", ""), "204"},
		{"200 JSON of blanks alone", answer(200, "application/json", " \r\n"), "200"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, c.be)
			res := run(t, engine.New(engine.Config{}), compile(t, flowSource("empty-answer", "", src), "BACKEND", b.URL), `{"orderId":"A-1"}`)
			checkView(t, res, view{Status: 200, Header: jsonHdr("c-1"),
				Body: `{"out":"","body":"","sc":` + c.sc + `,"len":0}`, Outcome: engine.Succeeded})

			res = run(t, engine.New(engine.Config{}), compile(t, flowSource("empty-answer-last", "", last), "BACKEND", b.URL), `{"orderId":"A-1"}`)
			checkView(t, res, view{Status: 200, Header: hdr("Content-Type", "text/plain; charset=utf-8", "X-Correlation-Id", "c-1"),
				Body: "", Outcome: engine.Succeeded})
		})
	}
}
