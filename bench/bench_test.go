package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The load benchmarks. Each starts nexus serve and the bare server, then
// drives them in alternating rounds (nexus, bare, bare, nexus, …) with the
// same connections, body and headers, and reports requests/s, p50 and p99
// of both, their ratios, and the CPU time per request of each server and of
// the client (this process: the machine's cores are shared, so a server
// that makes the client work harder per request pays for it in its rate).
// Besides the ratio of the pooled rounds, each pair of adjacent rounds
// (nexus, bare / bare, nexus) gives a ratio of its own: they are printed
// with their median (reported as rps-ratio-median) and range, and a
// warning when a server's rate varied by more than 15% between its rounds,
// which says the machine was disturbed and the ratio of that run is noise.
// NEXUS_BENCH_ROUNDS (default 4) and
// NEXUS_BENCH_ROUND (default 3s) set the rounds; NEXUS_BENCH_CLIENT picks
// the generator's client (see clientKind); NEXUS_BENCH_NEXUS_ENV=KEY=VALUE
// adds a variable to nexus's environment only (GOGC=100, to compare with
// the collector's target serve sets); NEXUS_BENCH_PERF=FILE records
// the nexus process with perf(1) (the binary serves no pprof) in one more
// nexus round after the warm-up, which is not reported: perf's sampling is
// charged to nexus's CPU time and perf itself runs on the shared cores, so
// a recorded round is slower and costlier per request than the others.
//
//	just bench-run       # /run, 64 connections
//	just bench-enqueue   # /enqueue, 1, 16, 64 and 256 connections, and the disk's fdatasync rate

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("NEXUS_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 4
}

func roundTime() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NEXUS_BENCH_ROUND")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}

// BenchmarkRun is /run of a validate+ntd flow at 64 connections against a
// bare server answering a fixed 200.
func BenchmarkRun(b *testing.B) {
	dir := b.TempDir()
	nx := startNexus(b, dir)
	path := "/flows/" + benchTenant + "/" + benchFlow + "/run"
	_, _, runBody, err := post(nx.addr, path)
	if err != nil {
		b.Fatal(err)
	}
	_, _, enqueueBody, err := post(nx.addr, "/flows/"+benchTenant+"/"+benchFlow+"/enqueue")
	if err != nil {
		b.Fatal(err)
	}
	bare := startBare(b, runBody, enqueueBody)
	nexusT := target{name: "nexus", addr: nx.addr, path: path, header: benchHeader(), body: []byte(benchBody), status: http.StatusOK}
	nexusT.pid = nx.cmd.Process.Pid
	bareT := nexusT
	bareT.name, bareT.addr, bareT.pid = "bare", bare.addr, bare.cmd.Process.Pid
	b.Logf("answer %s (%d bytes); client %s", runBody, len(runBody), clientKind())
	compareTargets(b, nexusT, bareT, 64, nil)
}

