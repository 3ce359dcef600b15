package integration

import (
	"database/sql"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The examples of handling-failures.md that the other tests check only in
// part, each as printed, through the built binary.

const fence = "```"

// auditFlows are the flows of TestDocAuditFaultsRun; BACKEND is replaced by
// the backend's URL.
var auditFlows = map[string]string{
	// the page's first flow, as printed (its name: the worked example is
	// order-intake too)
	"order-intake-first": `---
flowmarkdown_version: "0.1"
flow: order-intake-first
tenant: acme
effects: [http_egress]
---

## Step: check
` + fence + `validate
$.orderId != null | "orderId is required" | syntactic
` + fence + `

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Fault: report
response_status: 400
response_header_content_type: application/problem+json
` + fence + `ntd
{
  "title": "Order rejected",
  "detail": "{{ $.fault_error }}",
  "step": "{{ $.fault_step }}",
  "correlationId": "{{ $.fault_correlation_id }}"
}
` + fence + `
`,
	// "after a failed http_egress call, ctx.HTTP_RESPONSE_BODY holds the
	// backend's error body, parsed, and ctx.HTTP_RESPONSE_HEADERS its
	// response headers"
	"partner-error": `---
flowmarkdown_version: "0.1"
flow: partner-error
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/partner
method: POST

## Fault: translate
` + fence + `ntd
{"partner": {{ ctx.HTTP_RESPONSE_BODY }}, "code": "{{ ctx.HTTP_RESPONSE_BODY.code }}", "trace": "{{ ctx.HTTP_RESPONSE_HEADERS["X-Partner-Trace"] }}"}
` + fence + `
`,
	// "## Fault: report / response_status: 409", as printed
	"fault-409": `---
flowmarkdown_version: "0.1"
flow: fault-409
tenant: acme
---

## Step: check
` + fence + `validate
$.orderId != null | "orderId is required" | syntactic
` + fence + `

## Fault: report
response_status: 409
`,
	// "## Fault: absorb / response_status: 200", as printed, on a flow
	// with dedup_key:
	"absorb-dedup": `---
flowmarkdown_version: "0.1"
flow: absorb-dedup
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/down
method: POST

## Fault: absorb
response_status: 200
`,
	// a handled fault on a flow with dedup_key:, with the natural status
	"handled-dedup": `---
flowmarkdown_version: "0.1"
flow: handled-dedup
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/down
method: POST

## Fault: report
` + fence + `ntd
{"detail": "{{ $.fault_error }}"}
` + fence + `
`,
	// fault_status: and fault_header_<name>:, the deprecated spellings
	"old-spelling": `---
flowmarkdown_version: "0.1"
flow: old-spelling
tenant: acme
---

## Step: check
` + fence + `validate
$.orderId != null | "orderId is required" | syntactic
` + fence + `

## Fault: report
fault_status: 409
fault_header_x_reason: declined
` + fence + `ntd
{"detail": "{{ $.fault_error }}"}
` + fence + `
`,
	// a template that could not be evaluated, without a handler
	"defect-nohandler": `---
flowmarkdown_version: "0.1"
flow: defect-nohandler
tenant: acme
---

## Step: shape
` + fence + `ntd
{"big": {{ $.a > 1 }}}
` + fence + `
`,
	// the duration ceiling reached in a step that runs past it: the step
	// after it does not start
	"ceiling-next": `---
flowmarkdown_version: "0.1"
flow: ceiling-next
tenant: acme
timeout_ms: 50
---

## Step: check
` + fence + `validate
MATCHES | "no match"
` + fence + `

## Step: next
` + fence + `ntd
{"never": true}
` + fence + `
`,
	// the duration ceiling reached during a call out
	"ceiling-call": `---
flowmarkdown_version: "0.1"
flow: ceiling-call
tenant: acme
effects: [http_egress]
timeout_ms: 100
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/slow
method: POST

## Step: after
` + fence + `ntd
{"done": true}
` + fence + `
`,
	// "a route takes the status of the branch that was taken"
	"route-status": `---
flowmarkdown_version: "0.1"
flow: route-status
tenant: acme
---

## Step: keep
save_body: request
` + fence + `ntd
{{ $ }}
` + fence + `

## Step: express
when: ctx.request.express == true
response_status: 202
` + fence + `ntd
{"route": "express"}
` + fence + `

## Step: standard
when: ctx.request.express != true
response_status: 201
` + fence + `ntd
{"route": "standard"}
` + fence + `
`,
	// "a step that failed contributed nothing", and two ## Fault: sections
	// running in order, as one sequence
	"failed-step-status": `---
flowmarkdown_version: "0.1"
flow: failed-step-status
tenant: acme
effects: [http_egress]
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/down
method: POST
response_status: 201

## Fault: describe
` + fence + `ntd
{"detail": "{{ $.fault_error }}"}
` + fence + `

## Fault: wrap
` + fence + `ntd
{"wrapped": {{ $ }}, "step": "{{ ctx.input.fault_step }}"}
` + fence + `
`,
	// "## Fault: notify-then-give-up" and "## Fault: decline", as printed,
	// on a queued flow
	"give-up": `---
flowmarkdown_version: "0.1"
flow: give-up
tenant: acme
effects: [http_egress]
queue_max_attempts: 2
queue_initial_delay_ms: 100
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/down
method: POST

## Fault: notify-then-give-up
effects: [http_egress]
endpoint: BACKEND/notify
method: POST

## Fault: decline
` + fence + `validate
$.fault_step == "never" | "handled, but still a failed delivery"
` + fence + `
`,
}

// auditBackend answers /ingest 503 for bodies holding DOWN, /down 503,
// /partner 422 with an error document and an X-Partner-Trace header, /slow
// after 2 s (or when the caller is gone), and 200 {"accepted":true}
// otherwise.
func auditBackend(t *testing.T) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, 1<<16)
		n, _ := r.Body.Read(body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/down" || (r.URL.Path == "/ingest" && strings.Contains(string(body[:n]), "DOWN")):
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"message":"partner secret text"}`))
		case r.URL.Path == "/partner":
			w.Header().Set("X-Partner-Trace", "pt-1")
			w.WriteHeader(http.StatusUnprocessableEntity)
			w.Write([]byte(`{"code":"E42","message":"sku unknown"}`))
		case r.URL.Path == "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			w.Write([]byte(`{"ok":true}`))
		default:
			w.Write([]byte(`{"accepted":true}`))
		}
	})
}

// on returns the requests the backend received on path.
func (b *backend) on(path string) []recorded {
	var out []recorded
	for _, r := range b.received() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// TestDocAuditFaultsRun checks, on one host, the examples of
// handling-failures.md whose answers no other test compares in full.
func TestDocAuditFaultsRun(t *testing.T) {
	t.Parallel()
	be := auditBackend(t)
	files := map[string]string{}
	names := make([]string, 0, len(auditFlows))
	for name, src := range auditFlows {
		// one rule of sixteen costly matches: a step that cannot be stopped
		// before it ends, and takes far longer than the ceiling
		slow := strings.TrimSuffix(strings.Repeat("matches($.v, $.p) && ", 16), " && ")
		files["flows/acme/"+name+".md"] = strings.NewReplacer("BACKEND", be.URL, "MATCHES", slow).Replace(src)
		names = append(names, name)
	}
	h, _ := queueHost(t, files, hostOptions{}, names...)
	run := func(flowName, body, cid string) response {
		return h.do(http.MethodPost, "/flows/acme/"+flowName+"/run", acmeKey, "application/json", body, "X-Correlation-ID", cid)
	}
	exact := func(t *testing.T, r response, status int, contentType, body string) {
		t.Helper()
		if r.status != status || r.header.Get("Content-Type") != contentType || r.body != body {
			t.Errorf("%d %q %s\nwant %d %q %s", r.status, r.header.Get("Content-Type"), r.body, status, contentType, body)
		}
	}

	// lines 5-31: response_status: 400 and the problem document for every
	// failure, a validate rule and a downstream outage alike
	t.Run("the first example: every failure answers 400 with the problem document", func(t *testing.T) {
		t.Parallel()
		exact(t, run("order-intake-first", `{}`, "trace-first-1"), 400, "application/problem+json",
			`{"title":"Order rejected","detail":"orderId is required","step":"check","correlationId":"trace-first-1"}`)
		exact(t, run("order-intake-first", `{"orderId":"DOWN-1"}`, "trace-first-2"), 400, "application/problem+json",
			`{"title":"Order rejected","detail":"effect handler failed: HTTP 503 Service Unavailable","step":"forward","correlationId":"trace-first-2"}`)
		exact(t, run("order-intake-first", `{"orderId":"A-1"}`, "trace-first-3"), 200, "application/json", `{"accepted":true}`)
	})

	// line 61: the backend's error body, parsed, and its headers
	t.Run("a handler reads HTTP_RESPONSE_BODY and HTTP_RESPONSE_HEADERS", func(t *testing.T) {
		t.Parallel()
		exact(t, run("partner-error", `{"sku":"x"}`, "trace-partner"), 502, "application/json",
			`{"partner":{"code":"E42","message":"sku unknown"},"code":"E42","trace":"pt-1"}`)
	})

	// lines 91-92
	t.Run("response_status: 409 in a fault section", func(t *testing.T) {
		t.Parallel()
		exact(t, run("fault-409", `{}`, "trace-409"), 409, "application/json",
			`{"fault_step":"check","fault_error":"orderId is required","fault_correlation_id":"trace-409"}`)
	})

	// line 103: the status of the branch taken; a failed step's status is
	// not collected, and the fault sections run in order (line 33)
	t.Run("a route takes the status of the branch taken; a failed step contributes nothing", func(t *testing.T) {
		t.Parallel()
		exact(t, run("route-status", `{"express":true}`, "trace-route-1"), 202, "application/json", `{"route":"express"}`)
		exact(t, run("route-status", `{}`, "trace-route-2"), 201, "application/json", `{"route":"standard"}`)
		exact(t, run("failed-step-status", `{"orderId":"F-1"}`, "trace-failed-step"), 502, "application/json",
			`{"wrapped":{"detail":"effect handler failed: HTTP 503 Service Unavailable"},"step":"forward"}`)
	})

	// lines 109-112 and 233: a handled fault commits the dedup row as a
	// failure, so the next delivery of the key runs again
	t.Run("a handled fault on a dedup flow: the duplicate runs again", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			flow, path string
			status     int
			body       string
		}{
			{"absorb-dedup", "/down", 200,
				`{"fault_step":"forward","fault_error":"effect handler failed: HTTP 503 Service Unavailable","fault_correlation_id":"CID"}`},
			{"handled-dedup", "/down", 502, `{"detail":"effect handler failed: HTTP 503 Service Unavailable"}`},
		} {
			key := `{"orderId":"` + c.flow + `-1"}`
			for i := 1; i <= 2; i++ {
				cid := fmt.Sprintf("trace-%s-%d", c.flow, i)
				r := run(c.flow, key, cid)
				exact(t, r, c.status, "application/json", strings.ReplaceAll(c.body, "CID", cid))
				if v := r.header.Get("X-Nexus-Idempotent-Replay"); v != "" {
					t.Errorf("%s delivery %d: X-Nexus-Idempotent-Replay %q, want none: the key's row is a failure", c.flow, i, v)
				}
			}
			n := 0
			for _, x := range be.on(c.path) {
				if x.Body == key {
					n++
				}
			}
			if n != 2 {
				t.Errorf("%s: %d calls out for two deliveries of one key, want 2", c.flow, n)
			}
		}
	})

	// lines 114 and 135: the deprecated spellings inside ## Fault:
	t.Run("fault_status: and fault_header_ inside a fault section", func(t *testing.T) {
		t.Parallel()
		r := run("old-spelling", `{}`, "trace-old")
		exact(t, r, 409, "application/json", `{"detail":"orderId is required"}`)
		if got := r.header.Values("X-Reason"); len(got) != 1 || got[0] != "declined" {
			t.Errorf("X-Reason %q, want declined", got)
		}
	})

	// lines 200-205: a template that could not be evaluated keeps its
	// status (500, a defect) and loses its message; the detail goes to
	// the log, naming the flow and the step
	t.Run("without a handler a defect is 500 flow execution failed", func(t *testing.T) {
		t.Parallel()
		exact(t, run("defect-nohandler", `{"a":"text"}`, "trace-defect"), 500, "application/json",
			`{"ok":false,"error":"flow execution failed"}`)
		ev := waitEvents(t, h, "run_completed", 1, field("correlation_id", "trace-defect"), 5*time.Second)[0]
		if ev["flow"] != "defect-nohandler" || ev["step"] != "shape" || fmt.Sprint(ev["status"]) != "500" {
			t.Errorf("run_completed: %v, want flow defect-nohandler, step shape, status 500", ev)
		}
		if line := fmt.Sprint(ev); !strings.Contains(line, "cannot compare string with number using >") {
			t.Errorf("run_completed: %v, want the step's error in it", ev)
		}
	})

	// line 207: "exceeding the duration ceiling is 500 naming the step that
	// did not start"
	t.Run("the duration ceiling names the step that did not start", func(t *testing.T) {
		t.Parallel()
		doc := `{"p":"[\\p{L}]{0,600}c","v":"` + strings.Repeat("ab", 2000) + `c"}`
		exact(t, run("ceiling-next", doc, "trace-ceiling-next"), 500, "application/json",
			`{"ok":false,"error":"duration ceiling of 50 ms reached","step":"next"}`)
		// a call in flight at the ceiling is cancelled and named the same way
		exact(t, run("ceiling-call", `{}`, "trace-ceiling-call"), 500, "application/json",
			`{"ok":false,"error":"duration ceiling of 100 ms reached","step":"forward"}`)
	})

	// lines 219-231: the handler notifies, then fails: the message is
	// retried and dead-lettered as without a handler
	t.Run("notify-then-give-up and decline on a queue", func(t *testing.T) {
		t.Parallel()
		id := mustEnqueue(t, h, "acme", "give-up", acmeKey, `{"orderId":"G-1"}`, "X-Correlation-ID", "trace-give-up")
		moved := waitEvents(t, h, "dlq_moved", 1, field("correlation_id", "trace-give-up"), 10*time.Second)[0]
		if fmt.Sprint(moved["attempts"]) != "2" || fmt.Sprint(moved["msg_id"]) != fmt.Sprint(id) {
			t.Errorf("dlq_moved: %v, want 2 attempts of message %d", moved, id)
		}
		const note = `{"fault_step":"forward","fault_error":"effect handler failed: HTTP 503 Service Unavailable","fault_correlation_id":"trace-give-up"}`
		notes := be.on("/notify")
		if len(notes) != 2 {
			t.Fatalf("%d notifications, want 2: one per attempt", len(notes))
		}
		for i, x := range notes {
			if x.Body != note || x.Method != http.MethodPost {
				t.Errorf("notification %d: %s %s, want POST %s", i+1, x.Method, x.Body, note)
			}
		}
		if evs := eventsWith(h, "queue_processed", "trace-give-up"); len(evs) != 0 {
			t.Errorf("the message was acknowledged: %v", evs)
		}
		r := nexus(t, "", "dlq", "list", "--db", h.db, "--flow", "give-up")
		want := regexp.MustCompile(`^DLQ: 1 pending message\(s\)\n\n  id=` + fmt.Sprint(id) + ` tenant=acme flow=give-up\n    enqueued_at: \S+Z\n    failed_at:   \S+Z\n    attempts:    2\n    last_error:  step 'forward': effect handler failed: HTTP 503 Service Unavailable\n$`)
		if r.code != 0 || !want.MatchString(r.stdout) {
			t.Errorf("dlq list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestDocAuditFaultsStateUnavailable checks the status table's row "Flow
// state is unavailable — the platform cannot honour dedup: … right now →
// 503", with and without a handler: the dedup table is taken away from
// under the running host.
func TestDocAuditFaultsStateUnavailable(t *testing.T) {
	t.Parallel()
	be := auditBackend(t)
	const src = `---
