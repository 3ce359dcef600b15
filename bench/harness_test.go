package bench_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Tests of the harness's own arithmetic; they run no load.

func TestPercentile(t *testing.T) {
	// lat is 1..n ms in reverse order, so percentile must sort it
	lat := func(n int) []time.Duration {
		l := make([]time.Duration, n)
		for i := range l {
			l[i] = time.Duration(n-i) * time.Millisecond
		}
		return l
	}
	tests := []struct {
		n    int
		p    float64
		want time.Duration // nearest rank: the ⌈n·p/100⌉-th smallest
	}{
		{0, 50, 0},
		{1, 50, time.Millisecond},
		{1, 99, time.Millisecond},
		{2, 50, 1 * time.Millisecond},
		{2, 99, 2 * time.Millisecond},
		{3, 50, 2 * time.Millisecond},
		{3, 99, 3 * time.Millisecond},
		{4, 50, 2 * time.Millisecond},
		{4, 75, 3 * time.Millisecond},
		{4, 99, 4 * time.Millisecond},
		{5, 50, 3 * time.Millisecond},
		{5, 20, 1 * time.Millisecond},
		{5, 21, 2 * time.Millisecond},
		{10, 50, 5 * time.Millisecond},
		{10, 55, 6 * time.Millisecond},
		{10, 99, 10 * time.Millisecond},
		{10, 100, 10 * time.Millisecond},
		{100, 99, 99 * time.Millisecond},
		{101, 99, 100 * time.Millisecond},
		{150, 99, 149 * time.Millisecond},
		{199, 99, 198 * time.Millisecond},
	}
	type pct struct {
		N int
		P float64
		V time.Duration
	}
	var got, want []pct
	for _, tt := range tests {
		got = append(got, pct{tt.n, tt.p, percentile(lat(tt.n), tt.p)})
		want = append(want, pct{tt.n, tt.p, tt.want})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("percentile (-want +got):\n%s", diff)
	}
}

func TestRoundStats(t *testing.T) {
	nexus := []float64{20000, 18000, 24000, 10000}
	bare := []float64{40000, 40000, 40000, 50000}
	pairs := pairRatios(nexus, bare)
	if diff := cmp.Diff([]float64{0.5, 0.45, 0.6, 0.2}, pairs); diff != "" {
		t.Errorf("pairRatios (-want +got):\n%s", diff)
	}
	type stats struct{ Median, Variation float64 }
	for _, tt := range []struct {
		xs   []float64
		want stats
	}{
		{nil, stats{0, 0}},
		{[]float64{3}, stats{3, 0}},
		{[]float64{4, 2}, stats{3, 0.5}},
		{[]float64{5, 1, 4}, stats{4, 0.8}},
		{pairs, stats{0.475, 1 - 0.2/0.6}},
		{[]float64{100, 85, 90, 95}, stats{92.5, 0.15}},
	} {
		got := stats{median(tt.xs), variation(tt.xs)}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tt.xs, diff)
		}
	}
}
