package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/nexushq/nexus/flow"
)

type connectTimeoutKey struct{}

// errReadTimeout is the cause of a call cancelled by read_timeout_ms.
var errReadTimeout = errors.New("read timeout")

// errConnectTimeout cancels a call that has no connection within the
// step's connect_timeout_ms: the dial, a proxy's CONNECT and the TLS
// handshake all count.
var errConnectTimeout = errors.New("connect timeout")

// stopper is a timer afterFunc started.
type stopper interface {
	// Stop stops the timer; false when its function already ran or runs.
	Stop() bool
}

// afterFunc is time.AfterFunc, the clock of a call's connect and read
// timers; a test replaces it to fire a timer at a chosen moment.
var afterFunc = func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// NewTransport returns the transport http_egress steps use by default: it
// keeps connections to the few hosts flows call, and dials, and makes a
// TLS handshake, within the connect timeout of the step making the call.
//
// The bound is the dialer's, not the call's: net/http dials on a context
// of its own, which a call that gives up (at its connect timeout or the
// flow's ceiling) does not cancel, so that another call may use the
// connection. A dial or a handshake a call gave up on therefore runs on to
// its own timeout; with the transport's handshake timeout (10 s) that was
// a socket and a goroutine held 10 s for each call to a backend that
// stalls its handshakes. Only a handshake through a proxy's CONNECT is
// still bounded by TLSHandshakeTimeout (net/http makes it).
//
// The handshake uses this transport's TLSClientConfig (set it before the
// first call): a Clone would dial with the original's, so call
// NewTransport again for another.
func NewTransport() *http.Transport {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
		// a backend's headers are bounded as its body is (Go's default
		// is 10 MiB, all copied into ctx.HTTP_RESPONSE_HEADERS)
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, connectTimeout(ctx))
		defer cancel()
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// the transport's own settings (net/http has added h2 to its
		// protocols by the time it dials), as its handshake would use them
		cfg := &tls.Config{}
		if t.TLSClientConfig != nil {
			cfg = t.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return t
}

// dial connects within the connect timeout of the step making the call.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: connectTimeout(ctx), KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, network, addr)
}

// connectTimeout is the connect timeout of the step whose call ctx is
// (net/http's dialing context keeps the call's values).
func connectTimeout(ctx context.Context) time.Duration {
	if t, ok := ctx.Value(connectTimeoutKey{}).(time.Duration); ok {
		return t
	}
	return flow.DefaultConnectTimeout
}

// maxResponseHeaderBytes bounds the headers of a backend's answer: as
// much as nexus serve takes from a caller (64 KiB).
const maxResponseHeaderBytes = 64 << 10

// callTimer is a call's connect or read timer. A connect timer and the
// connection it waits for race: decided is set by whichever comes first,
// and only the timer that sets it cancels the call, so that the outcome
// follows what came first (a timer that fires as the connection arrives
// cancelled the call whatever came first: a call that had its connection
// failed with "no connection within connect_timeout_ms").
type callTimer struct {
	stopper
	decided atomic.Bool
}

