package host_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nexushq/nexus/host"
)

// Signatures: X-Nexus-Timestamp and X-Nexus-Signature: v1=<hex
// HMAC-SHA256(secret, timestamp + "." + body)>, up to 8 values, a 300 s
// window, several secrets while rotating.

const (
	secretOld = "whsec_old_0123456789abcdef0123"
	secretNew = "whsec_new_fedcba9876543210fedc"
)

// sign is the hex HMAC-SHA256 of timestamp + "." + body.
func sign(secret, timestamp, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "." + body))
	return hex.EncodeToString(mac.Sum(nil))
}

// signedRun is a /run request to acme/echo with the given signature
// headers ("" leaves a header out).
func signedRun(body, timestamp, signature string, more ...string) *http.Request {
	r := runRequest("acme", "echo", keyAcmeAll, body, more...)
	if timestamp != "" {
		r.Header.Set("X-Nexus-Timestamp", timestamp)
	}
	if signature != "" {
		r.Header.Set("X-Nexus-Signature", signature)
	}
	return r
}

func TestSignatures(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	const body = `{"orderId":"A-1","total":42}`
	now := t0.Unix()
	ts := strconv.FormatInt(now, 10)
	at := func(d int64) string { return strconv.FormatInt(now+d, 10) }
	good := sign(secretNew, ts, body)
	wrong := sign(secretNew, ts, body+" ")
	list := func(vals ...string) string {
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = "v1=" + v
		}
		return strings.Join(out, ",")
	}
	sha1sig := func() string {
		mac := hmac.New(sha1.New, []byte(secretNew))
		mac.Write([]byte(ts + "." + body))
		return hex.EncodeToString(mac.Sum(nil))
	}()
	bodyOnly := func() string {
		mac := hmac.New(sha256.New, []byte(secretNew))
		mac.Write([]byte(body))
		return hex.EncodeToString(mac.Sum(nil))
	}()
	many := func(n int, valid bool) string {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = sign(secretNew, ts, body+strconv.Itoa(i))
		}
		if valid {
			vals[n-1] = good
		}
		return list(vals...)
	}

	refused := []struct{ name, body, timestamp, signature string }{
		{"no signature headers", body, "", ""},
		{"timestamp only", body, ts, ""},
		{"signature only", body, "", "v1=" + good},
		{"wrong secret", body, ts, "v1=" + sign("whsec_someone_else", ts, body)},
		{"removed secret", body, ts, "v1=" + sign(secretOld, ts, body)},
		{"other body", body, ts, "v1=" + wrong},
		{"body one byte longer", body + " ", ts, "v1=" + good},
		{"body one byte shorter", body[:len(body)-1], ts, "v1=" + good},
		{"re-serialized JSON", `{"orderId": "A-1", "total": 42}`, ts, "v1=" + good},
		{"signed with another timestamp", body, at(1), "v1=" + good},
		{"301 s old", body, at(-301), "v1=" + sign(secretNew, at(-301), body)},
		{"301 s ahead", body, at(301), "v1=" + sign(secretNew, at(301), body)},
		{"a day old", body, at(-86400), "v1=" + sign(secretNew, at(-86400), body)},
		{"non-numeric timestamp", body, "yesterday", "v1=" + sign(secretNew, "yesterday", body)},
		{"+-prefixed timestamp", body, "+" + ts, "v1=" + sign(secretNew, "+"+ts, body)},
		{"negative timestamp", body, "-" + ts, "v1=" + sign(secretNew, "-"+ts, body)},
		{"fractional timestamp", body, ts + ".0", "v1=" + sign(secretNew, ts+".0", body)},
		{"milliseconds timestamp", body, ts + "000", "v1=" + sign(secretNew, ts+"000", body)},
		{"overflowing timestamp", body, "99999999999999999999999", "v1=" + sign(secretNew, "99999999999999999999999", body)},
		{"hex timestamp", body, "0x" + strconv.FormatInt(now, 16), "v1=" + sign(secretNew, "0x"+strconv.FormatInt(now, 16), body)},
		{"no v1= prefix", body, ts, good},
		{"v2 prefix", body, ts, "v2=" + good},
		{"v1a prefix", body, ts, "v1a=" + good},
		{"V1 prefix", body, ts, "V1=" + good},
		{"Standard Webhooks form", body, ts, "v1," + good},
		{"Stripe form", body, ts, "t=" + ts + ",v1=" + good},
		{"empty value", body, ts, "v1="},
		{"truncated signature", body, ts, "v1=" + good[:62]},
		{"odd-length hex", body, ts, "v1=" + good[:63]},
		{"signature with a byte appended", body, ts, "v1=" + good + "00"},
		{"not hex", body, ts, "v1=" + strings.Repeat("zz", 32)},
		{"base64 instead of hex", body, ts, "v1=PJqF0Zp1Q3dYc6rdvT+OVYxqbpWHaXS7Mw5zKaiAYB8="},
		{"HMAC-SHA1", body, ts, "v1=" + sha1sig},
		{"body-only HMAC", body, ts, "v1=" + bodyOnly},
		{"9 values, the valid one last", body, ts, many(9, true)},
		{"1000 values, the valid one last", body, ts, many(1000, true)},
		{"8 wrong values", body, ts, many(8, false)},
	}
	// one hex digit of the right signature changed, at each of its 64
	// places: a near miss anywhere is refused
	for i := range len(good) {
		d := byte('0')
		if good[i] == '0' {
			d = '1'
		}
		tampered := good[:i] + string(d) + good[i+1:]
		refused = append(refused, struct{ name, body, timestamp, signature string }{
			fmt.Sprintf("digit %d changed", i), body, ts, "v1=" + tampered})
	}
	// the plan's figure (RELIABILITY D.17): 100 attacks, 10 controls; the
	// two duplicate-header attacks below count too
	if n := len(refused) + 2; n < 100 {
		t.Fatalf("%d signature attacks, want at least 100", n)
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			w := fx.serve(signedRun(tc.body, tc.timestamp, tc.signature))
			wantRefusalPrefix(t, w, http.StatusUnauthorized, "")
		})
	}
	t.Run("refused: two X-Nexus-Signature headers", func(t *testing.T) {
		r := signedRun(body, ts, "v1="+wrong)
		r.Header.Add("X-Nexus-Signature", "v1="+good)
		wantRefusalPrefix(t, fx.serve(r), http.StatusUnauthorized, "")
	})
	t.Run("refused: two X-Nexus-Timestamp headers", func(t *testing.T) {
		r := signedRun(body, ts, "v1="+good)
		r.Header.Add("X-Nexus-Timestamp", at(-1000))
		wantRefusalPrefix(t, fx.serve(r), http.StatusUnauthorized, "")
	})

	accepted := []struct{ name, body, timestamp, signature string }{
		{"right", body, ts, "v1=" + good},
		{"300 s old", body, at(-300), "v1=" + sign(secretNew, at(-300), body)},
		{"300 s ahead", body, at(300), "v1=" + sign(secretNew, at(300), body)},
		{"uppercase hex", body, ts, "v1=" + strings.ToUpper(good)},
		{"valid value first of several", body, ts, list(good, wrong, wrong)},
		{"valid value among several", body, ts, list(wrong, good, wrong)},
		{"valid value last of 8", body, ts, many(8, true)},
		{"values separated by comma and space", body, ts, "v1=" + wrong + ", v1=" + good},
		{"empty body", "", ts, "v1=" + sign(secretNew, ts, "")},
		{"1 s old", body, at(-1), "v1=" + sign(secretNew, at(-1), body)},
	}
	if len(accepted) < 10 {
		t.Fatalf("%d valid controls, want at least 10", len(accepted))
	}
	for _, tc := range accepted {
		t.Run("accepted: "+tc.name, func(t *testing.T) {
			w := fx.serve(signedRun(tc.body, tc.timestamp, tc.signature))
			if w.Code != http.StatusOK {
				t.Errorf("%d %s, want 200", w.Code, w.Body)
			}
		})
	}

	t.Run("rotation: either configured secret passes", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretOld, secretNew} })
		for _, secret := range []string{secretOld, secretNew} {
			if w := fx.serve(signedRun(body, ts, "v1="+sign(secret, ts, body))); w.Code != http.StatusOK {
				t.Errorf("signed with %s: %d %s", secret, w.Code, w.Body)
			}
		}
		// one value per secret, as a sender mid-rotation sends them
		if w := fx.serve(signedRun(body, ts, list(sign(secretOld, ts, body), sign(secretNew, ts, body)))); w.Code != http.StatusOK {
			t.Errorf("one value per secret: %d %s", w.Code, w.Body)
		}
		wantRefusalPrefix(t, fx.serve(signedRun(body, ts, "v1="+sign("whsec_third", ts, body))), http.StatusUnauthorized, "")
	})
}