flowmarkdown_version: "0.1"
flow: NAME
tenant: acme
effects: [http_egress]
dedup_key: "{{ $.orderId }}"
---

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
method: POST
`
	handler := "\n## Fault: report\n" + fence + "ntd\n{\"detail\": \"{{ $.fault_error }}\"}\n" + fence + "\n"
	h, _ := queueHost(t, map[string]string{
		"flows/acme/state-plain.md":   strings.NewReplacer("NAME", "state-plain", "BACKEND", be.URL).Replace(src),
		"flows/acme/state-handled.md": strings.NewReplacer("NAME", "state-handled", "BACKEND", be.URL).Replace(src) + handler,
	}, hostOptions{}, "state-plain", "state-handled")
	if r := h.run("acme", "state-plain", acmeKey, `{"orderId":"S-0"}`); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	// the host writes the journal of the run above after answering it: wait
	// for its lock as the host's own connections do, not fail at once with
	// SQLITE_BUSY
	db, err := sql.Open("sqlite", "file:"+h.db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE dedup RENAME TO dedup_away`); err != nil {
		t.Fatal(err)
	}
	calls := len(be.on("/ingest"))
	for _, f := range []string{"state-plain", "state-handled"} {
		r := h.run("acme", f, acmeKey, `{"orderId":"S-1"}`)
		if r.status != http.StatusServiceUnavailable || r.body != `{"ok":false,"error":"flow state is unavailable; try again"}` ||
			r.header.Get("Retry-After") != "1" {
			t.Errorf("%s: %d %v %s, want 503", f, r.status, r.header, r.body)
		}
	}
	if n := len(be.on("/ingest")) - calls; n != 0 {
		t.Errorf("%d calls out without flow state, want none", n)
	}
}

