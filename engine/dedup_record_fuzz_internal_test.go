package engine

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDedupRecord decodes arbitrary bytes as a recorded answer (the dedup
// row a registry keeps, which a later version reads): no panic, a record
// that decodes has a status the HTTP door can write, and it re-encodes to
// bytes that decode to the same record and re-encode to themselves.
func FuzzDedupRecord(f *testing.F) {
	for _, rec := range []record{
		{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`), Outcome: Succeeded},
		{Status: 502, Outcome: Failed, Message: "acme/orders/7"},
		{Status: 204, Header: http.Header{}, Outcome: Filtered},
	} {
		b, err := json.Marshal(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"status":0}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		if rec.Status < 100 || rec.Status > 599 {
			t.Fatalf("%q decodes with status %d", b, rec.Status)
		}
		enc, err := json.Marshal(rec)
		if err != nil {
			t.Fatalf("%q decodes as %+v, which does not encode: %v", b, rec, err)
		}
		again, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("%q decodes as %+v, which encoded as %s does not decode: %v", b, rec, enc, err)
		}
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("%q re-encoded as %s decodes otherwise (-first +again):\n%s", b, enc, diff)
		}
		if enc2, _ := json.Marshal(again); string(enc2) != string(enc) {
			t.Fatalf("%s re-encodes as %s", enc, enc2)
		}
	})
}
