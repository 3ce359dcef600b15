package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The fault handling of "Handling failures" (handling-failures.md) and the
// retry keys of "Queues, retries and the DLQ" (queues-retries-dlq.md),
// through the built binary: the fault section on the cron and queue doors,
// the response status and header rules on /run, an empty dedup_key, and
// nexus validate refusing a retry key that is not a number.

// fenceFlows returns the flows of the queue and cron checks, their
// endpoints pointed at backendURL.
//
// nightly ticks every second; its main step calls /tick (answered 503) and
// its fault sequence describes the failure and posts it to /cron-fault.
//
// fenced-fault filters {"skip":true} with a condition fence of the main
// sequence; any other message calls /ingest (answered 503), and the fault
// sequence starts with a condition fence that is false, so its second step
// (a call to /notify) never runs.
func fenceFlows(backendURL string) map[string]string {
	const nightly = `---
flowmarkdown_version: "0.1"
flow: nightly
tenant: acme
effects: [http_egress]
schedule: "@every 1s"
schedule_input: {"job": "nightly"}
---

## Step: push
effects: [http_egress]
endpoint: BACKEND/tick
method: POST

## Fault: describe
` + "```ntd" + `
{"step": "{{ $.fault_step }}", "error": "{{ $.fault_error }}", "door": "{{ ctx.door }}", "attempt": {{ ctx.attempt }}, "correlationId": "{{ $.fault_correlation_id }}"}
` + "```" + `

## Fault: notify
effects: [http_egress]
endpoint: BACKEND/cron-fault
method: POST
`
	const fenced = `---
flowmarkdown_version: "0.1"
flow: fenced-fault
tenant: acme
effects: [http_egress]
queue_max_attempts: 3
queue_initial_delay_ms: 100
---

## Step: wanted
` + "```condition" + `
$.skip != true
` + "```" + `

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
method: POST

## Fault: known-failures-only
` + "```condition" + `
$.fault_step == "never"
` + "```" + `

## Fault: notify
effects: [http_egress]
endpoint: BACKEND/notify
method: POST
`
	return map[string]string{
		"flows/acme/nightly.md":      strings.ReplaceAll(nightly, "BACKEND", backendURL),
		"flows/acme/fenced-fault.md": strings.ReplaceAll(fenced, "BACKEND", backendURL),
	}
}

