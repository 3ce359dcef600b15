package engine_test

import (
	"net/http"
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// A 503 the flow answers on purpose is not recorded for its dedup key,
// whether the main sequence or a fault handler declares it and under
// either dedup_on_failure: flow-file.md, Precise answers, "every finished
// execution commits its row except 500 `internal error` and 503". The 500
// is qualified by its body, the 503 is not: a flow answering 503 says
// "not now, try again", and a recorded 503 would answer every retry of
// the key with it (under absorb, or as a recorded success) though the
// flow asked for one. A 500 the flow declares is not the platform's
// internal error: it is recorded, as any finished execution.
func TestDedupDeliberateStatuses(t *testing.T) {
	const mainStatus = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
response_status: STATUS
`
	const faultStatus = `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest

## Step: check
~~~validate
$.ok == true | "not ok"
~~~

## Fault: answer
response_status: STATUS
~~~ntd
{"error": "{{ $.fault_error }}"}
~~~
`
	for _, c := range []struct {
		name, body, status, onFailure string
		recorded                      bool
	}{
		{"503 from the main sequence, rerun", mainStatus, "503", "rerun", false},
		{"503 from the main sequence, absorb", mainStatus, "503", "absorb", false},
		{"503 from a fault handler, rerun", faultStatus, "503", "rerun", false},
		{"503 from a fault handler, absorb", faultStatus, "503", "absorb", false},
		{"500 from the main sequence", mainStatus, "500", "rerun", true},
		{"500 from a fault handler, absorb", faultStatus, "500", "absorb", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(200, "application/json", `{"ok":false}`))
			front := "dedup_key: \"{{ $.orderId }}\"\ndedup_on_failure: " + c.onFailure + "\n"
			f := compile(t, flowSource("dedup-deliberate", front, c.body), "BACKEND", b.URL, "STATUS", c.status)
			e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
			first := run(t, e, f, `{"orderId":"A-1"}`)
			if want := map[string]int{"503": 503, "500": 500}[c.status]; first.Status != want || first.Replay {
				t.Fatalf("first delivery answered %d (replay %v) %s; want %d", first.Status, first.Replay, first.Body, want)
			}
			second := run(t, e, f, `{"orderId":"A-1"}`, func(r *engine.Request) { r.CorrelationID = "c-2" })
			if second.Replay != c.recorded {
				t.Errorf("second delivery: replay %v, want %v (%d %s)", second.Replay, c.recorded, second.Status, second.Body)
			}
			calls := int64(2)
			if c.recorded {
				calls = 1
				if second.Status != first.Status || second.Header.Get(engine.HeaderReplay) != "true" {
					t.Errorf("replay answered %d %v; want %d with %s", second.Status, second.Header, first.Status, engine.HeaderReplay)
				}
			} else if second.Status != http.StatusServiceUnavailable {
				t.Errorf("second delivery answered %d %s; want the flow's 503 again", second.Status, second.Body)
			}
			if n := b.calls.Load(); n != calls {
				t.Errorf("backend called %d times, want %d", n, calls)
			}
		})
	}
}
