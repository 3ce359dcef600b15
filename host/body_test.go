package host_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/queue"
)

// The body: read under the ceiling, then parsed as JSON or flattened XML.

// jsonOfSize is a JSON object of exactly n bytes (n ≥ 8).
func jsonOfSize(n int) string {
	return `{"a":"` + strings.Repeat("x", n-8) + `"}`
}

func TestBodyCeiling(t *testing.T) {
	fx := newFixture(t, nil)

	t.Run("announced over the ceiling: 413 before reading", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, "")
		body := hugeBody(r, host.DefaultMaxBodyBytes+1)
		w := fx.serve(r)
		wantRefusal(t, w, http.StatusRequestEntityTooLarge, "body exceeds 1048576 bytes")
		if n := body.reads.Load(); n != 0 {
			t.Errorf("the body was read %d times after its Content-Length was over the ceiling", n)
		}
	})
	t.Run("announced 10 GiB", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, "")
		body := hugeBody(r, 10<<30)
		wantRefusal(t, fx.serve(r), http.StatusRequestEntityTooLarge, "body exceeds 1048576 bytes")
		if n := body.reads.Load(); n != 0 {
			t.Errorf("the body was read %d times", n)
		}
	})
	t.Run("chunked over the ceiling", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, "")
		body := &recordingBody{r: io.LimitReader(endless{}, 4<<20)}
		r.Body, r.ContentLength = body, -1
		r.Header.Del("Content-Length")
		w := fx.serve(r)
		wantRefusal(t, w, http.StatusRequestEntityTooLarge, "body exceeds 1048576 bytes")
	})
	t.Run("chunked at the ceiling", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, "")
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(jsonOfSize(host.DefaultMaxBodyBytes))), -1
		if w := fx.serve(r); w.Code != http.StatusOK {
			t.Errorf("a chunked body of exactly the ceiling: %d %.200s", w.Code, w.Body)
		}
	})
	t.Run("exactly the ceiling", func(t *testing.T) {
		body := jsonOfSize(host.DefaultMaxBodyBytes)
		w := fx.serve(runRequest("acme", "echo", keyAcmeAll, body))
		if w.Code != http.StatusOK || w.Body.String() != body {
			t.Errorf("a body of exactly 1048576 bytes: %d, %d bytes back", w.Code, w.Body.Len())
		}
	})
	t.Run("one byte over, announced honestly", func(t *testing.T) {
		wantRefusal(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, jsonOfSize(host.DefaultMaxBodyBytes+1))),
			http.StatusRequestEntityTooLarge, "body exceeds 1048576 bytes")
	})
	t.Run("the flow's own max_body_bytes", func(t *testing.T) {
		wantJSON(t, fx.serve(runRequest("acme", "small", keyAcmeAll, jsonOfSize(16))), jsonOfSize(16))
		wantRefusal(t, fx.serve(runRequest("acme", "small", keyAcmeAll, jsonOfSize(17))), http.StatusRequestEntityTooLarge, "body exceeds 16 bytes")
		r := runRequest("acme", "small", keyAcmeAll, "")
		body := hugeBody(r, 17)
		wantRefusal(t, fx.serve(r), http.StatusRequestEntityTooLarge, "body exceeds 16 bytes")
		if n := body.reads.Load(); n != 0 {
			t.Errorf("the body was read %d times after its Content-Length was over the flow's ceiling", n)
		}
		// other flows keep the server's ceiling
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, jsonOfSize(17))), jsonOfSize(17))
	})

	t.Run("Config.MaxBodyBytes", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.MaxBodyBytes = 100 })
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, jsonOfSize(100))), jsonOfSize(100))
		wantRefusal(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, jsonOfSize(101))), http.StatusRequestEntityTooLarge, "body exceeds 100 bytes")
	})

	t.Run("a flow's ceiling above the server's wins for that flow", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.MaxBodyBytes = 10 })
		wantJSON(t, fx.serve(runRequest("acme", "small", keyAcmeAll, jsonOfSize(16))), jsonOfSize(16))
		wantRefusal(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, jsonOfSize(11))), http.StatusRequestEntityTooLarge, "body exceeds 10 bytes")
	})
}

