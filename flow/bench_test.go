package flow

import (
	"fmt"
	"runtime"
	"testing"
)

// generatedFlow returns the i-th of a family of realistic flows: several
// steps, validate rules, an ntd template, an http_egress call with headers,
// a fault handler.
func generatedFlow(i int) []byte {
	return fmt.Appendf(nil, `---
flowmarkdown_version: "0.1"
flow: order-intake-%d
tenant: tenant-%d
description: generated flow %d
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
`, i, i%17, i, 1+i%5, i, i%3)
}

// BenchmarkCompile compiles 1,000 generated flows per iteration; ns/flow
// allocs/flow and B/flow are reported per flow.
func BenchmarkCompile(b *testing.B) {
	const n = 1000
	srcs := make([][]byte, n)
	for i := range srcs {
		srcs[i] = generatedFlow(i)
		if _, err := Compile("gen.md", srcs[i]); err != nil {
			b.Fatalf("generated flow %d does not compile:\n%v", i, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		for _, src := range srcs {
			if _, err := Compile("gen.md", src); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	flows := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/flows, "ns/flow")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/flows, "allocs/flow")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/flows, "B/flow")
	b.ReportMetric(0, "ns/op")
}