// BenchmarkEnqueue is /enqueue at 1, 16, 64 and 256 connections against a
// bare server answering a fixed 202, and the fdatasync rate of the state
// directory's disk: before the connection counts, and again for 0.5 s
// after each (nexus idle), since the disk's rate moves within a run on a
// shared machine as the servers' rates do. Before each round the flow's
// queue is drained (its worker runs the flow in the same process), so that
// no round pays for the previous one's backlog.
func BenchmarkEnqueue(b *testing.B) {
	dir := b.TempDir()
	nx := startNexus(b, dir)
	path := "/flows/" + benchTenant + "/" + benchFlow + "/enqueue"
	_, _, runBody, err := post(nx.addr, "/flows/"+benchTenant+"/"+benchFlow+"/run")
	if err != nil {
		b.Fatal(err)
	}
	status, _, enqueueBody, err := post(nx.addr, path)
	if err != nil || status != http.StatusAccepted {
		b.Fatalf("enqueue: %d %s %v", status, enqueueBody, err)
	}
	bare := startBare(b, runBody, enqueueBody)
	nexusT := target{name: "nexus", addr: nx.addr, path: path, header: benchHeader(), body: []byte(benchBody), status: http.StatusAccepted}
	nexusT.pid = nx.cmd.Process.Pid
	bareT := nexusT
	bareT.name, bareT.addr, bareT.pid = "bare", bare.addr, bare.cmd.Process.Pid
	b.Logf("answer %s (%d bytes); client %s", enqueueBody, len(enqueueBody), clientKind())
	drain := func() {
		if err := waitDrained(nx.addr, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}

	stateDir := filepath.Join(dir, "state")
	b.Run("fdatasync", func(b *testing.B) {
		res, err := fdatasyncRate(stateDir, time.Duration(rounds())*roundTime()/2)
		if err != nil {
			b.Fatal(err)
		}
		p50, p99 := percentile(res.lat, 50), percentile(res.lat, 99)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(res.rate(), "fdatasync/s")
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		fmt.Printf("\nfdatasync of 100 B appends in %s: %.0f/s, p50 %.3f ms, p99 %.3f ms\n",
			stateDir, res.rate(), ms(p50), ms(p99))
	})
	for _, conns := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			before, err := scrapeCommits(nx.addr)
			if err != nil {
				b.Fatal(err)
			}
			compareTargets(b, nexusT, bareT, conns, drain)
			after, err := scrapeCommits(nx.addr)
			if err != nil {
				b.Fatal(err)
			}
			n := after.commits - before.commits
			if n == 0 {
				b.Fatal("nexus reported no group commit during its rounds")
			}
			perCommit, syncMS := (after.messages-before.messages)/n, 1000*(after.syncSeconds-before.syncSeconds)/n
			b.ReportMetric(perCommit, "msgs/fdatasync")
			fmt.Printf("  nexus group commits (warm-up included): %.1f messages per fdatasync, fdatasync %.3f ms on average\n", perCommit, syncMS)
			// the disk alone again, with nexus idle, so that each connection
			// count has a rate of its own to set its group commits against
			drain()
			probe, err := fdatasyncRate(stateDir, fdatasyncProbe)
			if err != nil {
				b.Fatal(err)
			}
			p50, p99 := percentile(probe.lat, 50), percentile(probe.lat, 99)
			b.ReportMetric(probe.rate(), "disk-fdatasync/s")
			fmt.Printf("  the disk alone right after, %s: %.0f fdatasync/s, p50 %.3f ms, p99 %.3f ms\n", fdatasyncProbe, probe.rate(), ms(p50), ms(p99))
		})
	}
}

// fdatasyncProbe is how long the disk's fdatasync rate is measured again
// after each connection count's rounds.
const fdatasyncProbe = 500 * time.Millisecond

// commits are the totals of nexus's group-commit histograms.
type commits struct{ messages, commits, syncSeconds float64 }

// scrapeCommits reads the group-commit totals from nexus's /metrics.
func scrapeCommits(addr string) (commits, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return commits{}, err
	}
	defer resp.Body.Close()
	var c commits
	fields := map[string]*float64{
		"nexus_queue_commit_messages_sum":        &c.messages,
		"nexus_queue_commit_messages_count":      &c.commits,
		"nexus_queue_fsync_duration_seconds_sum": &c.syncSeconds,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if p := fields[name]; ok && p != nil {
			if *p, err = strconv.ParseFloat(value, 64); err != nil {
				return commits{}, fmt.Errorf("/metrics: %s: %w", name, err)
			}
		}
	}
	return c, sc.Err()
}