// TestBodyOverTheWire sends bodies over a real connection: chunked framing,
// a ceiling on a chunked body, and a broken chunk.
func TestBodyOverTheWire(t *testing.T) {
	fx := newFixture(t, nil)
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)

	raw := func(t *testing.T, req string) string {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		go io.WriteString(c, req) // the server may answer before it reads everything
		var out bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			out.Write(buf[:n])
			if err != nil || bytes.Contains(out.Bytes(), []byte("\r\n\r\n")) && bytes.HasSuffix(out.Bytes(), []byte("}")) {
				break
			}
		}
		return out.String()
	}
	head := "POST /flows/acme/echo/run HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer " + keyAcmeAll +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

	t.Run("chunked", func(t *testing.T) {
		got := raw(t, head+"4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, `{"a":1}`) {
			t.Errorf("answer:\n%s", got)
		}
	})
	t.Run("chunked over the ceiling", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(head)
		chunk := strings.Repeat("a", 64<<10)
		for i := 0; i < 17; i++ { // 17 × 64 KiB > 1 MiB
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		b.WriteString("0\r\n\r\n")
		got := raw(t, b.String())
		if !strings.HasPrefix(got, "HTTP/1.1 413 ") || !strings.Contains(got, `{"ok":false,"error":"body exceeds 1048576 bytes"}`) {
			t.Errorf("answer:\n%.400s", got)
		}
	})
	t.Run("bare LF in a chunk size", func(t *testing.T) {
		got := raw(t, head+"4\n{\"a\"\r\n0\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
			t.Errorf("answer:\n%s", got)
		}
	})
}

