package flow

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// halfway is the exact decimal value halfway between f and the next
// float64 up, written out in full.
func halfway(f float64) string {
	a := new(big.Float).SetPrec(2000).SetFloat64(f)
	b := new(big.Float).SetPrec(2000).SetFloat64(math.Nextafter(f, math.Inf(1)))
	a.Add(a, b).Quo(a, big.NewFloat(2).SetPrec(2000))
	r, _ := a.Rat(nil)
	// an exact decimal: r's denominator is a power of two
	s := r.FloatString(1100)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// pad makes a literal exactly n characters long by adding digits to its
// fraction (zeros, then a final 1: just above the halfway point).
func pad(s string, n int) string {
	if !strings.Contains(s, ".") {
		s += "."
	}
	if len(s) >= n {
		return s[:n-1] + "1"
	}
	return s + strings.Repeat("0", n-len(s)-1) + "1"
}

// costBodies are 1 MiB bodies: arrays of one literal repeated.
func costBodies() []struct{ name, lit string } {
	big1 := halfway(1.5e300)    // ~300 whole digits
	small := halfway(0x1p-1022) // ~770 digits
	one := halfway(1)           // 1 + 2^-53
	tiny := halfway(5e-324)     // 2^-1075 × 3
	return []struct{ name, lit string }{
		{"int", "123456789"},
		{"float 1.5", "1.5"},
		{"float 17 digits", "0.30000000000000004"},
		{"exact 0.1000000000000000000001", "0.1000000000000000000001"},
		{"exact 1e-400", "1e-400"},
		{"exact 1.0000000000000001e308", "1.0000000000000001e308"},
		{"exact 1000000000000001e293", "1000000000000001e293"},
		{"exponent of 9 digits 1e-999999999", "1e-999999999"},
		{"zero with a 20-digit exponent", "0e-99999999999999999999"},
		{"out of range 1e-0000000001000000000", "1e-0000000001000000000"},
		{"800: halfway above 1", pad(one, 800)},
		{"800: halfway near 1.5e300", pad(big1, 800)},
		{"800: halfway near 2^-1022", pad(small, 800)},
		{"800: halfway near 5e-324", pad(tiny, 800)},
		{"801: halfway above 1", pad(one, 801)},
		{"801: halfway near 1.5e300", pad(big1, 801)},
		{"801: halfway near 2^-1022", pad(small, 801)},
		{"801: halfway near 5e-324", pad(tiny, 801)},
		{"4000: halfway near 2^-1022", pad(small, 4000)},
		{"65536: halfway near 2^-1022", pad(small, 65536)},
		{"one literal of 1 MiB", ""},
	}
}

func costBody(lit string) []byte {
	const size = 1 << 20
	if lit == "" {
		return []byte("[0." + strings.Repeat("7", size-5) + "]")
	}
	n := max(1, (size-2)/(len(lit)+1))
	return []byte("[" + strings.Repeat(lit+",", n-1) + lit + "]")
}

func BenchmarkParseNumbers(b *testing.B) {
	for _, c := range costBodies() {
		body := costBody(c.lit)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				ParseJSON(body, 0)
			}
		})
	}
}
