package gitsync_test

import (
	"context"
	"fmt"
	"testing"
)

// generatedFlow returns the i-th of a family of realistic flows (several
// steps, validate rules, an ntd template, an http_egress call with
// headers, a fault handler), its description carrying round.
func generatedFlow(i, round int) []byte {
	return fmt.Appendf(nil, `---
flowmarkdown_version: "0.1"
flow: order-intake-%d
tenant: tenant-%d
description: generated flow %d, round %d
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
`, i, i%17, i, round, 1+i%5, i, i%3)
}

// BenchmarkSync1000Flows: each iteration commits a change to every one of
// 1,000 flows (outside the timer) and runs one Sync: fetch, compile,
// publish and the live set's swap.
func BenchmarkSync1000Flows(b *testing.B) {
	const n = 1000
	e := newEnv(b)
	writeAll := func(round int) {
		for i := range n {
			e.src.write(fmt.Sprintf("flows/tenant-%d/order-intake-%d.md", i%17, i), generatedFlow(i, round))
		}
	}
	writeAll(0)
	e.mustApply(e.src.gitCommit("1,000 flows"))
	if st := e.status(); st.Flows != n {
		b.Fatalf("%d flows live, want %d", st.Flows, n)
	}
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		writeAll(round)
		c := e.src.gitCommit(fmt.Sprintf("round %d", round))
		b.StartTimer()
		res, err := e.s.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !res.Applied() || res.Commit != c || len(res.Changes) != n || res.Changes[0].Action != "published" {
			b.Fatalf("round %d: Sync = %v, %d changes, errors %q", round, res.Applied(), len(res.Changes), res.Errors)
		}
	}
	if lf, ok := e.reg.Live().Lookup("tenant-0", "order-intake-0"); !ok || lf.Version != round+1 {
		b.Fatalf("the live set is not the last round's: %+v", lf)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "flows/s")
}