// TestSignatureOrder: the gate first, then the body under its ceiling, then
// the signature, then the parse.
func TestSignatureOrder(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	ts := strconv.FormatInt(t0.Unix(), 10)

	t.Run("no key and a huge body: 401 for the key, body unread", func(t *testing.T) {
		r := runRequest("acme", "echo", "", "")
		body := hugeBody(r, 10<<30)
		w := fx.serve(r)
		wantRefusal(t, w, http.StatusUnauthorized, unknownKey)
		if n := body.reads.Load(); n != 0 {
			t.Errorf("the body was read %d times", n)
		}
	})
	t.Run("another tenant, signed: 403", func(t *testing.T) {
		w := fx.serve(runRequest("globex", "shipment", keyAcmeAll, `{}`, "X-Nexus-Timestamp", ts, "X-Nexus-Signature", "v1="+sign(secretNew, ts, `{}`)))
		wantRefusal(t, w, http.StatusForbidden, "key acme-all may not call globex/shipment")
	})
	t.Run("unsigned and over the ceiling: 413", func(t *testing.T) {
		r := runRequest("acme", "echo", keyAcmeAll, "")
		hugeBody(r, host.DefaultMaxBodyBytes+1)
		wantRefusal(t, fx.serve(r), http.StatusRequestEntityTooLarge, "body exceeds 1048576 bytes")
	})
	t.Run("unsigned bad JSON: 401, not 400", func(t *testing.T) {
		wantRefusalPrefix(t, fx.serve(signedRun(`{"a":`, "", "")), http.StatusUnauthorized, "")
	})
	t.Run("unsigned text/csv: 401, not 415", func(t *testing.T) {
		wantRefusalPrefix(t, fx.serve(signedRun("a,b", "", "", "Content-Type", "text/csv")), http.StatusUnauthorized, "")
	})
	t.Run("signed bad JSON: 400", func(t *testing.T) {
		wantRefusalPrefix(t, fx.serve(signedRun(`{"a":`, ts, "v1="+sign(secretNew, ts, `{"a":`))), http.StatusBadRequest, "invalid JSON")
	})
	t.Run("signed text/csv: 415", func(t *testing.T) {
		wantRefusal(t, fx.serve(signedRun("a,b", ts, "v1="+sign(secretNew, ts, "a,b"), "Content-Type", "text/csv")),
			http.StatusUnsupportedMediaType, `unsupported content type "text/csv"`)
	})
	t.Run("signed XML", func(t *testing.T) {
		const x = `<order><id>A-1</id></order>`
		wantJSON(t, fx.serve(signedRun(x, ts, "v1="+sign(secretNew, ts, x), "Content-Type", "application/xml")), `{"id":"A-1"}`)
	})
	t.Run("the window follows the clock", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
		r := func() *http.Request { return signedRun(`{}`, ts, "v1="+sign(secretNew, ts, `{}`)) }
		if w := fx.serve(r()); w.Code != http.StatusOK {
			t.Fatalf("fresh: %d %s", w.Code, w.Body)
		}
		fx.clock.Advance(301e9)
		wantRefusalPrefix(t, fx.serve(r()), http.StatusUnauthorized, "")
	})
}