// TestDocFaultsQueueAndCronDoors checks the fault section on the doors
// without a caller, in handling-failures.md ("On a queue, a handler acks
// the message", and "## Fault: is a property of the flow, not of the door,
// so the same section runs on /run, on the queue, on cron") with the
// precise answers of flow-file.md ("A condition fence that is false inside
// ## Fault: ends the fault sequence as handled"):
//
//   - cron: a tick whose main step fails (a 503) runs the fault section —
//     its call arrives with the failure's description, door cron — and the
//     tick is logged queue_processed with outcome fault_handled, acked
//     without a retry, and journaled as fault_handled 502;
//   - queue: a condition fence inside the fault section ("A condition
//     fence inside a fault handler does not mark the original message as
//     filtered") ends the handler as handled: queue_processed with outcome
//     fault_handled, no queue_filtered, the later fault step not run, no
//     retry, nothing dead-lettered; while a fence of the main sequence on
//     the same flow does log queue_filtered;
//   - /run: the same flow answers the natural 502 with the fault
//     sequence's document, not the filtered answer.
func TestDocFaultsQueueAndCronDoors(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	be.setAnswer(func(x hit) int {
		if strings.HasPrefix(x.path, "/tick") || strings.HasPrefix(x.path, "/ingest") {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, _ := queueHost(t, fenceFlows(be.URL), hostOptions{}, "fenced-fault")

	t.Run("cron: the fault section runs and the tick is queue_processed fault_handled", func(t *testing.T) {
		t.Parallel()
		call := be.waitOn(t, "/cron-fault", 1, 20*time.Second)[0]
		var got struct {
			Step, Error, Door, CorrelationID string
			Attempt                          int
		}
		if err := json.Unmarshal([]byte(call.body), &got); err != nil {
			t.Fatalf("the fault step's call %q: %v", call.body, err)
		}
		cid := call.header.Get("X-Correlation-Id")
		if got.Step != "push" || got.Error != "effect handler failed: HTTP 503 Service Unavailable" || got.Door != "cron" ||
			got.Attempt != 1 || got.CorrelationID == "" || got.CorrelationID != cid {
			t.Errorf("the fault step's call: %s (X-Correlation-Id %q), want the failure of step push, door cron, attempt 1, the tick's correlation ID", call.body, cid)
		}
		if call.method != http.MethodPost {
			t.Errorf("the fault step's call: %s, want POST", call.method)
		}
		// the failed main step was called first, in the same trace
		var tick *hit
		for _, x := range be.on("/tick") {
			if x.header.Get("X-Correlation-Id") == cid {
				tick = &x
				break
			}
		}
		if tick == nil || tick.at.After(call.at) {
			t.Errorf("no call of the main step with correlation ID %q before the fault step's call", cid)
		}

		ev := waitEvents(t, h, "queue_processed", 1, both(field("flow", "nightly"), field("correlation_id", cid)), 10*time.Second)[0]
		if ev["outcome"] != "fault_handled" || ev["tenant"] != "acme" || fmt.Sprint(ev["attempt"]) != "1" || ev["msg_id"] == nil {
			t.Errorf("queue_processed of the tick: %v, want outcome fault_handled on attempt 1", ev)
		}
		if evs := waitEvents(t, h, "cron_tick", 1, field("correlation_id", cid), 5*time.Second); evs[0]["flow"] != "nightly" {
			t.Errorf("cron_tick: %v", evs[0])
		}
		// the handled tick was acknowledged: the worker logged
		// queue_processed instead of scheduling a retry or dead-lettering
		for _, name := range []string{"queue_retry_scheduled", "dlq_moved"} {
			for _, e := range h.events(name) {
				if e["flow"] == "nightly" {
					t.Errorf("%s for the cron flow, whose fault section handled every tick: %v", name, e)
				}
			}
		}
		journalRow(t, h, "nightly", cid,
			`(?m)^\S+ cron +acme/nightly v1 fault_handled 502 \d+ms attempt=1 correlation_id=`+regexp.QuoteMeta(cid)+` msg_id=\d+`)
	})

	t.Run("queue: a condition fence in the fault section is not a filter", func(t *testing.T) {
		t.Parallel()
		// FIFO on first delivery: the filtered message, queued second, is
		// delivered after the first has been handled (and acknowledged, or
		// rescheduled), so its queue_filtered line comes after every line
		// of the first delivery
		handledID := mustEnqueue(t, h, "acme", "fenced-fault", acmeKey, `{"orderId":"F-1"}`, "X-Correlation-ID", "trace-fence-handled")
		mustEnqueue(t, h, "acme", "fenced-fault", acmeKey, `{"orderId":"F-2","skip":true}`, "X-Correlation-ID", "trace-fence-filtered")
		waitEvents(t, h, "queue_filtered", 1, field("correlation_id", "trace-fence-filtered"), 15*time.Second)

		processed := waitEvents(t, h, "queue_processed", 1, field("correlation_id", "trace-fence-handled"), 5*time.Second)
		if ev := processed[0]; len(processed) != 1 || ev["outcome"] != "fault_handled" || ev["flow"] != "fenced-fault" ||
			fmt.Sprint(ev["attempt"]) != "1" || fmt.Sprint(ev["msg_id"]) != fmt.Sprint(handledID) {
			t.Errorf("queue_processed: %v, want one, outcome fault_handled, attempt 1, msg_id %d", processed, handledID)
		}
		for _, name := range []string{"queue_filtered", "queue_retry_scheduled", "dlq_moved"} {
			if evs := eventsWith(h, name, "trace-fence-handled"); len(evs) != 0 {
				t.Errorf("%s for the message whose fault section ended on a false fence: %v", name, evs)
			}
		}
		if n := len(be.on("/ingest")); n < 1 {
			t.Errorf("%d calls of the main step's endpoint, want the message's", n)
		}
		for _, x := range be.on("/ingest") {
			if x.header.Get("X-Correlation-Id") == "trace-fence-filtered" {
				t.Errorf("the filtered message called out: %s", x.body)
			}
		}
		if n := len(be.on("/notify")); n != 0 {
			t.Errorf("%d calls of the fault step after the false fence, want none: the fence ends the fault sequence", n)
		}
		if r := dlqCLI(t, h.db, "list", "--tenant", "acme", "--flow", "fenced-fault"); r.code != 0 || r.stdout != "DLQ is empty\n" {
			t.Errorf("dlq list: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		journalRow(t, h, "fenced-fault", "trace-fence-handled",
			`(?m)^\S+ enqueue +acme/fenced-fault v1 fault_handled 502 \d+ms attempt=1 correlation_id=trace-fence-handled msg_id=`+fmt.Sprint(handledID))
	})

	t.Run("/run: a false fence in the fault section answers the handled document, not filtered", func(t *testing.T) {
		t.Parallel()
		r := h.do(http.MethodPost, "/flows/acme/fenced-fault/run", acmeKey, "application/json", `{"orderId":"F-3"}`,
			"X-Correlation-ID", "trace-fence-run")
		want := `{"fault_step":"forward","fault_error":"effect handler failed: HTTP 503 Service Unavailable","fault_correlation_id":"trace-fence-run"}`
		if r.status != http.StatusBadGateway || r.body != want || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("/run: %d %q %s\nwant 502 application/json %s", r.status, r.header.Get("Content-Type"), r.body, want)
		}
		r = h.do(http.MethodPost, "/flows/acme/fenced-fault/run", acmeKey, "application/json", `{"skip":true}`)
		if r.status != http.StatusOK || r.body != `{"filtered":true,"step":"wanted"}` {
			t.Errorf("/run of a message the main fence filters: %d %s, want 200 {\"filtered\":true,\"step\":\"wanted\"}", r.status, r.body)
		}
	})
}

// eventsWith returns the host's events named event with correlation ID cid.
func eventsWith(h *hostProc, event, cid string) []map[string]any {
	var out []map[string]any
	for _, e := range h.events(event) {
		if e["correlation_id"] == cid {
			out = append(out, e)
		}
	}
	return out
}

// journalRow waits until nexus journal shows the row of correlation ID cid
// for acme/flowName, and checks it against the pattern want.
func journalRow(t *testing.T, h *hostProc, flowName, cid, want string) {
	t.Helper()
	var out string
	eventually(t, 15*time.Second, "the journal row of "+cid, func() bool {
		out = nexus(t, "", "journal", "--db", h.db, "--flow", flowName, "--limit", "500").stdout
		return strings.Contains(out, "correlation_id="+cid+" ")
	})
	if !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("journal:\n%s\nwant a row matching %s", out, want)
	}
}

// runDoorFlows are the flows of TestDocFaultsRunDoor; BACKEND is replaced
// by the backend's URL.
var runDoorFlows = map[string]string{
	// an expression error's text and a URL, as they read: the answer's
	// JSON leaves <, > and & as they are
	"as-written": `---
flowmarkdown_version: "0.1"
flow: as-written
tenant: acme
---

## Step: check
` + "```validate" + `
$.total > 0 | "total must be positive"
` + "```" + `

## Step: link
` + "```ntd" + `
{"next": "https://shop.example/orders?id={{ $.id }}&view=<full>", "total": {{ $.total }}}
` + "```" + `
`,
	// the header table of "Response headers", as written
	"header-table": `---
flowmarkdown_version: "0.1"
flow: header-table
tenant: acme
---

## Step: answer
response_header_content_type: application/problem+json
response_header_retry_after: 60
response_header_x_correlation_id: abc123
` + "```ntd" + `
{"title": "answered"}
` + "```" + `
`,
	// response_header_remove: last writer wins per name, case-insensitively
	"header-remove": `---
flowmarkdown_version: "0.1"
flow: header-remove
tenant: acme
---

## Step: first
response_header_x_internal: secret
response_header_x_ephemeral: short-lived
response_header_x_kept: first
response_header_x_back: first
response_header_x_cross: first
response_header_x_twice: one
response_header_x_twice: two
` + "```ntd" + `
{"step": "first"}
` + "```" + `

## Step: second
response_header_remove: [x-internal, X-EPHEMERAL, X-Back, x-cross]
response_header_X_BACK: again
response_header_X_KEPT: overwritten
` + "```ntd" + `
{"step": "second"}
` + "```" + `

## Step: third
response_header_x_cross: restored
response_header_x_late: set
response_header_remove: [X-LATE]
` + "```ntd" + `
{"step": "third"}
` + "```" + `
`,
	// "Values are literal — there is no NTD interpolation here."
	"header-literal": `---
flowmarkdown_version: "0.1"
flow: header-literal
tenant: acme
---

## Step: answer
response_header_x_quoted: "{{ $.name }}"
response_header_x_bare: {{ ctx.correlation_id }}
` + "```ntd" + `
{"greeting": "hello, {{ $.name }}"}
` + "```" + `
`,
	// headers declared before the error survive into the fault sequence;
	// the status does not
	"header-fault": `---
flowmarkdown_version: "0.1"
flow: header-fault
tenant: acme
---

## Step: decorate
response_status: 201
response_header_x_trace_tag: decorated
response_header_cache_control: no-store
response_header_x_dropped: by-the-handler
` + "```ntd" + `
{{ $ }}
` + "```" + `

## Step: check
` + "```validate" + `
$.ok == true | "ok must be true" | syntactic
` + "```" + `

## Fault: report
response_header_content_type: application/problem+json
response_header_remove: [x-dropped]
` + "```ntd" + `
{"detail": "{{ $.fault_error }}", "step": "{{ $.fault_step }}"}
` + "```" + `
`,
	// response_status as a template of the step's output
	"status-template": `---
flowmarkdown_version: "0.1"
flow: status-template
tenant: acme
---

## Step: answer
response_status: "{{ $.code }}"
` + "```ntd" + `
{"code": {{ $.want }}}
` + "```" + `

## Fault: report
` + "```ntd" + `
{"handled": true, "step": "{{ $.fault_step }}", "error": "{{ $.fault_error }}"}
` + "```" + `
`,
	// response_status as a template inside a fault step
	"status-template-fault": `---
flowmarkdown_version: "0.1"
flow: status-template-fault
tenant: acme
---

## Step: keep
save_body: request
` + "```ntd" + `
{{ $ }}
` + "```" + `

## Step: check
` + "```validate" + `
$.ok == true | "ok must be true" | syntactic
` + "```" + `

## Fault: report
response_status: "{{ $.code }}"
` + "```ntd" + `
{"code": {{ ctx.request.code }}}
` + "```" + `
`,
	// a dedup_key that renders nothing, without a handler
	"dedup-empty": `---
flowmarkdown_version: "0.1"
flow: dedup-empty
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/dedup-empty
method: POST
`,
	// the same, with a handler
	"dedup-empty-handled": `---
flowmarkdown_version: "0.1"
flow: dedup-empty-handled
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/dedup-handled
method: POST

## Fault: report
response_header_content_type: application/problem+json
` + "```ntd" + `
{"title": "rejected", "detail": "{{ $.fault_error }}"}
` + "```" + `
`,
}

// TestDocFaultsRunDoor checks, on /run of one host, the status and header
// rules of handling-failures.md:
//
//   - "Response headers": the three rows of the Written/Sent table, byte
//     for byte on the wire (X-Correlation-Id replacing the platform's);
//     response_header_remove with last writer wins per name,
//     case-insensitively, and a header written after its removal put back;
//     "Values are literal — there is no NTD interpolation here"; "headers
//     declared before the error do survive into the fault sequence" while
//     the status does not ("It does not survive entry into ## Fault:");
//   - "Overriding the status": a response_status template whose $ is the
//     step's output ({"code":202} → 202), and one that renders something
//     which is not a status, "in the main sequence it triggers the ##
//     Fault: section" (500, a defect of the flow, with the handler's body)
//     "and inside a fault step it becomes FaultHandlerFailed → 500";
//   - the status table's row "dedup_key: produced nothing from this
//     message → 400", with and without a handler, and nothing called out.
func TestDocFaultsRunDoor(t *testing.T) {
	t.Parallel()
	be := newLoopback(t)
	files := map[string]string{}
	for name, src := range runDoorFlows {
		files["flows/acme/"+name+".md"] = strings.ReplaceAll(src, "BACKEND", be.URL)
	}
	names := make([]string, 0, len(runDoorFlows))
	for name := range runDoorFlows {
		names = append(names, name)
	}
	h, _ := queueHost(t, files, hostOptions{}, names...)

	t.Run("the header table of Response headers, on the wire", func(t *testing.T) {
		t.Parallel()
		head, body := rawRun(t, h, "/flows/acme/header-table/run", acmeKey, `{}`, "X-Correlation-ID: trace-table")
		if !strings.HasPrefix(head, "HTTP/1.1 200 OK\r\n") {
			t.Errorf("status line of %q, want HTTP/1.1 200 OK", head)
		}
		for _, line := range []string{"Content-Type: application/problem+json", "Retry-After: 60", "X-Correlation-Id: abc123"} {
			if n := strings.Count(head, "\r\n"+line+"\r\n"); n != 1 {
				t.Errorf("the header line %q is sent %d times, want once:\n%s", line, n, head)
			}
		}
		if n := strings.Count(strings.ToLower(head), "\r\nx-correlation-id:"); n != 1 {
			t.Errorf("%d X-Correlation-Id headers, want the flow's replacing the platform's:\n%s", n, head)
		}
		if n := strings.Count(strings.ToLower(head), "\r\ncontent-type:"); n != 1 {
			t.Errorf("%d Content-Type headers, want one:\n%s", n, head)
		}
		if body != `{"title":"answered"}` {
			t.Errorf("body %q", body)
		}
	})

	t.Run("response_header_remove: last writer wins, case-insensitively", func(t *testing.T) {
		t.Parallel()
		r := h.run("acme", "header-remove", acmeKey, `{}`)
		if r.status != http.StatusOK || r.body != `{"step":"third"}` {
			t.Fatalf("/run: %d %s", r.status, r.body)
		}
		want := map[string][]string{
			"X-Internal":  nil,             // set, then removed in a later step
			"X-Ephemeral": nil,             // set, then removed, named in upper case
			"X-Back":      {"again"},       // removed, then written again in the same step
			"X-Cross":     {"restored"},    // removed, then written again in a later step
			"X-Kept":      {"overwritten"}, // written again under another case
			"X-Twice":     {"two"},         // written twice in one step
			"X-Late":      nil,             // written, then removed in the same step
		}
		for name, values := range want {
			if got := r.header.Values(name); strings.Join(got, "\x00") != strings.Join(values, "\x00") {
				t.Errorf("%s: %q, want %q", name, got, values)
			}
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	})

	t.Run("header values are literal", func(t *testing.T) {
		t.Parallel()
		r := h.do(http.MethodPost, "/flows/acme/header-literal/run", acmeKey, "application/json", `{"name":"Ada"}`,
			"X-Correlation-ID", "trace-literal")
		if r.status != http.StatusOK || r.body != `{"greeting":"hello, Ada"}` {
			t.Fatalf("/run: %d %s, want the body interpolated", r.status, r.body)
		}
		if got := r.header.Values("X-Quoted"); len(got) != 1 || got[0] != "{{ $.name }}" {
			t.Errorf("X-Quoted: %q, want {{ $.name }} as written", got)
		}
		if got := r.header.Values("X-Bare"); len(got) != 1 || got[0] != "{{ ctx.correlation_id }}" {
			t.Errorf("X-Bare: %q, want {{ ctx.correlation_id }} as written", got)
		}
		if cid := r.header.Get("X-Correlation-Id"); cid != "trace-literal" {
			t.Errorf("X-Correlation-Id %q", cid)
		}
	})

	t.Run("headers declared before an error survive into the fault sequence", func(t *testing.T) {
		t.Parallel()
		r := h.run("acme", "header-fault", acmeKey, `{"ok":false}`)
		if r.status != http.StatusBadRequest {
			t.Errorf("status %d, want 400: the natural status of a syntactic rule, not the 201 declared before the error", r.status)
		}
		if r.body != `{"detail":"ok must be true","step":"check"}` {
			t.Errorf("body %s", r.body)
		}
		for name, want := range map[string]string{
			"X-Trace-Tag":   "decorated",
			"Cache-Control": "no-store",
			"Content-Type":  "application/problem+json",
			"X-Dropped":     "",
		} {
			if got := strings.Join(r.header.Values(name), ","); got != want {
				t.Errorf("%s: %q, want %q", name, got, want)
			}
		}
		// the success, for contrast: the declared status and every header
		r = h.run("acme", "header-fault", acmeKey, `{"ok":true}`)
		if r.status != http.StatusCreated || r.body != `{"ok":true}` || r.header.Get("X-Trace-Tag") != "decorated" ||
			r.header.Get("X-Dropped") != "by-the-handler" || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("success: %d %s %v", r.status, r.body, r.header)
		}
	})

	t.Run("expression errors and URLs read as written: <, > and & are not escaped", func(t *testing.T) {
		t.Parallel()
		r := h.run("acme", "as-written", acmeKey, `{"id":"A&1"}`)
		if want := `{"error":"cannot compare null with number using >","step":"check"}`; r.status != http.StatusUnprocessableEntity || r.body != want {
			t.Errorf("/run without a total: %d %s, want 422 %s", r.status, r.body, want)
		}
		r = h.run("acme", "as-written", acmeKey, `{"id":"A&1","total":2}`)
		if want := `{"next":"https://shop.example/orders?id=A&1&view=<full>","total":2}`; r.status != http.StatusOK || r.body != want {
			t.Errorf("/run: %d %s, want 200 %s", r.status, r.body, want)
		}
	})

	t.Run("response_status template: $ is the step's output", func(t *testing.T) {
		t.Parallel()
		// the input's code is 404, the output's 202
		r := h.run("acme", "status-template", acmeKey, `{"code":404,"want":202}`)
		if r.status != http.StatusAccepted || r.body != `{"code":202}` {
			t.Errorf("/run: %d %s, want 202 {\"code\":202}", r.status, r.body)
		}
	})

	t.Run("response_status template rendering a non-status triggers the fault section", func(t *testing.T) {
		t.Parallel()
		r := h.run("acme", "status-template", acmeKey, `{"want":"abc"}`)
		var got struct {
			Handled     bool
			Step, Error string
		}
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			t.Fatalf("body %q: %v", r.body, err)
		}
		if r.status != http.StatusInternalServerError || !got.Handled || got.Step != "answer" || !strings.Contains(got.Error, "response_status") {
			t.Errorf("/run: %d %s, want 500 (a defect of the flow) with the handler's body naming step answer", r.status, r.body)
		}
	})

	t.Run("response_status template in a fault step", func(t *testing.T) {
		t.Parallel()
		r := h.run("acme", "status-template-fault", acmeKey, `{"code":409}`)
		if r.status != http.StatusConflict || r.body != `{"code":409}` {
			t.Errorf("a status rendered by the handler: %d %s, want 409 {\"code\":409}", r.status, r.body)
		}
		r = h.run("acme", "status-template-fault", acmeKey, `{"code":"abc"}`)
		if r.status != http.StatusInternalServerError || r.body != `{"ok":false,"error":"fault handler failed"}` {
			t.Errorf("a non-status rendered by the handler: %d %s, want 500 {\"ok\":false,\"error\":\"fault handler failed\"}", r.status, r.body)
		}
	})

	t.Run("dedup_key that renders nothing is 400", func(t *testing.T) {
		t.Parallel()
		const want = `{"ok":false,"error":"dedup_key produced nothing from this message"}`
		for _, body := range []string{`{}`, `{"orderId":""}`} {
			r := h.run("acme", "dedup-empty", acmeKey, body)
			if r.status != http.StatusBadRequest || r.body != want || r.header.Get("Content-Type") != "application/json" ||
				r.header.Get("X-Correlation-Id") == "" {
				t.Errorf("%s: %d %q %s, want 400 application/json %s", body, r.status, r.header.Get("Content-Type"), r.body, want)
			}
			// with a handler only the status is the page's ("The same list
			// answers for a flow with a handler and a flow without one"):
			// whether the handler runs for a key computed before the first
			// step is not said, so the body is not checked
			r = h.run("acme", "dedup-empty-handled", acmeKey, body)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s with a handler: %d %s, want 400, the same status as without", body, r.status, r.body)
			}
		}
		if n := len(be.on("/dedup-")); n != 0 {
			t.Errorf("%d calls out for messages whose key rendered nothing, want none", n)
		}
		// a key that renders runs, once
		first := h.run("acme", "dedup-empty", acmeKey, `{"orderId":"D-1"}`)
		again := h.run("acme", "dedup-empty", acmeKey, `{"orderId":"D-1"}`)
		if first.status != http.StatusOK || again.status != http.StatusOK || again.body != first.body ||
			again.header.Get("X-Nexus-Idempotent-Replay") != "true" || len(be.on("/dedup-empty")) != 1 {
			t.Errorf("a key that renders: %d %s, then %d %s %v; %d calls out, want the second a replay of the first",
				first.status, first.body, again.status, again.body, again.header, len(be.on("/dedup-empty")))
		}
	})
}

