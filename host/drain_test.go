package host_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/host"
)

// answerer serves name on every request.
func answerer(name string) *http.Server {
	return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name)
	})}
}

// newShutdownListener is a ShutdownListener on a loopback port whose drain
// server answers "drain", stopped when the test ends.
func newShutdownListener(t *testing.T) (*host.ShutdownListener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := host.NewShutdownListener(ln, answerer("drain"))
	t.Cleanup(sl.Stop)
	return sl, "http://" + ln.Addr().String()
}

// noKeepAlive is a client whose every request opens a new connection.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// fetch answers the body of GET url, or the error.
func fetch(url string) (string, error) {
	resp, err := noKeepAlive.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestShutdownListenerSwitch: the connections go to the main server until
// Drain, to the drain server after it and after the main server's
// Shutdown, and are refused once the listener is stopped, however many
// times Stop is called.
func TestShutdownListenerSwitch(t *testing.T) {
	sl, url := newShutdownListener(t)
	srv := answerer("main")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(host.PlatformAnswers(sl.Main())) }()

	check := func(when, want string) {
		t.Helper()
		got, err := fetch(url)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", when, got, err, want)
		}
	}
	check("before Drain", "main")
	sl.Drain()
	check("after Drain", "drain")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("the main server's Serve: %v, want http.ErrServerClosed", err)
	}
	check("after the main server's Shutdown", "drain")
	sl.Stop()
	sl.Stop()
	if _, err := fetch(url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Stop: %v, want the connection refused", err)
	}
}

// TestShutdownListenerMainClosedMidHandOver: a connection accepted while
// the main server does not take it (it is between two Accepts) and whose
// listener is then closed by the server's Shutdown goes to the drain
// server, even without Drain: no connection is dropped at the switch.
func TestShutdownListenerMainClosedMidHandOver(t *testing.T) {
	sl, url := newShutdownListener(t)
	// no server accepts from Main: the connection waits in the hand-over
	answered := make(chan string, 1)
	go func() {
		got, err := fetch(url)
		if err != nil {
			got = err.Error()
		}
		answered <- got
	}()
	select {
	case got := <-answered:
		t.Fatalf("answered %q with no server taking the main side's connections", got)
	case <-time.After(100 * time.Millisecond):
	}
	sl.Main().Close()
	select {
	case got := <-answered:
		if got != "drain" {
			t.Errorf("the connection waiting when Main closed: %q, want the drain server's answer", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection waiting when Main closed got no answer")
	}
}

// TestShutdownListenerLosesNoConnection: clients opening connection after
// connection while the host switches (Drain, then the main side closed, as
// the main server's Shutdown closes it) each get an answer, the main
// server's or the drain server's, and only the drain server's once the
// switch is done. (The main server's Shutdown itself closes, unanswered,
// a connection it took before the switch whose request it reads after:
// net/http's own, and the same as before the drain server.)
func TestShutdownListenerLosesNoConnection(t *testing.T) {
	sl, url := newShutdownListener(t)
	srv := answerer("main")
	go srv.Serve(host.PlatformAnswers(sl.Main()))
	defer srv.Close()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		counts   = map[string]int{}
		switched = make(chan struct{})
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for afterSwitch := 0; afterSwitch < 5; {
				select {
				case <-switched:
					afterSwitch++
				default:
				}
				done := afterSwitch > 0
				got, err := fetch(url)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case done && got != "drain":
					failures = append(failures, "after the switch: "+got)
				default:
					counts[got]++
				}
				mu.Unlock()
			}
		}()
	}
	// the switch once the main server has answered (a fixed 50 ms was
	// not always enough on a loaded machine for its first answer, and the
	// test saw the drain server's alone)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		main := counts["main"]
		mu.Unlock()
		if main >= 8 || time.Now().After(deadline) {
			break
		}
	}
	sl.Drain()
	sl.Main().Close()
	close(switched)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d requests failed during the switch; first: %q", len(failures), failures[0])
	}
	if counts["main"] == 0 || counts["drain"] == 0 {
		t.Errorf("answers %v, want both servers'", counts)
	}
}

