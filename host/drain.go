package host

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// ShutdownListener owns the host's listener through a graceful shutdown.
// One goroutine accepts its connections and hands each to the main server
// (through Main) until Drain is called or Main is closed (srv.Shutdown
// closes it), then to a drain server, which answers while the requests in
// flight finish: the process still takes connections, so that a liveness
// probe (/healthz) is answered for the whole drain rather than refused.
// Stop closes the listener for good. A connection is never dropped at
// the switch: one that the main server no longer takes goes to the drain
// server.
type ShutdownListener struct {
	ln       net.Listener
	main     *handoff
	drain    *handoff
	drainSrv *http.Server

	mu       sync.Mutex
	draining bool

	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	done     sync.WaitGroup // the accept goroutine and the drain server's Serve
}

// NewShutdownListener takes ln over and serves the drain side with drain
// (whose connections are wrapped by PlatformAnswers, as the main server's
// should be). Its accept goroutine runs until Stop.
func NewShutdownListener(ln net.Listener, drain *http.Server) *ShutdownListener {
	l := &ShutdownListener{
		ln:       ln,
		main:     newHandoff(ln.Addr()),
		drain:    newHandoff(ln.Addr()),
		drainSrv: drain,
		stop:     make(chan struct{}),
	}
	l.done.Add(2)
	go func() {
		defer l.done.Done()
		l.acceptLoop()
	}()
	go func() {
		defer l.done.Done()
		drain.Serve(PlatformAnswers(l.drain))
	}()
	return l
}

// drainAnswerWait bounds how long Stop lets the drain server's
// connections take their answers.
const drainAnswerWait = time.Second

// Main is the main server's listener. Its Close (made by srv.Shutdown)
// only stops handing connections to it: its Accept then returns
// net.ErrClosed, and the connections that follow go to the drain server.
func (l *ShutdownListener) Main() net.Listener { return l.main }

// Addr is the listener's address.
func (l *ShutdownListener) Addr() net.Addr { return l.ln.Addr() }

// Drain hands every connection accepted from now on to the drain server.
func (l *ShutdownListener) Drain() {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
}

// Stop closes the listener and the drain server (and the connections it
// holds) and waits until its goroutines have ended. It may be called more
// than once, and from more than one goroutine: each call returns once the
// listener is stopped.
func (l *ShutdownListener) Stop() {
	l.stopOnce.Do(func() {
		close(l.stop)
		l.ln.Close()
		l.main.Close()
		// the drain server's answers are written at once: its
		// connections are given a moment to take theirs (closed, a
		// caller whose request it read would see a reset), then closed
		ctx, cancel := context.WithTimeout(context.Background(), drainAnswerWait)
		defer cancel()
		if l.drainSrv.Shutdown(ctx) != nil { // closes l.drain too
			l.drainSrv.Close()
		}
		l.drain.Close()
		l.done.Wait()
	})
}

// acceptLoop accepts the listener's connections until Stop and hands each
// to the side that takes it. An accept error goes to that side too, whose
// server decides whether to accept again (after a pause, for a temporary
// one) or to end.
func (l *ShutdownListener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		select {
		case <-l.stop:
			if c != nil {
				c.Close()
			}
			return
		default:
		}
		if !l.handOver(accepted{c, err}) {
			if c != nil {
				c.Close()
			}
			return
		}
	}
}

// handOver gives a to the main server, or to the drain server once the
// shutdown has begun; false when Stop came first.
func (l *ShutdownListener) handOver(a accepted) bool {
	for {
		l.mu.Lock()
		to := l.main
		if l.draining {
			to = l.drain
		}
		l.mu.Unlock()
		select {
		case to.conns <- a:
			return true
		case <-to.closed:
			if to == l.drain {
				// the drain server ended on an accept error; nothing is
				// left to answer until Stop
				<-l.stop
				return false
			}
			// the main server stopped taking connections (srv.Shutdown)
			// while a waited: from now on they go to the drain server
			l.Drain()
		case <-l.stop:
			return false
		}
	}
}

// accepted is what one Accept of the listener returned.
type accepted struct {
	conn net.Conn
	err  error
}

// handoff is the listener of one side of a ShutdownListener: its Accept
// returns the connections the accept goroutine hands it.
type handoff struct {
	addr      net.Addr
	conns     chan accepted
	closed    chan struct{}
	closeOnce sync.Once
}

func newHandoff(addr net.Addr) *handoff {
	return &handoff{addr: addr, conns: make(chan accepted), closed: make(chan struct{})}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case a := <-h.conns:
		return a.conn, a.err
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

// Close stops handing connections to this side; the listener stays open.
func (h *handoff) Close() error {
	h.closeOnce.Do(func() { close(h.closed) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// shuttingDown is the refusal of every request but /healthz and /readyz
// while the host drains.
const shuttingDown = "the host is shutting down"

// DrainHandler answers while the host shuts down, its requests in flight
// finishing: /healthz 200 (the process runs), /readyz 503, and every
// other request 503 with Retry-After: 1 and Connection: close, in the
// platform's JSON with a correlation ID.
func (s *Server) DrainHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			s.healthz(w, r, nil)
			return
		}
		correlationID(w, r)
		w.Header().Set("Connection", "close")
		if r.URL.Path == "/readyz" {
			writeError(w, http.StatusServiceUnavailable, shuttingDown)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, shuttingDown)
	})
}

// NewConns follows the connections a server has accepted and not yet read
// a request from (http.StateNew), through its ConnState hook. Go's
// Server.Shutdown closes such a connection without an answer when its
// request is read after the shutdown began, so a caller that connected
// just before the drain (a readiness probe) would see the connection
// closed, not 503: the shutdown first lets them be read (Settle).
type NewConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Hook is the server's ConnState.
func (n *NewConns) Hook(c net.Conn, state http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if state != http.StateNew {
		delete(n.conns, c)
		return
	}
	if n.conns == nil {
		n.conns = make(map[net.Conn]struct{})
	}
	n.conns[c] = struct{}{}
}

// Settle waits until the server has no connection it has not read a
// request from, or for max at most (a client that connected and sends
// nothing).
func (n *NewConns) Settle(max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		n.mu.Lock()
		left := len(n.conns)
		n.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