// compareTargets drives nexus and bare in alternating rounds and reports
// both and their ratios. before, when set, runs before every round.
func compareTargets(b *testing.B, nexus, bare target, conns int, before func()) {
	ctx := context.Background()
	n, d := rounds(), roundTime()
	warm := min(d, time.Second)
	for _, t := range []target{nexus, bare} {
		if before != nil {
			before()
		}
		if _, err := drive(ctx, t, conns, warm); err != nil {
			b.Fatal(err)
		}
	}
	if os.Getenv("NEXUS_BENCH_PERF") != "" {
		// recorded in a round of its own, not reported (see the top)
		if before != nil {
			before()
		}
		stop := startPerf(b, nexusPID(nexus), d)
		_, err := drive(ctx, nexus, conns, d)
		stop()
		if err != nil {
			b.Fatal(err)
		}
	}
	var total [2]loadResult
	var perRound [2][]string
	var roundRates [2][]float64
	for r := range n {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			t := []target{nexus, bare}[i]
			if before != nil {
				before()
			}
			res, err := drive(ctx, t, conns, d)
			if err != nil {
				b.Fatal(err)
			}
			if res.failures > 0 {
				b.Fatalf("%s: %d failed requests, the first: %v", t.name, res.failures, res.firstErr)
			}
			perRound[i] = append(perRound[i], fmt.Sprintf("%.0f", res.rate()))
			roundRates[i] = append(roundRates[i], res.rate())
			total[i].merge(res)
		}
	}
	nx, br := total[0], total[1]
	nxRate, brRate := nx.rate(), br.rate()
	nx50, nx99 := percentile(nx.lat, 50), percentile(nx.lat, 99)
	br50, br99 := percentile(br.lat, 50), percentile(br.lat, 99)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(nxRate, "nexus-req/s")
	b.ReportMetric(brRate, "bare-req/s")
	b.ReportMetric(nxRate/brRate, "rps-ratio")
	pairs := pairRatios(roundRates[0], roundRates[1])
	pairMedian := median(pairs)
	b.ReportMetric(pairMedian, "rps-ratio-median")
	b.ReportMetric(ms(nx50), "nexus-p50-ms")
	b.ReportMetric(ms(nx99), "nexus-p99-ms")
	b.ReportMetric(ms(br50), "bare-p50-ms")
	b.ReportMetric(ms(br99), "bare-p99-ms")
	b.ReportMetric(float64(nx99)/float64(br99), "p99-ratio")
	b.ReportMetric(cpuPerRequest(nx), "nexus-cpu-us/req")
	b.ReportMetric(cpuPerRequest(br), "bare-cpu-us/req")
	b.ReportMetric(perRequest(nx.client, nx.requests), "nexus-client-cpu-us/req")
	b.ReportMetric(perRequest(br.client, br.requests), "bare-client-cpu-us/req")

	fmt.Printf("\n%s: %d connections, %d rounds × %s per server, client %s\n", b.Name(), conns, n, d, clientKind())
	fmt.Printf("  %-6s %10s %10s %10s %12s %12s %10s  %s\n", "server", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "client µs/req", "requests", "req/s per round")
	fmt.Printf("  %-6s %10.0f %10.3f %10.3f %12.1f %12.1f %10d  %s\n", "nexus", nxRate, ms(nx50), ms(nx99), cpuPerRequest(nx), perRequest(nx.client, nx.requests), nx.requests, strings.Join(perRound[0], " "))
	fmt.Printf("  %-6s %10.0f %10.3f %10.3f %12.1f %12.1f %10d  %s\n", "bare", brRate, ms(br50), ms(br99), cpuPerRequest(br), perRequest(br.client, br.requests), br.requests, strings.Join(perRound[1], " "))
	fmt.Printf("  nexus/bare: req/s %.2f×, p50 %.2f×, p99 %.2f×, CPU per request %.2f×\n", nxRate/brRate, float64(nx50)/float64(br50), float64(nx99)/float64(br99), cpuPerRequest(nx)/cpuPerRequest(br))
	pairText := make([]string, len(pairs))
	for k, x := range pairs {
		pairText[k] = fmt.Sprintf("%.2f", x)
	}
	fmt.Printf("  nexus/bare req/s per round pair: %s; median %.2f×, min–max %.2f–%.2f×\n",
		strings.Join(pairText, " "), pairMedian, slices.Min(pairs), slices.Max(pairs))
	var varied []string
	for i, name := range []string{"nexus", "bare"} {
		if v := variation(roundRates[i]); v > maxVariation {
			varied = append(varied, fmt.Sprintf("%s's by %.0f%%", name, 100*v))
		}
	}
	if len(varied) > 0 {
		fmt.Printf("  warning: req/s varied between rounds more than %.0f%%, %s: the run was disturbed, its ratios say little\n",
			100*maxVariation, strings.Join(varied, ", "))
	}
	nxRSS, brRSS := peakRSS(nexus.pid), peakRSS(bare.pid)
	b.ReportMetric(nxRSS, "nexus-peak-rss-MiB")
	fmt.Printf("  peak resident memory so far: nexus %.0f MiB, bare %.0f MiB\n", nxRSS, brRSS)
}

