package engine_test

import (
	"testing"

	"github.com/nexushq/nexus/engine"
)

// A condition fence false inside ## Fault: ends the sequence as handled
// with "its current document" as the answer (flow-file.md). On a fault
// step that calls out, the fence reads the call's answer ($ is the answer
// once the call returned), so that answer is the current document the
// fence stopped on: the answer was the document from before the call,
// which the fence never saw. The step still contributes no status or
// headers of its own (it stopped the sequence).
func TestFalseFenceAfterAFaultCallAnswersTheCallsAnswer(t *testing.T) {
	notify := newBackend(t, answer(200, "application/json", `{"notified":true,"ticket":"T-7"}`))
	for _, c := range []struct {
		name  string
		fence string
		want  view
	}{
		{"the fence false", `$.notified == false`, view{Status: 422, Header: jsonHdr("c-1"),
			Body: `{"notified":true,"ticket":"T-7"}`, Outcome: engine.FaultHandled,
			Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic}},
		{"the fence true", `$.notified == true`, view{Status: 299, Header: jsonHdr("c-1", "X-Notified", "yes"),
			Body: `{"notified":true,"ticket":"T-7"}`, Outcome: engine.FaultHandled,
			Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, flowSource("fault-fence-call", "", `
## Step: check
~~~validate
$.total > 0 | "total must be positive"
~~~

## Fault: notify
effects: [http_egress]
endpoint: `+notify.URL+`
response_status: 299
response_header_x_notified: yes
~~~condition
`+c.fence+`
~~~
`))
			checkView(t, run(t, engine.New(engine.Config{}), f, `{"total":0}`), c.want)
		})
	}
}
