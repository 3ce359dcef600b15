package flow

import (
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

func exact(text string, f float64) exactNumber { return exactNumber{f: f, text: text} }

// TestExactNumberExpressions: a number read from a document or written in
// an expression keeps its digits through a path, a comparison, equality and
// negation; other arithmetic is float64's.
func TestExactNumberExpressions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want any
	}{
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
	}
	env := &Env{Doc: exactDoc(t), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			got, err := evalExpr(t, tt.src, env)
			if err != nil {
				t.Fatalf("Eval(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, got, docOpts); diff != "" {
				t.Errorf("Eval(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestExactNumberErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want string
	}{
		{`$.id + "x"`, `cannot use + on number and string`},
		{`$.id && true`, `expected true or false, got number 12345678901234567890`},
		{`$.id < "x"`, `cannot compare number with string using <`},
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
		{"1e-99999999999999999999", "0", 1},
		{"1e99999999999999999999", "1e308", 1},
		{"18446744073709551616", "18446744073709551615", 1},
	}
	for _, tt := range tests {
		if got := compareDecimals(parseDecimal(tt.a), parseDecimal(tt.b)); got != tt.want {
			t.Errorf("compareDecimals(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
