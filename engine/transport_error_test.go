package engine_test

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// unread stands for the message of a call whose answer could not be read.
const unread = "(unread)"

// rawBackend answers every connection with reply, whatever it is asked,
// then closes it.
func rawBackend(t *testing.T, reply string) string {
	return scriptedBackend(t, reply, false)
}

// resetBackend answers every connection with reply, then resets it (an
// RST, not a FIN): the body's read ends with "connection reset by peer".
func resetBackend(t *testing.T, reply string) string {
	return scriptedBackend(t, reply, true)
}

// scriptedBackend answers every connection with reply once it has read the
// request's head, then closes it, with an RST when reset.
func scriptedBackend(t *testing.T, reply string, reset bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for { // the request's head
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				c.Write([]byte(reply))
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestTransportErrorNeverQuotesTheDownstream: an answer net/http cannot
// read as HTTP fails the call in the platform's words; Go's own error
// quotes what the downstream sent (`malformed HTTP status code "IS"`, a
// header line), and reached the caller through $.fault_error. A
// connection closed without an answer keeps Go's text, which is the
// platform's.
func TestTransportErrorNeverQuotesTheDownstream(t *testing.T) {
	for _, c := range []struct {
		name, reply, want string
	}{
		{"not HTTP", "THIS IS " + secret + "\r\n\r\n", unread},
		{"a bad status code", "HTTP/1.1 2" + secret + " OK\r\n\r\n", unread},
		{"a bad header line", "HTTP/1.1 200 OK\r\n" + secret + "\r\nContent-Length: 0\r\n\r\n", unread},
		{"a bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: " + secret + "\r\n\r\n", unread},
		{"closed without an answer", "", "EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := rawBackend(t, c.reply)
			src := flowSource("raw", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n"+handlerSection)
			res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", addr), `{}`)
			if res.Status != 502 || res.Err == nil {
				t.Fatalf("got %d %s, want 502 and the call's failure", res.Status, res.Body)
			}
			want := c.want
			if want == unread {
				want = "the downstream's answer could not be read (the log has why)"
			}
			wantErr := `effect handler failed: Post "` + addr + `/ingest": ` + want
			if got := res.Err.Error(); got != "step 'forward': "+wantErr {
				t.Errorf("error %q, want %q", got, "step 'forward': "+wantErr)
			}
			if strings.Contains(string(res.Body), secret) || !strings.Contains(string(res.Body), want) {
				t.Errorf("the handler's answer %s: want %q in it and nothing the downstream sent", res.Body, want)
			}
			// Go's own text, for the log alone
			if c.want == unread && !strings.HasPrefix(res.Err.Detail, `Post "`+addr+`/ingest": net/http: HTTP/1.x transport connection broken: `) {
				t.Errorf("Detail %q: want Go's text, which quotes the answer, for the log", res.Err.Detail)
			}
			if c.want != unread && res.Err.Detail != "" {
				t.Errorf("Detail %q: want none (the message is Go's text)", res.Err.Detail)
			}
		})
	}
}

// TestBodyReadErrorNeverQuotesTheDownstream: an answer whose head was read
// but whose body could not be fails the call in the platform's words too;
// Go's text for a chunked body's malformed trailer quotes the line the
// downstream sent, and reached the caller through $.fault_error. A body
// cut short keeps Go's text, which is the platform's.
func TestBodyReadErrorNeverQuotesTheDownstream(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	for _, c := range []struct {
		name, reply, want, detail string
	}{
		{"a malformed trailer", head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + secret + "\r\n\r\n",
			"the body from HOST could not be read (the log has why)", "reading the answer: malformed MIME header"},
		{"a body cut short", head + "Content-Length: 10\r\n\r\n{}", "unexpected EOF", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := rawBackend(t, c.reply)
			src := flowSource("raw", "", "\n## Step: forward\neffects: [http_egress]\nendpoint: BACKEND/ingest\n"+handlerSection)
			res := run(t, engine.New(engine.Config{}), compile(t, src, "BACKEND", addr), `{}`)
			if res.Status != 502 || res.Err == nil {
				t.Fatalf("got %d %s, want 502 and the call's failure", res.Status, res.Body)
			}
			want := "reading the answer: " + strings.Replace(c.want, "HOST", strings.TrimPrefix(addr, "http://"), 1)
			if got := res.Err.Error(); got != "step 'forward': effect handler failed: "+want {
				t.Errorf("error %q, want %q", got, "step 'forward': effect handler failed: "+want)
			}
			if strings.Contains(string(res.Body), secret) || !strings.Contains(string(res.Body), want) {
				t.Errorf("the handler's answer %s: want %q in it and nothing the downstream sent", res.Body, want)
			}
			if !strings.HasPrefix(res.Err.Detail, c.detail) || (c.detail == "") != (res.Err.Detail == "") {
				t.Errorf("Detail %q: want %q (Go's text, for the log alone)", res.Err.Detail, c.detail)
			}
		})
	}
}
