// Package bench_test holds the load benchmarks of the doors: the built
// nexus binary and a bare net/http server, each in its own process on a
// loopback port, driven in alternating rounds by the load generator of this
// file over keep-alive connections. It is test files only: nothing of it
// ships in the binary, and `go test ./...` runs no load (the benchmarks run
// with `just bench-run` and `just bench-enqueue`).
package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// target is one server the generator drives: every request is a POST of
// the same body to the same path with the same headers.
type target struct {
	name   string // "nexus" or "bare"
	addr   string // host:port on 127.0.0.1
	path   string
	header http.Header
	body   []byte
	status int // the status every answer must have
	pid    int // the server's process, whose CPU time is measured
}

// loadResult is one round against one target.
type loadResult struct {
	requests int
	elapsed  time.Duration
	cpu      time.Duration   // the server's CPU time (user and system) meanwhile
	client   time.Duration   // the client's (this process's) CPU time meanwhile
	lat      []time.Duration // one per request, in no order
	failures int
	firstErr error
}

func (r loadResult) rate() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// merge adds o's requests to r (rounds of the same target).
func (r *loadResult) merge(o loadResult) {
	r.requests += o.requests
	r.elapsed += o.elapsed
	r.cpu += o.cpu
	r.client += o.client
	r.lat = append(r.lat, o.lat...)
	r.failures += o.failures
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

// percentile returns the p-th percentile (0 < p ≤ 100) of the latencies,
// nearest rank: the smallest latency that at least p% of them do not
// exceed, the ⌈n·p/100⌉-th in order; it sorts lat in place.
func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(float64(len(lat))*p/100)) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

// client is one keep-alive connection of the generator.
type client interface {
	// do sends the target's request and reads the whole answer; it returns
	// the status.
	do() (int, error)
	close()
}

// clientKind picks the generator's HTTP client: "nethttp" (default) is
// net/http's client, one Transport per connection; "raw" writes the request
// bytes on a TCP connection and parses the answer itself, which costs the
// shared CPUs far less, so more of them serve the server under test.
func clientKind() string {
	if k := os.Getenv("NEXUS_BENCH_CLIENT"); k != "" {
		return k
	}
	return "nethttp"
}

func newClient(t target) (client, error) {
	switch k := clientKind(); k {
	case "nethttp":
		return newNetHTTPClient(t), nil
	case "raw":
		return newRawClient(t)
	default:
		return nil, fmt.Errorf("NEXUS_BENCH_CLIENT=%q: want nethttp or raw", k)
	}
}

// netHTTPClient is net/http's client over a Transport of its own, so that
// it keeps exactly one connection.
type netHTTPClient struct {
	t  target
	c  *http.Client
	tr *http.Transport
}

func newNetHTTPClient(t target) *netHTTPClient {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	return &netHTTPClient{t: t, c: &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr: tr}
}

func (c *netHTTPClient) do() (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.t.addr+c.t.path, bytes.NewReader(c.t.body))
	if err != nil {
		return 0, err
	}
	for k, v := range c.t.header {
		req.Header[k] = v
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

func (c *netHTTPClient) close() { c.tr.CloseIdleConnections() }

// rawClient speaks HTTP/1.1 itself: the request's bytes are built once;
// the answer must carry a Content-Length (both servers send one for these
// small bodies).
type rawClient struct {
	t    target
	req  []byte
	conn net.Conn
	r    *bufio.Reader
}

func newRawClient(t target) (*rawClient, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", t.path, t.addr)
	for k, vs := range t.header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(t.body))
	b.Write(t.body)
	c := &rawClient{t: t, req: b.Bytes()}
	return c, c.dial()
}

func (c *rawClient) dial() error {
	conn, err := net.DialTimeout("tcp", c.t.addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.conn, c.r = conn, bufio.NewReaderSize(conn, 4096)
	return nil
}

func (c *rawClient) do() (int, error) {
	if c.conn == nil {
		if err := c.dial(); err != nil {
			return 0, err
		}
	}
	status, err := c.roundTrip()
	if err != nil {
		c.close()
	}
	return status, err
}

func (c *rawClient) roundTrip() (int, error) {
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// HTTP/1.1 200 OK
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("malformed status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("malformed status line %q", line)
	}
	length, closing := -1, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		name, value, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, fmt.Errorf("malformed Content-Length %q", value)
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			return 0, fmt.Errorf("the raw client reads no Transfer-Encoding (%s)", value)
		case asciiEqualFold(name, "Connection"):
			closing = asciiEqualFold(value, "close")
		}
	}
	if length < 0 {
		return 0, errors.New("an answer without a Content-Length")
	}
	if _, err := c.r.Discard(length); err != nil {
		return 0, err
	}
	if closing {
		c.close()
	}
	return status, nil
}

func asciiEqualFold(b []byte, s string) bool { return strings.EqualFold(string(b), s) }

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// drive runs conns connections against t for d: each connection has its
// goroutine and sends its next request as soon as its answer arrived. The
// connections are made before the clock starts. Every answer must have
// t.status.
func drive(ctx context.Context, t target, conns int, d time.Duration) (loadResult, error) {
	clients := make([]client, conns)
	for i := range clients {
		c, err := newClient(t)
		if err != nil {
			for _, c := range clients[:i] {
				c.close()
			}
			return loadResult{}, err
		}
		clients[i] = c
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	// the net/http client dials on its first request: one request each,
	// untimed, so that every round starts with its connections open
	for _, c := range clients {
		if _, err := c.do(); err != nil {
			return loadResult{}, fmt.Errorf("%s: the first request: %w", t.name, err)
		}
	}

	type part struct {
		n, failures int
		lat         []time.Duration
		end         time.Time
		err         error
	}
	parts := make([]part, conns)
	for i := range parts {
		parts[i].lat = make([]time.Duration, 0, 1<<14) // before the clock starts
	}
	cpu0, _ := processCPU(t.pid)
	client0, _ := processCPU(os.Getpid())
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			p := &parts[i]
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				status, err := c.do()
				t1 := time.Now()
				p.end = t1
				if err == nil && status != t.status {
					err = fmt.Errorf("%s answered %d, want %d", t.name, status, t.status)
				}
				if err != nil {
					p.failures++
					if p.err == nil {
						p.err = err
					}
					if p.failures > 100 {
						return
					}
					continue
				}
				p.n++
				p.lat = append(p.lat, t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	res := loadResult{}
	if cpu1, err := processCPU(t.pid); err == nil {
		res.cpu = cpu1 - cpu0
	}
	if client1, err := processCPU(os.Getpid()); err == nil {
		res.client = client1 - client0
	}
	end := deadline
	for _, p := range parts {
		res.requests += p.n
		res.failures += p.failures
		res.lat = append(res.lat, p.lat...)
		if p.end.After(end) {
			end = p.end
		}
		if res.firstErr == nil {
			res.firstErr = p.err
		}
	}
	res.elapsed = end.Sub(start)
	return res, nil
}

// processCPU is the CPU time (user and system) pid has used, from
// /proc/PID/stat; 0 and an error where there is none.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, errors.New("no process")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid … utime stime: fields 14 and 15, counted from
	// after the command, which may hold spaces
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("malformed stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed stat")
	}
	const ticks = 100 // USER_HZ, 100 on Linux
	return time.Duration(utime+stime) * time.Second / ticks, nil
}

// peakRSS is pid's peak resident memory (VmHWM in /proc/PID/status), in
// MiB; 0 where there is none.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
