package host_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/host"
)

// TestPlatformAnswersNetHTTPRefusals: the refusals net/http writes itself,
// before any handler, go out through host.PlatformAnswers as the platform's
// JSON with a correlation ID (server.md: every answer carries
// X-Correlation-ID), the connection closed after them; net/http wrote
// plain text without one. Answers of the handlers, pipelined ones
// included, pass unchanged, and so do bytes a handler writes on a
// hijacked connection that look like net/http's refusal.
func TestPlatformAnswersNetHTTPRefusals(t *testing.T) {
	fx := newFixture(t, nil)
	const canned = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	mux := http.NewServeMux()
	mux.HandleFunc("POST /raw", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		io.WriteString(c, canned)
		c.Close()
	})
	mux.Handle("/", fx.handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.MaxHeaderBytes = 64 << 10
	srv.Listener = host.PlatformAnswers(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)

	type answer struct {
		Status     string
		Type       string
		Correlated bool
		Close      bool
		Body       string
	}
	refusal := func(status, msg string) []answer {
		return []answer{{status, "application/json", true, true, `{"ok":false,"error":"` + msg + `"}`}}
	}
	echo := answer{"200 OK", "application/json", true, false, `{"n":1}`}
	const run = "POST /flows/acme/echo/run HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer " + keyAcmeAll + "\r\n"
	for _, tc := range []struct {
		name, request string
		want          []answer
	}{
		{"headers over the limit", run + "X-Pad: " + strings.Repeat("a", 70<<10) + "\r\nContent-Length: 2\r\n\r\n{}",
			refusal("431 Request Header Fields Too Large", "431 Request Header Fields Too Large")},
		{"unknown transfer coding", run + "Transfer-Encoding: gzip\r\n\r\n", refusal("501 Not Implemented", "Unsupported transfer encoding")},
		{"two Content-Lengths", run + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", refusal("400 Bad Request", "400 Bad Request")},
		{"no Host", "POST /flows/acme/echo/run HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
			refusal("400 Bad Request", "400 Bad Request: missing required Host header")},
		{"pipelined, then headers over the limit", run + "Content-Length: 7\r\n\r\n{\"n\":1}" + run + "X-Pad: " + strings.Repeat("a", 100<<10) + "\r\n\r\n",
			append([]answer{echo}, refusal("431 Request Header Fields Too Large", "431 Request Header Fields Too Large")...)},
		{"three pipelined", strings.Repeat(run+"Content-Length: 7\r\n\r\n{\"n\":1}", 3), []answer{echo, echo, echo}},
		{"a hijacked connection's bytes", "POST /raw HTTP/1.1\r\nHost: nexus.test\r\nContent-Length: 0\r\n\r\n",
			[]answer{{"400 Bad Request", "text/plain; charset=utf-8", false, true, "400 Bad Request"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.WriteString(c, tc.request)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			var got []answer
			ids := map[string]bool{}
			for range tc.want {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("after %d answers: %v", len(got), err)
				}
				b, _ := io.ReadAll(resp.Body)
				id := resp.Header.Get("X-Correlation-Id")
				if ids[id] {
					t.Errorf("correlation ID %q answered twice", id)
				}
				ids[id] = true
				got = append(got, answer{resp.Status, resp.Header.Get("Content-Type"), id != "", resp.Close, string(b)})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
			if !tc.want[len(tc.want)-1].Close {
				return // the connection stays open
			}
			if rest, _ := io.ReadAll(br); len(rest) > 0 {
				t.Errorf("after the answers: %q", rest)
			}
		})
	}
}
