package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nexushq/nexus/flow"
)

// firesAtStop is a timer that fires just as it is stopped: its function
// runs, then Stop reports it too late.
type firesAtStop struct{ f func() }

func (t firesAtStop) Stop() bool {
	t.f()
	return false
}

// A connect timer that fires just as the connection arrives, once the
// call has it, does not end the call: the call is answered. The timer
// cancelled the call whatever came first, and the step failed with "no
// connection within connect_timeout_ms" though it had one.
func TestConnectTimerFiringAsTheConnectionArrives(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	const connect = 7 * time.Second // the connect timer's: the read timer is 9 s
	orig := afterFunc
	t.Cleanup(func() { afterFunc = orig })
	afterFunc = func(d time.Duration, f func()) stopper {
		if d == connect {
			return firesAtStop{f}
		}
		return time.AfterFunc(d, f)
	}
	f, err := flow.Compile("race.md", []byte(`---
flowmarkdown_version: "0.1"
flow: race
tenant: acme
effects: [http_egress]
---

## Step: call
effects: [http_egress]
endpoint: `+srv.URL+`/x
connect_timeout_ms: 7000
read_timeout_ms: 9000
`))
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{})
	res := e.Run(context.Background(), Request{Flow: f, Doc: flow.NewObject(nil, nil), CorrelationID: "c-1", Door: DoorRun})
	if res.Status != 200 || string(res.Body) != `{"ok":true}` || res.Err != nil {
		t.Errorf("got %d %s, %v; want 200 {\"ok\":true}", res.Status, res.Body, res.Err)
	}
}