// rawRun posts body as JSON to path on a connection of its own, with the
// extra header lines, and returns the answer's head (status line and
// header lines, as sent) and its body.
func rawRun(t *testing.T, h *hostProc, path, key, body string, extra ...string) (head, respBody string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
		path, strings.TrimPrefix(h.url, "http://"), key, len(body))
	for _, line := range extra {
		req.WriteString(line + "\r\n")
	}
	req.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	var hb strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer's head: %v (so far %q)", err, hb.String())
		}
		hb.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return hb.String(), string(rest)
}

// TestDocFaultsValidateRetryKeysNotNumbers checks "Retry configuration" of
// queues-retries-dlq.md: "A value that is not a number, for any of the
// four, is also rejected — a misspelled number does not silently fall back
// to the default." For each of queue_max_attempts, queue_initial_delay_ms,
// queue_backoff_factor and queue_max_delay_ms, nexus validate exits 1 and
// prints one line naming the file, the key's line and the key (flow-file.md,
// "Compile errors": FILE:LINE: message).
func TestDocFaultsValidateRetryKeysNotNumbers(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"queue_max_attempts", "queue_initial_delay_ms", "queue_backoff_factor", "queue_max_delay_ms"} {
		for _, value := range []string{`"2x"`, `three`} {
			t.Run(key+"="+value, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				writeFiles(t, dir, map[string]string{"flows/retry.md": `---
flowmarkdown_version: "0.1"
flow: retry
tenant: acme
` + key + `: ` + value + `
---

## Step: answer
` + "```ntd" + `
{}
` + "```" + `
`})
				r := nexus(t, dir, "validate", "flows")
				if r.code != 1 {
					t.Errorf("exit %d, want 1", r.code)
				}
				// one line: FILE:LINE naming the key, saying it is not a number
				want := regexp.MustCompile(`^flows/retry\.md:5: [^\n]*\b` + key + `\b[^\n]*\bnumber\b[^\n]*\n$`)
				if !want.MatchString(r.stdout) {
					t.Errorf("stdout %q, want one line matching %s", r.stdout, want)
				}
				if r.stderr != "nexus validate: 1 error\n" {
					t.Errorf("stderr %q", r.stderr)
				}
			})
		}
	}
}
