package host_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The access gate: 401, 400 for a name, 403, 404, 429, in that order, each
// before one byte of the body is read.

const unknownKey = "missing or unknown API key"

func TestGateUnauthenticated(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct {
		name, authorization, path string
		second                    string // a second Authorization header
	}{
		{"no Authorization", "", "/flows/acme/echo/run", ""},
		// which one a proxy in front reads is anyone's guess (the first,
		// the last, or one it added): neither counts
		{"two Authorization headers, the first a key", "Bearer " + keyAcmeAll, "/flows/acme/echo/run", "Bearer nxk_not_a_key"},
		{"two Authorization headers, the last a key", "Bearer nxk_not_a_key", "/flows/acme/echo/run", "Bearer " + keyAcmeAll},
		{"Basic credentials", "Basic YWNtZTprZXktYWNtZS1hbGw=", "/flows/acme/echo/run", ""},
		{"Basic with a real key", "Basic " + keyAcmeAll, "/flows/acme/echo/run", ""},
		{"empty Bearer", "Bearer ", "/flows/acme/echo/run", ""},
		{"Bearer of spaces", "Bearer     ", "/flows/acme/echo/run", ""},
		{"Bearer without a space", "Bearer" + keyAcmeAll, "/flows/acme/echo/run", ""},
		{"unknown key", "Bearer nxk_not_a_key", "/flows/acme/echo/run", ""},
		{"revoked key", "Bearer " + keyRevoked, "/flows/acme/echo/run", ""},
		{"a key's hash as the key", "Bearer " + hashHex(keyAcmeAll), "/flows/acme/echo/run", ""},
		{"key with a trailing byte", "Bearer " + keyAcmeAll + "x", "/flows/acme/echo/run", ""},
		// the key is checked first: a bad name, another tenant, an
		// undeployed flow are all 401 without a key
		{"no key, bad tenant name", "", "/flows/Acme/echo/run", ""},
		{"unknown key, dot-dot tenant", "Bearer nope", "/flows/%2e%2e/echo/run", ""},
		{"no key, other tenant", "", "/flows/globex/shipment/run", ""},
		{"no key, undeployed flow", "", "/flows/acme/nope/run", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(http.MethodPost, tc.path, "", "Content-Type", "application/json")
			if tc.authorization != "" {
				r.Header.Set("Authorization", tc.authorization)
			}
			if tc.second != "" {
				r.Header.Add("Authorization", tc.second)
			}
			body := hugeBody(r, 10<<30) // an unauthenticated caller announcing 10 GiB
			w := fx.serve(r)
			wantRefusal(t, w, http.StatusUnauthorized, unknownKey)
			if got := w.Header().Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("WWW-Authenticate = %q, want Bearer", got)
			}
			if n := body.reads.Load(); n != 0 {
				t.Errorf("the body was read %d times before the 401", n)
			}
		})
	}
}

// nameError is the name rule's text for a name of the pair tenant/flow.
func nameError(kind, name, otherKind, other, reason string) string {
	return `invalid name ` + quote(name) + ` for ` + kind + ` (` + otherKind + ` ` + quote(other) + `): ` + reason
}