func TestGitWebhook(t *testing.T) {
	hub := func(secret, body string) string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		return "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	const payload = `{"ref":"refs/heads/main","after":"0123"}`
	hook := func(fx *fixture, body string, header ...string) *http.Request {
		return newRequest(http.MethodPost, "/hooks/git", body, append([]string{"Content-Type", "application/json"}, header...)...)
	}
	started := func(t *testing.T, fx *fixture, r *http.Request, calls int64) {
		t.Helper()
		w := fx.serve(r)
		if w.Code != http.StatusAccepted || w.Body.String() != `{"sync":"started"}` {
			t.Errorf("%d %s, want 202 {\"sync\":\"started\"}", w.Code, w.Body)
		}
		if w.Header().Get("X-Correlation-Id") == "" {
			t.Error("no X-Correlation-Id")
		}
		if n := fx.syncer.n.Load(); n != calls {
			t.Errorf("Trigger called %d times, want %d", n, calls)
		}
	}

	t.Run("without secrets", func(t *testing.T) {
		fx := newFixture(t, nil)
		started(t, fx, hook(fx, payload), 1)
		started(t, fx, hook(fx, ""), 2)
	})
	t.Run("with secrets", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretOld, secretNew} })
		for _, tc := range []struct{ name, sig string }{
			{"missing", ""},
			{"wrong secret", hub("whsec_someone_else", payload)},
			{"other body", hub(secretNew, payload+" ")},
			{"no sha256= prefix", strings.TrimPrefix(hub(secretNew, payload), "sha256=")},
			{"sha1 prefix", "sha1=" + strings.TrimPrefix(hub(secretNew, payload), "sha256=")},
			{"truncated", hub(secretNew, payload)[:40]},
			{"not hex", "sha256=" + strings.Repeat("zz", 32)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := hook(fx, payload)
				if tc.sig != "" {
					r.Header.Set("X-Hub-Signature-256", tc.sig)
				}
				wantRefusalPrefix(t, fx.serve(r), http.StatusUnauthorized, "")
				if n := fx.syncer.n.Load(); n != 0 {
					t.Errorf("Trigger called %d times by a refused hook", n)
				}
			})
		}
		started(t, fx, hook(fx, payload, "X-Hub-Signature-256", hub(secretNew, payload)), 1)
		started(t, fx, hook(fx, payload, "X-Hub-Signature-256", hub(secretOld, payload)), 2)
	})
	// The webhook's ceiling is GitHub's own (25 MiB), whatever
	// --max-body-bytes says of the doors: the body goes through the MACs
	// as it arrives, never held. A push of many commits is megabytes; it
	// was refused 413 at --max-body-bytes (1 MiB by default).
	t.Run("with secrets, a body past the doors' ceiling", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) {
			c.Secrets, c.MaxBodyBytes = []string{secretNew}, int64(len(payload))
		})
		big := payload + strings.Repeat(" ", 2<<20)
		started(t, fx, hook(fx, big, "X-Hub-Signature-256", hub(secretNew, big)), 1)
	})
	// Only a body over the ceiling is too large; one that cannot be read
	// (cut short, a broken chunk) is a bad request. Either way no sync.
	t.Run("with secrets, an unreadable body", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) {
			c.Secrets, c.MaxBodyBytes = []string{secretNew}, int64(len(payload))
		})
		const ceiling = 25 << 20
		for _, tc := range []struct {
			name   string
			body   io.Reader
			status int
			msg    string
		}{
			{"one byte over the ceiling", io.LimitReader(endless{}, ceiling+1), http.StatusRequestEntityTooLarge,
				"the webhook body exceeds " + strconv.Itoa(ceiling) + " bytes"},
			{"cut short", io.MultiReader(strings.NewReader(`{"ref":`), iotest.ErrReader(io.ErrUnexpectedEOF)), http.StatusBadRequest,
				"the body could not be read: it was cut short or its chunked encoding is broken"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := hook(fx, "", "X-Hub-Signature-256", hub(secretNew, payload))
				r.Body, r.ContentLength = io.NopCloser(tc.body), -1
				wantRefusal(t, fx.serve(r), tc.status, tc.msg)
				if n := fx.syncer.n.Load(); n != 0 {
					t.Errorf("Trigger called %d times by a refused hook", n)
				}
			})
		}
		started(t, fx, hook(fx, payload, "X-Hub-Signature-256", hub(secretNew, payload)), 1)
	})
	t.Run("without a syncer: 404", func(t *testing.T) {
		fx := newFixture(t, func(c *host.Config) { c.Sync = nil })
		w := fx.serve(hook(fx, payload))
		if w.Code != http.StatusNotFound || w.Header().Get("X-Correlation-Id") == "" {
			t.Errorf("%d %s %v", w.Code, w.Body, w.Header())
		}
	})
	t.Run("GET: 405", func(t *testing.T) {
		fx := newFixture(t, nil)
		if w := fx.serve(newRequest(http.MethodGet, "/hooks/git", "")); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%d %s", w.Code, w.Body)
		}
		if n := fx.syncer.n.Load(); n != 0 {
			t.Errorf("Trigger called %d times", n)
		}
	})
}

