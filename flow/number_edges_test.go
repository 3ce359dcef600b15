package flow

import (
	"strings"
	"testing"
)

// Every number read is written in a form that reads back: one whose value
// needs an exponent of 10 digits (0.1e-999999999 is 1e-1000000000) is
// refused as out of range, though its own exponent has 9, or an answer, a
// queue_publish payload or a schedule_input could not be read back.
func TestCanonicalFormReadsBack(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"0.1e-999999999", "0.0001e-999999999", "-0.000001e-999999999", "0.12e-999999999"} {
		v, err := ParseJSON([]byte(in), 0)
		if err != nil {
			continue // refusing it is fine too
		}
		out := AppendJSON(nil, v)
		if _, err := ParseJSON(out, 0); err != nil {
			t.Errorf("%s is read, then written %s, which does not read back: %v", in, out, err)
		}
	}
}

// The same in an expression: such a literal is refused when it compiles,
// not every time the expression runs.
func TestExpressionLiteralRuns(t *testing.T) {
	t.Parallel()
	e, err := CompileExpr(`$.x < 0.1e-999999999`)
	if err != nil {
		return // refusing it at publication is fine
	}
	if _, err := e.Eval(&Env{Doc: 0}); err != nil {
		t.Errorf("`$.x < 0.1e-999999999` compiled but fails when it runs: %v", err)
	}
}

// A whole number that fits 64 bits is an int, whatever its spelling: the
// form an exactNumber is written in (9007199254740993) reads back as an
// int, so 9007199254740993.0 must be one too, or a document changes
// between a flow and the next (queue_publish, schedule_input) and its
// arithmetic loses the very digit the exact number keeps.
func TestWholeExactNumberInInt64IsAnInt(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"9007199254740993.0", "1234567890123456789.000", "9.007199254740993e15", "-9223372036854775808.0", "92233720368547758.07e2"} {
		v, err := ParseJSON([]byte(in), 0)
		if err != nil {
			t.Fatal(err)
		}
		back, _ := ParseJSON(AppendJSON(nil, v), 0)
		if _, ok := back.(int); ok {
			if _, ok := v.(int); !ok {
				t.Errorf("%s is a %T, written %s, read back as an int", in, v, AppendJSON(nil, v))
			}
		}
	}
	e, err := CompileExpr(`$.x - 2`)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := ParseJSON([]byte(`{"x":9007199254740993.0}`), 0)
	got, _ := e.Eval(&Env{Doc: doc})
	again, _ := ParseJSON(AppendJSON(nil, doc), 0)
	want, _ := e.Eval(&Env{Doc: again})
	if Text(got) != Text(want) {
		t.Errorf("$.x - 2 is %s on {\"x\":9007199254740993.0} and %s on the same document written and read again", Text(got), Text(want))
	}
}

