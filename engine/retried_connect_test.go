package engine_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// firstConnOnly hands its server the first connection it accepts; the
// ones after are held open and never spoken to, so a TLS handshake on
// them stalls.
type firstConnOnly struct {
	net.Listener
	mu     sync.Mutex
	served bool
	held   []net.Conn
}

func (l *firstConnOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if !l.served {
			l.served = true
			l.mu.Unlock()
			return c, nil
		}
		l.held = append(l.held, c)
		l.mu.Unlock()
	}
}

func (l *firstConnOnly) closeHeld() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.held {
		c.Close()
	}
}

// reusedThenStalling starts an HTTPS backend that answers the first request
// on its one connection, keeps that connection alive, and hangs up on the
// next request without answering: net/http retries a GET that fails so on
// a reused connection, and the retry's new connection stalls in the TLS
// handshake. It returns the backend's address and an engine trusting it.
func reusedThenStalling(t *testing.T) (string, *engine.Engine) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &firstConnOnly{Listener: inner}
	var calls atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijacking the second request's connection: %v", err)
			return
		}
		c.Close() // read, never answered
	}))
	s.Listener.Close()
	s.Listener = l
	s.StartTLS()
	t.Cleanup(func() {
		s.Close()
		l.closeHeld()
	})
	tr := engine.NewTransport()
	tr.TLSClientConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone() // trusts the test's certificate
	return inner.Addr().String(), engine.New(engine.Config{Transport: tr})
}

// A call net/http retries on a new connection (a GET whose reused idle
// connection failed before the answer) starts over: connect_timeout_ms
// bounds the new connection, and read_timeout_ms runs from when it is
// had. The read timer started on the failed connection ran on through
// the retry's dial, and the retry, counted as connected, fell through to
// the transport's text: a retry stalled in its TLS handshake failed with
// "no answer ... within read_timeout_ms", or Go's text of the handshake's
// timeout, instead of the connect timeout's one text.
func TestRetriedCallConnectsWithinConnectTimeout(t *testing.T) {
	for _, c := range []struct {
		name          string
		connect, read string
		runs          int
	}{
		// the read timer of the failed connection fires first
		{"read timeout shorter", "400", "100", 1},
		// the handshake's own timeout fires at the same moment as the
		// step's: whichever came first, one text
		{"connect timeout short", "20", "5000", 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.runs {
				addr, e := reusedThenStalling(t)
				src := flowSource("retried-connect", "timeout_ms: 10000\n", `
## Step: fetch
effects: [http_egress]
endpoint: https://ADDR/item
method: GET
connect_timeout_ms: CONNECT
read_timeout_ms: READ
`)
				// the connection is had within a generous bound (a
				// handshake under the race detector can take 20 ms), and
				// kept for the call under test
				warm := compile(t, src, "ADDR", addr, "CONNECT", "5000", "READ", "5000")
				f := compile(t, src, "ADDR", addr, "CONNECT", c.connect, "READ", c.read)
				if res := run(t, e, warm, `{}`); res.Status != 200 || string(res.Body) != `{"ok":true}` {
					t.Fatalf("run %d, first call: answer %d %s (err %v), want 200", i+1, res.Status, res.Body, res.Err)
				}
				want := "step 'fetch': effect handler failed: no connection to " + addr + " within connect_timeout_ms (" + c.connect + " ms)"
				res := run(t, e, f, `{}`)
				if res.Status != 502 || res.Err == nil || res.Err.Kind != engine.KindEffect || res.Err.Error() != want {
					t.Fatalf("run %d, retried call: %d %v (%v); want 502 %q", i+1, res.Status, res.Err, viewOf(res).ErrKind, want)
				}
			}
		})
	}
}
