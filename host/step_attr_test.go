package host_test

import (
	"net/http"
	"testing"
)

// TestFailureLineNamesAStepOnlyWhenThereIsOne: run_completed of a failure
// no step made (a dedup_key that renders nothing, checked before the
// first step) has no step attribute; one a step made names it. The line
// carried "step":"" for the first.
func TestFailureLineNamesAStepOnlyWhenThereIsOne(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	files := adminFlows()
	files["flows/acme/keyed.md"] = flowFile("acme", "keyed", "effects: [http_egress]\ndedup_key: \"{{ $.id }}\"\n",
		"## Step: call\neffects: [http_egress]\nendpoint: http://127.0.0.1:1/x\n")
	files["flows/acme/guarded.md"] = flowFile("acme", "guarded", "",
		"## Step: check\n```validate\n$.orderId != null | \"orderId is required\"\n```\n")
	fx.publish(files, testAccessYAML(), "c2")
	for _, tc := range []struct {
		flow, cid string
		status    int
		step      any // nil: no step attribute
	}{
		{"keyed", "no-step", http.StatusBadRequest, nil},
		{"guarded", "step-check", http.StatusUnprocessableEntity, "check"},
	} {
		w := fx.serve(runRequest("acme", tc.flow, keyAcmeAll, `{}`, "X-Correlation-ID", tc.cid))
		if w.Code != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.flow, w.Code, w.Body, tc.status)
		}
		var line map[string]any
		for _, ev := range fx.logs.Events(t, "run_completed") {
			if ev["correlation_id"] == tc.cid {
				line = ev
			}
		}
		if line == nil {
			t.Fatalf("%s: no run_completed line of %s in\n%s", tc.flow, tc.cid, fx.logs.String())
		}
		step, ok := line["step"]
		if tc.step == nil && ok || tc.step != nil && step != tc.step {
			t.Errorf("%s: run_completed %v, want step %v (nil: none)", tc.flow, line, tc.step)
		}
	}
}
