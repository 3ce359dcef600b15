package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/naming"
)

// maxJSONDepth is the deepest nesting a body may have.
const maxJSONDepth = 64

// readBody reads the body under the ceiling. A body announced or found to
// be larger answers 413; a body that cannot be read (a broken chunked
// encoding) answers 400.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if r.ContentLength > limit {
		refuseUnread(w, r, http.StatusRequestEntityTooLarge, "body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
		return nil, false
	}
	// the buffer grows as bytes arrive: an announced length is not
	// reserved before the bytes come (a caller could announce the limit
	// and send one byte on many connections)
	size := min(r.ContentLength, 64<<10)
	if size < 0 || size > limit {
		size = 512
	}
	buf := make([]byte, 0, size+1)
	body := http.MaxBytesReader(serverWriter(w), r.Body, limit)
	for {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, true
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeError(w, http.StatusRequestEntityTooLarge, "body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
			} else {
				writeBodyError(w, err)
			}
			return nil, false
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// writeBodyError answers a body that could not be read: 408 when it did
// not arrive in time (the server's read deadline), else 400 (a broken
// chunked encoding, a connection cut short). The texts are fixed: the
// read error names the connection's addresses, which are the host's.
func writeBodyError(w http.ResponseWriter, err error) {
	w.Header().Set("Connection", "close") // what is left of the body is not read
	if errors.Is(err, os.ErrDeadlineExceeded) {
		writeError(w, http.StatusRequestTimeout, "the body did not arrive in time")
		return
	}
	writeError(w, http.StatusBadRequest, "the body could not be read: it was cut short or its chunked encoding is broken")
}

// serverWriter returns the server's own ResponseWriter from under w's
// wrappers (statusWriter), following Unwrap as http.ResponseController
// does. http.MaxBytesReader tells the server that a body was refused
// through an unexported method of that writer alone, and the server then
// answers at once with Connection: close; behind a wrapper it would first
// read what is left of the body (up to 256 KiB), so the 413 of a chunked
// body would wait for bytes its caller may never send.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// parseBody turns a body into the document a flow receives: JSON for
// application/json, +json or no content type; XML (application/xml,
// text/xml, +xml) flattened; an empty body is {}. Another type or a
// Content-Encoding but identity answers 415; a body that does not parse,
// or a request with two Content-Type lines (which proxies and servers
// read differently), answers 400 naming the problem. A JSON body may begin
// with a byte order mark; rawJSON is the JSON parsed, without it (nil for
// XML and for an empty body).
func parseBody(w http.ResponseWriter, r *http.Request, body []byte) (doc any, rawJSON []byte, ok bool) {
	// every Content-Encoding line and every coding in each: one gzip
	// after an identity still encodes the body
	for _, line := range r.Header["Content-Encoding"] {
		for enc := range strings.SplitSeq(line, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported content encoding %s: send the body uncompressed", naming.Quote(enc)))
				return nil, nil, false
			}
		}
	}
	if len(r.Header["Content-Type"]) > 1 {
		writeError(w, http.StatusBadRequest, "more than one Content-Type header")
		return nil, nil, false
	}
	kind, ascii, err := bodyKind(headerValue(r, "Content-Type"))
	if err != nil {
		writeError(w, http.StatusUnsupportedMediaType, err.Error())
		return nil, nil, false
	}
	if len(body) == 0 {
		return flow.NewObject(nil, nil), nil, true
	}
	if ascii != "" {
		// ASCII is read as the UTF-8 it is; a byte past it is not what
		// the label says
		if i := flow.NonASCII(body); i >= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("charset %s is declared, but byte %d of the body is 0x%02X, which is not ASCII", naming.Quote(ascii), i, body[i]))
			return nil, nil, false
		}
	}
	if kind == kindXML {
		doc, err = flow.FlattenXML(body)
	} else {
		// RFC 8259 lets a parser ignore a byte order mark, which some
		// clients write; XML accepts one too
		bom := bytes.HasPrefix(body, utf8BOM)
		if bom {
			body = body[len(utf8BOM):]
		}
		doc, err = flow.ParseJSON(body, maxJSONDepth)
		if jerr, isJSON := errors.AsType[*flow.JSONError](err); isJSON && bom {
			// the byte named is the body's as sent, the mark counted
			jerr.Offset += len(utf8BOM)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, nil, false
	}
	if kind == kindJSON {
		rawJSON = body
	}
	return doc, rawJSON, true
}

// utf8BOM is the byte order mark of UTF-8.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

type contentKind int

const (
	kindJSON contentKind = iota
	kindXML
)

// bodyKind reads a Content-Type: the kind of body it names, and its charset
// when that is US-ASCII (flow.IsASCIICharset), whose body must then hold
// ASCII alone. A type the doors do not take, or a charset but UTF-8 and
// US-ASCII, is an error.
func bodyKind(contentType string) (kind contentKind, ascii string, err error) {
	if contentType == "" || contentType == "application/json" {
		return kindJSON, "", nil // the usual case, without parsing
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, "", fmt.Errorf("unsupported content type %s", naming.Quote(contentType))
	}
	// the type first: a type the doors do not take is named, whatever its
	// charset (told to send UTF-8, a text/csv caller would be refused again)
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		kind = kindJSON
	case mt == "application/xml" || mt == "text/xml" || strings.HasSuffix(mt, "+xml"):
		kind = kindXML
	default:
		return 0, "", fmt.Errorf("unsupported content type %s", naming.Quote(mt))
	}
	cs, ok := params["charset"]
	switch {
	case !ok || flow.IsUTF8Charset(cs):
		return kind, "", nil
	case flow.IsASCIICharset(cs):
		return kind, cs, nil
	}
	return 0, "", fmt.Errorf("unsupported charset %s: send UTF-8", naming.Quote(cs))
}
