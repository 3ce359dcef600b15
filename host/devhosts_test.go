package host_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
)

// TestLoopbackNamesOnly: a --dev host on the loopback answers a request
// whose Host is an IP address, localhost or a name under .localhost, and
// refuses any other name (a page's own name made to resolve to 127.0.0.1:
// DNS rebinding) with 421 and the platform's error body.
func TestLoopbackNamesOnly(t *testing.T) {
	h := host.LoopbackNamesOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tt := range []struct {
		host string
		want int
	}{
		{"localhost:9090", http.StatusNoContent},
		{"LOCALHOST", http.StatusNoContent},
		{"localhost.:9090", http.StatusNoContent},
		{"app.localhost:9090", http.StatusNoContent},
		{"127.0.0.1:9090", http.StatusNoContent},
		{"[::1]:9090", http.StatusNoContent},
		{"10.1.2.3", http.StatusNoContent},
		{"127.1:9090", http.StatusNoContent},      // inet_aton's short form, as curl sends it
		{"2130706433:9090", http.StatusNoContent}, // 127.0.0.1 as one number
		{"0x7f.1", http.StatusNoContent},
		{"1.2.3.4.5", http.StatusMisdirectedRequest}, // not an address: a name
		{"123.example", http.StatusMisdirectedRequest},
		{"0xzz.1", http.StatusMisdirectedRequest},
		{"", http.StatusNoContent},
		{"rebind.attacker.example:9090", http.StatusMisdirectedRequest},
		{"7f000001.attacker.example", http.StatusMisdirectedRequest},
		{"localhost.attacker.example:9090", http.StatusMisdirectedRequest},
		{"evil-localhost:9090", http.StatusMisdirectedRequest},
	} {
		r := httptest.NewRequest(http.MethodPost, "/flows/acme/hello/run", nil)
		r.Host = tt.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q: %d %s, want %d", tt.host, w.Code, w.Body, tt.want)
		}
		if tt.want == http.StatusMisdirectedRequest && !strings.HasPrefix(w.Body.String(), `{"ok":false,"error":"host \"`+tt.host+`\" is not this host`) {
			t.Errorf("Host %q: body %s, want the platform's error naming the host", tt.host, w.Body)
		}
	}
}

// TestLoopbackRefusalCarriesTheCorrelationID: the 421 of a name other than
// localhost carries X-Correlation-ID like every other answer (server.md,
// Precise answers): the caller's when it sent a valid one, else a new
// lowercase UUID v4; a real server answers it, the request's body unread.
func TestLoopbackRefusalCarriesTheCorrelationID(t *testing.T) {
	srv := httptest.NewServer(host.LoopbackNamesOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })))
	defer srv.Close()
	for _, tt := range []struct {
		name, sent string
		want       func(string) bool
	}{
		{"the caller's", "trace-42", func(id string) bool { return id == "trace-42" }},
		{"a new one", "", uuidV4.MatchString},
		{"a new one for an invalid one", "a b", uuidV4.MatchString},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/flows/acme/hello/run", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "rebind.attacker.example"
			if tt.sent != "" {
				req.Header.Set("X-Correlation-ID", tt.sent)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest {
				t.Fatalf("status %d, want 421", resp.StatusCode)
			}
			if id := resp.Header.Get("X-Correlation-Id"); !tt.want(id) {
				t.Errorf("X-Correlation-Id = %q, sent %q", id, tt.sent)
			}
		})
	}
}
