package engine_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// chain is a flow body of n ntd steps named double1…doubleN, each
// rendering block.
func chain(n int, block string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString("\n## Step: double" + strconv.Itoa(i) + "\n~~~ntd\n" + block + "\n~~~\n")
	}
	return b.String()
}

// A step whose document repeats the one it reads doubles it at each step:
// 15 steps made a 1 KB message a 32 MB answer, and a few more would have
// taken gigabytes. The step that passes the bound (the egress answer
// ceiling, 10 MiB here) fails as a defect naming the step and the limit,
// with memory allocated a few times the bound, not the document's size.
func TestRenderedDocumentIsBounded(t *testing.T) {
	doc := `{"text":"` + strings.Repeat("x", 1000) + `"}`
	limitErr := func(step string) string {
		return "step '" + step + "': ntd: the document is larger than the limit of 10485760 bytes"
	}
	failed := func(step string) view {
		return view{Status: 500, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
			Outcome: engine.Failed, Err: limitErr(step), ErrKind: engine.KindDefect}
	}
	for _, c := range []struct {
		name, body string
		want       view
	}{
		// 1 KB × 2^14 passes 10 MiB at the 14th step
		{"whole-value holes", chain(15, `{"a":{{ $ }},"b":{{ $ }}}`), failed("double14")},
		// each copy escapes the quotes and backslashes of the one
		// before: past 10 MiB at the 11th step
		{"string holes", chain(15, `{"a":"{{ $ }}{{ $ }}"}`), failed("double11")},
		{"an array of holes", chain(15, `[{{ $ }},{{ $ }}]`), failed("double14")},
		{"a fault sequence answers it", chain(15, `{"a":{{ $ }},"b":{{ $ }}}`) +
			"\n## Fault: answer\n~~~ntd\n{\"failed\": \"{{ $.fault_step }}\", \"why\": \"{{ $.fault_error }}\"}\n~~~\n",
			view{Status: 500, Header: jsonHdr("c-1"),
				Body:    `{"failed":"double14","why":"ntd: the document is larger than the limit of 10485760 bytes"}`,
				Outcome: engine.FaultHandled, Err: limitErr("double14"), ErrKind: engine.KindDefect}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, flowSource("doubling", "", c.body))
			e := engine.New(engine.Config{})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := run(t, e, f, doc)
			runtime.ReadMemStats(&after)
			checkView(t, res, c.want)
			// the steps before the one that fails build documents of up
			// to 10 MiB: the chain's strings, half the limit, then a
			// quarter…, a few times the limit in all
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*engine.DefaultMaxResponseBytes {
				t.Errorf("allocated %d bytes, more than 8 times the limit", alloc)
			} else {
				t.Logf("allocated %d bytes", alloc)
			}
		})
	}
}

// The bound is the flow's max_body_bytes when that is larger than the
// egress answer ceiling: a flow that takes 16 MiB messages may answer one
// it wraps in an envelope.
func TestRenderedDocumentBoundFollowsMaxBodyBytes(t *testing.T) {
	doc := `{"text":"` + strings.Repeat("x", 12<<20) + `"}`
	f := compile(t, flowSource("big", "max_body_bytes: 16777216\n", "\n## Step: wrap\n~~~ntd\n{\"order\": {{ $ }}}\n~~~\n"))
	res := run(t, engine.New(engine.Config{}), f, doc)
	if res.Status != 200 || len(res.Body) != len(doc)+len(`{"order":}`) {
		t.Fatalf("got %d, %d bytes (%v), want 200 and the document wrapped", res.Status, len(res.Body), res.Err)
	}
	f = compile(t, flowSource("big", "max_body_bytes: 16777216\n", "\n## Step: twice\n~~~ntd\n[{{ $ }}, {{ $ }}]\n~~~\n"))
	res = run(t, engine.New(engine.Config{}), f, doc)
	if res.Err == nil || res.Err.Error() != "step 'twice': ntd: the document is larger than the limit of 16777216 bytes" {
		t.Fatalf("got %d %v, want the limit of max_body_bytes", res.Status, res.Err)
	}
}

// The answer is written under the same bound, stopped as soon as it passes
// it: a U+2028 takes six bytes once escaped, three as a message may send
// it, and a 9 MiB message answered as it came was 18 MiB.
func TestAnswerIsWrittenUnderTheBound(t *testing.T) {
	doc := `{"text":"` + strings.Repeat("\u2028", 3<<20) + `"}`
	f := compile(t, flowSource("echo", "", "\n## Step: check\n~~~validate\n$.text != null | \"text is required\"\n~~~\n"))
	checkView(t, run(t, engine.New(engine.Config{}), f, doc), view{Status: 500, Header: jsonHdr("c-1"),
		Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
		Err: "step 'check': answer: the document is larger than the limit of 10485760 bytes", ErrKind: engine.KindDefect})
}
