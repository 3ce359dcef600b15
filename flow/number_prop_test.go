package flow

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// lit is a random JSON number literal and its parts.
type lit struct {
	text             string
	neg              bool
	intPart, frac    string
	hasExp           bool
	expSign, expDigs string
}

func digitRun(r *rand.Rand, n int) string {
	var b strings.Builder
	mode := r.IntN(5)
	for range n {
		switch mode {
		case 0: // zeros mostly
			if r.IntN(40) == 0 {
				b.WriteByte(byte('1' + r.IntN(9)))
			} else {
				b.WriteByte('0')
			}
		case 1: // nines mostly (carries at rounding)
			if r.IntN(40) == 0 {
				b.WriteByte(byte('0' + r.IntN(10)))
			} else {
				b.WriteByte('9')
			}
		default:
			b.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	return b.String()
}

func randLen(r *rand.Rand) int {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return r.IntN(4)
	case 2:
		return r.IntN(20)
	case 3:
		return r.IntN(40)
	case 4:
		return 780 + r.IntN(40) // around maxShortNumber
	default:
		return r.IntN(3000)
	}
}

func randLit(r *rand.Rand) lit {
	var l lit
	l.neg = r.IntN(2) == 0
	n := randLen(r)
	if n == 0 || r.IntN(4) == 0 {
		l.intPart = "0"
	} else {
		l.intPart = string(byte('1'+r.IntN(9))) + digitRun(r, n-1)
	}
	if r.IntN(2) == 0 {
		m := randLen(r)
		if m == 0 {
			m = 1
		}
		l.frac = digitRun(r, m)
		if r.IntN(3) == 0 { // leading zeros then digits
			l.frac = strings.Repeat("0", r.IntN(400)) + l.frac
		}
	}
	if r.IntN(3) != 0 {
		l.hasExp = true
		l.expSign = []string{"", "+", "-"}[r.IntN(3)]
		lead := strings.Repeat("0", []int{0, 0, 1, 3, 12}[r.IntN(5)])
		var e int
		switch r.IntN(6) {
		case 0:
			e = r.IntN(10)
		case 1:
			e = r.IntN(400)
		case 2:
			e = 280 + r.IntN(60) // near the top of float64's range
		case 3:
			e = 300 + r.IntN(50) + len(l.frac) // near the bottom, after the fraction
		case 4:
			if r.IntN(2) == 0 {
				e = 999_999_999 - r.IntN(30) // the written exponent's last 9-digit values
			} else {
				e = r.IntN(1 << 20)
			}
		default:
			e = r.IntN(2_000_000_000) // 9 or 10 digits
		}
		l.expDigs = lead + strconv.Itoa(e)
	}
	switch r.IntN(5) {
	case 0: // a short significand behind many zeros, brought back by the exponent
		sig := strconv.Itoa(1 + r.IntN(1_000_000_000))
		z := r.IntN(5000)
		if r.IntN(2) == 0 {
			l.intPart, l.frac = sig+strings.Repeat("0", z), ""
			l.hasExp, l.expSign, l.expDigs = true, "-", strconv.Itoa(z+r.IntN(700)-350)
		} else {
			l.intPart, l.frac = "0", strings.Repeat("0", z)+sig
			l.hasExp, l.expSign, l.expDigs = true, "", strconv.Itoa(z+r.IntN(700)-350)
		}
		if l.expDigs[0] == '-' {
			l.expSign, l.expDigs = "-", l.expDigs[1:]
			if strings.HasPrefix(l.expSign, "-") && r.IntN(2) == 0 {
				l.expSign = "-"
			}
		}
	case 1: // a 16 to 25 digit significand, perhaps whole
		l.intPart = string(byte('1'+r.IntN(9))) + digitRun(r, 15+r.IntN(10))
		l.frac = strings.Repeat("0", r.IntN(3))
		l.hasExp = false
	}
	l.text = rebuild(l)
	return l
}

// ref is a literal's exact value: zero, or 0.S × 10^exp (S without leading
// or trailing zeros); bigExp when the exponent has more than 9 digits.
type ref struct {
	zero   bool
	neg    bool
	s      string
	exp    int
	bigExp bool
}

func refOf(l lit) ref {
	m := new(big.Int)
	m.SetString(l.intPart+l.frac, 10)
	if m.Sign() == 0 {
		return ref{zero: true, neg: l.neg}
	}
	ms := m.String()
	trimmed := strings.TrimRight(ms, "0")
	e := big.NewInt(0)
	if l.hasExp {
		e.SetString(l.expDigs, 10)
		if l.expSign == "-" {
			e.Neg(e)
		}
	}
	if len(e.String()) > 10 || e.CmpAbs(big.NewInt(999_999_999)) > 0 {
		return ref{neg: l.neg, s: trimmed, bigExp: true}
	}
	// value = ms × 10^(e - len(frac)) = 0.ms × 10^(e - len(frac) + len(ms))
	x := ref{neg: l.neg, s: trimmed, exp: int(e.Int64()) - len(l.frac) + len(ms)}
	// out of range too: a value whose own exponent (d.ddde-N) needs 10
	// digits, which would be written in a form that does not read back
	x.bigExp = x.exp-1 < -999_999_999 || x.exp-1 > 999_999_999
	return x
}

// rat is the exact value, when small enough to build.
func (x ref) rat() (*big.Rat, bool) {
	if x.zero {
		return new(big.Rat), true
	}
	if x.bigExp || x.exp > 4000 || x.exp < -4000 {
		return nil, false
	}
	n := new(big.Int)
	n.SetString(x.s, 10)
	p := x.exp - len(x.s)
	r := new(big.Rat).SetInt(n)
	pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(p))), nil)
	if p >= 0 {
		r.Mul(r, new(big.Rat).SetInt(pow))
	} else {
		r.Quo(r, new(big.Rat).SetInt(pow))
	}
	if x.neg {
		r.Neg(r)
	}
	return r, true
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// nearest is the float64 nearest to x; inf when out of range.
func (x ref) nearest() (float64, bool) {
	if x.zero {
		if x.neg {
			return math.Copysign(0, -1), true
		}
		return 0, true
	}
	if x.bigExp {
		return 0, false
	}
	if x.exp > 310 {
		return 0, false
	}
	if x.exp < -330 {
		if x.neg {
			return math.Copysign(0, -1), true
		}
		return 0, true
	}
	r, _ := x.rat()
	f, _ := r.Float64()
	return f, !math.IsInf(f, 0)
}