// TestShutdownListenerStopLeavesNothing: Stop, called from several
// goroutines at once, each returning only when it is done, closes the
// listener, a connection still waiting for a server and the drain
// server's connections, and leaves none of its goroutines running.
func TestShutdownListenerStopLeavesNothing(t *testing.T) {
	sl, url := newShutdownListener(t)
	waiting := make(chan error, 1)
	go func() { _, err := fetch(url); waiting <- err }() // no server takes it
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); sl.Stop() }()
	}
	wg.Wait()
	// (a goroutine that has signalled its end may still be leaving: a
	// moment is given for that alone)
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "host.(*ShutdownListener)") && !strings.Contains(stacks, "host.NewShutdownListener") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of the ShutdownListener still run 1 s after Stop:\n%s", stacks)
		}
	}
	select {
	case err := <-waiting:
		if err == nil {
			t.Error("the connection waiting at Stop was answered, want it closed")
		}
	case <-time.After(5 * time.Second):
		t.Error("the connection waiting at Stop was not closed")
	}
	if _, err := fetch(url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Stop: %v, want the connection refused", err)
	}
}

// TestDrainHandler: while the host drains, /healthz answers 200 as
// always, /readyz 503 (on the main handler too, once Drain is called), and
// every other request 503 shutting down, with Retry-After: 1 and
// Connection: close; every answer carries the correlation ID.
func TestDrainHandler(t *testing.T) {
	fx := newFixture(t, func(c *host.Config) { c.AdminKey = "admin-key" })
	drain := fx.server.DrainHandler()
	const stopping = `{"ok":false,"error":"the host is shutting down"}`
	type answer struct {
		Status     int
		Body       string
		RetryAfter string
		Connection string
		ID         string
	}
	for _, tc := range []struct {
		method, path string
		want         answer
	}{
		// the body each request sends is not read: the connection closes
		{"GET", "/healthz", answer{Status: 200, Body: `{"ok":true}`, Connection: "close"}},
		{"HEAD", "/healthz", answer{Status: 200, Body: `{"ok":true}`, Connection: "close"}},
		{"GET", "/readyz", answer{Status: 503, Body: stopping, Connection: "close"}},
		{"POST", "/healthz", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"POST", "/flows/acme/hello/run", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"POST", "/flows/acme/hello/enqueue", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"GET", "/status", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"GET", "/api/flows", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"GET", "/ui/", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"GET", "/metrics", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
		{"GET", "/nowhere", answer{Status: 503, Body: stopping, RetryAfter: "1", Connection: "close"}},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`))
		req.Header.Set("X-Correlation-ID", "trace-drain")
		w := httptest.NewRecorder()
		drain.ServeHTTP(w, req)
		got := answer{w.Code, w.Body.String(), w.Header().Get("Retry-After"), w.Header().Get("Connection"), w.Header().Get("X-Correlation-Id")}
		tc.want.ID = "trace-drain"
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}

	readyz := func() (int, string) {
		w := httptest.NewRecorder()
		fx.handler.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		return w.Code, w.Body.String()
	}
	if code, body := readyz(); code != 200 {
		t.Fatalf("the main handler's /readyz before Drain: %d %s, want 200", code, body)
	}
	fx.server.Drain()
	if code, body := readyz(); code != 503 || body != stopping {
		t.Errorf("the main handler's /readyz after Drain: %d %s, want 503 %s", code, body, stopping)
	}
}

// TestNewConnsSettle: a connection the server accepted and has read no
// request from holds Settle (up to its bound); once its request is read,
// Settle returns at once, and Shutdown after it answers the request, where
// Go's Shutdown alone closes it unanswered.
func TestNewConnsSettle(t *testing.T) {
	fresh := &host.NewConns{}
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "answered")
	}))
	srv.Config.ConnState = fresh.Hook
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// accepted, nothing sent: Settle waits for its bound
	deadline := time.Now().Add(5 * time.Second)
	for {
		start := time.Now()
		fresh.Settle(200 * time.Millisecond)
		if time.Since(start) >= 200*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Settle returned at once with a connection that sent nothing")
		}
		time.Sleep(10 * time.Millisecond) // not yet accepted
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fresh.Settle(5 * time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Settle took %v after the request was sent, want it back once the request is read", d)
	}
	shut := make(chan error, 1)
	go func() { shut <- srv.Config.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	b, err := io.ReadAll(c)
	if err != nil || !strings.Contains(string(b), "answered") {
		t.Errorf("the request read before Shutdown: %q, %v; want its answer", b, err)
	}
	if err := <-shut; err != nil {
		t.Error(err)
	}
}