func TestGateNameRule(t *testing.T) {
	fx := newFixture(t, nil)
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		name, key, path, want string
	}{
		{"uppercase tenant", keyAcmeAll, "/flows/Acme/echo/run",
			nameError("tenant", "Acme", "flow", "echo", "character 'A' at position 1 is not allowed")},
		{"dotted flow", keyAcmeAll, "/flows/acme/a.b/run",
			nameError("flow", "a.b", "tenant", "acme", "character '.' at position 2 is not allowed")},
		{"raw dot-dot tenant", keyAcmeAll, "/flows/../echo/run",
			nameError("tenant", "..", "flow", "echo", "character '.' at position 1 is not allowed")},
		{"encoded dot-dot tenant", keyAcmeAll, "/flows/%2e%2e/echo/run",
			nameError("tenant", "..", "flow", "echo", "character '.' at position 1 is not allowed")},
		{"encoded dot-dot flow", keyAcmeAll, "/flows/acme/%2E%2E/run",
			nameError("flow", "..", "tenant", "acme", "character '.' at position 1 is not allowed")},
		{"65-character flow", keyAcmeAll, "/flows/acme/" + long + "/run",
			nameError("flow", long, "tenant", "acme", "the name is 65 characters long, more than 64")},
		{"65-character tenant", keyAcmeAll, "/flows/" + long + "/echo/run",
			nameError("tenant", long, "flow", "echo", "the name is 65 characters long, more than 64")},
		{"NUL in the tenant", keyAcmeAll, "/flows/a%00/echo/run",
			nameError("tenant", "a\x00", "flow", "echo", `character '\x00' at position 2 is not allowed`)},
		{"leading hyphen", keyAcmeAll, "/flows/acme/-echo/run",
			nameError("flow", "-echo", "tenant", "acme", "character '-' at position 1 is not allowed")},
		// the name comes before the tenant and the allowlist
		{"another tenant's key, bad tenant name", keyGlobex, "/flows/Acme/echo/run",
			nameError("tenant", "Acme", "flow", "echo", "character 'A' at position 1 is not allowed")},
		{"another tenant's key, bad flow name", keyGlobex, "/flows/acme/a.b/run",
			nameError("flow", "a.b", "tenant", "acme", "character '.' at position 2 is not allowed")},
		{"allowlisted key, bad flow name", keyAcmeOrders, "/flows/acme/Order-intake/run",
			nameError("flow", "Order-intake", "tenant", "acme", "character 'O' at position 1 is not allowed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(http.MethodPost, tc.path, "", "Authorization", "Bearer "+tc.key, "Content-Type", "application/json")
			body := hugeBody(r, 10<<30)
			w := fx.serve(r)
			wantRefusal(t, w, http.StatusBadRequest, tc.want)
			if n := body.reads.Load(); n != 0 {
				t.Errorf("the body was read %d times before the 400", n)
			}
		})
	}

	t.Run("64 characters is a name", func(t *testing.T) {
		name := strings.Repeat("b", 64)
		w := fx.serve(runRequest("acme", name, keyAcmeAll, `{}`))
		wantRefusal(t, w, http.StatusNotFound, "no flow acme/"+name+" is deployed")
	})
}

func TestGateForbidden(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct {
		name, key, tenant, flow, want string
	}{
		{"another tenant's flow", keyAcmeOrders, "globex", "shipment", "key acme-orders may not call globex/shipment"},
		{"another tenant's flow, all-flows key", keyAcmeAll, "globex", "shipment", "key acme-all may not call globex/shipment"},
		{"another tenant's undeployed flow", keyGlobex, "acme", "x", "key globex-all may not call acme/x"},
		{"deployed flow outside the allowlist", keyAcmeOrders, "acme", "echo", "key acme-orders may not call acme/echo"},
		// the allowlist is checked before the flow's existence
		{"undeployed flow outside the allowlist", keyAcmeOrders, "acme", "x", "key acme-orders may not call acme/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runRequest(tc.tenant, tc.flow, tc.key, "")
			body := hugeBody(r, 10<<30)
			w := fx.serve(r)
			wantRefusal(t, w, http.StatusForbidden, tc.want)
			if n := body.reads.Load(); n != 0 {
				t.Errorf("the body was read %d times before the 403", n)
			}
		})
	}
	t.Run("the allowlisted flow passes", func(t *testing.T) {
		wantJSON(t, fx.serve(runRequest("acme", "order-intake", keyAcmeOrders, `{}`)), `{"accepted":true}`)
	})
}

