package engine_test

import (
	"testing"

	"github.com/nexushq/nexus/engine"
)

// The status a main step declared does not survive entry into ## Fault:,
// however the fault sequence ends: handling-failures.md, "It does not
// survive entry into ## Fault:. On the way in, the status becomes the
// natural status of the error that triggered the sequence, and the fault
// steps may set their own from there", and flow-file.md, "A condition
// fence that is false inside ## Fault: ends the fault sequence as handled:
// its current document is the answer, with the natural status". A fault
// step skipped by its when: contributes nothing, and neither does the
// fence step itself (a step that stopped the sequence did not run to its
// end); a fault step that ran before the fence set its status, which
// stands (the statuses are collected from the steps that ran).
func TestStatusAcrossAFalseConditionInFault(t *testing.T) {
	const main = `
## Step: accept
response_status: 201
~~~ntd
{{ $ }}
~~~

## Step: check
~~~validate
$.total > 0 | "total must be positive"
~~~
`
	for _, c := range []struct {
		name   string
		faults string
		want   int
		body   string
	}{
		{"a fence false first", `
## Fault: stop
response_status: 299
~~~condition
$.fault_step == "never"
~~~
`, 422, `{"fault_step":"check","fault_error":"total must be positive","fault_correlation_id":"c-1"}`},
		{"a when: false, then a fence false", `
## Fault: skipped
when: $.fault_step == "never"
response_status: 202
~~~ntd
{"skipped": false}
~~~

## Fault: stop
~~~condition
$.fault_step == "never"
~~~
`, 422, `{"fault_step":"check","fault_error":"total must be positive","fault_correlation_id":"c-1"}`},
		{"a when: false alone", `
## Fault: skipped
when: $.fault_step == "never"
response_status: 202
~~~ntd
{"skipped": false}
~~~
`, 422, `{"fault_step":"check","fault_error":"total must be positive","fault_correlation_id":"c-1"}`},
		{"a status set in the fault sequence, then a fence false", `
## Fault: decide
response_status: 409
~~~ntd
{"decided": true}
~~~

## Fault: stop
~~~condition
$.decided == false
~~~
`, 409, `{"decided":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, flowSource("fault-fence-status", "", main+c.faults))
			res := run(t, engine.New(engine.Config{}), f, `{"total":0}`)
			checkView(t, res, view{Status: c.want, Header: jsonHdr("c-1"), Body: c.body, Outcome: engine.FaultHandled,
				Err: "step 'check': validation failed (Semantic): total must be positive", ErrKind: engine.KindSemantic})
		})
	}
}
