package engine_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
)

// TestHTTPSCallsKeepTheirProtocols: the transport makes its own TLS
// handshakes (NewTransport's DialTLSContext), with the TLS settings it is
// given, and still speaks HTTP/2 to a backend that offers it and HTTP/1.1
// to one that does not.
func TestHTTPSCallsKeepTheirProtocols(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		var mu sync.Mutex
		var protos []string
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			protos = append(protos, r.Proto)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
		}))
		s.EnableHTTP2 = h2
		s.StartTLS()
		t.Cleanup(s.Close)
		tr := engine.NewTransport()
		tr.TLSClientConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone() // trusts the test's certificate
		e := engine.New(engine.Config{Transport: tr})
		f := compile(t, flowSource("tls", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n"), "BACKEND", s.URL)
		for range 2 {
			if res := run(t, e, f, `{}`); res.Status != 200 || string(res.Body) != `{"ok":true}` {
				t.Fatalf("HTTP/2 offered %v: answer %d %s (err %v)", h2, res.Status, res.Body, res.Err)
			}
		}
		want := []string{"HTTP/1.1", "HTTP/1.1"}
		if h2 {
			want = []string{"HTTP/2.0", "HTTP/2.0"}
		}
		mu.Lock()
		if diff := cmp.Diff(want, protos); diff != "" {
			t.Errorf("HTTP/2 offered %v: the protocols of the calls (-want +got):\n%s", h2, diff)
		}
		mu.Unlock()
	}
}

// TestConnectTimeoutEndsTheHandshake: connect_timeout_ms bounds the TLS
// handshake of the connection itself, not only the call's wait for it.
// net/http dials on a context the call does not cancel, so a handshake a
// call gave up on ran on to the transport's TLSHandshakeTimeout (10 s): a
// socket and a goroutine held for each call to a backend that stalls its
// handshakes (every call dials anew, none finding an idle connection).
func TestConnectTimeoutEndsTheHandshake(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() { // accepts, never answers the ClientHello, notices the hang-up
				defer wg.Done()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				mu.Lock()
				delete(open, c)
				mu.Unlock()
				c.Close()
			}()
		}
	}()
	f := compile(t, flowSource("tls-stall", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: https://ADDR/ingest\nconnect_timeout_ms: 100\n"), "ADDR", l.Addr().String())
	e := engine.New(engine.Config{})
	const calls = 10
	for range calls {
		if res := run(t, e, f, `{}`); res.Status != 502 {
			t.Fatalf("answer %d %s (err %v), want the 502 of connect_timeout_ms", res.Status, res.Body, res.Err)
		}
	}
	// the last handshake began 100 ms before the last call gave up; 5 s
	// is half the transport's TLSHandshakeTimeout
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(open)
		mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls gave up at connect_timeout_ms 100; 5 s after the last, %d of their connections are still open, their handshakes running on", calls, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCertificateNamesStayInTheLog: a call refused for its backend's
// certificate fails with the platform's words; Go's text, which names what
// the certificate holds (written by the downstream's operator: here the
// test certificate's example.com names), is for the log alone, and a
// fault handler's $.fault_error passed it to the caller.
func TestCertificateNamesStayInTheLog(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(s.Close)
	tr := engine.NewTransport()
	tr.TLSClientConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	// localhost: a name the certificate (127.0.0.1, example.com) does not hold
	endpoint := "https://localhost:" + s.URL[strings.LastIndexByte(s.URL, ':')+1:]
	f := compile(t, flowSource("cert", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n\n## Fault: report\n```ntd\n{\"err\": \"{{ $.fault_error }}\"}\n```\n"), "BACKEND", endpoint)
	res := run(t, engine.New(engine.Config{Transport: tr}), f, `{}`)
	if res.Err == nil {
		t.Fatalf("answer %d %s: the call was not refused", res.Status, res.Body)
	}
	if strings.Contains(string(res.Body), "example.com") || strings.Contains(res.Err.Msg, "example.com") {
		t.Errorf("the certificate's names reach the caller: answer %s, error %q", res.Body, res.Err.Msg)
	}
	if !strings.Contains(string(res.Body), "TLS certificate was not accepted") {
		t.Errorf("answer %s; want $.fault_error to say the certificate was not accepted", res.Body)
	}
	if !strings.Contains(res.Err.Detail, "example.com") {
		t.Errorf("the log's detail %q does not say why (the names the certificate holds)", res.Err.Detail)
	}
}