// TestSecretComparisonsAreConstantTime is a static check: the functions
// that compare signatures and keys use hmac.Equal or
// subtle.ConstantTimeCompare, and no ==, bytes.Equal or strings.Compare
// between two values that are not constants.
func TestSecretComparisonsAreConstantTime(t *testing.T) {
	checked := map[string][]string{
		"signature.go":        {"verifySignature"},
		"ops.go":              {"admin", "hookGit"},
		"session.go":          {"validSession", "isAdminKey", "adminAuth", "crossOrigin"},
		"ui.go":               {"uiLogin"},
		"../access/access.go": {"Lookup"},
	}
	fset := token.NewFileSet()
	for file, funcs := range checked {
		f, err := parser.ParseFile(fset, filepath.FromSlash(file), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !contains(funcs, fd.Name.Name) {
				continue
			}
			found[fd.Name.Name] = true
			constantTime := 0
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					switch callName(n) {
					case "hmac.Equal", "subtle.ConstantTimeCompare", "s.isAdminKey": // isAdminKey is checked here too
						constantTime++
					case "bytes.Equal", "bytes.Compare", "strings.Compare", "reflect.DeepEqual", "strings.EqualFold", "slices.Equal":
						t.Errorf("%s: %s compares with %s", fset.Position(n.Pos()), fd.Name.Name, callName(n))
					}
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && !trivial(n.X) && !trivial(n.Y) {
						t.Errorf("%s: %s compares two values with %s", fset.Position(n.Pos()), fd.Name.Name, n.Op)
					}
				}
				return true
			})
			if constantTime == 0 {
				t.Errorf("%s: %s has no hmac.Equal or subtle.ConstantTimeCompare", file, fd.Name.Name)
			}
		}
		for _, fn := range funcs {
			if !found[fn] {
				t.Errorf("%s: no function %s to check", file, fn)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func callName(c *ast.CallExpr) string {
	if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok {
			return id.Name + "." + sel.Sel.Name
		}
	}
	return ""
}

// trivial reports whether e is a literal, nil, true/false, a call of len or
// of a comparison function, or a package-level name (a constant).
func trivial(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		return e.Name == "nil" || e.Name == "true" || e.Name == "false"
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "len" {
			return true
		}
		switch callName(e) {
		case "hmac.Equal", "subtle.ConstantTimeCompare":
			return true
		}
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok && (id.Name == "sha256" || id.Name == "io" || id.Name == "http") {
			return true
		}
	}
	return false
}

