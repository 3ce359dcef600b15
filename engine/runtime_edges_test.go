package engine_test

// What a flow does at run time with what callers send: copies of ctx,
// patterns and header values from the message, integers.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
)

// TestCtxSnapshotDoesNotChangeAfterItIsTaken: a template that copies ctx
// (`{"ctx": {{ ctx }}}`, an audit record of the execution's variables)
// keeps them as they were when it was built: values are never modified
// once built. It held the execution's own variable map, which the next
// http_egress step changed (it unsets HTTP_SC and HTTP_RESPONSE_BODY
// first), so the record it posted had lost the first call's answer.
func TestCtxSnapshotDoesNotChangeAfterItIsTaken(t *testing.T) {
	first := newBackend(t, answer(200, "application/json", `{"stock":7}`))
	audit := newBackend(t, answer(200, "application/json", `{"ok":true}`))
	src := flowSource("ctx-snapshot", "", `
## Step: lookup
effects: [http_egress]
endpoint: FIRST/stock
method: GET

## Step: snapshot
`+"```ntd\n{\"vars\": {{ ctx }}}\n```"+`

## Step: record
effects: [http_egress]
endpoint: AUDIT/audit
method: POST
`)
	f := compile(t, src, "FIRST", first.URL, "AUDIT", audit.URL)
	res := run(t, engine.New(engine.Config{}), f, `{"sku":"S-1"}`)
	if res.Status != 200 {
		t.Fatalf("status %d, body %s; want 200", res.Status, res.Body)
	}
	reqs := audit.requests()
	if len(reqs) != 1 {
		t.Fatalf("audit backend got %d requests, want 1", len(reqs))
	}
	var posted struct {
		Vars map[string]any `json:"vars"`
	}
	if err := json.Unmarshal([]byte(reqs[0].Body), &posted); err != nil {
		t.Fatalf("audit body %q: %v", reqs[0].Body, err)
	}
	if posted.Vars["HTTP_SC"] != float64(200) || posted.Vars["HTTP_RESPONSE_BODY"] == nil {
		t.Errorf("the snapshot taken after the lookup, as posted by the next step, is %s:\n"+
			"it lost HTTP_SC/HTTP_RESPONSE_BODY, which the next step deleted from the live map after the snapshot was built", reqs[0].Body)
	}
}

// TestCtxSnapshotSavedDoesNotKillTheProcess: the same copy kept with
// save_body answers 200 with the variables as they were. It stored the map
// inside itself, and encoding the answer recursed until Go died of a stack
// overflow, which no recover catches: the first message through such a
// flow stopped the whole host. The flow runs in a child process, its stack
// capped at 64 MiB so that it would die in well under a second.
func TestCtxSnapshotSavedDoesNotKillTheProcess(t *testing.T) {
	src := flowSource("ctx-saved", "", `
## Step: audit
save_body: audit
`+"```ntd\n{\"vars\": {{ ctx }}}\n```"+`
`)
	if os.Getenv("NEXUS_ENGINE_TEST_CHILD") == "saved-ctx" {
		debug.SetMaxStack(64 << 20)
		res := run(t, engine.New(engine.Config{}), compile(t, src), `{"orderId":"A-1"}`)
		os.Stdout.WriteString("CHILD-STATUS " + res.Header.Get("Content-Type") + " " + string(res.Body) + "\n")
		if res.Status != 200 {
			t.Fatalf("status %d", res.Status)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCtxSnapshotSavedDoesNotKillTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NEXUS_ENGINE_TEST_CHILD=saved-ctx")
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := string(out)
		if i := strings.Index(text, "goroutine stack exceeds"); i >= 0 {
			text = text[i:min(len(text), i+300)]
		} else if len(text) > 1500 {
			text = text[:1500]
		}
		t.Fatalf("the process running the flow died (%v):\n%s", err, text)
	}
	if !strings.Contains(string(out), `"correlation_id":"c-1"`) {
		t.Errorf("answer does not hold the snapshot: %s", out)
	}
}

// regexFlow validates a value against a pattern the message carries (a
// flow whose rules come with the data, or from a configuration document).
func regexFlow(timeout string) string {
	return flowSource("rx", timeout, `
## Step: check
`+"```validate\nmatches($.value, $.pattern) | \"value does not match\"\n```"+`
`)
}

// TestMatchesHonoursTheDurationCeiling: a matches() pattern that comes
// from the message is bounded (its size, its compiled program, and that
// program times the value's length) and refused with an evaluation error
// over the bound. One message with a 101-byte pattern and an 80 KB value
// kept a step busy for about 5 s under a 300 ms timeout_ms: a regexp cannot
// be interrupted, and the ceiling of a flow without effects is read between
// steps.
func TestMatchesHonoursTheDurationCeiling(t *testing.T) {
	f := compile(t, regexFlow("timeout_ms: 300\n"))
	doc := `{"pattern":"` + strings.Repeat("[ab]{1000}", 10) + `c","value":"` + strings.Repeat("ab", 40_000) + `"}`
	res := run(t, engine.New(engine.Config{}), f, doc)
	// refused before it runs: the rule's expression fails (422), and the
	// error says why, not that the value did not match
	if res.Status != 422 || res.Err == nil || !strings.Contains(res.Err.Error(), "the pattern from the message is too costly to run on this value") {
		t.Errorf("%d %s (%v), want the pattern refused as too costly", res.Status, res.Body, res.Err)
	}
}

// TestMatchesMemoryIsBoundedPerMessage: the same bound keeps one message's
// pattern from allocating hundreds of MiB: `a{1000}` written 2,000 times (14
// KB) compiled to two million instructions, about 450 MiB for one message.
func TestMatchesMemoryIsBoundedPerMessage(t *testing.T) {
	f := compile(t, regexFlow(""))
	doc := `{"pattern":"` + strings.Repeat("a{1000}", 2000) + `","value":"b"}`
	e := engine.New(engine.Config{})
	req := newRequest(t, f, doc)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := e.Run(context.Background(), req)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if alloc > 64<<20 {
		t.Errorf("one message of %d bytes made the engine allocate %d MiB (answer %d %s)", len(doc), alloc>>20, res.Status, res.Body)
	}
}

// TestHeaderValueThatCannotBeSentIsNotA502: a `headers:` value the
// message fills with a line break is a defect of the flow (500), refused
// before any call, as a bad endpoint value is (handling-failures.md: 502 is
// "a call out that did not succeed"). It answered 502, with net/http's
// "invalid header field value" as the effect's failure, though no call went
// out.
func TestHeaderValueThatCannotBeSentIsNotA502(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{}`))
	src := flowSource("hdr", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/orders
headers: {"X-Order": "{{ $.orderId }}"}
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{"orderId":"A-1\r\nX-Injected: yes"}`)
	if b.calls.Load() != 0 {
		t.Fatalf("the backend was called")
	}
	if res.Status != 500 || res.Err == nil || res.Err.Kind != engine.KindDefect {
		kind, msg := engine.Kind(0), ""
		if res.Err != nil {
			kind, msg = res.Err.Kind, res.Err.Error()
		}
		t.Errorf("a header value the flow cannot send answers %d (kind %v, %q); want 500, a defect of the flow, before any call", res.Status, kind, msg)
	}
}