// maxVariation is the spread of a server's per-round rates (variation)
// past which a run is reported as disturbed: the rounds of one server do
// the same work, so a wider spread is the shared machine's doing.
const maxVariation = 0.15

// pairRatios is nexus's rate over bare's in each pair of adjacent rounds,
// round r of each: the rounds go nexus, bare, bare, nexus, nexus, bare, …,
// so the two rounds of a pair ran one after the other and saw the machine
// in about the same state, which the pooled ratio of all rounds does not
// ask.
func pairRatios(nexus, bare []float64) []float64 {
	r := make([]float64, min(len(nexus), len(bare)))
	for k := range r {
		r[k] = nexus[k] / bare[k]
	}
	return r
}

// median is the middle of xs (the mean of the two middle ones for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// variation is how much the slowest of the rates is below the fastest, as
// a fraction of the fastest: 0.2 when the slowest round ran at 80% of the
// fastest's rate.
func variation(rates []float64) float64 {
	if len(rates) == 0 || slices.Max(rates) <= 0 {
		return 0
	}
	return 1 - slices.Min(rates)/slices.Max(rates)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuPerRequest is the server's CPU time per request, in µs.
func cpuPerRequest(r loadResult) float64 { return perRequest(r.cpu, r.requests) }

// perRequest is d per request, in µs.
func perRequest(d time.Duration, requests int) float64 {
	return float64(d) / float64(time.Microsecond) / float64(requests)
}

// waitDrained waits until nexus's queues are empty and idle, as its
// /metrics reports them (nexus_queue_depth and nexus_queue_in_flight 0).
func waitDrained(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy, err := queueBusy(addr)
		if err == nil && !busy {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queues did not drain within %s (%v)", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func queueBusy(addr string) (bool, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	busy := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "nexus_queue_depth{") && !strings.HasPrefix(line, "nexus_queue_in_flight{") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err != nil || v != 0 {
			busy = true
		}
	}
	return busy, sc.Err()
}

// fdatasyncRate appends 100 B and fdatasyncs, in a loop, to a file in dir
// for d: the disk's own rate of durable appends, one at a time.
func fdatasyncRate(dir string, d time.Duration) (loadResult, error) {
	f, err := os.CreateTemp(dir, "fdatasync-*.bench")
	if err != nil {
		return loadResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rec := make([]byte, 100)
	res := loadResult{}
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := f.Write(rec); err != nil {
			return res, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return res, err
		}
		res.lat = append(res.lat, time.Since(t0))
		res.requests++
	}
	res.elapsed = time.Since(start)
	return res, nil
}

// startPerf records pid with perf(1) into $NEXUS_BENCH_PERF for d, when
// that is set; the returned function waits for the recording.
func startPerf(b *testing.B, pid int, d time.Duration) func() {
	out := os.Getenv("NEXUS_BENCH_PERF")
	if out == "" || pid == 0 {
		return func() {}
	}
	cmd := exec.Command("perf", "record", "-F", "999", "-g", "-p", strconv.Itoa(pid), "-o", out, "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Logf("perf: %v", err)
		return func() {}
	}
	return func() {
		if err := cmd.Wait(); err != nil {
			b.Logf("perf: %v", err)
		}
	}
}