// TestBodyOverTheCeilingAnsweredAtOnce sends both doors, over a real
// connection, bodies over the ceiling whose rest never comes, from a caller
// that keeps the connection open: the 413 must come at once, saying the
// connection closes. net/http reads what is left of a body the handler did
// not read before it answers, unless it knows the connection closes after
// the answer: for a chunked body it learns that from http.MaxBytesReader,
// through its own ResponseWriter only (given the door's metrics wrapper, the
// answer waited for the next 256 KiB); for a Content-Length over a flow's
// small ceiling, from the answer's Connection: close.
func TestBodyOverTheCeilingAnsweredAtOnce(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{})
	srv := httptest.NewServer(fx.handler)
	t.Cleanup(srv.Close)
	var chunks strings.Builder
	chunk := strings.Repeat("a", 64<<10)
	for range 17 { // 17 × 64 KiB > 1 MiB, and no last chunk
		fmt.Fprintf(&chunks, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	for _, door := range []string{"run", "enqueue"} {
		for _, tc := range []struct {
			name, flow, head, body, msg string
		}{
			{"chunked past the ceiling", "echo", "Transfer-Encoding: chunked", chunks.String(), "body exceeds 1048576 bytes"},
			{"announced over the flow's ceiling", "small", "Content-Length: 1000", "{", "body exceeds 16 bytes"},
		} {
			t.Run(door+"/"+tc.name, func(t *testing.T) {
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				sent := make(chan struct{})
				t.Cleanup(func() { c.Close(); <-sent })
				go func() {
					defer close(sent)
					io.WriteString(c, "POST /flows/acme/"+tc.flow+"/"+door+" HTTP/1.1\r\nHost: nexus.test\r\nAuthorization: Bearer "+keyAcmeAll+
						"\r\nContent-Type: application/json\r\n"+tc.head+"\r\n\r\n"+tc.body)
				}()
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer within 10 s: %v", err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				type answer struct {
					Status string
					Close  bool // Connection: close
					Body   string
				}
				got := answer{resp.Status, resp.Close, string(body)}
				want := answer{"413 Request Entity Too Large", true, `{"ok":false,"error":"` + tc.msg + `"}`}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestContentTypes(t *testing.T) {
	fx := newFixture(t, nil)
	send := func(contentType, body string, header ...string) *httptest.ResponseRecorder {
		r := runRequest("acme", "echo", keyAcmeAll, body, header...)
		if contentType == "" {
			r.Header.Del("Content-Type")
		} else {
			r.Header.Set("Content-Type", contentType)
		}
		return fx.serve(r)
	}
	for _, tc := range []struct{ contentType, body, want string }{
		{"", `{"a":1}`, `{"a":1}`},
		{"application/json", `{"a":1}`, `{"a":1}`},
		{"application/json; charset=utf-8", `{"a":1}`, `{"a":1}`},
		{"Application/JSON", `{"a":1}`, `{"a":1}`},
		{"application/vnd.acme.order+json", `{"a":1}`, `{"a":1}`},
		{"application/xml", `<order><id>A-1</id></order>`, `{"id":"A-1"}`},
		{"text/xml; charset=UTF-8", `<order><id>A-1</id></order>`, `{"id":"A-1"}`},
		{"application/soap+xml", `<order><id>A-1</id></order>`, `{"id":"A-1"}`},
		// RFC 8259 lets a parser ignore a byte order mark; it was a 400
		{"application/json", "\uFEFF" + `{"a":1}`, `{"a":1}`},
		// ASCII is UTF-8's first 128 characters: a body so labelled is
		// read as it is (it was 415, "send UTF-8")
		{"application/json; charset=us-ascii", `{"a":"\u00e9"}`, `{"a":"é"}`},
		{"application/json; charset=US-ASCII", `{"a":1}`, `{"a":1}`},
		{"text/xml; charset=ascii", `<order><id>A-1</id></order>`, `{"id":"A-1"}`},
	} {
		t.Run("accepted "+tc.contentType, func(t *testing.T) {
			wantJSON(t, send(tc.contentType, tc.body), tc.want)
		})
	}

	// the byte a refusal names is the body's as sent, its byte order mark
	// counted: it was counted from after the mark, 3 bytes short
	for _, tc := range []struct{ body, want string }{
		{"\uFEFF" + `{"a":}`, `invalid JSON at byte 8: unexpected character '}'`},
		{"\uFEFF", `invalid JSON at byte 3: unexpected end of input`},
		{"\uFEFF" + `{"a":1}{}`, `invalid JSON at byte 10: unexpected data after the document`},
	} {
		t.Run("byte order mark then "+tc.body[3:], func(t *testing.T) {
			wantRefusal(t, send("application/json", tc.body), http.StatusBadRequest, tc.want)
		})
	}

	// a body labelled US-ASCII that holds a byte of 0x80 or more is not
	// what its label says: 400, naming the byte as sent
	t.Run("charset=us-ascii holding UTF-8", func(t *testing.T) {
		wantRefusal(t, send("application/json; charset=us-ascii", `{"a":"é"}`), http.StatusBadRequest,
			`charset "us-ascii" is declared, but byte 6 of the body is 0xC3, which is not ASCII`)
	})
	t.Run("charset=ascii holding Latin-1", func(t *testing.T) {
		wantRefusal(t, send("application/xml; charset=ascii", "<o>\xe9</o>"), http.StatusBadRequest,
			`charset "ascii" is declared, but byte 3 of the body is 0xE9, which is not ASCII`)
	})
	t.Run("text/csv", func(t *testing.T) {
		wantRefusal(t, send("text/csv", "a,b\n1,2\n"), http.StatusUnsupportedMediaType, `unsupported content type "text/csv"`)
	})
	t.Run("text/csv with a charset", func(t *testing.T) {
		wantRefusal(t, send("text/csv; charset=utf-8", "a,b\n"), http.StatusUnsupportedMediaType, `unsupported content type "text/csv"`)
	})
	// a type the doors do not take is named whatever its charset: told to
	// send UTF-8, a caller sending text/csv would be refused again
	for _, ct := range []string{"text/csv; charset=iso-8859-1", "text/csv; charset=utf-16"} {
		t.Run(ct, func(t *testing.T) {
			wantRefusal(t, send(ct, "a,b\n"), http.StatusUnsupportedMediaType, `unsupported content type "text/csv"`)
		})
	}
	t.Run("application/json with another charset", func(t *testing.T) {
		wantRefusal(t, send("application/json; charset=iso-8859-1", `{"a":1}`), http.StatusUnsupportedMediaType, `unsupported charset "iso-8859-1": send UTF-8`)
	})
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/", "application/json; charset=iso-8859-1"} {
		t.Run(ct, func(t *testing.T) {
			if w := send(ct, `{"a":1}`); w.Code != http.StatusUnsupportedMediaType {
				t.Errorf("%d %s, want 415", w.Code, w.Body)
			}
		})
	}
	for _, enc := range []string{"gzip", "deflate", "br", "gzip, identity"} {
		t.Run("Content-Encoding "+enc, func(t *testing.T) {
			w := send("application/json", `{"a":1}`, "Content-Encoding", enc)
			if w.Code != http.StatusUnsupportedMediaType {
				t.Errorf("%d %s, want 415", w.Code, w.Body)
			}
		})
	}
	// two Content-Type lines, which servers and proxies read differently
	// (the first or the last): refused; the first was read
	t.Run("two Content-Type lines", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, `<order><id>A-1</id></order>`)
		r.Header["Content-Type"] = []string{"application/xml", "application/json"}
		wantRefusal(t, fx.serve(r), http.StatusBadRequest, "more than one Content-Type header")
	})
	t.Run("Content-Encoding identity", func(t *testing.T) {
		wantJSON(t, send("application/json", `{"a":1}`, "Content-Encoding", "identity"), `{"a":1}`)
	})
	t.Run("an ISO-8859-1 XML declaration", func(t *testing.T) {
		w := send("application/xml", `<?xml version="1.0" encoding="ISO-8859-1"?><order><id>A-1</id></order>`)
		if w.Code != http.StatusBadRequest && w.Code != http.StatusUnsupportedMediaType {
			t.Errorf("%d %s, want 400 or 415", w.Code, w.Body)
		}
	})
}

// TestCharsetNamesAgree: the names of an encoding the doors take are the
// same in a Content-Type's charset and in an XML declaration's encoding:
// UTF-8 (utf-8 or utf8) and US-ASCII (us-ascii or ascii), in any case. An
// XML declaration of encoding="utf8" was refused as not UTF-8 while
// charset=utf8 was taken.
func TestCharsetNamesAgree(t *testing.T) {
	fx := newFixture(t, nil)
	const doc = `<order><id>A-1</id></order>`
	for _, tc := range []struct {
		name     string
		accepted bool
	}{
		{"utf-8", true}, {"UTF-8", true}, {"utf8", true}, {"UTF8", true}, {"Utf8", true},
		{"us-ascii", true}, {"US-ASCII", true}, {"ascii", true}, {"ASCII", true},
		{"iso-8859-1", false}, {"utf-16", false}, {"utf_8", false}, {"utf-8 ", false}, {"latin1", false},
	} {
		for _, way := range []struct{ name, contentType, body string }{
			{"charset", "application/xml; charset=\"" + tc.name + "\"", doc},
			{"XML encoding", "application/xml", `<?xml version="1.0" encoding="` + tc.name + `"?>` + doc},
		} {
			t.Run(way.name+" "+tc.name, func(t *testing.T) {
				r := runRequest("acme", "echo", keyAcmeAll, way.body)
				r.Header.Set("Content-Type", way.contentType)
				w := fx.serve(r)
				if tc.accepted {
					wantJSON(t, w, `{"id":"A-1"}`)
				} else if w.Code != http.StatusBadRequest && w.Code != http.StatusUnsupportedMediaType {
					t.Errorf("%d %s, want 400 or 415", w.Code, w.Body)
				}
			})
		}
	}
}

func TestBadBodies(t *testing.T) {
	fx := newFixture(t, nil)
	nest := func(open, close string, n int) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	xmlNest := func(n int) string {
		return strings.Repeat("<e>", n) + "x" + strings.Repeat("</e>", n)
	}
	attrs := func(n int) string {
		var b strings.Builder
		b.WriteString("<order")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, ` a%d="v"`, i)
		}
		b.WriteString("><id>1</id></order>")
		return b.String()
	}
	for _, tc := range []struct{ name, contentType, body string }{
		{"truncated JSON", "application/json", `{"a":`},
		{"not JSON", "application/json", `hello`},
		{"single quotes", "application/json", `{'a':1}`},
		{"duplicate key", "application/json", `{"role":"user","role":"admin"}`},
		{"nested duplicate key", "application/json", `{"a":{"b":1,"b":2}}`},
		{"depth 65 arrays", "application/json", nest("[", "]", 65)},
		{"depth 65 objects", "application/json", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65)},
		{"depth 10001", "application/json", nest("[", "]", 10001)},
		{"invalid UTF-8", "application/json", "{\"a\":\"\xff\xfe\"}"},
		{"invalid UTF-8 in a key", "application/json", "{\"\xc3\x28\":1}"},
		{"lone surrogate escape", "application/json", `{"a":"\ud800"}`},
		{"two documents", "application/json", `{} {}`},
		{"trailing data", "application/json", `{"a":1}x`},
		{"XML DOCTYPE", "application/xml", `<!DOCTYPE order><order><id>1</id></order>`},
		{"XML external entity", "application/xml", `<?xml version="1.0"?><!DOCTYPE order [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><order><id>&xxe;</id></order>`},
		{"billion laughs", "application/xml", `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]><lolz>&lol2;</lolz>`},
		{"two XML roots", "application/xml", `<order><id>1</id></order><order><id>2</id></order>`},
		{"XML depth 65", "application/xml", xmlNest(65)},
		{"XML depth 100000", "application/xml", xmlNest(100000)},
		{"257 attributes", "application/xml", attrs(257)},
		{"duplicate attribute", "application/xml", `<order a="1" a="2"><id>1</id></order>`},
		{"unclosed element", "application/xml", `<order><id>1</id>`},
		{"text outside the root", "application/xml", `<order/>trailing`},
		{"NUL character in XML", "application/xml", "<order><id>\x00</id></order>"},
		{"JSON sent as XML", "application/xml", `{"a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := fx.serve(runRequest("acme", "echo", keyAcmeAll, tc.body, "Content-Type", tc.contentType))
			if w.Code != http.StatusBadRequest {
				t.Errorf("%d %.300s, want 400", w.Code, w.Body)
			}
			wantRefusalPrefix(t, w, http.StatusBadRequest, "invalid ")
		})
	}

	for _, tc := range []struct{ name, contentType, body, want string }{
		{"depth 64 arrays", "application/json", nest("[", "]", 64), nest("[", "]", 64)},
		{"role next to ROLE", "application/json", `{"role":"user","ROLE":"admin"}`, `{"role":"user","ROLE":"admin"}`},
		{"XML depth 64", "application/xml", xmlNest(64), ""},
		{"256 attributes", "application/xml", attrs(256), ""},
	} {
		t.Run("accepted: "+tc.name, func(t *testing.T) {
			w := fx.serve(runRequest("acme", "echo", keyAcmeAll, tc.body, "Content-Type", tc.contentType))
			if w.Code != http.StatusOK {
				t.Fatalf("%d %.300s, want 200", w.Code, w.Body)
			}
			if tc.want != "" {
				wantJSON(t, w, tc.want)
			}
		})
	}
}

func TestEmptyBodyIsAnEmptyObject(t *testing.T) {
	fx := newFixture(t, nil)
	for _, ct := range []string{"", "application/json", "application/xml"} {
		t.Run("Content-Type "+ct, func(t *testing.T) {
			r := runRequest("acme", "echo", keyAcmeAll, "")
			if ct == "" {
				r.Header.Del("Content-Type")
			} else {
				r.Header.Set("Content-Type", ct)
			}
			w := fx.serve(r)
			if w.Code != http.StatusOK || w.Body.String() != `{}` {
				t.Errorf("%d %q, want 200 {}", w.Code, w.Body)
			}
		})
	}
	t.Run("a validate rule sees {}", func(t *testing.T) {
		w := fx.serve(runRequest("acme", "hello", keyAcmeAll, ""))
		if w.Code != http.StatusBadRequest || w.Body.String() != `{"error":"name is required","step":"check"}` {
			t.Errorf("%d %s", w.Code, w.Body)
		}
	})
}

// TestNullBodyStaysNull holds that only an empty body is {}: a body that is
// the JSON null reaches the flow as null, on /run and through the queue
// (the stored payload of an /enqueue of null is null), so that a rule
// requiring a document refuses it.
func TestNullBodyStaysNull(t *testing.T) {
	fx := newFixture(t, nil)
	files := testFlows()
	files["flows/acme/required.md"] = flowFile("acme", "required", "",
		"## Step: check\n```validate\n$ != null | \"a document is required\" | syntactic\n```\n\n"+echoSteps)
	fx.publish(files, testAccessYAML(), "c2")

	t.Run("run", func(t *testing.T) {
		w := fx.serve(runRequest("acme", "required", keyAcmeAll, `null`))
		if w.Code != http.StatusBadRequest || w.Body.String() != `{"error":"a document is required","step":"check"}` {
			t.Errorf("body null: %d %s, want 400 {\"error\":\"a document is required\",\"step\":\"check\"}", w.Code, w.Body)
		}
		if w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `null`)); w.Code != http.StatusOK || w.Body.String() != `null` {
			t.Errorf("echo of null: %d %s, want 200 null", w.Code, w.Body)
		}
		if w := fx.serve(runRequest("acme", "required", keyAcmeAll, ``)); w.Code != http.StatusOK || w.Body.String() != `{}` {
			t.Errorf("an empty body: %d %s, want 200 {}", w.Code, w.Body)
		}
	})
	t.Run("queued", func(t *testing.T) {
		srv := host.New(host.Config{Live: fx.reg, Status: fx.reg, Engine: engine.New(engine.Config{}),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
		v := srv.Handle(context.Background(), queue.Delivery{Message: queue.Message{ID: 1, Source: engine.DoorEnqueue, CorrelationID: "m1",
			Payload: []byte(`null`)}, Tenant: "acme", Flow: "required", Attempt: 1})
		if v.Kind != queue.VerdictRetry || v.Error != "step 'check': validation failed (Syntactic): a document is required" {
			t.Errorf("a queued null: %+v, want a retry for the failed rule", v)
		}
	})
}

func TestXMLReachesTheFlowFlattened(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct{ name, body, want string }{
		{"the example", `<order><id>A-1</id></order>`, `{"id":"A-1"}`},
		{"declaration and namespace", `<?xml version="1.0" encoding="UTF-8"?><o:order xmlns:o="urn:x"><o:id>A-1</o:id></o:order>`, `{"id":"A-1"}`},
		{"repeated siblings", `<order><item>a</item><item>b</item><item>c</item></order>`, `{"item":["a","b","c"]}`},
		{"attributes and text", `<order no="7"><note lang="en">hi</note></order>`, `{"@no":"7","note":{"@lang":"en","#text":"hi"}}`},
		{"leaf values are strings", `<order><total>42</total><paid>true</paid></order>`, `{"total":"42","paid":"true"}`},
		{"nested", `<order><customer><name>Ada</name></customer></order>`, `{"customer":{"name":"Ada"}}`},
		{"escaped text", `<order><note>a &amp; b &lt;c&gt;</note></order>`, `{"note":"a & b <c>"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, tc.body, "Content-Type", "application/xml")), tc.want)
		})
	}
}

// TestContentEncodingEveryValue: server.md: "anything else → 415, and
// so is any `Content-Encoding` but `identity`". parseBody read only the
// first Content-Encoding field line once, so a request that sent
// `Content-Encoding: identity` and then `Content-Encoding: gzip` (RFC 9110
// §5.3: the same as `identity, gzip`) passed as uncompressed.
func TestContentEncodingEveryValue(t *testing.T) {
	fx := newFixture(t, nil)
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`,
		"Content-Encoding", "identity", "Content-Encoding", "gzip"))
	if w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("status = %d, want 415 (body %s)", w.Code, w.Body)
	}
}

// TestRunKeepsEveryDigit: a number no float64 holds digit for digit (an
// unsigned 64-bit id, a long decimal) comes back from a flow that passes it
// on exactly as it was sent.
func TestRunKeepsEveryDigit(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	const body = `{"id":12345678901234567890,"amount":0.1000000000000000000001,"ids":[9223372036854775808,-98765432109876543210123],"tiny":1e-400}`
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, body))
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200 (body %s)", w.Code, w.Body)
	}
	if got := strings.TrimSpace(w.Body.String()); got != body {
		t.Errorf("answer = %s\nwant     %s", got, body)
	}
}