// TestHeaderNamesKeepTheirUnderscores: the names of headers: are names,
// not step keys: X_Api_Key (a name some APIs use) reaches the backend with
// its underscores (in Go's letter case, X_api_key: header names are
// case-insensitive). The compiler turned its underscores into hyphens, as
// it does for response_header_<name> keys, and sent X-Api-Key.
func TestHeaderNamesKeepTheirUnderscores(t *testing.T) {
	b := newBackend(t, answer(200, "application/json", `{}`))
	src := flowSource("underscore", "", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
headers: {"X_Api_Key": "k-1", "x-trace": "t-1"}
`)
	if res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", b.URL), `{}`); res.Status != 200 {
		t.Fatalf("answer %d %s", res.Status, res.Body)
	}
	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("the backend got %d requests, want 1", len(reqs))
	}
	got := map[string]string{}
	for _, name := range []string{"X_Api_Key", "X-Api-Key", "X-Trace"} {
		got[name] = reqs[0].Header.Get(name)
	}
	want := map[string]string{"X_Api_Key": "k-1", "X-Api-Key": "", "X-Trace": "t-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headers the backend received (-want +got):\n%s", diff)
	}
}

// TestUnaryMinusKeepsAnIntegerExact: -$.n is exact for an integer, as
// 0 - $.n is (integers are exact up to 64 bits); it went through float64,
// and -9007199254740993 came out as -9007199254740992.
func TestUnaryMinusKeepsAnIntegerExact(t *testing.T) {
	src := flowSource("neg", "", "## Step: negate\n```ntd\n{\"neg\": {{ -$.n }}, \"sub\": {{ 0 - $.n }}}\n```\n")
	res := run(t, engine.New(engine.Config{}), compile(t, src), `{"n":9007199254740993}`)
	want := `{"neg":-9007199254740993,"sub":-9007199254740993}`
	if res.Status != 200 || string(res.Body) != want {
		t.Errorf("answer %d %s; want 200 %s", res.Status, res.Body, want)
	}
}

// TestSaveBodyOfNullKeepsTheVariable: save_body of a step whose document is
// a JSON null sets the variable to null; it removed it.
func TestSaveBodyOfNullKeepsTheVariable(t *testing.T) {
	src := flowSource("save-null", "", `
## Step: first
save_body: prev
`+"```ntd\nnull\n```"+`

## Step: second
`+"```ntd\n{\"saved\": {{ \"prev\" in ctx }}}\n```"+`
`)
	res := run(t, engine.New(engine.Config{}), compile(t, src), `{"orderId":"A-1"}`)
	if res.Status != 200 || string(res.Body) != `{"saved":true}` {
		t.Errorf("answer %d %s, want 200 {\"saved\":true}: the saved null was deleted from ctx", res.Status, res.Body)
	}
}

// TestNullAnswerKeepsHTTPResponseBody: a downstream answering null sets
// ctx.HTTP_RESPONSE_BODY to null; it removed it.
func TestNullAnswerKeepsHTTPResponseBody(t *testing.T) {
	first := newBackend(t, answer(200, "application/json", `null`))
	src := flowSource("null-answer", "", `
## Step: lookup
effects: [http_egress]
endpoint: FIRST/stock
method: GET

## Step: check
`+"```ntd\n{\"kept\": {{ \"HTTP_RESPONSE_BODY\" in ctx }}}\n```"+`
`)
	f := compile(t, src, "FIRST", first.URL)
	res := run(t, engine.New(engine.Config{}), f, `{"sku":"S-1"}`)
	if res.Status != 200 || string(res.Body) != `{"kept":true}` {
		t.Errorf("answer %d %s, want 200 {\"kept\":true}: the null answer was deleted from ctx", res.Status, res.Body)
	}
}
