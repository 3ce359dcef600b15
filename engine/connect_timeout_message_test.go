package engine_test

import (
	"net"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// stallingTLS returns the address of a listener that accepts connections
// and never says a word: a TLS handshake with it stalls.
func stallingTLS(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c // hold it open, say nothing
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	return l.Addr().String()
}

// A call that has no connection within connect_timeout_ms fails with one
// text, however the connecting failed: the dial timed out (a host that
// drops packets) or the TLS handshake did (a host that never answers the
// ClientHello). The dialer's and the handshake's own timeouts, which fire
// at the same moment as the step's, made Go's text of them ("dial tcp …:
// i/o timeout", "context deadline exceeded") the message as often as not.
func TestConnectTimeoutHasOneMessage(t *testing.T) {
	for _, c := range []struct {
		name   string
		scheme string
		addr   func(*testing.T) string
		ms     string
	}{
		{"the dial", "http", blackhole, "100"},
		{"the TLS handshake", "https", stallingTLS, "100"},
		{"the dial, a short timeout", "http", blackhole, "20"},
		{"the TLS handshake, a short timeout", "https", stallingTLS, "20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := c.addr(t)
			src := flowSource("connect-timeout", "timeout_ms: 10000\n", `
## Step: forward
effects: [http_egress]
endpoint: SCHEME://ADDR/ingest
connect_timeout_ms: MS
read_timeout_ms: 5000
`)
			f := compile(t, src, "SCHEME", c.scheme, "ADDR", addr, "MS", c.ms)
			e := engine.New(engine.Config{})
			want := "step 'forward': effect handler failed: no connection to " + addr + " within connect_timeout_ms (" + c.ms + " ms)"
			for i := range 8 { // the timeouts race: one run may be lucky
				res := run(t, e, f, `{}`)
				if res.Status != 502 || res.Err == nil || res.Err.Kind != engine.KindEffect || res.Err.Error() != want {
					t.Fatalf("call %d: %d %v (%v); want 502 %q", i+1, res.Status, res.Err, viewOf(res).ErrKind, want)
				}
			}
		})
	}
}