// Writing a number does not multiply a body's size: 1.0000000000000001e308
// (22 bytes) is not written in 309 digits, or a 1 MiB body of such numbers
// echoed by a flow would be a 13.5 MiB answer (and as much again in a
// queued payload, an egress body, a recorded dedup answer).
func TestWrittenSizeIsBounded(t *testing.T) {
	t.Parallel()
	const lit = "1.0000000000000001e308"
	body := "[" + strings.Repeat(lit+",", 1000) + lit + "]"
	doc, err := ParseJSON([]byte(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	if out := AppendJSON(nil, doc); len(out) > 2*len(body) {
		t.Errorf("a %d-byte body is written in %d bytes (%.1f×): %s…", len(body), len(out), float64(len(out))/float64(len(body)), out[:60])
	}
}

// Comparisons are transitive: a float64 is the value of its shortest form
// against an int as against an exactNumber (above 2^53 its binary value
// differs, and i < x, x < f and f < i all held).
func TestComparisonsAreTransitive(t *testing.T) {
	t.Parallel()
	doc, err := ParseJSON([]byte(`{"i":1234567890123456789,"x":1234567890123456790.5,"f":1.2345678901234568e18}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := CompileExpr(`$.i < $.x && $.x < $.f && $.f < $.i`)
	if err != nil {
		t.Fatal(err)
	}
	if cycle, _ := e.Eval(&Env{Doc: doc}); cycle == true {
		t.Errorf("$.i < $.x, $.x < $.f and $.f < $.i all hold (i=1234567890123456789, x=1234567890123456790.5, f=1.2345678901234568e18)")
	}
}

// schedule_input written as a YAML object keeps its numbers as a body
// does, and so refuses what a body refuses: 1e-1000000000 is out of range
// in a body, not YAML's 0.
func TestScheduleInputRefusesWhatABodyRefuses(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"1e-1000000000", "0.1e-999999999", "1e-0000000001000000000"} {
		src := "---\nflowmarkdown_version: \"0.1\"\nflow: tick\ntenant: acme\nschedule: \"@hourly\"\nschedule_input: {\"x\": " + n + "}\n---\n\n## Step: copy\n```ntd\n{{ $ }}\n```\n"
		if _, err := ParseJSON([]byte(`{"x": `+n+`}`), 0); err == nil {
			continue
		}
		f, err := Compile("tick.md", []byte(src))
		if err == nil {
			t.Errorf("schedule_input {\"x\": %s} compiles to %s; a body refuses it", n, AppendJSON(nil, f.Schedule().Input()))
		}
	}
}

// 1e-400 is not zero (`$.tiny == 0` is false), so `1 / $.tiny` is not a
// division by zero: through float64 the quotient is out of range, and the
// error says so.
func TestDivisionByATinyNumber(t *testing.T) {
	t.Parallel()
	env := &Env{Doc: exactDoc(t), Ctx: exprCtx()}
	_, err := evalExpr(t, `$.tiny != 0 && 1 / $.tiny > 0`, env)
	if err == nil || err.Error() == "division by zero" {
		t.Errorf("`$.tiny != 0 && 1 / $.tiny > 0` = %v, want the quotient out of range (1e-400 is not zero)", err)
	}
	if got, err := evalExpr(t, `0 / $.tiny`, env); err != nil || Text(got) != "0" {
		t.Errorf("0 / $.tiny = %v, %v; want 0", got, err)
	}
}

// The same for a whole number of few digits written with an exponent or a
// fraction (1e18, 100000000000000000.0): it is written back in all its
// digits (1000000000000000000), which read as an int, so it must be one
// when it is first read, or `$.x + 1` loses the 1 at the door and keeps it
// in the worker that reads the queued document.
func TestShortWholeNumberInInt64IsAnInt(t *testing.T) {
	t.Parallel()
	e, err := CompileExpr(`$.x + 1`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"1e18", "1000000000000000001"},
		{"1E+18", "1000000000000000001"},
		{"100000000000000000.0", "100000000000000001"},
		{"-1.5e18", "-1499999999999999999"},
		{"9.2e18", "9200000000000000001"},
		{"1e5", "100001"},
		{"1.5", "2.5"},
		{"1e19", "10000000000000000000"}, // over 64 bits: through float64, as before
	}
	for _, tt := range tests {
		doc, err := ParseJSON([]byte(`{"x":`+tt.in+`}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Eval(&Env{Doc: doc})
		if err != nil {
			t.Fatalf("$.x + 1 on %s: %v", tt.in, err)
		}
		again, _ := ParseJSON(AppendJSON(nil, doc), 0)
		back, _ := e.Eval(&Env{Doc: again})
		if Text(got) != tt.want || Text(back) != tt.want {
			t.Errorf("$.x + 1 is %s on {\"x\":%s} and %s on it written and read again, want %s", Text(got), tt.in, Text(back), tt.want)
		}
		lit, err := CompileExpr(tt.in + ` + 1`)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := lit.Eval(&Env{}); Text(got) != tt.want {
			t.Errorf("%s + 1 is %s, want %s", tt.in, Text(got), tt.want)
		}
	}
	// a whole result of float64 arithmetic is the same number: the int it
	// is written as
	e, err = CompileExpr(`$.x * 1.5 + 1`)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := ParseJSON([]byte(`{"x":1000000000000000000}`), 0)
	got, err := e.Eval(&Env{Doc: doc})
	if err != nil || Text(got) != "1500000000000000001" {
		t.Errorf("$.x * 1.5 + 1 on {\"x\":1000000000000000000} is %s (%v), want 1500000000000000001", Text(got), err)
	}
}
