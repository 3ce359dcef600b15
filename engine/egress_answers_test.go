package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nexushq/nexus/engine"
)

// TestHTTPEgressSwitchingProtocolsIsAFailedAnswer: a backend that answers
// 101 Switching Protocols (to a call that asked for no upgrade) fails the
// step with its status at once. net/http hands the connection itself over
// as the answer's body, which neither read_timeout_ms nor the flow's
// ceiling ends: reading it held the execution, its worker and the
// connection for as long as the backend kept the connection open.
func TestHTTPEgressSwitchingProtocolsIsAFailedAnswer(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(http.StatusSwitchingProtocols)
		// the server keeps the connection open for a next request
	})
	f := compile(t, flowSource("upgrade", "timeout_ms: 2000\n", `
## Step: forward
effects: [http_egress]
endpoint: BACKEND/ingest
read_timeout_ms: 1000
`), "BACKEND", b.URL)
	done := make(chan engine.Result, 1)
	req := newRequest(t, f, `{}`)
	go func() { done <- engine.New(engine.Config{}).Run(context.Background(), req) }()
	select {
	case res := <-done:
		checkView(t, res, view{Status: 502, Header: jsonHdr("c-1"), Body: `{"ok":false,"error":"flow execution failed"}`, Outcome: engine.Failed,
			Err: "step 'forward': effect handler failed: HTTP 101 Switching Protocols", ErrKind: engine.KindEffect})
	case <-time.After(30 * time.Second):
		// far past read_timeout_ms and the ceiling: the call never ended
		t.Fatal("the call answered 101 did not end within read_timeout_ms or the flow's ceiling")
	}
}