// httpEgress makes the step's call with the current document as the body.
// A 2xx answer's body becomes the output; any answer sets ctx.HTTP_SC and
// ctx.HTTP_RESPONSE_HEADERS, and ctx.HTTP_RESPONSE_BODY when its body was
// read whole (within the ceiling, not cut short). A non-2xx answer fails
// the step with its status, its body read or not.
func (x *execution) httpEgress(ctx context.Context, s *flow.Step, doc any) (any, *Error) {
	h := s.HTTP()
	// the variables describe this call's answer: a call without one
	// leaves them unset, not an earlier step's
	x.unsetVar("HTTP_SC")
	x.unsetVar("HTTP_RESPONSE_BODY")
	x.unsetVar("HTTP_RESPONSE_HEADERS")
	env := x.env(doc)
	fail := func(format string, args ...any) *Error {
		return &Error{Kind: KindEffect, Step: s.Name(), Msg: "effect handler failed: " + fmt.Sprintf(format, args...)}
	}
	url, err := h.Endpoint.RenderURL(env)
	if err != nil {
		return nil, &Error{Kind: KindDefect, Step: s.Name(), Msg: "endpoint: " + err.Error()}
	}
	var body io.Reader
	contentType := "application/json"
	if h.Method != http.MethodGet && h.Method != http.MethodHead {
		if xd, ok := doc.(*flow.XMLDocument); ok {
			body, contentType = bytes.NewReader(xd.Raw()), "application/xml"
		} else {
			// written under the document's bound, its escapes counted
			// (a render counts a string's bytes, not its escapes)
			b, ok := flow.AppendJSONLimit(nil, doc, x.docLimit())
			if !ok {
				return nil, &Error{Kind: KindDefect, Step: s.Name(), Msg: "request body: " + (&flow.LimitError{Limit: x.docLimit()}).Error()}
			}
			body = bytes.NewReader(b)
		}
	}
	// connect_timeout_ms runs until a connection is had (the dial, which
	// it also bounds itself, and a TLS handshake); read_timeout_ms from
	// then to the end of the answer's body.
	callCtx, cancel := context.WithCancelCause(context.WithValue(ctx, connectTimeoutKey{}, h.ConnectTimeout))
	defer cancel(nil)
	var connectTimer, readTimer atomic.Pointer[callTimer]
	var connected atomic.Bool // a connection was had
	defer func() {
		for _, p := range []*atomic.Pointer[callTimer]{&connectTimer, &readTimer} {
			if t := p.Load(); t != nil {
				t.Stop()
			}
		}
	}()
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		GetConn: func(string) {
			// a retried request (its reused connection failed before
			// the answer) starts over on a new one: the connect bound
			// first, then the read
			connected.Store(false)
			if old := readTimer.Swap(nil); old != nil {
				old.Stop()
			}
			t := &callTimer{}
			t.stopper = afterFunc(h.ConnectTimeout, func() {
				if t.decided.CompareAndSwap(false, true) {
					cancel(errConnectTimeout)
				}
			})
			if old := connectTimer.Swap(t); old != nil {
				old.Stop()
			}
		},
		GotConn: func(httptrace.GotConnInfo) {
			if t := connectTimer.Load(); t != nil {
				if !t.decided.CompareAndSwap(false, true) {
					// the connect timer came first: the call is
					// cancelled, with no connection in time
					return
				}
				t.Stop()
			}
			connected.Store(true)
			t := &callTimer{stopper: afterFunc(h.ReadTimeout, func() { cancel(errReadTimeout) })}
			if old := readTimer.Swap(t); old != nil {
				old.Stop()
			}
		},
	})
	req, err := http.NewRequestWithContext(callCtx, h.Method, url, body)
	if err != nil {
		return nil, fail("%v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("User-Agent", "nexus")
	for _, ht := range h.Headers {
		v, err := ht.Value.Render(env)
		if err != nil {
			return nil, &Error{Kind: KindDefect, Step: s.Name(), Msg: "headers: " + ht.Name + ": " + err.Error()}
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			// no call can carry it: the flow's value, not a downstream's
			// failure (502), refused before any call, as a bad endpoint is
			return nil, &Error{Kind: KindDefect, Step: s.Name(), Msg: "headers: " + ht.Name + ": the value rendered holds a character a header cannot carry (a line break or another control character)"}
		}
		req.Header.Set(ht.Name, v)
	}
	req.Header.Set(HeaderCorrelationID, x.req.CorrelationID)

	start := time.Now()
	resp, err := x.e.client.Do(req)
	if err != nil {
		if errDeadline(ctx, err) {
			return nil, x.deadline(s.Name())
		}
		switch cause := context.Cause(callCtx); {
		case errors.Is(cause, errReadTimeout):
			return nil, fail("no answer from %s within read_timeout_ms (%d ms)", req.URL.Host, h.ReadTimeout.Milliseconds())
		case errors.Is(cause, errConnectTimeout),
			// the dialer's and the handshake's own bounds are the same
			// connect timeout, and fire at the same moment as the
			// step's: whichever came first, one text
			!connected.Load() && isTimeout(err) && time.Since(start) >= h.ConnectTimeout:
			return nil, fail("no connection to %s within connect_timeout_ms (%d ms)", req.URL.Host, h.ConnectTimeout.Milliseconds())
		}
		msg, detail := transportError(err)
		e := fail("%s", msg)
		e.Detail = detail
		return nil, e
	}
	defer resp.Body.Close()
	// A 101's body is the connection itself, handed over by net/http:
	// neither read_timeout_ms nor the ceiling ends a read of it, which
	// lasted as long as the backend kept the connection open. It is a
	// non-2xx answer without a body (no call asks for an upgrade); the
	// Close deferred above closes the connection.
	var raw []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		raw, err = io.ReadAll(io.LimitReader(decoded(resp), x.e.maxBody+1))
	}
	failed := resp.StatusCode < 200 || resp.StatusCode > 299
	if err != nil {
		if errDeadline(ctx, err) {
			return nil, x.deadline(s.Name())
		}
		var e *Error
		switch {
		case errors.Is(context.Cause(callCtx), errReadTimeout):
			e = fail("the answer from %s did not arrive within read_timeout_ms (%d ms)", req.URL.Host, h.ReadTimeout.Milliseconds())
		case platformCause(err):
			e = fail("reading the answer: %v", err)
		default:
			// Go's text may quote what the downstream sent (a malformed
			// chunk's trailer line): only the log has it then
			e = fail("reading the answer: the body from %s could not be read (the log has why)", req.URL.Host)
			e.Detail = "reading the answer: " + err.Error()
		}
		// An answer whose body could not be read (cut short, reset,
		// stalled) is still that answer as far as it arrived: the
		// variables describe its status and headers, but the body read
		// in part is not kept (HTTP_RESPONSE_BODY stays unset). A 2xx
		// fails with why the body could not be read; a non-2xx with its
		// status, as any non-2xx answer does, why the read failed being
		// for the log.
		x.setVar("HTTP_SC", resp.StatusCode)
		x.setVar("HTTP_RESPONSE_HEADERS", headerObject(resp.Header))
		if !failed {
			return nil, e
		}
		detail := e.Detail
		if detail == "" {
			detail = strings.TrimPrefix(e.Msg, "effect handler failed: ")
		}
		e = fail("HTTP %s", statusLine(resp.StatusCode))
		e.Detail = detail
		return nil, e
	}
	x.setVar("HTTP_SC", resp.StatusCode)
	x.setVar("HTTP_RESPONSE_HEADERS", headerObject(resp.Header))
	if int64(len(raw)) > x.e.maxBody && !failed {
		return nil, fail("the answer's body exceeds %d bytes", x.e.maxBody)
	}
	if failed {
		// the status is the failure, whatever the body's size (one
		// over the ceiling is not kept: HTTP_RESPONSE_BODY stays unset)
		if int64(len(raw)) <= x.e.maxBody {
			x.setVar("HTTP_RESPONSE_BODY", responseDocument(resp.Header.Get("Content-Type"), raw))
		}
		e := fail("HTTP %s", statusLine(resp.StatusCode))
		e.Detail = excerpt(raw)
		return nil, e
	}
	out := responseDocument(resp.Header.Get("Content-Type"), raw)
	x.setVar("HTTP_RESPONSE_BODY", out)
	return out, nil
}

