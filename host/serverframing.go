package host

import (
	"bytes"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"

	"github.com/nexushq/nexus/flow"
)

// PlatformAnswers wraps ln so that the refusals net/http writes itself,
// before any handler runs (431 for headers over MaxHeaderBytes, 400 for a
// request it cannot parse, 501 for a transfer coding it does not know),
// go out as every other answer does: the platform's JSON body
// {"ok":false,"error":"…"} with a new X-Correlation-Id, nosniff and
// Connection: close. net/http has no hook for them: it writes its plain
// text straight to the connection, so the connection recognises that
// write (its exact shape, made by net/http's connection loop) and sends
// the platform's answer in its place. Every other byte passes unchanged.
func PlatformAnswers(ln net.Listener) net.Listener { return answeringListener{ln} }

type answeringListener struct{ net.Listener }

func (l answeringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &answeringConn{Conn: c}, nil
}

// answeringConn is a connection whose net/http plain-text refusals are
// rewritten (see PlatformAnswers).
type answeringConn struct{ net.Conn }

// CloseWrite half-closes a TCP connection, as net/http does after a 431
// so that its caller reads the answer before the connection is reset.
func (c *answeringConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *answeringConn) Write(p []byte) (int, error) {
	status, text, ok := cannedRefusal(p)
	if !ok || !writtenByServeLoop() {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(platformRefusal(status, text)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// cannedErrorHeaders are the headers of net/http's own refusals (the
// errorHeaders of its conn.serve): no Date, which every answer written
// through a ResponseWriter has.
const cannedErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// cannedRefusal reads p as one of net/http's own refusals, "HTTP/1.1 NNN
// Reason" + cannedErrorHeaders + a one-line text, whole in one short write, and
// returns its status and its text.
func cannedRefusal(p []byte) (status int, text string, ok bool) {
	if len(p) > 512 { // net/http's are under 200 bytes; a response's writes are longer
		return 0, "", false
	}
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 || rest[3] != ' ' {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(rest[:3]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	line, body, ok := bytes.Cut(rest, []byte(cannedErrorHeaders))
	if !ok || bytes.ContainsAny(line, "\r\n") || len(body) == 0 || bytes.ContainsAny(body, "\r\n") {
		return 0, "", false
	}
	return status, string(body), true
}

// writtenByServeLoop tells whether the caller's write was made by
// net/http's connection loop (through fmt.Fprintf), where its own refusals
// are written, and not through a ResponseWriter, however its bytes look.
func writtenByServeLoop() bool {
	var pcs [4]uintptr
	n := runtime.Callers(3, pcs[:]) // from Write's caller (fmt.Fprintf) up
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "net/http.(*conn).serve") {
			return true
		}
		if !more {
			return false
		}
	}
}

// platformRefusal is the answer sent in place of net/http's refusal of
// status whose text is text ("431 Request Header Fields Too Large",
// "Unsupported transfer encoding"), which echoes nothing the caller sent.
func platformRefusal(status int, text string) []byte {
	body := flow.AppendJSON([]byte(`{"ok":false,"error":`), text)
	body = append(body, '}')
	b := []byte("HTTP/1.1 ")
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nX-Correlation-Id: "...)
	b = append(b, flow.NewUUID()...)
	b = append(b, "\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}
