package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/net/proxy"
)

// A fetch's connections are watched: a read or a write that moves no byte
// for the Syncer's FetchTimeout fails, and the fetch's context ending
// closes them. So a remote that takes the connection and then says nothing
// (a hung sshd, a proxy or load balancer that swallows traffic) ends the
// round after FetchTimeout, while a transfer that keeps moving, however
// slowly, is not cut off (only by maxFetchTime, a cap).
//
// go-git's ssh transport does its handshake without the fetch's context,
// and has no hook for its dial but one: it dials through a proxy when the
// fetch names one. The scheme nexus-fetch is registered with
// golang.org/x/net/proxy as a "proxy" that dials directly, watched, for
// the fetch whose id the proxy URL names (fetchWatches). HTTP(S) fetches
// go through a client whose transport dials the same way, installed for
// go-git's http and https in init; the watch rides in the request's
// context.

// fetchScheme is the proxy scheme of a watched ssh dial.
const fetchScheme = "nexus-fetch"

// maxFetchTime caps one fetch, however steadily its bytes arrive.
const maxFetchTime = 30 * time.Minute

// fetchWatch is one fetch's watch over its connections.
type fetchWatch struct {
	ctx      context.Context
	idle     time.Duration
	timedOut atomic.Bool // a connection was silent for idle
}

type watchKey struct{}

var (
	fetchWatches sync.Map // id (string) → *fetchWatch, for the ssh dials
	fetchIDs     atomic.Uint64
)

func init() {
	proxy.RegisterDialerType(fetchScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		w, ok := fetchWatches.Load(u.Host)
		if !ok {
			return nil, fmt.Errorf("no fetch %s is in progress", u.Host)
		}
		return watchDialer{w.(*fetchWatch)}, nil
	})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		w, ok := ctx.Value(watchKey{}).(*fetchWatch)
		if !ok {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		return w.dial(ctx, network, addr)
	}
	c := githttp.NewClient(&http.Client{Transport: errorPageCap{tr}})
	client.InstallProtocol("https", c)
	client.InstallProtocol("http", c)
}

// maxErrorPage is how much of a remote's error answer (401, 403, 404, …)
// go-git may read: it reads the whole body into its error, which the log's
// sync_unreachable lines and /status repeat, and a remote's 200 MB error
// page made the host hold 2 GB and every line 200 MB.
const maxErrorPage = 512

// errorPageCap cuts the body of an HTTP answer of 400 or more to
// maxErrorPage bytes (go-git puts it in its error, which the fetch's error
// folds into one line: see newFetchError).
type errorPageCap struct{ base http.RoundTripper }

func (c errorPageCap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil && resp.StatusCode >= http.StatusBadRequest && resp.Body != nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, maxErrorPage), resp.Body}
	}
	return resp, err
}

// oneLine is what a remote sent (an error page, an "ERR" packet's
// text, an ssh server's error line), as go-git's error holds it, made one
// line: each run of white space, control characters (a terminal's escape
// sequences) and format characters (a bidirectional override) a space,
// bytes that are not UTF-8 U+FFFD. The error reaches sync_unreachable,
// /status and the UI, which held the remote's lines and escapes as sent.
func oneLine(text string) string {
	var b strings.Builder
	gap := false
	for _, r := range strings.ToValidUTF8(text, "\uFFFD") {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			gap = true
			continue
		}
		if gap && b.Len() > 0 {
			b.WriteByte(' ')
		}
		gap = false
		b.WriteRune(r)
	}
	return b.String()
}

// watch starts watching a fetch under ctx: it returns the context to fetch
// with (which carries the watch, for HTTP), the proxy URL of its ssh dial,
// and the end of the watch.
func watch(ctx context.Context, idle time.Duration) (context.Context, *fetchWatch, string, func()) {
	w := &fetchWatch{idle: idle}
	ctx = context.WithValue(ctx, watchKey{}, w)
	w.ctx = ctx
	id := strconv.FormatUint(fetchIDs.Add(1), 10)
	fetchWatches.Store(id, w)
	return ctx, w, fetchScheme + "://" + id, func() { fetchWatches.Delete(id) }
}

// dial connects to addr, watched.
func (w *fetchWatch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, w.idle)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, network, addr)
	if err != nil {
		if dctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			w.timedOut.Store(true)
		}
		return nil, err
	}
	return w.watchConn(conn), nil
}

// watchConn watches conn, a connection the fetch made (a dial, or the
// ssh agent's): its reads and writes time out, and it closes when the
// fetch's context ends.
func (w *fetchWatch) watchConn(conn net.Conn) net.Conn {
	stop := context.AfterFunc(w.ctx, func() { conn.Close() })
	return &watchedConn{Conn: conn, w: w, stop: stop}
}

// watchDialer is the proxy.ContextDialer of a watched ssh dial.
type watchDialer struct{ w *fetchWatch }

func (d watchDialer) Dial(network, addr string) (net.Conn, error) {
	return d.w.dial(d.w.ctx, network, addr)
}

func (d watchDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.w.dial(ctx, network, addr)
}

// watchedConn fails a read or a write that moves nothing for its watch's
// idle time.
type watchedConn struct {
	net.Conn
	w    *fetchWatch
	stop func() bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.w.idle))
	n, err := c.Conn.Read(p)
	c.noteTimeout(err)
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.w.idle))
	n, err := c.Conn.Write(p)
	c.noteTimeout(err)
	return n, err
}

func (c *watchedConn) noteTimeout(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.w.timedOut.Store(true)
	}
}

func (c *watchedConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
