package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The examples and precise answers of the spec's flow-file page, each as
// printed, through the built binary.

// flowFileFlows are the flows of TestDocAuditFlowFileRun; BACKEND is
// replaced by the backend's URL.
var flowFileFlows = map[string]string{
	// the page's example, as printed (but for the endpoint)
	"order-intake": `---
flowmarkdown_version: "0.1"
flow: order-intake
tenant: acme
effects: [http_egress]
---

## Step: check
` + fence + `validate
$.orderId != null | "orderId is required" | syntactic
$.total > 0       | "total must be positive"
` + fence + `

## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
method: POST
`,
	"gate": `---
flowmarkdown_version: "0.1"
flow: gate
tenant: acme
---

## Step: pass
` + fence + `condition
$.go == true
` + fence + `

## Step: after
` + fence + `ntd
{"went": true}
` + fence + `
`,
	"no-content": `---
flowmarkdown_version: "0.1"
flow: no-content
tenant: acme
---

## Step: done
response_status: "{{ ctx.input.status }}"
response_header_content_type: text/plain
` + fence + `ntd
{"dropped": true}
` + fence + `
`,
	"holes": `---
flowmarkdown_version: "0.1"
flow: holes
tenant: acme
---

## Step: shape
` + fence + `ntd
{"missing": "{{ $.nope }}", "null": "{{ $.nil }}", "whole": {{ $.nope }}, "obj": "{{ $.obj }}", "arr": "{{ $.arr }}", "typed": {{ $.obj }}, "n": {{ $.n }}}
` + fence + `
`,
	"own-cid": `---
flowmarkdown_version: "0.1"
flow: own-cid
tenant: acme
---

## Step: done
response_header_x_correlation_id: abc123
` + fence + `ntd
{"ok": true}
` + fence + `
`,
	// a call out whose answer (XML, or text) is the final document
	"shapes": `---
flowmarkdown_version: "0.1"
flow: shapes
tenant: acme
effects: [http_egress]
---

## Step: fetch
effects: [http_egress]
endpoint: BACKEND/{{ $.kind }}
method: GET
`,
	// queue_publish of an XML document, and to a flow not deployed
	"publisher": `---
flowmarkdown_version: "0.1"
flow: publisher
tenant: acme
effects: [http_egress, queue_publish]
---

## Step: fetch
when: $.kind == "xml"
effects: [http_egress]
endpoint: BACKEND/xml
method: GET

## Step: to-target
when: ctx.input.to == "target"
effects: [queue_publish]
queue: target

## Step: to-nowhere
when: ctx.input.to == "nowhere"
effects: [queue_publish]
queue: nowhere
`,
	// handling-failures.md's "## Step: proxy", as printed (but for the
	// call it follows)
	"proxy": `---
flowmarkdown_version: "0.1"
flow: proxy
tenant: acme
effects: [http_egress]
---

## Step: proxy
effects: [http_egress]
endpoint: BACKEND/created
method: POST
response_status: "{{ ctx.HTTP_SC }}"
`,
	// handling-failures.md's "## Step: keep" and "## Fault: report", as
	// printed, around a rule that fails
	"keep": `---
flowmarkdown_version: "0.1"
flow: keep
tenant: acme
---

## Step: keep
save_body: request
` + fence + `ntd
{{ $ }}
` + fence + `

## Step: check
` + fence + `validate
$.total > 0 | "total must be positive"
` + fence + `

## Fault: report
` + fence + `ntd
{
  "title": "Order rejected",
  "orderId": "{{ ctx.request.orderId }}",
  "detail": "{{ $.fault_error }}"
}
` + fence + `
`,
	"target": `---
flowmarkdown_version: "0.1"
flow: target
tenant: acme
effects: [http_egress]
queue_initial_delay_ms: 0
---

## Step: tell
effects: [http_egress]
endpoint: BACKEND/door/{{ ctx.door }}/{{ $.id }}
method: POST
`,
}