func TestGateNotDeployed(t *testing.T) {
	fx := newFixture(t, nil)
	r := runRequest("acme", "x", keyAcmeAll, "")
	body := hugeBody(r, 10<<30)
	w := fx.serve(r)
	wantRefusal(t, w, http.StatusNotFound, "no flow acme/x is deployed")
	if n := body.reads.Load(); n != 0 {
		t.Errorf("the body was read %d times before the 404", n)
	}

	// a withdrawn flow is gone from the live set at once
	files := testFlows()
	delete(files, "flows/acme/echo.md")
	fx.publish(files, testAccessYAML(), "1111111111111111111111111111111111111111")
	wantRefusal(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{}`)), http.StatusNotFound, "no flow acme/echo is deployed")
}

func TestGateRateLimit(t *testing.T) {
	fx := newFixture(t, nil)

	// refusals earlier in the gate take no token
	wantRefusal(t, fx.serve(runRequest("acme", "x", keyAcmeLimited, `{}`)), http.StatusNotFound, "no flow acme/x is deployed")
	wantRefusal(t, fx.serve(runRequest("globex", "shipment", keyAcmeLimited, `{}`)), http.StatusForbidden, "key acme-limited may not call globex/shipment")

	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{"n":1}`)), `{"n":1}`)

	r := runRequest("acme", "echo", keyAcmeLimited, "")
	body := hugeBody(r, 10<<30)
	w := fx.serve(r)
	wantRefusal(t, w, http.StatusTooManyRequests, "rate limit exceeded")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	if n := body.reads.Load(); n != 0 {
		t.Errorf("the body was read %d times before the 429", n)
	}

	// the bucket is the key's: other keys are not limited by it
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"n":2}`)), `{"n":2}`)
	// with the bucket empty, an undeployed flow is still 404 (404 comes first)
	wantRefusal(t, fx.serve(runRequest("acme", "x", keyAcmeLimited, `{}`)), http.StatusNotFound, "no flow acme/x is deployed")

	fx.clock.Advance(500 * time.Millisecond)
	w = fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`))
	wantRefusal(t, w, http.StatusTooManyRequests, "rate limit exceeded")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After half a second before the next token = %q, want 1 (whole seconds, rounded up)", got)
	}

	fx.clock.Advance(500 * time.Millisecond)
	wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{"n":3}`)), `{"n":3}`)

	t.Run("Retry-After rounds up to whole seconds", func(t *testing.T) {
		// rate 0.4/s: a token every 2.5 s
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeSlow, `{}`)), `{}`)
		w := fx.serve(runRequest("acme", "echo", keyAcmeSlow, `{}`))
		wantRefusal(t, w, http.StatusTooManyRequests, "rate limit exceeded")
		if got := w.Header().Get("Retry-After"); got != "3" {
			t.Errorf("Retry-After 2.5 s before the next token = %q, want 3", got)
		}
		fx.clock.Advance(time.Second)
		w = fx.serve(runRequest("acme", "echo", keyAcmeSlow, `{}`))
		if got := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || got != "2" {
			t.Errorf("1.5 s before the next token: %d Retry-After %q, want 429 and 2", w.Code, got)
		}
		fx.clock.Advance(1500 * time.Millisecond)
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeSlow, `{}`)), `{}`)
	})

	t.Run("a clock going backwards mints no token", func(t *testing.T) {
		fx := newFixture(t, nil)
		wantJSON(t, fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)), `{}`)
		fx.clock.Advance(-time.Hour)
		if w := fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)); w.Code != http.StatusTooManyRequests {
			t.Errorf("after the clock went back an hour: %d %s, want 429", w.Code, w.Body)
		}
		fx.clock.Advance(time.Hour)
		if w := fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)); w.Code != http.StatusTooManyRequests {
			t.Errorf("back at the same instant: %d %s, want 429", w.Code, w.Body)
		}
	})
}

// TestGateBurstBound: within one instant a key gets at most its burst.
func TestGateBurstBound(t *testing.T) {
	fx := newFixture(t, nil)
	ok := 0
	for i := 0; i < 50; i++ {
		if fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)).Code == http.StatusOK {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d of 50 requests at one instant passed a bucket of burst 1", ok)
	}
}

// TestGateRateChangeKeepsTheTokensHeld: a commit that changes a key's rate
// or burst takes effect at once, on the tokens the key holds: a key that
// has spent its bucket gets no new token from the change, only from the
// new rate as time passes.
func TestGateRateChangeKeepsTheTokensHeld(t *testing.T) {
	fx := newFixture(t, nil)
	limited := func(extra string) string {
		return strings.Replace(testAccessYAML(), "    rate: 1\n    burst: 1\n", extra, 1)
	}
	send := func() *httptest.ResponseRecorder { return fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)) }
	wantJSON(t, send(), `{}`)
	wantRefusal(t, send(), http.StatusTooManyRequests, "rate limit exceeded")

	// slowed down to one request in 100 s: still spent
	fx.publish(testFlows(), limited("    rate: 0.01\n    burst: 1\n"), "2222222222222222222222222222222222222222")
	w := send()
	wantRefusal(t, w, http.StatusTooManyRequests, "rate limit exceeded")
	if got := w.Header().Get("Retry-After"); got != "100" {
		t.Errorf("Retry-After at the new rate of 0.01/s = %q, want 100", got)
	}

	// a larger burst is room to fill, not tokens given
	fx.publish(testFlows(), limited("    rate: 1\n    burst: 5\n"), "3333333333333333333333333333333333333333")
	wantRefusal(t, send(), http.StatusTooManyRequests, "rate limit exceeded")
	fx.clock.Advance(2 * time.Second)
	passed := 0
	for range 5 {
		if send().Code == http.StatusOK {
			passed++
		}
	}
	if passed != 2 {
		t.Errorf("%d requests passed 2 s after the burst was raised to 5 at 1/s, want 2 (the tokens of 2 s)", passed)
	}

	// a smaller burst caps the tokens held
	fx.clock.Advance(time.Minute)
	fx.publish(testFlows(), limited("    rate: 1\n    burst: 2\n"), "4444444444444444444444444444444444444444")
	passed = 0
	for range 5 {
		if send().Code == http.StatusOK {
			passed++
		}
	}
	if passed != 2 {
		t.Errorf("%d requests passed at one instant with a full bucket lowered to burst 2, want 2", passed)
	}
}

func TestRouterAnswers(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct {
		name, method, path string
		status             int
	}{
		{"GET on the run route", http.MethodGet, "/flows/acme/echo/run", http.StatusMethodNotAllowed},
		{"PUT on the run route", http.MethodPut, "/flows/acme/echo/run", http.StatusMethodNotAllowed},
		{"unknown path", http.MethodGet, "/nope", http.StatusNotFound},
		{"encoded slash in a name", http.MethodPost, "/flows/a%2Fb/echo/run", http.StatusNotFound},
		{"trailing slash", http.MethodPost, "/flows/acme/echo/run/", http.StatusNotFound},
		// the router's own OPTIONS answer echoes it too ("Every answer
		// echoes it, the router's own 404 and 405 included", server.md);
		// httprouter's once did not
		{"OPTIONS on the run route", http.MethodOptions, "/flows/acme/echo/run", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(tc.method, tc.path, `{}`, "Authorization", "Bearer "+keyAcmeAll, "X-Correlation-ID", "router-1")
			w := fx.serve(r)
			if tc.status != 0 && w.Code != tc.status {
				t.Errorf("status = %d, want %d (%s)", w.Code, tc.status, w.Body)
			}
			if got := w.Header().Get("X-Correlation-Id"); got != "router-1" {
				t.Errorf("X-Correlation-Id = %q, want the incoming router-1", got)
			}
		})
	}
}

// TestRouterNamesThePathAsSent: the router's 404 and 405 name the path as
// the request sent it, escapes kept: an encoded slash in a name is told
// from a slash between names. They named the decoded path
// (/flows/a/b/echo/run for /flows/a%2Fb/echo/run), a path no one sent. A
// path with an encoded slash names no endpoint: the router routed its
// decoded form, so /flows/acme%2Fecho/run ran acme/echo, past a proxy
// rule written for /flows/acme/echo/run.
func TestRouterNamesThePathAsSent(t *testing.T) {
	fx := newFixture(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodPost, "/flows/a%2Fb/echo/run", http.StatusNotFound, "no such endpoint: POST /flows/a%2Fb/echo/run"},
		{http.MethodPost, "/flows/acme/echo%2fx/run", http.StatusNotFound, "no such endpoint: POST /flows/acme/echo%2fx/run"},
		{http.MethodGet, "/nope%2Fx", http.StatusNotFound, "no such endpoint: GET /nope%2Fx"},
		{http.MethodGet, "/no%20pe", http.StatusNotFound, "no such endpoint: GET /no%20pe"},
		{http.MethodGet, "/nope", http.StatusNotFound, "no such endpoint: GET /nope"},
		// an encoded slash is part of a name, which no name holds: the
		// router matched the decoded path, ran acme/echo for the first
		// and answered the second 405 as a door
		{http.MethodPost, "/flows/acme%2Fecho/run", http.StatusNotFound, "no such endpoint: POST /flows/acme%2Fecho/run"},
		{http.MethodGet, "/flows/acme%2Fx/run", http.StatusNotFound, "no such endpoint: GET /flows/acme%2Fx/run"},
		{http.MethodGet, "/ui%2Fqueues", http.StatusNotFound, "no such endpoint: GET /ui%2Fqueues"},
		{http.MethodGet, "/flows/acme/echo/run", http.StatusMethodNotAllowed, "method GET is not allowed on /flows/acme/echo/run"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := newRequest(tc.method, tc.path, `{}`, "Authorization", "Bearer "+keyAcmeAll)
			wantRefusal(t, fx.serve(r), tc.status, tc.want)
		})
	}
}

// TestGateRateUnderConcurrency: 64 clients against a bucket of rate 1 and
// burst 1 while the clock moves 10 s in 10 ms steps (RELIABILITY F.24): at
// most burst + rate·T (+1 for the step in flight) requests pass.
func TestGateRateUnderConcurrency(t *testing.T) {
	const (
		clients = 64
		span    = 10 * time.Second
		step    = 10 * time.Millisecond
		bound   = 1 + int64(span/time.Second) + 1 // burst + rate·T + 1
	)
	fx := newFixture(t, nil)
	var passed, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch w := fx.serve(runRequest("acme", "echo", keyAcmeLimited, `{}`)); w.Code {
				case http.StatusOK:
					passed.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("%d %s", w.Code, w.Body)
					return
				}
			}
		}()
	}
	for i := 0; i < int(span/step); i++ {
		fx.clock.Advance(step)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := passed.Load(); n > bound || n < 1 {
		t.Errorf("%d requests passed in %v at rate 1, burst 1 (%d refused); want 1 to %d", n, span, refused.Load(), bound)
	}
	if refused.Load() == 0 {
		t.Errorf("no request refused: the %d clients did not press the bucket", clients)
	}
	t.Logf("%d clients over %v: %d passed (bound %d), %d refused", clients, span, passed.Load(), bound, refused.Load())
}

// TestRefusalsAreLogged: a door's refusal is logged (request_refused,
// with the door, the status, the text the caller got, the correlation ID,
// the key when known and the remote address), so that a caller quoting
// its correlation ID can be traced; at most 20 at once and 10 a second
// after, the first line after a pause saying how many were not logged. No
// refusal was logged.
func TestRefusalsAreLogged(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	w := fx.serve(runRequest("acme", "echo", "no-such-key", `{}`, "X-Correlation-ID", "trace-refused"))
	wantRefusal(t, w, http.StatusUnauthorized, unknownKey)
	w = fx.serve(newRequest(http.MethodPost, "/flows/globex/shipment/enqueue", `{}`, "Authorization", "Bearer "+keyAcmeAll, "Content-Type", "application/json"))
	if w.Code != http.StatusForbidden {
		t.Fatalf("enqueue with another tenant's key: %d %s", w.Code, w.Body)
	}
	evs := fx.logs.Events(t, "request_refused")
	if len(evs) != 2 {
		t.Fatalf("request_refused lines %v, want 2", evs)
	}
	if e := evs[0]; e["door"] != "run" || e["status"] != 401.0 || e["error"] != unknownKey || e["correlation_id"] != "trace-refused" ||
		e["tenant"] != "acme" || e["flow"] != "echo" || e["key"] != "" || e["remote"] == nil || e["suppressed"] != 0.0 {
		t.Errorf("the 401's line: %v", e)
	}
	if e := evs[1]; e["door"] != "enqueue" || e["status"] != 403.0 || e["key"] != "acme-all" {
		t.Errorf("the 403's line: %v", e)
	}
	if strings.Contains(fx.logs.String(), keyAcmeAll) || strings.Contains(fx.logs.String(), "no-such-key") {
		t.Errorf("the log holds a presented key:\n%s", fx.logs.String())
	}
	// a flood: 18 more lines at once (20 in all), then none until time
	// passes; the next says how many were left out
	for range 40 {
		fx.serve(runRequest("acme", "echo", "no-such-key", `{}`))
	}
	if n := len(fx.logs.Events(t, "request_refused")); n != 20 {
		t.Errorf("%d request_refused lines after a flood of 42 refusals, want 20", n)
	}
	fx.clock.Advance(time.Second)
	fx.serve(runRequest("acme", "echo", "no-such-key", `{}`))
	evs = fx.logs.Events(t, "request_refused")
	if last := evs[len(evs)-1]; len(evs) != 21 || last["suppressed"] != 22.0 {
		t.Errorf("the line after a pause: %d lines, the last %v; want 21, saying 22 were not logged", len(evs), last)
	}
}

// TestRefusalLogClockSetBack: the refusal lines' limit holds when the
// clock is set back (NTP, by hand) or a request's clock reading is older
// than another's: time taken from the limiter is not counted again once
// the clock is back where it was. At one moment, 15 refusals, then 5 with
// the clock set back 10 s, then 20 with it back: 20 lines in all, as at
// once, and 10 more a second later. The stale stamp once moved the
// limiter back, so the clock's return minted a whole new burst (40 lines).
func TestRefusalLogClockSetBack(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	refuse := func(n int) {
		for range n {
			fx.serve(runRequest("acme", "echo", "no-such-key", `{}`))
		}
	}
	lines := func() int { return len(fx.logs.Events(t, "request_refused")) }
	refuse(15)
	fx.clock.SetBack(10 * time.Second)
	refuse(5)
	fx.clock.Advance(10 * time.Second)
	refuse(20)
	if n := lines(); n != 20 {
		t.Errorf("%d request_refused lines for 40 refusals at one moment of the clock (10 s of it set back and forth between), want 20", n)
	}
	fx.clock.Advance(time.Second)
	refuse(20)
	if n := lines(); n != 30 {
		t.Errorf("%d request_refused lines a second later, want 30 (10 more)", n)
	}
}

// TestRefusalLinesCutWhatTheCallerSent: the names of a refused request's
// path, and a media type or content coding it sent, are cut in its answer and in its
// request_refused line as the name rule's errors cut them (the first 64
// characters and "…" past 128): the refusal limiter counts lines, and a
// caller without a key wrote 60 KB lines ten times a second.
func TestRefusalLinesCutWhatTheCallerSent(t *testing.T) {
	long := strings.Repeat("a", 60000)
	cut := strings.Repeat("a", 64) + "…"
	longType := "application/" + long
	for _, tc := range []struct {
		name         string
		r            *http.Request
		status       int
		tenant, flow string
	}{
		{"no key, a long tenant", runRequest(long, "echo", "", `{}`), http.StatusUnauthorized, cut, "echo"},
		{"no key, a long flow", runRequest("acme", long, "", `{}`), http.StatusUnauthorized, "acme", cut},
		{"a key, a long flow", runRequest("acme", long, keyAcmeAll, `{}`), http.StatusBadRequest, "acme", cut},
		{"no key, a long tenant, enqueue", newRequest(http.MethodPost, "/flows/"+long+"/echo/enqueue", `{}`, "Content-Type", "application/json"), http.StatusUnauthorized, cut, "echo"},
		{"a name of 128 characters is not cut", runRequest(strings.Repeat("b", 128), "echo", "", `{}`), http.StatusUnauthorized, strings.Repeat("b", 128), "echo"},
		{"a key, a long media type", runRequest("acme", "echo", keyAcmeAll, `{}`, "Content-Type", longType), http.StatusUnsupportedMediaType, "acme", "echo"},
		{"a key, a long content coding", runRequest("acme", "echo", keyAcmeAll, `{}`, "Content-Encoding", long), http.StatusUnsupportedMediaType, "acme", "echo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newAdminFixture(t, adminOptions{key: adminKey})
			w := fx.serve(tc.r)
			if w.Code != tc.status || w.Body.Len() > 512 {
				t.Fatalf("answer %d of %d bytes, want %d of at most 512: %.300s", w.Code, w.Body.Len(), tc.status, w.Body)
			}
			evs := fx.logs.Events(t, "request_refused")
			if len(evs) != 1 {
				t.Fatalf("%d request_refused lines, want 1", len(evs))
			}
			got := map[string]any{"tenant": evs[0]["tenant"], "flow": evs[0]["flow"]}
			if diff := cmp.Diff(map[string]any{"tenant": tc.tenant, "flow": tc.flow}, got); diff != "" {
				t.Errorf("the line's names (-want +got):\n%s", diff)
			}
			if n := len(fx.logs.String()); n > 1024 {
				t.Errorf("the log is %d bytes: %.300s…", n, fx.logs.String())
			}
		})
	}
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{}`, "Content-Type", longType))
	wantRefusal(t, w, http.StatusUnsupportedMediaType, `unsupported content type "application/`+strings.Repeat("a", 52)+`"…`)
}
