package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
)

// A step that runs past the flow's timeout_ms and then fails, or is
// filtered out, answers the ceiling's 500 naming that step, as one that
// runs past it and succeeds does: the ceiling came first. It answered the
// step's own failure (a rule's 422, a filtered 200, a defect's 500 with
// another body) long after timeout_ms.
func TestDurationCeilingHoldsForAStepThatRunsPastItAndFails(t *testing.T) {
	// slow takes tens of milliseconds (a second under -race) and is true:
	// the value does not match the pattern
	const slow = `!matches($.v, $.p)`
	doc := `{"p":"[\\p{L}]{0,600}c","v":"` + strings.Repeat("ab", 2000) + `"}`
	ceiling := func(step string) view {
		return view{Status: 500, Header: jsonHdr("c-1"),
			Body:    `{"ok":false,"error":"duration ceiling of 20 ms reached","step":"` + step + `"}`,
			Outcome: engine.Failed, Err: "step '" + step + "': duration ceiling of 20 ms reached", ErrKind: engine.KindDeadline}
	}
	for _, c := range []struct {
		name string
		body string
		want view
	}{
		{"a validate rule that fails", "\n## Step: check\n~~~validate\n!(" + slow + `) | "no match"` + "\n~~~\n", ceiling("check")},
		{"a condition fence that is false", "\n## Step: check\n~~~condition\n!(" + slow + ")\n~~~\n", ceiling("check")},
		{"a template that fails", "\n## Step: check\n~~~ntd\n{\"x\": {{ " + slow + " && $.n > 1 }}}\n~~~\n", ceiling("check")},
		{"a rendered status that is no status", "\n## Step: check\nresponse_status: \"{{ $.x }}\"\n~~~ntd\n{\"x\": {{ " + slow + " }}}\n~~~\n", ceiling("check")},
		{"a when: that fails", "\n## Step: check\nwhen: " + slow + " && $.n > 1\n~~~ntd\n{}\n~~~\n", ceiling("check")},
		{"a when: that is false, the last step", "\n## Step: first\n~~~ntd\n{{ $ }}\n~~~\n\n## Step: check\nwhen: !(" + slow + ")\n~~~ntd\n{}\n~~~\n", ceiling("check")},
		{"a fault step that fails", "\n## Step: keep\nsave_body: request\n~~~ntd\n{{ $ }}\n~~~\n\n## Step: first\n~~~validate\nfalse | \"first fails\"\n~~~\n" +
			"\n## Fault: check\n~~~validate\nmatches(ctx.request.v, ctx.request.p) | \"no match\"\n~~~\n",
			view{Status: 500, Header: jsonHdr("c-1"),
				Body:    `{"ok":false,"error":"duration ceiling of 20 ms reached","step":"check"}`,
				Outcome: engine.Failed, Err: "step 'first': validation failed (Semantic): first fails", ErrKind: engine.KindSemantic,
				HandlerErr: "step 'check': duration ceiling of 20 ms reached", HandlerErrKind: engine.KindDeadline}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, flowSource("overrun", "timeout_ms: 20\n", c.body))
			checkView(t, run(t, engine.New(engine.Config{}), f, doc), c.want)
		})
	}
}

// TestDefaultDurationCeilingAnswer: a flow without timeout_ms has the
// default ceiling of 30000 ms, and a call in flight when it is reached is
// cancelled and answered with flow-file.md's text to the letter:
// {"ok":false,"error":"duration ceiling of 30000 ms reached","step":"forward"}
// ("Precise answers"). The call's own read timeout is longer than the
// ceiling, so the ceiling ends it. It takes the 30 s of the ceiling.
func TestDefaultDurationCeilingAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the default ceiling of 30 s")
	}
	t.Parallel()
	cancelled := make(chan struct{}, 1)
	b := newBackend(t, slow(time.Minute, cancelled))
	src := flowSource("default-ceiling", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 50000
`)
	f := compile(t, src, "BACKEND", b.URL)
	if f.Timeout() != 30*time.Second {
		t.Fatalf("the default ceiling is %v, want 30 s", f.Timeout())
	}
	res := run(t, engine.New(engine.Config{Transport: inFlight(b)}), f, `{"orderId":"A-1"}`)
	checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"),
		Body:    `{"ok":false,"error":"duration ceiling of 30000 ms reached","step":"forward"}`,
		Outcome: engine.Failed, Err: "step 'forward': duration ceiling of 30000 ms reached", ErrKind: engine.KindDeadline})
	waitFor(t, cancelled, "cancellation of the backend call")
}