// oldRead is how a number was read before the exact numbers.
func oldRead(text string) (any, bool) {
	if !strings.ContainsAny(text, ".eE") {
		if n, err := strconv.ParseInt(text, 10, 0); err == nil {
			return int(n), true
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		if err != nil && f == 0 && !math.IsInf(f, 0) { // underflow is not an error
			return f, true
		}
		return nil, false
	}
	return f, true
}

func decimalRat(d decimal) *big.Rat {
	return ref{zero: d.digits == "", neg: d.neg, s: d.digits, exp: d.exp}.mustRat()
}

func (x ref) mustRat() *big.Rat {
	r, ok := x.rat()
	if !ok {
		panic("rat")
	}
	return r
}

func describeLit(s string) string {
	if len(s) > 120 {
		return fmt.Sprintf("%s…%s (%d bytes)", s[:60], s[len(s)-40:], len(s))
	}
	return s
}

// TestNumberProperties checks readNumber, readDecimal, appendJSON,
// compareDecimals and decimalOf against math/big over random literals.
func TestNumberProperties(t *testing.T) {
	t.Parallel()
	seed := uint64(11)
	if s := os.Getenv("NUMSEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	r := rand.New(rand.NewPCG(seed, 12))
	n := 15000
	kinds := map[string]int{}
	if testing.Short() {
		n = 5000
	}
	var prev []struct {
		v any
		x ref
	}
	failures := 0
	fail := func(format string, args ...any) {
		t.Helper()
		failures++
		if failures <= 25 {
			t.Errorf(format, args...)
		}
	}
	for range n {
		l := randLit(r)
		x := refOf(l)
		v, err := ParseJSON([]byte(l.text), 0)
		k := fmt.Sprintf("%T", v)
		if len(l.text) > maxShortNumber {
			k += " long"
		}
		if err != nil {
			k = "refused"
		}
		kinds[k]++
		if x.bigExp && !x.zero {
			if err == nil {
				fail("%s: read, want out of range (exponent of more than 9 digits)", describeLit(l.text))
			}
			continue
		}
		want, inRange := x.nearest()
		if !inRange {
			if err == nil {
				fail("%s: read as %s, want out of range", describeLit(l.text), describeLit(Text(v)))
			}
			continue
		}
		if err != nil {
			fail("%s: %v, want %g", describeLit(l.text), err, want)
			continue
		}
		// (a) the value and its float64
		switch got := v.(type) {
		case int:
			if x.zero && got != 0 || !x.zero && (x.exp > 19 || x.exp < len(x.s)) {
				fail("%s: int %d", describeLit(l.text), got)
			}
			if rr, ok := x.rat(); ok && rr.Cmp(new(big.Rat).SetInt64(int64(got))) != 0 {
				fail("%s: int %d, want %s", describeLit(l.text), got, rr.RatString())
			}
		case float64:
			if math.Float64bits(got) != math.Float64bits(want) {
				fail("%s: float64 %g, want %g", describeLit(l.text), got, want)
			}
			if !x.zero {
				// a float64 only when its shortest form is the value
				d, _ := decimalOf(got)
				if d.digits != x.s || d.exp != x.exp || d.neg != x.neg {
					fail("%s: float64 %g whose shortest form is not the value", describeLit(l.text), got)
				}
			}
		case exactNumber:
			if got.f != want && !(want == 0 && got.f == 0) {
				fail("%s: exactNumber f = %g, want %g", describeLit(l.text), got.f, want)
			}
			if got.d.digits != x.s || got.d.exp != x.exp || got.d.neg != x.neg {
				fail("%s: exactNumber d = %+v, want %+v", describeLit(l.text), got.d, x)
			}
			if d, _ := decimalOf(want); want != 0 && d.digits == x.s && d.exp == x.exp {
				fail("%s: exactNumber although its float64's shortest form is its value", describeLit(l.text))
			}
		default:
			fail("%s: %T", describeLit(l.text), v)
			continue
		}
		// (d) a number of at most 15 significant digits in normal
		// range, or any number that is not an exactNumber, is read as
		// before (ParseFloat was right up to 800 characters)
		_, isInt := v.(int)
		wholeExact := isInt && strings.ContainsAny(l.text, ".eE") // an exactNumber before the review's fix
		if _, isExact := v.(exactNumber); !isExact && !wholeExact && len(l.text) <= maxShortNumber {
			old, ok := oldRead(l.text)
			if !ok {
				fail("%s: read now, refused before", describeLit(l.text))
			} else if Text(old) != Text(v) || fmt.Sprintf("%T", old) != fmt.Sprintf("%T", v) {
				fail("%s: %T %s, before %T %s", describeLit(l.text), v, Text(v), old, Text(old))
			}
		}
		if len(x.s) <= 15 && math.Abs(want) >= 0x1p-1022 {
			if _, isExact := v.(exactNumber); isExact {
				fail("%s: a short normal number is an exactNumber", describeLit(l.text))
			}
		}
		// (b) written in one form, read back the same
		out := AppendJSON(nil, v)
		back, err := ParseJSON(out, 0)
		if err != nil {
			fail("%s: written %s, which does not read: %v", describeLit(l.text), describeLit(string(out)), err)
			continue
		}
		if !Equal(back, v) {
			fail("%s: written %s, read back %s (%T, was %T)", describeLit(l.text), describeLit(string(out)), describeLit(Text(back)), back, v)
		}
		if _, isExact := v.(exactNumber); isExact && fmt.Sprintf("%T", back) != fmt.Sprintf("%T", v) { // a whole float64 reads back as an int, as before
			fail("%s: a %T, written %s, reads back as a %T", describeLit(l.text), v, describeLit(string(out)), back)
		}
		if len(out) > 2*len(l.text)+24 {
			fail("%s (%d bytes): written in %d bytes", describeLit(l.text), len(l.text), len(out))
		}
		if again := AppendJSON(nil, back); string(again) != string(out) {
			fail("%s: written %s, then %s", describeLit(l.text), describeLit(string(out)), describeLit(string(again)))
		}
		if rr, ok := x.rat(); ok {
			if _, isExact := v.(exactNumber); isExact {
				br, ok := new(big.Rat).SetString(string(out))
				if !ok || br.Cmp(rr) != 0 {
					fail("%s: written %s, another value", describeLit(l.text), describeLit(string(out)))
				}
			}
		}
		// (c) compareNumbers against math/big on a pair
		if len(prev) > 0 {
			p := prev[r.IntN(len(prev))]
			ra, oka := valueRat(v, x)
			rb, okb := valueRat(p.v, p.x)
			if oka && okb {
				c, ok := compareNumbers(v, p.v)
				if !ok || c != ra.Cmp(rb) {
					fail("compareNumbers(%s, %s) = %d, want %d", describeLit(Text(v)), describeLit(Text(p.v)), c, ra.Cmp(rb))
				}
				if c2, _ := compareNumbers(p.v, v); c2 != -c {
					fail("compareNumbers is not antisymmetric on %s, %s", describeLit(Text(v)), describeLit(Text(p.v)))
				}
			}
		}
		prev = append(prev, struct {
			v any
			x ref
		}{v, x})
		if len(prev) > 200 {
			prev = prev[1:]
		}
	}
	t.Logf("%d literals: %v", n, kinds)
}

// valueRat is the value compareNumbers gives v: an int's, an exactNumber's
// exact value, a float64's shortest form.
func valueRat(v any, x ref) (*big.Rat, bool) {
	switch n := v.(type) {
	case int:
		return new(big.Rat).SetInt64(int64(n)), true
	case float64:
		d, _ := decimalOf(n)
		_ = x
		return decimalRat(d), true
	case exactNumber:
		if n.d.exp > 4000 || n.d.exp < -4000 {
			return nil, false
		}
		return decimalRat(n.d), true
	}
	return nil, false
}

// TestCompareDecimalsAgainstBig compares close pairs (a shared prefix, a
// carry, equal values written differently).
func TestCompareDecimalsAgainstBig(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	n := 10000
	if testing.Short() {
		n = 1000
	}
	for range n {
		a := randLit(r)
		var b lit
		switch r.IntN(3) {
		case 0:
			b = randLit(r)
		case 1: // the same digits, moved: the same value or close
			b = a
			b.frac += strings.Repeat("0", r.IntN(3))
			if r.IntN(2) == 0 && len(b.frac) > 0 {
				b.frac = b.frac[:len(b.frac)-1] + string(byte('0'+r.IntN(10)))
			}
		default:
			b = a
			b.neg = !b.neg
		}
		b.text = rebuild(b)
		xa, xb := refOf(a), refOf(b)
		if xa.bigExp || xb.bigExp {
			continue
		}
		ra, oka := xa.rat()
		rb, okb := xb.rat()
		if !oka || !okb {
			continue
		}
		got := compareDecimals(parseDecimal(a.text), parseDecimal(b.text))
		if want := ra.Cmp(rb); got != want {
			t.Fatalf("compareDecimals(%s, %s) = %d, want %d", describeLit(a.text), describeLit(b.text), got, want)
		}
	}
}

func rebuild(l lit) string {
	var b strings.Builder
	if l.neg {
		b.WriteByte('-')
	}
	b.WriteString(l.intPart)
	if l.frac != "" {
		b.WriteString("." + l.frac)
	}
	if l.hasExp {
		b.WriteString("e" + l.expSign + l.expDigs)
	}
	return b.String()
}

// TestHalfwayRounding: a literal just above, at or just below the point
// halfway between two float64s, at every length around maxShortNumber,
// takes the float64 math/big rounds it to.
func TestHalfwayRounding(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{1, 1.5e300, 0x1p-1022, 5e-324, 1e-310, 123456.789, 0x1p53, 1e22, math.MaxFloat64 / 2} {
		h := halfway(f)
		below := h[:len(h)-1] + string(h[len(h)-1]-1) + "9"
		if !strings.Contains(h, ".") { // a whole halfway point: h - 1 + 0.9
			n, _ := new(big.Int).SetString(h, 10)
			below = n.Sub(n, big.NewInt(1)).String() + ".9"
		}
		for _, n := range []int{0, 790, 799, 800, 801, 802, 1000, 4000} {
			for _, s := range []string{h, below} {
				lit := s
				if n > 0 {
					lit = pad(s, n)
					if len(s) >= n {
						continue
					}
				}
				r, _ := new(big.Rat).SetString(lit)
				want, _ := r.Float64()
				v, err := ParseJSON([]byte(lit), 0)
				if err != nil {
					t.Errorf("%s: %v", describeLit(lit), err)
					continue
				}
				if got, _ := number(v); got != want {
					t.Errorf("%s: %g, want %g", describeLit(lit), got, want)
				}
			}
		}
	}
}