// TestUnsignedWebhookIsRefusedBeforeItsBody: with --secret, POST
// /hooks/git (which needs no key) refuses a request without a well-formed
// X-Hub-Signature-256 before reading its body (it once read up to
// --max-body-bytes first), and a signed one's body goes through the MACs
// as it arrives.
func TestUnsignedWebhookIsRefusedBeforeItsBody(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) {
		c.Secrets = []string{"whsec_test_secret"}
		c.MaxBodyBytes = 1 << 30 // an operator whose flows take large documents
	})
	r := newRequest(http.MethodPost, "/hooks/git", "", "Content-Type", "application/json")
	const size = 64 << 20
	counted := &countingBody{r: io.NopCloser(io.LimitReader(endless{}, size))}
	r.Body, r.ContentLength = counted, size
	r.Header.Set("Content-Length", strconv.Itoa(size))
	w := fx.serve(r)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("an unsigned webhook: %d %s, want 401", w.Code, w.Body)
	}
	if n := counted.n.Load(); n > 8<<20 {
		t.Errorf("an unsigned, anonymous webhook had %d bytes of its body read before it was refused", n)
	}
	if n := fx.syncer.n.Load(); n != 0 {
		t.Errorf("Trigger called %d times", n)
	}
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	r io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return b.r.Close() }

