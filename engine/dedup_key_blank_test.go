package engine_test

import (
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// A dedup_key whose holes all render blank is the template's literal text
// alone ("order-" for every message without an id): it answers the status
// table's 400, as a key that renders empty does, rather than making
// unrelated messages duplicates of each other.
func TestDedupKeyOfBlankHolesProducedNothing(t *testing.T) {
	src := flowSource("dedup-blank", "dedup_key: \"order-{{ $.id }}-{{ $.line }}\"\n", `
## Step: answer
~~~ntd
{"seen": {{ $ }}}
~~~
`)
	nothing := view{Status: 400, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"dedup_key produced nothing from this message"}`,
		Outcome: engine.Failed, Err: "dedup_key produced nothing from this message", ErrKind: engine.KindDedupKey}
	tests := []struct {
		name string
		doc  string
		want view
	}{
		{"no id, no line", `{"other":1}`, nothing},
		{"null id, blank line", `{"id":null,"line":"  "}`, nothing},
		{"empty id", `{"id":""}`, nothing},
		{"an id", `{"id":"A-1"}`, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"seen":{"id":"A-1"}}`, Outcome: engine.Succeeded}},
		{"a line alone", `{"line":2}`, view{Status: 200, Header: jsonHdr("c-1"), Body: `{"seen":{"line":2}}`, Outcome: engine.Succeeded}},
	}
	f := compile(t, src)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &enginetest.Dedup{}
			e := engine.New(engine.Config{Dedup: store})
			checkView(t, run(t, e, f, tt.doc), tt.want)
			// again: a key of blank holes was never recorded, so the
			// second message is not a replay of the first
			checkView(t, run(t, e, f, `{"unrelated":true}`), nothing)
		})
	}
}
