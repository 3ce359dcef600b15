package host_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexushq/nexus/host"
)

// TestMaxRuns: with MaxRuns /run executions in progress, one more is
// refused before its body is read (503, Retry-After: 1, the correlation
// ID, the connection closed), counted and shown in
// nexus_runs_in_progress, and once a run ends the next is taken. Without
// a limit the callers of a slow flow held the host's memory without a
// bound.
func TestMaxRuns(t *testing.T) {
	be := newHeldBackend(t)
	fx := newFixture(t, func(c *host.Config) { c.MaxRuns = 2 })
	files := testFlows()
	files["flows/acme/forward.md"] = flowFile("acme", "forward", "effects: [http_egress]\n",
		"## Step: forward\neffects: [http_egress]\nendpoint: "+be.URL+"/ingest\nmethod: POST\n")
	fx.publish(files, testAccessYAML(), "c2")

	var wg sync.WaitGroup
	answers := make([]int, 2)
	for i := range answers {
		wg.Go(func() { answers[i] = fx.serve(runRequest("acme", "forward", keyAcmeAll, `{"orderId":"A-1"}`)).Code })
	}
	deadline := time.Now().Add(10 * time.Second)
	for be.calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 runs reached the backend", be.calls.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if text := fx.serve(newRequest(http.MethodGet, "/metrics", "")).Body.String(); !strings.Contains(text, "\nnexus_runs_in_progress 2\n") {
		t.Errorf("/metrics does not show the 2 runs in progress:\n%s", grepLines(text, "nexus_runs"))
	}

	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`, "X-Correlation-ID", "third-run"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || w.Header().Get("X-Correlation-Id") != "third-run" ||
		w.Header().Get("Connection") != "close" ||
		w.Body.String() != `{"ok":false,"error":"too many runs in progress (at most 2): try again"}` {
		t.Errorf("a third run: %d %v %s", w.Code, w.Header(), w.Body)
	}
	// the gate still answers first: a wrong key is a 401, not a 503
	if w := fx.serve(runRequest("acme", "echo", "no-such-key", `{}`)); w.Code != http.StatusUnauthorized {
		t.Errorf("a wrong key while the runs are taken: %d %s", w.Code, w.Body)
	}

	be.free()
	wg.Wait()
	if answers[0] != 200 || answers[1] != 200 {
		t.Errorf("the two runs answered %v, want 200 both", answers)
	}
	if w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)); w.Code != http.StatusOK {
		t.Errorf("a run once the others ended: %d %s", w.Code, w.Body)
	}
	text := fx.serve(newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, want := range []string{"\nnexus_runs_in_progress 0\n", "\nnexus_requests_total{door=\"run\",status=\"503\"} 1\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %q:\n%s", strings.TrimSpace(want), grepLines(text, "nexus_r"))
		}
	}
}

// grepLines is the lines of text that hold s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
