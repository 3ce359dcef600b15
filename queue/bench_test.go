package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks on the real disk (b.TempDir()). Compare:
//
//	BenchmarkAppend/callers=64 acks/s ÷ BenchmarkGroupCommitLimit/callers=64 acks/s (target ≥ 0.6)
//	BenchmarkAppend/callers=1 p50 ÷ BenchmarkFdatasync p50 (target ≤ 1.5)
//
// Run with a -benchtime long enough to be stable, e.g. 2s.

// countingFS counts the fdatasyncs of segment.log.
type countingFS struct {
	FS
	syncs atomic.Int64
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != segmentFile {
		return f, err
	}
	return countingFile{f, &c.syncs}, nil
}

type countingFile struct {
	File
	syncs *atomic.Int64
}

func (f countingFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

// runCallers runs b.N calls of call spread over callers goroutines and
// reports acks/s and the p50 and p99 latency of a call.
func runCallers(b *testing.B, callers int, call func() error) {
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t := time.Now()
				if err := call(); err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	pct := func(p int) float64 { return float64(all[(len(all)-1)*p/100].Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "acks/s")
	b.ReportMetric(pct(50), "p50-µs")
	b.ReportMetric(pct(99), "p99-µs")
}

// BenchmarkAppend: concurrent callers appending 100-byte payloads.
func BenchmarkAppend(b *testing.B) {
	for _, callers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			fsys := &countingFS{FS: OS{}}
			q, _ := openQueue(b, b.TempDir(), Options{FS: fsys})
			m := newMessage(0, 100)
			runCallers(b, callers, func() error {
				_, err := q.Append(m)
				return err
			})
			b.ReportMetric(float64(b.N)/float64(max(fsys.syncs.Load(), 1)), "appends/sync")
		})
	}
}

// BenchmarkFdatasync: the disk's own rate of a 100-byte write and an
// fdatasync of one file, in the folder the queues use.
func BenchmarkFdatasync(b *testing.B) {
	f, err := OS{}.OpenFile(filepath.Join(b.TempDir(), "sync.log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec := make([]byte, 100)
	off := int64(0)
	runCallers(b, 1, func() error {
		if _, err := f.WriteAt(rec, off); err != nil {
			return err
		}
		off += int64(len(rec))
		return f.Sync()
	})
}

// groupCommitter is the reference group commit: callers hand records to
// one writer goroutine, which writes all those waiting with one write and
// one fdatasync, then acknowledges them.
type groupCommitter struct {
	f     File
	reqs  chan commitReq
	syncs int
}

type commitReq struct {
	rec  []byte
	done chan error
}

func (g *groupCommitter) run() {
	var off int64
	var buf []byte
	var batch []commitReq
	for r := range g.reqs {
		batch = append(batch[:0], r)
	more:
		for {
			select {
			case r, ok := <-g.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		buf = buf[:0]
		for _, r := range batch {
			buf = append(buf, r.rec...)
		}
		_, err := g.f.WriteAt(buf, off)
		if err == nil {
			err = g.f.Sync()
		}
		off += int64(len(buf))
		g.syncs++
		for _, r := range batch {
			r.done <- err
		}
	}
}

// BenchmarkGroupCommitLimit: the group-commit limit of this disk for
// 100-byte records, to compare BenchmarkAppend with.
func BenchmarkGroupCommitLimit(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			f, err := OS{}.OpenFile(filepath.Join(b.TempDir(), "limit.log"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			g := &groupCommitter{f: f, reqs: make(chan commitReq, callers)}
			stopped := make(chan struct{})
			go func() { g.run(); close(stopped) }()
			rec := make([]byte, 100)
			runCallers(b, callers, func() error {
				done := make(chan error, 1)
				g.reqs <- commitReq{rec: rec, done: done}
				return <-done
			})
			close(g.reqs)
			<-stopped
			b.ReportMetric(float64(b.N)/float64(max(g.syncs, 1)), "appends/sync")
		})
	}
}
