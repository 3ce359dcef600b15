package access

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// flowNames are n flow names of a usual length ("order-intake-00042").
func flowNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("order-intake-%05d", i)
	}
	return names
}

// BenchmarkAllowsScanOrSet measures a look-up in a key's flows list by a
// scan and by a set, for lists of n names, of a name listed last and of one
// not listed (the gate's worst cases): Parse builds the set for lists longer
// than setFrom, where the scan is slower.
func BenchmarkAllowsScanOrSet(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8, 12, 16, 32, 64} {
		names := flowNames(n)
		set := make(map[string]bool, n)
		for _, name := range names {
			set[name] = true
		}
		for _, probe := range []string{names[n-1], "order-intake-99999"} {
			b.Run(fmt.Sprintf("n=%d/%s/scan", n, probe), func(b *testing.B) {
				for b.Loop() {
					_ = slices.Contains(names, probe)
				}
			})
			b.Run(fmt.Sprintf("n=%d/%s/set", n, probe), func(b *testing.B) {
				for b.Loop() {
					_ = set[probe]
				}
			})
		}
	}
}

// TestAllowsLongListInConstantTime: a key listing 180,000 flows answers
// Allows from a set Parse builds, not by a scan of the list on every
// request (0.76 ms a call, of the gate's every request with that key).
// 10,000 calls take microseconds each at most; scans took 7 s.
func TestAllowsLongListInConstantTime(t *testing.T) {
	names := flowNames(180_000)
	set := parseFlows(t, names)
	k, _ := set.Lookup("the key")
	if k.flowSet == nil {
		t.Errorf("a key listing %d flows has no set of them", len(names))
	}
	start := time.Now()
	for range 10_000 {
		if k.Allows("order-intake-x") {
			t.Fatal("Allows a flow not listed")
		}
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("10,000 calls of Allows on a list of %d flows took %v, want a few ms", len(names), took)
	}
}

// TestAllowsByListSize: Allows answers the same whether it scans the list
// (short) or looks the name up in the set (long), and so does a key of
// Keys, whose copy of the list the caller may change.
func TestAllowsByListSize(t *testing.T) {
	for _, n := range []int{1, 2, setFrom - 1, setFrom, setFrom + 1, 100} {
		names := flowNames(n)
		set := parseFlows(t, names)
		k, _ := set.Lookup("the key")
		if got, want := k.flowSet != nil, n >= setFrom; got != want {
			t.Errorf("%d flows: a set %v, want %v", n, got, want)
		}
		keys := set.Keys()
		keys[0].Flows[0] = "changed"
		for _, tc := range []struct {
			flow string
			want bool
		}{
			{names[0], true},
			{names[n-1], true},
			{"order-intake", false},
			{"", false},
			{"*", false},
		} {
			if got := k.Allows(tc.flow); got != tc.want {
				t.Errorf("%d flows: Allows(%q) = %v, want %v", n, tc.flow, got, tc.want)
			}
		}
		if keys[0].Allows(names[0]) || !keys[0].Allows("changed") {
			t.Errorf("%d flows: a copy whose list was changed does not answer by its list", n)
		}
	}
}

// parseFlows parses an access.yaml of one key, "the key", listing names.
func parseFlows(t *testing.T, names []string) *Set {
	t.Helper()
	var b strings.Builder
	b.WriteString("keys:\n  - id: a\n    tenant: acme\n    sha256: ")
	sum := HashKey("the key")
	b.WriteString(hex.EncodeToString(sum[:]))
	b.WriteString("\n    flows:\n")
	for _, name := range names {
		b.WriteString("      - " + name + "\n")
	}
	set, err := Parse("access.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return set
}
