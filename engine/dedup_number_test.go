package engine_test

import (
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// A dedup key rendered from a number no float64 holds is its value, as
// every other number's is (100, 100.0 and 1e2 are one key): the same id,
// sent again as 12345678901234567890.0 or 1.2345678901234567890e19, is a
// duplicate.
func TestDedupKeyOfALongNumberIsItsValue(t *testing.T) {
	src := flowSource("dedup-exact", "dedup_key: \"order-{{ $.id }}\"\n", `
## Step: answer
~~~ntd
{"id": {{ $.id }}}
~~~
`)
	f := compile(t, src)
	e := engine.New(engine.Config{Dedup: &enginetest.Dedup{}})
	first := run(t, e, f, `{"id":12345678901234567890}`)
	if first.Outcome != engine.Succeeded {
		t.Fatalf("first: %v (%v)", first.Outcome, first.Err)
	}
	for _, again := range []string{`{"id":12345678901234567890.0}`, `{"id":1.2345678901234567890e19}`} {
		res := run(t, e, f, again, func(r *engine.Request) { r.CorrelationID = "c-2" })
		if !res.Replay {
			t.Errorf("%s after {\"id\":12345678901234567890}: ran again (%s), want the recorded answer", again, res.Body)
		}
	}
	// the control: an int and a float of the same value are one key
	run(t, e, f, `{"id":100}`)
	if res := run(t, e, f, `{"id":1e2}`, func(r *engine.Request) { r.CorrelationID = "c-3" }); !res.Replay {
		t.Errorf("{\"id\":1e2} after {\"id\":100}: ran again")
	}
}