// TestDocAuditFaultsCompileErrors checks what nexus validate refuses
// (handling-failures.md): "A literal outside 100–599 is a compile error";
// fault_status: and fault_header_<name>: "refused anywhere else" than a
// ## Fault: section; and the response header names "refused at compile
// time: the nine hop-by-hop and framing headers … and the whole x-nexus-
// prefix". Each is one line, FILE:LINE naming the key's line.
func TestDocAuditFaultsCompileErrors(t *testing.T) {
	t.Parallel()
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n---\n\n"
	cases := map[string]string{
		"response_status: 600":      "## Step: s\nresponse_status: 600\n",
		"response_status: 99":       "## Step: s\nresponse_status: 99\n",
		"fault status 700":          "## Step: s\n" + fence + "ntd\n{}\n" + fence + "\n\n## Fault: f\nresponse_status: 700\n",
		"fault_status in a step":    "## Step: s\nfault_status: 409\n",
		"fault_header_ in a step":   "## Step: s\nfault_header_x_reason: declined\n",
		"x-nexus-idempotent-replay": "## Step: s\nresponse_header_x_nexus_idempotent_replay: true\n",
		"x-nexus- in a fault":       "## Step: s\n" + fence + "ntd\n{}\n" + fence + "\n\n## Fault: f\nresponse_header_x_nexus_replay: true\n",
	}
	for _, name := range []string{"host", "content_length", "transfer_encoding", "connection", "keep_alive",
		"proxy_connection", "te", "trailer", "upgrade"} {
		cases["response_header_"+name] = "## Step: s\nresponse_header_" + name + ": x\n"
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			src := head + body
			writeFiles(t, dir, map[string]string{"flows/f.md": src})
			// the key's line, the last line of the source, naming the key
			line := strings.Count(src, "\n")
			lines := strings.Split(strings.TrimSuffix(src, "\n"), "\n")
			key, _, _ := strings.Cut(lines[len(lines)-1], ":")
			r := nexus(t, dir, "validate", "flows")
			want := regexp.MustCompile(fmt.Sprintf(`^flows/f\.md:%d: [^\n]*\b%s\b[^\n]*\n$`, line, key))
			if r.code != 1 || !want.MatchString(r.stdout) || r.stderr != "nexus validate: 1 error\n" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 1 and one line %s", r.code, r.stdout, r.stderr, want)
			}
		})
	}
	// the bounds themselves are statuses
	for _, status := range []string{"100", "599"} {
		t.Run("response_status: "+status, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"flows/f.md": head + "## Step: s\nresponse_status: " + status + "\n" + fence + "ntd\n{}\n" + fence + "\n"})
			if r := nexus(t, dir, "validate", "flows"); r.code != 0 {
				t.Errorf("exit %d: %s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}
