package host_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDoors sends the whole handler (router, gate, body reader, parser,
// engine) requests with arbitrary names, doors, keys, content types and
// bodies. Whatever comes, it does not panic, it never answers 500 (the
// fixture's flows cannot fail inside), every answer carries an
// X-Correlation-ID, and every JSON answer of 400 or more holds a one-line
// error ({"ok":false,"error":…} from the door, or a flow's own answer).
func FuzzDoors(f *testing.F) {
	fx := newFixture(f, nil)
	f.Add("POST", "acme", "hello", "run", 0, "application/json", `{"name":"Ada"}`)
	f.Add("POST", "acme", "echo", "run", 0, "application/json; charset=utf-8", `{"a":[1,2,{"b":null}]}`)
	f.Add("POST", "acme", "echo", "run", 0, "application/xml", `<a x="1"><b>2</b></a>`)
	f.Add("POST", "acme", "small", "run", 0, "application/json", `{"far":"too long for sixteen bytes"}`)
	f.Add("POST", "globex", "shipment", "run", 1, "application/json", `{}`)
	f.Add("GET", "acme", "echo", "run", 0, "application/json", `{}`)
	f.Add("POST", "..", "%2e%2e", "run", 2, "text/csv", "a,b")
	f.Add("POST", "acme", "echo", "run", 0, "application/json", `{"a":1,"a":2}`)
	f.Add("POST", "Acme", "echo", "enqueue", 3, "", "\xff")
	f.Add("POST", "0", "%0A", "0", 0, "", "") // a 404 echoing a path with a line break
	keys := []string{keyAcmeAll, keyGlobex, keyRevoked, ""}
	f.Fuzz(func(t *testing.T, method, tenant, flowName, door string, key int, contentType, body string) {
		r, err := http.NewRequest(method, "http://nexus.test/flows/"+tenant+"/"+flowName+"/"+door, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if k := keys[(key%len(keys)+len(keys))%len(keys)]; k != "" {
			r.Header.Set("Authorization", "Bearer "+k)
		}
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		fx.handler.ServeHTTP(w, r)
		if w.Code == http.StatusInternalServerError {
			t.Fatalf("%s %s (%q, %q): 500 %s", method, r.URL.Path, contentType, body, w.Body)
		}
		if w.Header().Get("X-Correlation-ID") == "" {
			t.Errorf("%s %s: %d without X-Correlation-ID", method, r.URL.Path, w.Code)
		}
		if w.Code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
			// a refusal of the door, or a flow's own failure answer (a
			// validate rule's {"error":…,"step":…}): an error on one line,
			// and ok false when there is an ok
			var answer struct {
				OK    *bool  `json:"ok"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || (answer.OK != nil && *answer.OK) || answer.Error == "" || strings.ContainsAny(answer.Error, "\n\r") {
				t.Errorf("%s %s: %d %q, want an answer with an error on one line (and \"ok\":false)", method, r.URL.Path, w.Code, w.Body)
			}
		}
	})
}
