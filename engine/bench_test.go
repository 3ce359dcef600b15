package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
)

// benchFlow is the flow of BenchmarkThreeSteps: a validate step with three
// rules, then two ntd steps.
const benchFlow = `---
flowmarkdown_version: "0.1"
flow: bench
tenant: acme
---

## Step: check
~~~validate
$.orderId != null | "orderId is required" | syntactic
$.total > 0       | "total must be positive"
len($.items) > 0  | "an order needs at least one item"
~~~

## Step: shape
~~~ntd
{"orderId": "{{ $.orderId }}", "total": {{ $.total }}, "count": {{ len($.items) }}, "customer": "{{ lower($.customer) }}"}
~~~

## Step: envelope
~~~ntd
{"accepted": true, "order": {{ $ }}, "tenant": "{{ ctx.tenant }}"}
~~~
`

const benchInput = `{"orderId":"A-1","total":12.5,"items":[{"sku":"x","qty":1},{"sku":"y","qty":2}],"customer":"ACME"}`

// BenchmarkThreeSteps runs the three-step flow. The "parse+run" case also
// parses the request body, so it does the same work as
// BenchmarkBaselineJSON (decode, check, build, encode); "run" starts from
// a parsed document, as Request.Doc does.
func BenchmarkThreeSteps(b *testing.B) {
	f, err := flow.Compile("bench.md", []byte(benchFlow))
	if err != nil {
		b.Fatal(err)
	}
	e := engine.New(engine.Config{})
	ctx := context.Background()
	const want = `{"accepted":true,"order":{"orderId":"A-1","total":12.5,"count":2,"customer":"acme"},"tenant":"acme"}`

	b.Run("parse+run", func(b *testing.B) {
		input := []byte(benchInput)
		check := func() engine.Result {
			doc, err := flow.ParseJSON(input, 512)
			if err != nil {
				b.Fatal(err)
			}
			return e.Run(ctx, engine.Request{Flow: f, Doc: doc, CorrelationID: "c-1", Door: engine.DoorRun})
		}
		if res := check(); res.Status != 200 || string(res.Body) != want {
			b.Fatalf("got %d %s", res.Status, res.Body)
		}
		b.ReportAllocs()
		for b.Loop() {
			doc, _ := flow.ParseJSON(input, 512)
			res := e.Run(ctx, engine.Request{Flow: f, Doc: doc, CorrelationID: "c-1", Door: engine.DoorRun})
			if res.Status != 200 {
				b.Fatal(res.Status)
			}
		}
	})
	b.Run("run", func(b *testing.B) {
		doc, err := flow.ParseJSON([]byte(benchInput), 512)
		if err != nil {
			b.Fatal(err)
		}
		req := engine.Request{Flow: f, Doc: doc, CorrelationID: "c-1", Door: engine.DoorRun}
		if res := e.Run(ctx, req); res.Status != 200 || string(res.Body) != want {
			b.Fatalf("got %d %s", res.Status, res.Body)
		}
		b.ReportAllocs()
		for b.Loop() {
			if res := e.Run(ctx, req); res.Status != 200 {
				b.Fatal(res.Status)
			}
		}
	})
}

// baseline is what a hand-written Go handler would do for the same logic:
// decode into a map, check the three fields, build the output, encode.
func baseline(input []byte) ([]byte, error) {
	var in map[string]any
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	if in["orderId"] == nil {
		return nil, errors.New("orderId is required")
	}
	total, ok := in["total"].(float64)
	if !ok || total <= 0 {
		return nil, errors.New("total must be positive")
	}
	items, _ := in["items"].([]any)
	if len(items) == 0 {
		return nil, errors.New("an order needs at least one item")
	}
	id, _ := in["orderId"].(string)
	customer, _ := in["customer"].(string)
	out := map[string]any{
		"accepted": true,
		"order": map[string]any{
			"orderId":  id,
			"total":    total,
			"count":    len(items),
			"customer": strings.ToLower(customer),
		},
		"tenant": "acme",
	}
	return json.Marshal(out)
}

func BenchmarkBaselineJSON(b *testing.B) {
	input := []byte(benchInput)
	const want = `{"accepted":true,"order":{"count":2,"customer":"acme","orderId":"A-1","total":12.5},"tenant":"acme"}`
	if out, err := baseline(input); err != nil || string(out) != want {
		b.Fatalf("got %s, %v", out, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := baseline(input); err != nil {
			b.Fatal(err)
		}
	}
}