// TestOversizedWebhookIsRefusedBeforeItsBody: a signed webhook whose
// Content-Length is over the webhook's ceiling is answered 413 at once,
// with Connection: close, before a byte of its body is read, as the doors
// answer a Content-Length over theirs. It was read and put through the
// MACs up to the ceiling (25 MiB) first, and a caller that announced the
// length and sent less waited for the server's read timeout.
func TestOversizedWebhookIsRefusedBeforeItsBody(t *testing.T) {
	const ceiling = 25 << 20
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{"whsec_test_secret"} })
	r := newRequest(http.MethodPost, "/hooks/git", "", "Content-Type", "application/json",
		"X-Hub-Signature-256", "sha256="+strings.Repeat("ab", 32))
	counted := &countingBody{r: io.NopCloser(io.LimitReader(endless{}, ceiling+1))}
	r.Body, r.ContentLength = counted, ceiling+1
	r.Header.Set("Content-Length", strconv.Itoa(ceiling+1))
	w := fx.serve(r)
	wantRefusal(t, w, http.StatusRequestEntityTooLarge, "the webhook body exceeds "+strconv.Itoa(ceiling)+" bytes")
	if got := w.Header().Get("Connection"); got != "close" {
		t.Errorf("Connection: %q, want close", got)
	}
	if n := counted.n.Load(); n != 0 {
		t.Errorf("%d bytes of a body announced over the ceiling were read before its 413", n)
	}
	if n := fx.syncer.n.Load(); n != 0 {
		t.Errorf("Trigger called %d times", n)
	}
}

// TestSignatureHeaderCounts: a request without one of the two headers is
// told the signature is missing; one with a header given twice is told so,
// not that its signature is missing (it said "missing signature" to a
// caller that had sent two).
func TestSignatureHeaderCounts(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	const body = `{}`
	ts := strconv.FormatInt(t0.Unix(), 10)
	good := "v1=" + sign(secretNew, ts, body)
	const missing = "missing signature: send one X-Nexus-Timestamp and one X-Nexus-Signature header"
	tests := []struct {
		name        string
		ts, sig     []string
		wantMessage string
	}{
		{"neither", nil, nil, missing},
		{"timestamp only", []string{ts}, nil, missing},
		{"signature only", nil, []string{good}, missing},
		{"two signature headers", []string{ts}, []string{good, good},
			"more than one X-Nexus-Signature header: send one, its values comma-separated"},
		{"two timestamp headers", []string{ts, ts}, []string{good},
			"more than one X-Nexus-Timestamp header: send one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := signedRun(body, "", "")
			r.Header["X-Nexus-Timestamp"] = tt.ts
			r.Header["X-Nexus-Signature"] = tt.sig
			wantRefusal(t, fx.serve(r), http.StatusUnauthorized, tt.wantMessage)
		})
	}
}

