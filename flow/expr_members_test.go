package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExprMemberOfValueWithoutMembers: a member (.name or [key]) of a value
// written in the expression that never has one (a number, a string, a
// boolean, null, the result of an operator or a function, a name of an
// array literal) is a compile error naming the expression; it compiled
// and was always null. 1.e5 is member e5 of 1, since a point in a number is
// followed by a digit (as in JSON), and the error says how the number is
// written.
func TestExprMemberOfValueWithoutMembers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src, want string
	}{
		{`1.x`, `1.x at column 1 is always null: 1 is a number, which has no members`},
		{`"a".b`, `"a".b at column 1 is always null: "a" is a string, which has no members`},
		{`1.e5`, `1.e5 at column 1 is always null: 1 is a number, which has no members; a point in a number is followed by a digit: 1e5 or 1.0e5`},
		{`$.n > 1.E5`, `1.E5 at column 7 is always null: 1 is a number, which has no members; a point in a number is followed by a digit: 1E5 or 1.0E5`},
		{`1.e+5`, `1.e at column 1 is always null: 1 is a number, which has no members; a point in a number is followed by a digit: 1e+5 or 1.0e+5`},
		{`1.5.e3`, `1.5.e3 at column 1 is always null: 1.5 is a number, which has no members; a number's exponent follows its digits: 1.5e3`},
		{`1.e`, `1.e at column 1 is always null: 1 is a number, which has no members`},
		{`1.0.x`, `1.0.x at column 1 is always null: 1.0 is a number, which has no members`},
		{`1e5.x`, `1e5.x at column 1 is always null: 1e5 is a number, which has no members`},
		{`1 .x`, `1 .x at column 1 is always null: 1 is a number, which has no members`},
		{`-1.x`, `1.x at column 2 is always null: 1 is a number, which has no members`},
		{`12345678901234567890.x`, `12345678901234567890.x at column 1 is always null: 12345678901234567890 is a number, which has no members`},
		{`true.x`, `true.x at column 1 is always null: true is a boolean, which has no members`},
		{`false["x"]`, `false["x"] at column 1 is always null: false is a boolean, which has no members`},
		{`null.x`, `null.x at column 1 is always null: null has no members`},
		{`null[0]`, `null[0] at column 1 is always null: null has no members`},
		{`1[0]`, `1[0] at column 1 is always null: 1 is a number, which has no members`},
		{`"abc"[0]`, `"abc"[0] at column 1 is always null: "abc" is a string, which has no members`},
		{`(1).x`, `(1).x at column 1 is always null: (1) is a number, which has no members`},
		{`[1, 2].x`, `[1, 2].x at column 1 is always null: [1, 2] is an array, whose members are numbered: [0], [1], …`},
		{`[1, 2]["x"]`, `[1, 2]["x"] at column 1 is always null: [1, 2] is an array, whose members are numbered: [0], [1], …`},
		{`[1, 2][lower($.k)]`, `[1, 2][lower($.k)] at column 1 is always null: [1, 2] is an array, whose members are numbered: [0], [1], …`},
		{`len($.s).x`, `len($.s).x at column 1 is always null: len($.s) is a number, which has no members`},
		{`lower($.s).x`, `lower($.s).x at column 1 is always null: lower($.s) is a string or null, which has no members`},
		{`now().x`, `now().x at column 1 is always null: now() is a string, which has no members`},
		{`uuid()[0]`, `uuid()[0] at column 1 is always null: uuid() is a string, which has no members`},
		{`matches($.s, "a").x`, `matches($.s, "a").x at column 1 is always null: matches($.s, "a") is a boolean, which has no members`},
		{`($.a == 1).x`, `($.a == 1).x at column 1 is always null: ($.a == 1) is a boolean, which has no members`},
		{`($.a && $.b).x`, `($.a && $.b).x at column 1 is always null: ($.a && $.b) is a boolean, which has no members`},
		{`(!$.a).x`, `(!$.a).x at column 1 is always null: (!$.a) is a boolean, which has no members`},
		{`($.a + 1).x`, `($.a + 1).x at column 1 is always null: ($.a + 1) is a number or a string, which has no members`},
		{`($.a * 2)[0]`, `($.a * 2)[0] at column 1 is always null: ($.a * 2) is a number, which has no members`},
		{`$.a[1.x]`, `1.x at column 5 is always null: 1 is a number, which has no members`},
		{`ctx.x == "a".b`, `"a".b at column 10 is always null: "a" is a string, which has no members`},
		{`"` + strings.Repeat("a", 70) + `".b`, `"` + strings.Repeat("a", 63) + `… at column 1 is always null: "` + strings.Repeat("a", 47) + `… is a string, which has no members`},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			e, err := CompileExpr(tt.src)
			if err == nil {
				v, _ := e.Eval(&Env{Doc: exprDoc(), Ctx: exprCtx()})
				t.Fatalf("CompileExpr(%q) succeeded (it evaluates to %#v), want the error %q", tt.src, v, tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("CompileExpr(%q) error (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

// TestExprMembersThatMayExist: a member of what the document decides ($,
// ctx, a path, an item of an array) and a numbered member of an array
// literal compile and run as before.
func TestExprMembersThatMayExist(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want any
	}{
		{`$.a.b[1]`, "second"},
		{`$["k-1"]`, "dashed"},
		{`$.s.x`, nil}, // the document's string: the document decides
		{`$.n.x`, nil},
		{`$.nul.x`, nil},
		{`ctx.request.lines[0].sku`, "A"},
		{`ctx.HTTP_SC.x`, nil},
		{`$[$.key]`, nil},
		{`$.obj[$.key]`, 1},
		{`[10, 20][1]`, 20},
		{`[10, 20][$.one]`, 20},
		{`[10, 20][$.zero + 1]`, 20},
		{`[10, 20][-1]`, nil},
		{`[10, 20][len($.s) - 4]`, 20},
		{`[$.obj][0].x`, 1}, // an item of an array literal: may have members
		{`[[1, 2]][0][1]`, 2},
		{`1.5e3`, 1500.0},
		{`1.0e5`, 100000.0},
		{`1e5`, 100000.0},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			got, err := evalExpr(t, tt.src, &Env{Doc: exprDoc(), Ctx: exprCtx()})
			if err != nil {
				t.Fatalf("Eval(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Eval(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}