// decoded is the answer's body as the flow reads it. net/http decodes a
// gzipped answer only when it asked for gzip itself; one a flow asked for
// with its own Accept-Encoding is decoded here, as net/http would (its
// Content-Encoding and Content-Length dropped from the headers), so that
// the answer ceiling counts decoded bytes and the flow reads the document,
// not its compressed bytes as a string.
func decoded(resp *http.Response) io.Reader {
	ce := resp.Header.Values("Content-Encoding")
	if resp.Uncompressed || len(ce) != 1 {
		return resp.Body
	}
	if c := strings.TrimSpace(ce[0]); !strings.EqualFold(c, "gzip") && !strings.EqualFold(c, "x-gzip") {
		return resp.Body
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength, resp.Uncompressed = -1, true
	return &gunzip{r: resp.Body}
}

// gunzip decodes gzip from r, starting at its first Read: an empty body
// (a HEAD's, a 204's) is an empty document, as net/http reads it.
type gunzip struct {
	r   io.Reader
	zr  *gzip.Reader
	err error
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.r)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

// responseDocument reads a response body by its content type: JSON parsed,
// XML kept as an XML document, anything else a string; a byte order mark
// before JSON is dropped, as one before XML is. A body that does not
// parse as its type says is kept as a string, UTF-8 as every string is (see
// utf8Text).
func responseDocument(contentType string, raw []byte) any {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case len(bytes.TrimSpace(raw)) == 0:
		return ""
	case mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "":
		// a byte order mark before JSON is dropped (RFC 8259 lets a
		// parser ignore it), as the doors drop it from a request's body
		if v, err := flow.ParseJSON(bytes.TrimPrefix(raw, utf8BOM), 512); err == nil {
			return v
		}
	case mt == "application/xml" || mt == "text/xml" || strings.HasSuffix(mt, "+xml"):
		if d, err := flow.ParseXMLDocument(raw); err == nil {
			return d
		}
	}
	return utf8Text(raw)
}