// TestMillisecondTimestamp: a timestamp in milliseconds (JavaScript's
// Date.now()) is told to be one, not that it is more than 300 s away (it
// was: 50,000 years away, which does not say what to change).
func TestMillisecondTimestamp(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	const body = `{}`
	const want = "malformed X-Nexus-Timestamp: unix seconds expected, not milliseconds"
	for _, ms := range []int64{t0.UnixMilli(), t0.UnixMilli() - 299_000, t0.UnixMilli() + 299_999} {
		ts := strconv.FormatInt(ms, 10)
		wantRefusal(t, fx.serve(signedRun(body, ts, "v1="+sign(secretNew, ts, body))), http.StatusUnauthorized, want)
	}
	// a timestamp of seconds far off is still far off
	ts := strconv.FormatInt(t0.Unix()*100, 10)
	wantRefusal(t, fx.serve(signedRun(body, ts, "v1="+sign(secretNew, ts, body))), http.StatusUnauthorized,
		"signature timestamp is more than 300 s away from the server's clock")
}

// TestGitWebhookTwoSignatures: a webhook with two X-Hub-Signature-256
// headers is refused 401 before its body is read, as the doors refuse two
// X-Nexus-Signature headers: which one counts is a proxy's choice. The
// first was checked and the second ignored, so a valid one ahead of junk
// started a sync.
func TestGitWebhookTwoSignatures(t *testing.T) {
	const payload = `{"ref":"refs/heads/main"}`
	mac := hmac.New(sha256.New, []byte(secretNew))
	mac.Write([]byte(payload))
	good := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	for _, tc := range []struct{ name, first, second string }{
		{"valid, then junk", good, "sha256=" + strings.Repeat("ab", 32)},
		{"junk, then valid", "junk", good},
		{"the same twice", good, good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(http.MethodPost, "/hooks/git", payload, "Content-Type", "application/json",
				"X-Hub-Signature-256", tc.first, "X-Hub-Signature-256", tc.second)
			wantRefusal(t, fx.serve(r), http.StatusUnauthorized, "more than one X-Hub-Signature-256 header: send one")
			if n := fx.syncer.n.Load(); n != 0 {
				t.Errorf("Trigger called %d times by a refused hook", n)
			}
		})
	}
}

// TestSignatureWindowEdges: the window is counted in whole seconds, as
// X-Nexus-Timestamp is, so a timestamp 300 s away either way passes during
// the whole of the server's second at the edge, and one 301 s away is
// refused from that second's start. The server's clock read 0.1 s into the
// edge second refused a timestamp exactly 300 s old.
func TestSignatureWindowEdges(t *testing.T) {
	ts := strconv.FormatInt(t0.Unix(), 10)
	sig := "v1=" + sign(secretNew, ts, `{}`)
	tests := []struct {
		name string
		now  time.Duration // the server's clock, from the timestamp's second
		want int
	}{
		{"300 s old, .0", 300 * time.Second, http.StatusOK},
		{"300 s old, .1", 300*time.Second + 100*time.Millisecond, http.StatusOK},
		{"300 s old, .999", 300*time.Second + 999*time.Millisecond, http.StatusOK},
		{"301 s old, .0", 301 * time.Second, http.StatusUnauthorized},
		{"300 s ahead, .0", -300 * time.Second, http.StatusOK},
		{"300 s ahead, .1", -300*time.Second + 100*time.Millisecond, http.StatusOK},
		{"300 s ahead, .999", -300*time.Second + 999*time.Millisecond, http.StatusOK},
		{"301 s ahead, .999", -301*time.Second + 999*time.Millisecond, http.StatusUnauthorized},
		{"301 s ahead, .0", -301 * time.Second, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, func(c *host.Config) {
				c.Secrets = []string{secretNew}
				c.Now = func() time.Time { return t0.Add(tt.now) }
			})
			w := fx.serve(signedRun(`{}`, ts, sig))
			if w.Code != tt.want {
				t.Errorf("clock at %v from the timestamp: %d %s, want %d", tt.now, w.Code, w.Body, tt.want)
			}
		})
	}
}