// TestDocAuditFlowFileRun checks the /run answers the flow-file page gives,
// and two of handling-failures.md that no other test runs end to end:
// status, headers and body of each, byte for byte.
func TestDocAuditFlowFileRun(t *testing.T) {
	t.Parallel()
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/xml":
			w.Header().Set("Content-Type", "application/xml")
			w.Write([]byte(`<order><id>7</id></order>`))
		case r.URL.Path == "/created":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"n-1"}`))
		case r.URL.Path == "/text":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte(`accepted`))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"accepted":true}`))
		}
	})
	files := map[string]string{"access.yaml": accessYAML(testKey{id: "acme-all", tenant: "acme", key: acmeKey})}
	for name, text := range flowFileFlows {
		files["flows/acme/"+name+".md"] = strings.ReplaceAll(text, "BACKEND", be.URL)
	}
	repo := newConfigRepo(t, files)
	h := startHost(t, hostOptions{repo: repo.dir})
	h.waitCommit(repo.git("rev-parse", "HEAD"), 20*time.Second)

	// answer is what a test compares of a response: the platform's
	// X-Correlation-Id is only checked to be there, unless cid is set
	type answer struct {
		Status      int
		ContentType string
		Body        string
		Cid         string
	}
	for _, c := range []struct {
		name, flow, body string
		want             answer
	}{
		{"the example passes", "order-intake", `{"orderId":"o-1","total":5}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"accepted":true}`}},
		{"the example's syntactic rule", "order-intake", `{"total":5}`,
			answer{Status: 400, ContentType: "application/json", Body: `{"error":"orderId is required","step":"check"}`}},
		{"the example's semantic rule", "order-intake", `{"orderId":"o-1","total":0}`,
			answer{Status: 422, ContentType: "application/json", Body: `{"error":"total must be positive","step":"check"}`}},
		{"a rule whose expression errors is semantic, in our own words", "order-intake", `{"orderId":"o-1"}`,
			answer{Status: 422, ContentType: "application/json", Body: `{"error":"cannot compare null with number using >","step":"check"}`}},
		{"a false condition fence is filtered", "gate", `{"go":false}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"filtered":true,"step":"pass"}`}},
		{"a true one goes on", "gate", `{"go":true}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"went":true}`}},
		// (a type the flow sets itself is kept: docs/decisions.md; Go's
		// server drops it from a 304)
		{"204 is sent without a body", "no-content", `{"status":204}`,
			answer{Status: 204, ContentType: "text/plain"}},
		{"304 is sent without a body", "no-content", `{"status":304}`,
			answer{Status: 304}},
		{"a status below 200 is a step error", "no-content", `{"status":150}`,
			answer{Status: 500, ContentType: "application/json", Body: `{"ok":false,"error":"flow execution failed"}`}},
		{"holes: null and missing, objects and arrays in strings, whole values", "holes", `{"nil":null,"obj":{"b":[1,2],"a":"x"},"arr":[1,"y"],"n":1.5}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"missing":"","null":"","whole":null,"obj":"{\"b\":[1,2],\"a\":\"x\"}","arr":"[1,\"y\"]","typed":{"b":[1,2],"a":"x"},"n":1.5}`}},
		{"response_header_x_correlation_id replaces the platform's", "own-cid", `{}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"ok":true}`, Cid: "abc123"}},
		{"an XML document is application/xml", "shapes", `{"kind":"xml"}`,
			answer{Status: 200, ContentType: "application/xml", Body: `<order><id>7</id></order>`}},
		{"a string is text/plain", "shapes", `{"kind":"text"}`,
			answer{Status: 200, ContentType: "text/plain; charset=utf-8", Body: `accepted`}},
		{"a backend's own status passed through", "proxy", `{}`,
			answer{Status: 201, ContentType: "application/json", Body: `{"id":"n-1"}`}},
		{"a fault handler reads what save_body kept", "keep", `{"orderId":"o-9","total":0}`,
			answer{Status: 422, ContentType: "application/json", Body: `{"title":"Order rejected","orderId":"o-9","detail":"total must be positive"}`}},
		{"queue_publish of an XML document is a defect of the flow", "publisher", `{"kind":"xml","to":"target"}`,
			answer{Status: 500, ContentType: "application/json", Body: `{"ok":false,"error":"flow execution failed"}`}},
		{"queue_publish to a flow not live fails as an effect", "publisher", `{"to":"nowhere"}`,
			answer{Status: 502, ContentType: "application/json", Body: `{"ok":false,"error":"flow execution failed"}`}},
		{"queue_publish of a JSON document", "publisher", `{"to":"target","id":"p-1"}`,
			answer{Status: 200, ContentType: "application/json", Body: `{"to":"target","id":"p-1"}`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.run("acme", c.flow, acmeKey, c.body)
			got := answer{Status: r.status, ContentType: r.header.Get("Content-Type"), Body: r.body, Cid: r.header.Get("X-Correlation-Id")}
			if c.want.Cid == "" && got.Cid != "" {
				got.Cid = ""
			} else if got.Cid == "" {
				got.Cid = "(none)"
			}
			if vs := r.header.Values("X-Correlation-Id"); len(vs) > 1 {
				t.Errorf("X-Correlation-Id sent %d times: %q", len(vs), vs)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("POST /flows/acme/%s/run %s (-want +got):\n%s", c.flow, c.body, diff)
			}
		})
	}

	// the XML document and the flow not deployed were refused before
	// anything was written; the JSON document ran on the queue door
	deadline := time.Now().Add(10 * time.Second)
	for len(be.on("/door/enqueue/p-1")) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var calls []string
	for _, r := range be.received() {
		if strings.HasPrefix(r.Path, "/door/") {
			calls = append(calls, r.Path)
		}
	}
	if diff := cmp.Diff([]string{"/door/enqueue/p-1"}, calls); diff != "" {
		t.Errorf("the target's calls (-want +got):\n%s", diff)
	}
	queues := filepath.Join(filepath.Dir(h.db), "queues", "acme")
	if _, err := os.Stat(filepath.Join(queues, "nowhere")); !os.IsNotExist(err) {
		t.Errorf("a queue folder was made for the flow not deployed: %v", err)
	}
	logs := strings.Join(h.logLines(), "\n")
	for _, want := range []string{
		`"error":"step 'to-target': queue_publish needs a JSON document"`,
		`"error":"step 'to-nowhere': effect handler failed: no flow acme/nowhere is deployed"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no %s", want)
		}
	}
}

// TestDocAuditFlowFileCompileLines checks the lines and texts the flow-file
// page's precise answers give for compile errors, through nexus validate.
func TestDocAuditFlowFileCompileLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"flows/lines.md": `---
flowmarkdown_version: "0.1"
flow: lines
tenant: acme
queue_backoff_factor: "2x"
colour: blue
---

## Step: call
effects: [http_egress]
endpoint: https://orders.example.com/ingest

## Step: shape
` + fence + `ntd
{"a":
  "{{ $.a "}
` + fence + `

## Step: pub
effects: [queue_publish]

## Fault: call
`,
		"flows/names.md": `---
flowmarkdown_version: "0.1"
flow: "a\u0000b"
tenant: ""
effects: [queue_publish]
---

## Step: pub
effects: [queue_publish]
queue: Orders
`,
		"flows/long.md": `---
flowmarkdown_version: "0.1"
flow: orders
tenant: ` + strings.Repeat("a", 65) + `
---

## Step: answer
` + fence + `ntd
{}
` + fence + `
`,
		"flows/version.md": `---
flowmarkdown_version: "0.2"
flow: orders
tenant: acme
---

## Step: answer
` + fence + `ntd
{}
` + fence + `
`,
	})
	r := nexus(t, dir, "validate", "flows")
	want := strings.Join([]string{
		`flows/lines.md:5: queue_backoff_factor must be a number, not the string "2x"`,
		`flows/lines.md:6: unknown front matter key "colour"`,
		`flows/lines.md:10: step "call" uses the effect http_egress, which the front matter does not declare: add it to effects: at the top of the file`,
		`flows/lines.md:16: step "shape": unclosed {{: a hole ends with }}`,
		`flows/lines.md:19: step "pub" has effects: [queue_publish] but no queue: naming the target flow`,
		`flows/lines.md:20: step "pub" uses the effect queue_publish, which the front matter does not declare: add it to effects: at the top of the file`,
		`flows/lines.md:22: duplicate step name "call" (first used at line 9): step names are unique across ## Step: and ## Fault: sections`,
		`flows/long.md:4: invalid name "` + strings.Repeat("a", 65) + `" for tenant (flow "orders"): the name is 65 characters long, more than 64`,
		`flows/names.md:3: invalid name "a\x00b" for flow (tenant ""): character '\x00' at position 2 is not allowed`,
		`flows/names.md:4: invalid name "" for tenant (flow "a\x00b"): the name is empty`,
		`flows/names.md:10: invalid name "Orders" for queue (tenant "", flow "a\x00b"): character 'O' at position 1 is not allowed`,
		`flows/version.md:2: flowmarkdown_version "0.2" is not supported: this compiler reads "0.1"`,
	}, "\n") + "\n"
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if diff := cmp.Diff(want, r.stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if r.stderr != "nexus validate: 12 errors\n" {
		t.Errorf("stderr = %q", r.stderr)
	}
}