// utf8BOM is the UTF-8 byte order mark.
var utf8BOM = []byte("\xef\xbb\xbf")

// utf8Text is b as a string of UTF-8: each byte that is not part of a UTF-8
// character (a Latin-1 body's é) becomes U+FFFD, as JSON writes it. The
// charset a backend declares is not read. Kept as they came, the bytes went
// out in an answer that says charset=utf-8.
func utf8Text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return string(out)
}

func headerObject(h http.Header) *flow.Object {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = strings.Join(h[k], ", ")
	}
	return flow.NewObject(keys, vals)
}

func statusLine(code int) string {
	if text := http.StatusText(code); text != "" {
		return fmt.Sprintf("%d %s", code, text)
	}
	return fmt.Sprint(code)
}

// excerpt keeps the start of a downstream's body for the operational log,
// cut between characters (a character the cut would split is left out).
func excerpt(b []byte) string {
	const max = 512
	if len(b) > max {
		cut := max
		for i := max; i > max-utf8.UTFMax && i > 0; i-- {
			if utf8.RuneStart(b[i]) {
				cut = i // the character at max starts here: it goes whole
				break
			}
		}
		return string(b[:cut]) + "…"
	}
	return string(b)
}

// publish puts the current document on the step's queue, in the flow's own
// tenant, with the execution's correlation ID.
func (x *execution) publish(ctx context.Context, s *flow.Step, doc any) *Error {
	if _, isXML := doc.(*flow.XMLDocument); isXML {
		return &Error{Kind: KindDefect, Step: s.Name(), Msg: "queue_publish needs a JSON document"}
	}
	if x.e.publisher == nil {
		return &Error{Kind: KindEffect, Step: s.Name(), Msg: "effect handler failed: queue_publish is not available in this process"}
	}
	// written under the document's bound, its escapes counted, as the
	// answer is
	payload, ok := flow.AppendJSONLimit(nil, doc, x.docLimit())
	if !ok {
		return &Error{Kind: KindDefect, Step: s.Name(), Msg: "message: " + (&flow.LimitError{Limit: x.docLimit()}).Error()}
	}
	err := x.e.publisher.Publish(ctx, x.req.Flow.Tenant(), s.Queue(), payload, x.req.CorrelationID)
	if err != nil {
		if errDeadline(ctx, err) {
			return x.deadline(s.Name())
		}
		return &Error{Kind: KindEffect, Step: s.Name(), Msg: "effect handler failed: " + err.Error()}
	}
	return nil
}

// transportError is a failed call's error as the flow (and, through a
// fault handler's $.fault_error, its caller) may read it: Go's own text,
// "Post "URL": cause", but the URL without its query, fragment or user
// information, where API keys and passwords live. When Go's cause may
// quote what the downstream sent (an answer that is not HTTP: `malformed
// HTTP status code "IS"`, a header line, an HTTP/2 GOAWAY's debug data),
// msg says so in the platform's words, and detail, for the log alone, is
// Go's text; detail is "" otherwise. A downstream's text never travels to
// the caller.
func transportError(err error) (msg, detail string) {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error(), ""
	}
	where := ue.Op
	if u, perr := url.Parse(ue.URL); perr == nil {
		u.RawQuery, u.ForceQuery, u.Fragment, u.User = "", false, "", nil
		where = fmt.Sprintf("%s %q", ue.Op, u.String())
	}
	var cert *tls.CertificateVerificationError
	if errors.As(ue.Err, &cert) {
		// Go's text names what the certificate holds (the names it is
		// valid for, its issuer), which the downstream's operator wrote
		return where + ": the downstream's TLS certificate was not accepted (the log has why)", where + ": " + ue.Err.Error()
	}
	if platformCause(ue.Err) {
		return where + ": " + ue.Err.Error(), ""
	}
	return where + ": the downstream's answer could not be read (the log has why)", where + ": " + ue.Err.Error()
}

// isTimeout reports whether err is a timeout: a deadline that ran out (a
// dialer's, a handshake's context), not a refusal or a reset.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// platformCause reports whether err's text is the platform's own, with
// nothing a downstream sent in it: a connection refused, reset or closed
// (io.EOF), a deadline, or a text that quotes nothing (Go quotes foreign
// bytes with %q) and is not net/http's for an answer it could not read,
// which cites the answer's lines.
func platformCause(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	text := err.Error()
	return !strings.Contains(text, `"`) && !strings.HasPrefix(text, "net/http: HTTP/1.x transport connection broken: ")
}