// TestSignatureRefusalsChallenge: every 401 names the scheme the door
// expects in WWW-Authenticate (RFC 9110 requires one on a 401): Bearer for
// a missing or unknown key, Nexus-Signature for a door's signature,
// Hub-Signature-256 for the git webhook's. The signature's 401s sent none.
func TestSignatureRefusalsChallenge(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.Secrets = []string{secretNew} })
	ts := strconv.FormatInt(t0.Unix(), 10)
	old := strconv.FormatInt(t0.Unix()-301, 10)
	hook := func(sig ...string) *http.Request {
		return newRequest(http.MethodPost, "/hooks/git", `{}`, append([]string{"Content-Type", "application/json"}, sig...)...)
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want string
	}{
		{"no key", runRequest("acme", "echo", "", `{}`), "Bearer"},
		{"unsigned", signedRun(`{}`, "", ""), "Nexus-Signature"},
		{"wrong signature", signedRun(`{}`, ts, "v1="+sign(secretOld, ts, `{}`)), "Nexus-Signature"},
		{"stale timestamp", signedRun(`{}`, old, "v1="+sign(secretNew, old, `{}`)), "Nexus-Signature"},
		{"malformed signature", signedRun(`{}`, ts, "v2=ab"), "Nexus-Signature"},
		{"webhook unsigned", hook(), "Hub-Signature-256"},
		{"webhook two signatures", hook("X-Hub-Signature-256", "sha256=00", "X-Hub-Signature-256", "sha256=00"), "Hub-Signature-256"},
		{"webhook wrong signature", hook("X-Hub-Signature-256", "sha256="+strings.Repeat("00", 32)), "Hub-Signature-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := fx.serve(tc.r)
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("%d %s, want 401", w.Code, w.Body)
			}
			if got := w.Header().Values("WWW-Authenticate"); len(got) != 1 || got[0] != tc.want {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tc.want)
			}
		})
	}
	// a signed request is answered without a challenge
	w := fx.serve(signedRun(`{}`, ts, "v1="+sign(secretNew, ts, `{}`)))
	if w.Code != http.StatusOK || w.Header().Get("WWW-Authenticate") != "" {
		t.Errorf("signed: %d, WWW-Authenticate %q, want 200 and none", w.Code, w.Header().Get("WWW-Authenticate"))
	}
}

// TestWebhookWithoutASecretAnswersBeforeItsBody: POST /hooks/git on a
// host without a secret, which has no use for the body (the 202 of a host
// that follows a repo, the 404 of one that follows none), answers at once
// with Connection: close, over a real connection whose caller announced a
// body and has not sent it. net/http read up to 256 KiB of it before the
// answer, so that caller waited for the server's read timeout.
func TestWebhookWithoutASecretAnswersBeforeItsBody(t *testing.T) {
	for _, tt := range []struct {
		name   string
		edit   func(*host.Config)
		status string
	}{
		{"a host that follows a repo", nil, "202 Accepted"},
		{"a host that follows none", func(c *host.Config) { c.Sync = nil }, "404 Not Found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, tt.edit)
			resp := answerBeforeTheBody(t, fx.handler, "POST /hooks/git HTTP/1.1\r\nHost: nexus.test\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
			if resp.Status != tt.status || !resp.Close || resp.Header.Get("X-Correlation-Id") == "" {
				t.Errorf("%s, Connection: close %v, X-Correlation-Id %q; want %s, the connection closed", resp.Status, resp.Close, resp.Header.Get("X-Correlation-Id"), tt.status)
			}
		})
	}
}
