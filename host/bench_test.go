package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
)

// The doors' hot path in process, for profiles (go test -run '^$' -bench
// BenchmarkDoor -cpuprofile cpu.out -memprofile mem.out ./host/): the real
// gate, body reader, parser, engine, JSON log (jsonlog, to io.Discard), metrics and
// journal writer over a real registry, for the flow of the load benchmark
// in bench/. Only the connection is missing: the answer goes to a
// ResponseWriter that keeps nothing.

const (
	benchDoorKey  = "nxk_bench_acme_0123456789abcdef0123"
	benchDoorBody = `{"name":"Ada Lovelace"}`
	benchDoorWant = `{"greeting":"hello, Ada Lovelace","n":12}`
)

var benchDoorFlow = flowFile("acme", "hello", "",
	"## Step: check\n```validate\n"+
		"$.name != null       | \"name is required\" | syntactic\n"+
		"len($.name) <= 64    | \"name must be at most 64 characters\"\n"+
		"```\n\n"+
		"## Step: greet\n```ntd\n"+
		`{"greeting":"hello, {{ $.name }}","n":{{ len($.name) }}}`+"\n"+
		"```\n")

// newBenchServer is a Server configured as nexus serve configures it, over
// a registry in a temporary folder holding the flow and a key without a
// rate limit. withQueues adds the queues (in the same folder).
func newBenchServer(b *testing.B, withQueues bool) http.Handler {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	reg, err := registry.Open(ctx, filepath.Join(dir, "state", "registry.db"), registry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Close() })
	f, err := flow.Compile("flows/acme/hello.md", []byte(benchDoorFlow))
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256([]byte(benchDoorKey))
	keys, err := access.Parse("access.yaml", []byte("keys:\n  - id: bench\n    tenant: acme\n    sha256: "+hex.EncodeToString(sum[:])+"\n    flows: [\"*\"]\n"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := reg.Publish(ctx, registry.Publication{Flows: []*flow.Flow{f}, Complete: true, Access: keys, Commit: fixtureCommit}); err != nil {
		b.Fatal(err)
	}
	if _, err := reg.Load(ctx); err != nil {
		b.Fatal(err)
	}
	logger := slog.New(jsonlog.New(io.Discard, nil))
	journal := reg.NewJournalWriter(registry.JournalConfig{Logger: logger})
	journal.Start()
	b.Cleanup(journal.Stop)
	var srv *host.Server
	cfg := host.Config{
		Live: reg, Status: reg, Engine: engine.New(engine.Config{Dedup: reg.Dedup()}),
		Journal: journal, Metrics: host.NewMetrics(), Logger: logger,
	}
	if withQueues {
		queues := queue.NewManager(queue.ManagerConfig{
			Root: filepath.Join(dir, "state", "queues"), Logger: logger, MaxWorkers: 16,
			Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict { return srv.Handle(ctx, d) }),
		})
		b.Cleanup(queues.Stop)
		cfg.Queues = queues
	}
	srv = host.New(cfg)
	return srv.Handler()
}

// discardWriter is a ResponseWriter that keeps the status and the body's
// length only; reset readies it for the next request.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// benchRequest is one reusable request: its body is rewound before each
// use.
type benchRequest struct {
	r    *http.Request
	body *bytes.Reader
}

func newBenchRequest(path string) *benchRequest {
	br := &benchRequest{body: bytes.NewReader([]byte(benchDoorBody))}
	br.r = httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, nil)
	br.r.Header.Set("Authorization", "Bearer "+benchDoorKey)
	br.r.Header.Set("Content-Type", "application/json")
	br.r.ContentLength = int64(len(benchDoorBody))
	return br
}

func (br *benchRequest) next() *http.Request {
	br.body.Reset([]byte(benchDoorBody))
	br.r.Body = io.NopCloser(br.body)
	return br.r
}

// BenchmarkDoorRun is one /run of the validate+ntd flow; "parallel" runs
// GOMAXPROCS goroutines at once, as a loaded server does.
func BenchmarkDoorRun(b *testing.B) {
	h := newBenchServer(b, false)
	const path = "/flows/acme/hello/run"
	check := func(b *testing.B) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, newBenchRequest(path).next())
		if w.Code != http.StatusOK || w.Body.String() != benchDoorWant {
			b.Fatalf("run: %d %s", w.Code, w.Body)
		}
	}
	b.Run("serial", func(b *testing.B) {
		check(b)
		req, w := newBenchRequest(path), &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			w.reset()
			h.ServeHTTP(w, req.next())
			if w.status != http.StatusOK {
				b.Fatalf("status %d", w.status)
			}
		}
		cpu.report(b)
	})
	b.Run("parallel", func(b *testing.B) {
		check(b)
		b.ReportAllocs()
		cpu := startCPU()
		serveParallel(b, h, path, http.StatusOK)
		cpu.report(b)
	})
}

// BenchmarkDoorEnqueue is one /enqueue of the same flow, its queue in a
// temporary folder (each append waits for an fdatasync; parallel appends
// share one), its worker running the flow in the background.
func BenchmarkDoorEnqueue(b *testing.B) {
	h := newBenchServer(b, true)
	const path = "/flows/acme/hello/enqueue"
	b.ReportAllocs()
	b.SetParallelism(32) // 32 × GOMAXPROCS callers, as many connections do
	cpu := startCPU()
	serveParallel(b, h, path, http.StatusAccepted)
	cpu.report(b)
}

// serveParallel sends the benchmark's requests to path from b's parallel
// callers, each expecting status.
func serveParallel(b *testing.B, h http.Handler, path string, status int) {
	b.RunParallel(func(pb *testing.PB) {
		req, w := newBenchRequest(path), &discardWriter{h: http.Header{}}
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, req.next())
			if w.status != status {
				b.Errorf("status %d, want %d", w.status, status)
				return
			}
		}
	})
}

// cpuClock measures the process's CPU time (user and system, every
// goroutine: the journal writer's and the collector's included), which
// other processes on the machine disturb far less than the wall clock.
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{start: processCPU()} }

// report adds cpu-ns/op: the CPU time since startCPU per iteration.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
}
