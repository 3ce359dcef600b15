package flow

import (
	"strings"
	"testing"
)

// An operand of &&, || or ! that can never be true or false (a number, a
// string, an array, the result of arithmetic, len, lower or upper) is a
// compile error naming the operator, its column and the operand: reached,
// it fails every message; never reached (false && 5), it is dead text.
// They compiled and failed at run time. An operand whose value the
// document decides (a path, ctx) compiles, and so do null, a comparison
// and a boolean.
func TestBooleanOperandNeverBoolean(t *testing.T) {
	const tail = ", never true or false: write a comparison (==, <, in …)"
	for _, c := range []struct {
		src, want string // want "": compiles
	}{
		{`"a" && true`, `the left side of && at column 5, "\"a\"", is a string` + tail},
		{`true && "a"`, `the right side of && at column 6, "\"a\"", is a string` + tail},
		{`!5`, `the operand of ! at column 1, "5", is a number` + tail},
		{`1 || $.x`, `the left side of || at column 3, "1", is a number` + tail},
		{`$.x || 1`, `the right side of || at column 5, "1", is a number` + tail},
		{`false && 5`, `the right side of && at column 7, "5", is a number` + tail},
		{`!($.a + 1)`, `the operand of ! at column 1, "($.a + 1)", is a number or a string` + tail},
		{`$.a == 1 && len($.s)`, `the right side of && at column 10, "len($.s)", is a number` + tail},
		{`!lower($.s)`, `the operand of ! at column 1, "lower($.s)", is a string or null` + tail},
		{`[1] || true`, `the left side of || at column 5, "[1]", is an array` + tail},
		{`$.a && !!"x"`, `the operand of ! at column 9, "\"x\"", is a string` + tail},
		{`$.a == (1 && true)`, `the left side of && at column 11, "1", is a number` + tail},
		{`$.a - 1 && true`, `the left side of && at column 9, "$.a - 1", is a number` + tail},
		{`$.a && now()`, `the right side of && at column 5, "now()", is a string` + tail},
		{`!"` + strings.Repeat("s", 100) + `"`, `the operand of ! at column 1, "\"` + strings.Repeat("s", 63) + `"…, is a string` + tail},
		// the document decides, or null, a comparison, a boolean
		{`$.x && ctx.request.ok`, ""},
		{`!$.x || $.items[0]`, ""},
		{`null || !null`, ""},
		{`!($.a == 1) && ($.b in ["x"]) || matches($.c, "y")`, ""},
		{`!!true && (false || $.z)`, ""},
		{`[1, 2][$.i] && true`, ""},
	} {
		t.Run(c.src, func(t *testing.T) {
			_, err := CompileExpr(c.src)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("CompileExpr(%s): error %q, want %q", c.src, got, c.want)
			}
		})
	}
}
