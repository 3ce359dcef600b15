// Package flowtest generates flow files for tests and benchmarks: small
// ones told apart by a mark, and realistic ones by the thousand.
package flowtest

import "fmt"

// Flow returns the source of the i-th of a family of realistic flows:
// several steps, validate rules, an ntd template, an http_egress call with
// headers, a fault handler. It is flow order-intake-{i} of tenant
// tenant-{i mod 17}; note is appended to its description, so that a new
// note makes a changed file.
func Flow(i int, note string) []byte {
	return fmt.Appendf(nil, `---
flowmarkdown_version: "0.1"
flow: order-intake-%d
tenant: tenant-%d
description: generated flow %d%s
effects: [http_egress]
queue_max_attempts: %d
queue_initial_delay_ms: 500
queue_backoff_factor: 3.0
dedup_key: "{{ $.orderId }}-%d"
---

## Step: keep
save_body: request
`+"```ntd"+`
{{ $ }}
`+"```"+`

## Step: check
`+"```validate"+`
$.orderId != null                 | "orderId is required" | syntactic
$.total > %d                      | "total must be positive"
len($.items) > 0 && $.items[0].sku != null | "items are required"
matches($.orderId, "^A-[0-9]+$")   | "orderId looks wrong" | syntactic
`+"```"+`

## Step: shape
when: $.total >= 10 || ctx.door == "run"
`+"```ntd"+`
{
  "id": "{{ $.orderId }}",
  "total": {{ $.total * 100 }},
  "lines": {{ len($.items) }},
  "customer": {"name": "{{ upper($.customer.name) }}", "tier": "gold"},
  "tags": ["a", "{{ lower($.channel) }}"]
}
`+"```"+`

## Step: forward
effects: [http_egress]
endpoint: https://orders.example.com/ingest/{{ $.id }}
method: PUT
headers: {"Idempotency-Key": "{{ ctx.correlation_id }}", "X-Tenant": "{{ ctx.tenant }}"}
read_timeout_ms: 5000
response_status: 201
response_header_location: /orders

## Fault: problem
response_header_content_type: application/problem+json
`+"```ntd"+`
{"title": "Order rejected", "detail": "{{ $.fault_error }}", "step": "{{ $.fault_step }}"}
`+"```"+`
`, i, i%17, i, note, 1+i%5, i, i%3)
}

// Marked returns a valid flow file for tenant/name whose description and
// answer carry mark, so that two marks give two different artifacts. The
// front matter's lines: 3 flow, 4 tenant, 5 description.
func Marked(tenant, name, mark string) []byte {
	return fmt.Appendf(nil, `---
flowmarkdown_version: "0.1"
flow: %s
tenant: %s
description: "%s"
---

## Step: answer
`+"```ntd"+`
{"mark": "%s", "name": "{{ $.name }}"}
`+"```"+`
`, name, tenant, mark, mark)
}
