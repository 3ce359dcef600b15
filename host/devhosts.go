package host

import (
	"net"
	"net/http"
	"strings"

	"github.com/nexushq/nexus/naming"
)

// LoopbackNamesOnly answers 421 to a request whose Host is a name other
// than localhost: a --dev host on the loopback accepts the README's example
// key for every acme flow, and a web page the developer opens could reach
// it by DNS rebinding (its own name made to resolve to 127.0.0.1, so that
// the browser lets it send that key and read the answers); the Host header
// is the only trace of it the host sees. IP addresses, localhost and names
// under .localhost (which resolve to the loopback without DNS) pass. The
// 421 carries X-Correlation-ID, as every answer does.
func LoopbackNamesOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
		if name == "" || name == "localhost" || strings.HasSuffix(name, ".localhost") || net.ParseIP(name) != nil || ipv4Number(name) {
			next.ServeHTTP(w, r)
			return
		}
		correlationID(w, r) // as on every answer, refusals included
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusMisdirectedRequest, "host "+naming.Quote(r.Host)+" is not this host: --dev listens on the loopback and answers localhost and IP addresses only")
	})
}

// ipv4Number reports whether name is an IPv4 address in a form inet_aton
// takes besides the dotted quad (127.1, 2130706433, 0x7f.1), which curl
// sends as typed: every label a number, decimal or hexadecimal. No DNS name
// a page could own is one.
func ipv4Number(name string) bool {
	labels := strings.Split(name, ".")
	if len(labels) > 4 {
		return false
	}
	for _, l := range labels {
		digits, base := l, "0123456789"
		if hex, ok := strings.CutPrefix(l, "0x"); ok {
			digits, base = hex, "0123456789abcdef"
		}
		if digits == "" || strings.Trim(digits, base) != "" {
			return false
		}
	}
	return true
}
