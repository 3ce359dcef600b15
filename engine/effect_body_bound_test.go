package engine_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/engine/enginetest"
)

// What queue_publish and http_egress send is written under the document's
// bound, its escapes counted: a render counts a string's bytes, and a
// string of control characters takes six times as many written (\u0001).
// A step whose message or request body would pass the bound fails as a
// defect naming the step and the limit, and nothing is sent: 12 MiB was
// published or posted under a bound of 10 MiB.
func TestEffectBodiesAreWrittenUnderTheBound(t *testing.T) {
	// 1 MiB of U+0001, sent as 6 MiB of \u0001; the step before the effect
	// holds it twice: 2 MiB counted, 12 MiB written
	doc := `{"text":"` + strings.Repeat(`\u0001`, 1<<20) + `"}`
	const twice = "\n## Step: twice\n~~~ntd\n{\"a\": \"{{ $.text }}\", \"b\": \"{{ $.text }}\"}\n~~~\n"
	for _, c := range []struct {
		name, step, want string
	}{
		{"queue_publish", "\n## Step: hand-off\neffects: [queue_publish]\nqueue: order-fulfilment\n",
			"step 'hand-off': message: the document is larger than the limit of 10485760 bytes"},
		{"http_egress", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n",
			"step 'forward': request body: the document is larger than the limit of 10485760 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t, answer(200, "application/json", `{"ok":true}`))
			pub := &enginetest.Publisher{}
			f := compile(t, flowSource("fanout", "", twice+c.step), "BACKEND", b.URL)
			res := run(t, engine.New(engine.Config{Publisher: pub}), f, doc)
			checkView(t, res, view{Status: 500, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`,
				Outcome: engine.Failed, Err: c.want, ErrKind: engine.KindDefect})
			if m := pub.Messages(); len(m) != 0 {
				t.Errorf("%d messages published, of %d bytes first; want none", len(m), len(m[0].Payload))
			}
			if r := b.requests(); len(r) != 0 {
				t.Errorf("%d requests made, of %d bytes first; want none", len(r), len(r[0].Body))
			}
		})
	}
	// a body under the bound is sent whole, its escapes written
	t.Run("under the bound", func(t *testing.T) {
		b := newBackend(t, answer(200, "application/json", `{"ok":true}`))
		small := `{"text":"` + strings.Repeat(`\u0001`, 1000) + `"}`
		pub := &enginetest.Publisher{}
		f := compile(t, flowSource("fanout", "", twice+
			"\n## Step: hand-off\neffects: [queue_publish]\nqueue: order-fulfilment\n"+
			"\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n"), "BACKEND", b.URL)
		if res := run(t, engine.New(engine.Config{Publisher: pub}), f, small); res.Status != http.StatusOK {
			t.Fatalf("status %d: %v", res.Status, res.Err)
		}
		want := `{"a":"` + strings.Repeat(`\u0001`, 1000) + `","b":"` + strings.Repeat(`\u0001`, 1000) + `"}`
		if m := pub.Messages(); len(m) != 1 || m[0].Payload != want {
			t.Errorf("published %d messages, want one of %d bytes", len(m), len(want))
		}
		if r := b.requests(); len(r) != 1 || r[0].Body != want {
			t.Errorf("%d requests, want one with a body of %d bytes", len(r), len(want))
		}
	})
}
