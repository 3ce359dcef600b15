package gitsync_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
)

// BenchmarkSync1000Flows: each iteration commits a change to every one of
// 1,000 flows (outside the timer) and runs one Sync: fetch, compile,
// publish and the live set's swap.
func BenchmarkSync1000Flows(b *testing.B) {
	const n = 1000
	e := newEnv(b)
	writeAll := func(round int) {
		for i := range n {
			e.src.write(fmt.Sprintf("flows/tenant-%d/order-intake-%d.md", i%17, i), flowtest.Flow(i, fmt.Sprintf(", round %d", round)))
		}
	}
	writeAll(0)
	e.mustApply(e.src.gitCommit("1,000 flows"))
	if st := e.status(); st.Flows != n {
		b.Fatalf("%d flows live, want %d", st.Flows, n)
	}
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		writeAll(round)
		c := e.src.gitCommit(fmt.Sprintf("round %d", round))
		b.StartTimer()
		res, err := e.s.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !res.Applied() || res.Commit != c || len(res.Changes) != n || res.Changes[0].Action != "published" {
			b.Fatalf("round %d: Sync = %v, %d changes, errors %q", round, res.Applied(), len(res.Changes), res.Errors)
		}
	}
	if lf, ok := e.reg.Live().Lookup("tenant-0", "order-intake-0"); !ok || lf.Version != round+1 {
		b.Fatalf("the live set is not the last round's: %+v", lf)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "flows/s")
}

// BenchmarkSyncOneOf1000Flows: each iteration commits a change to one of
// 1,000 flows (outside the timer) and runs one Sync: what an everyday
// commit to a large installation costs.
func BenchmarkSyncOneOf1000Flows(b *testing.B) {
	const n = 1000
	e := newEnv(b)
	for i := range n {
		e.src.write(fmt.Sprintf("flows/tenant-%d/order-intake-%d.md", i%17, i), flowtest.Flow(i, ", round 0"))
	}
	e.mustApply(e.src.gitCommit("1,000 flows"))
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		i := round % n
		e.src.write(fmt.Sprintf("flows/tenant-%d/order-intake-%d.md", i%17, i), flowtest.Flow(i, fmt.Sprintf(", round %d", round)))
		c := e.src.gitCommit(fmt.Sprintf("round %d", round))
		b.StartTimer()
		res, err := e.s.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !res.Applied() || res.Commit != c {
			b.Fatalf("round %d: Sync = %v, errors %q", round, res.Applied(), res.Errors)
		}
	}
}
