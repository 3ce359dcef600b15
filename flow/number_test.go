package flow

import (
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exactDoc holds numbers no float64 holds digit for digit.
func exactDoc(t *testing.T) any {
	t.Helper()
	doc, err := ParseJSON([]byte(`{
		"id": 12345678901234567890,
		"big": 123456789012345678901234567890,
		"amount": 0.1000000000000000000001,
		"tiny": 1e-400,
		"items": [10, 20, 30]
	}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// exact is the exactNumber of a literal and its nearest float64.
func exact(text string, f float64) exactNumber { return exactNumber{f: f, d: parseDecimal(text)} }

// TestExactNumberExpressions: a number read from a document or written in
// an expression keeps its digits through a path, a comparison, equality and
// negation; other arithmetic is float64's.
func TestExactNumberExpressions(t *testing.T) {
	t.Parallel()
	checkEvals(t, &Env{Doc: exactDoc(t), Ctx: exprCtx()}, []evalCase{
		{`$.id`, exact("12345678901234567890", 12345678901234567890.0)},
		{`[$.id][0]`, exact("12345678901234567890", 12345678901234567890.0)},
		{`12345678901234567890`, exact("12345678901234567890", 12345678901234567890.0)},
		{`-12345678901234567890`, exact("-12345678901234567890", -12345678901234567890.0)},
		{`-$.id`, exact("-12345678901234567890", -12345678901234567890.0)},
		{`--$.id`, exact("12345678901234567890", 12345678901234567890.0)},
		{`$.id == 12345678901234567890`, true},
		{`$.id == 12345678901234567891`, false}, // the same float64
		{`$.id != 12345678901234567891`, true},
		{`$.id > 12345678901234567889`, true},
		{`$.id < 12345678901234567891`, true},
		{`$.id > 9223372036854775807`, true},
		{`$.id > 1.2345678901234567e19`, true}, // a float64 is the value of its shortest form
		{`$.id in [1, 12345678901234567890]`, true},
		{`$.id in [1, 12345678901234567891]`, false},
		{`$.big > $.id`, true},
		{`-$.big < -$.id`, true},
		{`$.amount > 0.1`, true},
		{`$.amount == 0.1`, false},
		{`$.amount < 0.1000000000000000000002`, true},
		{`$.tiny > 0`, true},
		{`-$.tiny < 0`, true},
		{`$.tiny == 0`, false},
		{`$.id + 0`, 12345678901234567890.0},
		{`$.amount * 10`, 1}, // through float64: 0.1 × 10
		{`$.items[$.amount]`, nil},
	})
}

func TestExactNumberErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want string
	}{
		{`$.id + "x"`, `cannot use + on number and string`},
		{`$.id && true`, `expected true or false, got number 12345678901234567890`},
		{`$.id < "x"`, `cannot compare number with string using <: string "x" is not a number`},
	}
	env := &Env{Doc: exactDoc(t), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			_, err := evalExpr(t, tt.src, env)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Eval(%q) = %v, want %q", tt.src, err, tt.want)
			}
		})
	}
}

// TestExactNumberTemplates: a document's long numbers reach a rendered
// string and a rendered document as they were sent.
func TestExactNumberTemplates(t *testing.T) {
	t.Parallel()
	env := &Env{Doc: exactDoc(t), Ctx: exprCtx()}
	tmpl, err := CompileTemplate(`order-{{ $.id }}: {{ $.amount }} ({{ $.big }})`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(env)
	if err != nil {
		t.Fatal(err)
	}
	if want := `order-12345678901234567890: 0.1000000000000000000001 (123456789012345678901234567890)`; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
	doc, err := renderNTD(t, `{"id": {{ $.id }}, "neg": {{ -$.amount }}, "s": "{{ $.big }}", "lit": 98765432109876543210, "all": {{ $ }}}`, env)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":12345678901234567890,"neg":-0.1000000000000000000001,"s":"123456789012345678901234567890","lit":98765432109876543210,"all":{"id":12345678901234567890,"big":123456789012345678901234567890,"amount":0.1000000000000000000001,"tiny":1e-400,"items":[10,20,30]}}`
	if diff := cmp.Diff(want, string(AppendJSON(nil, doc))); diff != "" {
		t.Errorf("rendered document (-want +got):\n%s", diff)
	}
}

func TestCompareDecimals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"1", "1.0", 0},
		{"1", "1e0", 0},
		{"123e-2", "1.23", 0},
		{"0.0120", "1.2E-2", 0},
		{"0", "-0", 0},
		{"0", "0e999999999999999999999", 0},
		{"0.12", "0.123", -1},
		{"0.123", "0.12", 1},
		{"-1", "1", -1},
		{"-0.5", "-0.25", -1},
		{"1e3", "999", 1},
		{"999.9999999999999999999", "1000", -1},
		{"-999.9999999999999999999", "-1000", 1},
		{"1e-400", "0", 1},
		{"-1e-400", "0", -1},
		{"1e-400", "1e-401", 1},
		{"1e400", "1e399", 1},
		{"1e-999999999", "0", 1},
		{"1e-999999999", "1e-999999998", -1},
		{"0.0001e-999999990", "1e-999999994", 0},
		{"-1e-999999999", "-1e-999999998", 1},
		{"18446744073709551616", "18446744073709551615", 1},
	}
	for _, tt := range tests {
		if got := compareDecimals(parseDecimal(tt.a), parseDecimal(tt.b)); got != tt.want {
			t.Errorf("compareDecimals(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestLongNumbers: a literal of any length up to the body's ceiling reads
// as its exact value and its nearest float64 (strconv.ParseFloat alone
// misreads one of more than 800 characters), or is refused as out of
// range, and costs time in proportion to its length.
func TestLongNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		twice    string // $.x * 2, or "" when the number is out of range
	}{
		{"1 written with 1000 zeros", "1" + strings.Repeat("0", 1000) + "e-1000", "2"},
		{"1 written with 200000 leading zeros", "0." + strings.Repeat("0", 200000) + "1e200001", "2"},
		{"0.5 written with 900 zeros", "5" + strings.Repeat("0", 900) + "e-901", "1"},
		{"1.5 with a long fraction", "1.5" + strings.Repeat("0", 1000) + "1", "3"},
		{"10^90000 behind leading zeros", "0." + strings.Repeat("0", 9999) + "1e100000", ""},
		{"10^400 behind 200000 leading zeros", "0." + strings.Repeat("0", 200000) + "1e200400", ""},
		{"an exponent of ten digits", "1e-1000000000", ""},
		{"a zero with an exponent of twenty digits", "0e-99999999999999999999", "0"},
		{"a million digits", "0." + strings.Repeat("3", 1<<20), "0.6666666666666666"},
	}
	e, err := CompileExpr(`$.x * 2`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc, err := ParseJSON([]byte(`{"x":`+tt.in+`}`), 0)
			if tt.twice == "" {
				if err == nil || !strings.Contains(err.Error(), "is out of range") || len(err.Error()) > 200 {
					t.Fatalf("ParseJSON = %v, want a short out-of-range error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Eval(&Env{Doc: doc})
			if err != nil {
				t.Fatal(err)
			}
			if s := Text(got); s != tt.twice {
				t.Errorf("$.x * 2 = %s, want %s", s, tt.twice)
			}
		})
	}
}

// TestNearestFloat: the float64 an exactNumber's arithmetic uses is the
// nearest to its value, as math/big rounds it.
func TestNearestFloat(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		var b strings.Builder
		b.WriteByte(byte('1' + r.IntN(9)))
		for range r.IntN(20) {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		sig := b.String()
		var text string
		switch r.IntN(3) {
		case 0: // trailing zeros, a negative exponent
			z := 800 + r.IntN(3000)
			text = sig + strings.Repeat("0", z) + "e-" + strconv.Itoa(z-r.IntN(600)+300)
		case 1: // leading zeros
			z := r.IntN(300000)
			text = "0." + strings.Repeat("0", z) + sig + "e" + strconv.Itoa(z+r.IntN(600)-300)
		default: // a long fraction
			text = sig[:1] + "." + sig[1:] + strings.Repeat("0", 900+r.IntN(100)) + "1e" + strconv.Itoa(r.IntN(600)-300)
		}
		bf, _, err := big.ParseFloat(text, 10, 5000, big.ToNearestEven)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := bf.Float64()
		v, err := ParseJSON([]byte(text), 0)
		if err != nil {
			if !math.IsInf(want, 0) {
				t.Fatalf("%.60s… (%d bytes) refused (%v), but it is %g", text, len(text), err, want)
			}
			continue
		}
		if math.Abs(want) < 0x1p-1022 {
			continue // subnormal: big.Float rounds twice
		}
		if got, _ := number(v); got != want {
			t.Fatalf("%.80s… (%d bytes): f = %g, want %g", text, len(text), got, want)
		}
	}
}

// TestExactNumberComparisonIsLinear: an exactNumber's exact value is read
// once, not at every comparison (`$.x in $.a` would cost the number's
// length for each element).
func TestExactNumberComparisonIsLinear(t *testing.T) {
	const n = 20000
	body := `{"x":0.` + strings.Repeat("1", n) + `,"a":[` + strings.Repeat("1,", n) + `1]}`
	doc, err := ParseJSON([]byte(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := CompileExpr(`$.x in $.a`)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := e.Eval(&Env{Doc: doc})
	runtime.ReadMemStats(&after)
	if err != nil || v != false {
		t.Fatalf("Eval = %v, %v; want false", v, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(body)) {
		t.Errorf("`$.x in $.a` on a %d-byte body allocated %d bytes", len(body), alloc)
	}
}

// TestLongNumberInAnError: an error quotes a long number no more than a
// long string (its answer, its journal row and its log line stay short).
func TestLongNumberInAnError(t *testing.T) {
	t.Parallel()
	doc, err := ParseJSON([]byte(`{"flag":0.`+strings.Repeat("1", 100000)+`}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := CompileExpr(`$.flag`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.EvalBool(&Env{Doc: doc}); err == nil || err.Error() != "expected true or false, got a number" {
		t.Errorf("EvalBool = %v, want expected true or false, got a number", err)
	}
}

// TestScheduleInputKeepsEveryDigit: schedule_input written as the JSON
// object it is, which YAML reads, keeps its numbers as a body does.
func TestScheduleInputKeepsEveryDigit(t *testing.T) {
	t.Parallel()
	for _, input := range []string{
		`{"id": 12345678901234567890, "amount": 0.1000000000000000000001, "n": 7, "f": 2.5}`,
		`'{"id": 12345678901234567890, "amount": 0.1000000000000000000001, "n": 7, "f": 2.5}'`,
	} {
		src := "---\nflowmarkdown_version: \"0.1\"\nflow: tick\ntenant: acme\nschedule: \"@hourly\"\nschedule_input: " + input + "\n---\n\n## Step: copy\n```ntd\n{{ $ }}\n```\n"
		f, err := Compile("tick.md", []byte(src))
		if err != nil {
			t.Errorf("schedule_input: %s: %v", input, err)
			continue
		}
		if got, want := string(AppendJSON(nil, f.Schedule().Input())), `{"id":12345678901234567890,"amount":0.1000000000000000000001,"n":7,"f":2.5}`; got != want {
			t.Errorf("schedule_input: %s is %s, want %s", input, got, want)
		}
	}
}

// TestWholeFloatActsAsInteger: a whole number written with a point or an
// exponent below 2^53 (3.0, 3e0, as a JSON body may hold it) is an integer
// wherever integers are exact: arithmetic with a large integer keeps every
// digit, as 3 does, and it indexes an array.
func TestWholeFloatActsAsInteger(t *testing.T) {
	t.Parallel()
	doc, err := ParseJSON([]byte(`{"three":3.0,"exp":3e0,"neg":-2.0,"half":1.5,"big":1000000000000000001,"items":["a","b","c","d"]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEvals(t, &Env{Doc: doc, Ctx: exprCtx()}, []evalCase{
		{`$.three * $.big`, 3000000000000000003},
		{`$.big * $.three`, 3000000000000000003},
		{`$.exp * $.big`, 3000000000000000003},
		{`$.big + $.three`, 1000000000000000004},
		{`$.big - $.neg`, 1000000000000000003},
		{`$.neg * $.big`, -2000000000000000002},
		{`$.big * 3.0`, 3000000000000000003},
		{`($.big * $.three) / $.three`, 1000000000000000001},
		{`$.items[$.three]`, "d"},
		{`$.items[$.three - 1.0]`, "c"},
		{`$.three + 1`, 4},
		{`$.half * 2`, 3},
		{`$.three / 2`, 1.5},
	})
}
