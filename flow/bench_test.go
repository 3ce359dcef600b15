package flow

import (
	"runtime"
	"testing"

	"github.com/nexushq/nexus/flow/flowtest"
)

// BenchmarkCompile compiles 1,000 generated flows per iteration; ns/flow
// allocs/flow and B/flow are reported per flow.
func BenchmarkCompile(b *testing.B) {
	const n = 1000
	srcs := make([][]byte, n)
	for i := range srcs {
		srcs[i] = flowtest.Flow(i, "")
		if _, err := Compile("gen.md", srcs[i]); err != nil {
			b.Fatalf("generated flow %d does not compile:\n%v", i, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		for _, src := range srcs {
			if _, err := Compile("gen.md", src); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	flows := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/flows, "ns/flow")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/flows, "allocs/flow")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/flows, "B/flow")
	b.ReportMetric(0, "ns/op")
}
