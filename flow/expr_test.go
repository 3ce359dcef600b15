package flow

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// exprDoc is the document the expression tables run against.
func exprDoc() any {
	return obj(
		"a", obj("b", []any{"first", "second"}),
		"k-1", "dashed",
		"items", []any{10, 20, 30},
		"n", 5,
		"f", 2.5,
		"one", 1,
		"onef", 1.0,
		"zero", 0,
		"s", "hello",
		"S", "ÀBc",
		"empty", "",
		"t", true,
		"fa", false,
		"nul", nil,
		"obj", obj("x", 1, "y", nil),
		"key", "x",
		"pattern", "^h.*o$",
		"badpattern", "a(b",
		"arr", []any{1, "two", nil, obj("z", true)},
		"in", "reserved-looking key",
	)
}

// exprCtx is ctx as the engine passes it: a map holding document values.
func exprCtx() any {
	return map[string]any{
		"request":     obj("orderId", "o-17", "lines", []any{obj("sku", "A")}),
		"tenant":      "acme",
		"attempt":     2,
		"HTTP_SC":     200,
		"headers":     map[string]any{"Content-Type": "application/json"},
		"correlation": nil,
	}
}

func evalExpr(t *testing.T, src string, env *Env) (any, error) {
	t.Helper()
	e, err := CompileExpr(src)
	if err != nil {
		t.Fatalf("CompileExpr(%q): %v", src, err)
	}
	if e.String() != src {
		t.Errorf("String() = %q, want %q", e.String(), src)
	}
	return e.Eval(env)
}

// evalCase is an expression and the value it evaluates to.
type evalCase struct {
	src  string
	want any
}

// checkEvals evaluates each case's expression against env.
func checkEvals(t *testing.T, env *Env, tests []evalCase) {
	t.Helper()
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

func TestExprEval(t *testing.T) {
	t.Parallel()
	checkEvals(t, &Env{Doc: exprDoc(), Ctx: exprCtx()}, []evalCase{
		// literals
		{`null`, nil},
		{`true`, true},
		{`false`, false},
		{`42`, 42},
		{`2.5`, 2.5},
		{`1e3`, 1000.0},
		{`"text"`, "text"},
		{`"esc\"aped\n\u00e9"`, "esc\"aped\né"},
		{`[]`, []any{}},
		{`[1, "a", null]`, []any{1, "a", nil}},
		// paths
		{`$.a.b[0]`, "first"},
		{`$.a.b[1]`, "second"},
		{`$["k-1"]`, "dashed"},
		{`$.items[1]`, 20},
		{`$.items[$.one]`, 20},
		{`$.items[1.0]`, 20},
		{`$.items[-1]`, nil},
		{`$.items[3]`, nil},
		{`$.items[1.5]`, nil},
		{`$.items["0"]`, nil},
		{`$.s.length`, nil},
		{`$.s[0]`, nil},
		{`$.missing`, nil},
		{`$.missing.deeper[2].x`, nil},
		{`$.nul.x`, nil},
		{`$.obj[$.key]`, 1},
		{`$.obj.y`, nil},
		{`$.in`, "reserved-looking key"},
		{`$.arr[3].z`, true},
		{`$.items`, []any{10, 20, 30}},
		{`$.obj`, obj("x", 1, "y", nil)},
		{`[10, 20][1]`, 20},
		{`ctx.request.orderId`, "o-17"},
		{`ctx.request.lines[0].sku`, "A"},
		{`ctx.tenant`, "acme"},
		{`ctx.headers["Content-Type"]`, "application/json"},
		{`ctx.missing.x`, nil},
		// arithmetic
		{`1 + 2`, 3},
		{`1 + 2 * 3`, 7},
		{`(1 + 2) * 3`, 9},
		{`10 - 2 - 3`, 5},
		{`2 * 3 / 4`, 1.5},
		{`7 / 2`, 3.5},
		{`84 / 2`, 42},
		// a whole quotient of two integers is exact beyond 2^53 (it went
		// through float64: 9007199254740992)
		{`18014398509481986 / 2`, 9007199254740993},
		{`9007199254740993 / 1`, 9007199254740993},
		{`-9007199254740993 / -1`, 9007199254740993},
		{`-9223372036854775807 - 1`, math.MinInt},
		{`(-9223372036854775807 - 1) / -1`, 9223372036854775808.0},
		{`1.5 * 2`, 3},
		{`0.1 + 0.2`, 0.30000000000000004},
		{`$.n * $.f`, 12.5},
		{`$.n - 7`, -2},
		{`-$.n`, -5},
		{`-$.f`, -2.5},
		{`-2 * 3`, -6},
		{`-2 + 3`, 1},
		{`1 - -1`, 2},
		{`--1`, 1},
		{`"a" + "b"`, "ab"},
		{`$.s + " world"`, "hello world"},
		// comparisons
		{`1 == 1`, true},
		{`1 == 1.0`, true},
		{`$.one == $.onef`, true},
		{`1 == 2`, false},
		{`1 != 2`, true},
		{`1 != 1.0`, false},
		{`1 == "1"`, false},
		{`1 != "1"`, true},
		{`true == 1`, false},
		{`null == false`, false},
		{`null != false`, true},
		{`$.missing == null`, true},
		{`$.nul == null`, true},
		{`$.missing != null`, false},
		{`$.obj == $.obj`, true},
		{`$.items == [10, 20, 30]`, true},
		{`$.items != [10, 20]`, true},
		{`[1, [2]] == [1.0, [2.0]]`, true},
		{`ctx.request.orderId == "o-17"`, true},
		{`ctx.request == ctx.request`, true},
		// ctx.headers is a map[string]any: a value equals itself
		{`ctx.headers == ctx.headers`, true},
		// and != is false for a map and itself
		{`ctx.headers != ctx.headers`, false},
		{`1 < 2`, true},
		{`2 < 1`, false},
		{`1 < 1.5`, true},
		{`2 <= 2.0`, true},
		{`3 > 2`, true},
		{`2 > 3`, false},
		{`2 >= 2`, true},
		{`1 >= 2`, false},
		{`"a" < "b"`, true},
		{`"B" < "a"`, true},
		{`"abc" <= "abd"`, true},
		{`"b" > "a"`, true},
		{`"a" >= "a"`, true},
		{`"" < "a"`, true},
		{`ctx.attempt >= 2`, true},
		{`9007199254740993 > 9007199254740992`, true},
		// an int beyond 2^53 is ordered against a float exactly, not after
		// rounding it to float64
		{`9007199254740993 > 9007199254740992.0`, true},
		// logic
		{`true && true`, true},
		{`true && false`, false},
		{`false || true`, true},
		{`false || false`, false},
		{`!true`, false},
		{`!false`, true},
		{`!null`, true},
		{`!!$.t`, true},
		{`!$.fa && $.fa`, false},
		{`!($.fa && $.fa)`, true},
		{`($.t || $.fa) && $.fa`, false},
		{`$.t || $.fa && $.fa`, true},
		{`!$.t == false`, true},
		{`1 < 2 && 2 < 3`, true},
		{`$.missing1 || $.missing2`, false},
		{`$.nul || $.missing`, false},
		{`$.nul && true`, false},
		{`$.t && null`, false},
		// short-circuit: the right side is never evaluated
		{`$.x != null && $.x > 0`, false},
		{`$.n != null && $.n > 0`, true},
		{`false && null > 0`, false},
		{`true || null > 0`, true},
		{`false && $.s`, false},
		// in
		{`1 in [1, 2]`, true},
		{`1.0 in [1, 2]`, true},
		{`3 in [1, 2]`, false},
		{`20 in $.items`, true},
		{`null in $.arr`, true},
		{`"two" in $.arr`, true},
		{`[1] in [[1], [2]]`, true},
		{`"x" in $.obj`, true},
		{`"y" in $.obj`, true},
		{`"z" in $.obj`, false},
		{`1 in $.obj`, false},
		{`"request" in ctx`, true},
		{`"nope" in ctx`, false},
		{`"ell" in "hello"`, true},
		{`"" in "hello"`, true},
		{`"xyz" in $.s`, false},
		{`"a" in null`, false},
		{`"a" in $.missing`, false},
		{`lower($.s) in ["hello", "bye"]`, true},
		// functions
		{`len("héllo")`, 5},
		{`len("")`, 0},
		{`len($.items)`, 3},
		{`len([])`, 0},
		{`len($.obj)`, 2},
		{`len(ctx)`, 6},
		{`len(ctx.request)`, 2},
		{`len($.missing)`, 0},
		{`lower($.S)`, "àbc"},
		{`upper($.S)`, "ÀBC"},
		{`lower(null)`, nil},
		{`upper($.missing)`, nil},
		{`matches($.s, "^h.*o$")`, true},
		{`matches($.s, "^x")`, false},
		{`matches($.s, $.pattern)`, true},
		{`matches("a.b", "a\\.b")`, true},
		{`matches("axb", "a\\.b")`, false},
		{`matches($.missing, "x")`, false},
		{`len($.s) > 3 && matches($.s, "l+")`, true},
	})
}

func TestExprDocumentRoot(t *testing.T) {
	t.Parallel()
	doc := exprDoc()
	got, err := evalExpr(t, `$`, &Env{Doc: doc})
	if err != nil {
		t.Fatal(err)
	}
	if got != doc {
		t.Errorf("$ is not the document itself")
	}
	// $ may be any value, not only an object
	for _, d := range []any{nil, "text", 3, []any{"x"}} {
		got, err := evalExpr(t, `$[0]`, &Env{Doc: d})
		if err != nil {
			t.Fatal(err)
		}
		want := any(nil)
		if arr, ok := d.([]any); ok {
			want = arr[0]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("$[0] on %s (-want +got):\n%s", AppendJSON(nil, d), diff)
		}
	}
	// ctx may be an *Object
	got, err = evalExpr(t, `ctx.request.orderId`, &Env{Ctx: obj("request", obj("orderId", 7))})
	if err != nil || got != 7 {
		t.Errorf("ctx.request.orderId with ctx an *Object = %v, %v, want 7", got, err)
	}
	// a nil ctx is empty
	got, err = evalExpr(t, `ctx.tenant`, &Env{})
	if err != nil || got != nil {
		t.Errorf("ctx.tenant with no ctx = %v, %v, want nil", got, err)
	}
}

// TestExprOrOfNulls: || and && treat null as false.
func TestExprOrOfNulls(t *testing.T) {
	t.Parallel()
	env := &Env{Doc: obj("a", nil, "b", nil)}
	for src, want := range map[string]bool{
		`$.a || $.b`:    false,
		`$.a && $.b`:    false,
		`!$.a || $.b`:   true,
		`$.a || !$.b`:   true,
		`!($.a || $.b)`: true,
	} {
		got, err := evalExpr(t, src, env)
		if err != nil || got != want {
			t.Errorf("Eval(%q) = %v, %v, want %v", src, got, err, want)
		}
	}
}

func TestExprNowAndUUID(t *testing.T) {
	t.Parallel()
	clock := func() time.Time {
		return time.Date(2024, 2, 29, 23, 30, 15, 123456789, time.FixedZone("CET", 3600))
	}
	env := &Env{Now: clock}
	got, err := evalExpr(t, `now()`, env)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(any("2024-02-29T22:30:15Z"), got); diff != "" {
		t.Errorf("now() (-want +got):\n%s", diff)
	}
	got, err = evalExpr(t, `now() > "2024-01-01T00:00:00Z"`, env)
	if err != nil || got != true {
		t.Errorf(`now() > "2024-01-01T00:00:00Z" = %v, %v, want true`, got, err)
	}

	// without a clock, now() is the current time
	before := time.Now().UTC().Truncate(time.Second)
	got, err = evalExpr(t, `now()`, &Env{})
	after := time.Now().UTC()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := got.(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil || !strings.HasSuffix(s, "Z") || at.Before(before) || at.After(after) {
		t.Errorf("now() without a clock = %v, want the current time in RFC 3339 UTC", got)
	}

	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	e, err := CompileExpr(`uuid()`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[any]bool{}
	for range 100 {
		u, err := e.Eval(env)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := u.(string)
		if !ok || !v4.MatchString(s) {
			t.Fatalf("uuid() = %#v, want a lowercase version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("uuid() returned %s twice", s)
		}
		seen[u] = true
	}
}

func TestExprEvalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want string
	}{
		{`null > 0`, `cannot compare null with number using >`},
		{`$.missing > 0`, `cannot compare null with number using >`},
		{`$.s < 1`, `cannot compare string with number using <: string "hello" is not a number`},
		{`1 <= "a"`, `cannot compare number with string using <=: string "a" is not a number`},
		{`"12.5" > 10`, `cannot compare string with number using >: string "12.5" is text, not a number (a JSON number is written without quotes)`},
		{`0 >= "-3"`, `cannot compare number with string using >=: string "-3" is text, not a number (a JSON number is written without quotes)`},
		{`"` + strings.Repeat("9", 40) + `" > 0`, `cannot compare string with number using >: a string is text, not a number (a JSON number is written without quotes)`},
		{`" 5" > 0`, `cannot compare string with number using >: string " 5" is text, not a number (a JSON number is written without quotes)`},
		{`true >= false`, `cannot compare boolean with boolean using >=`},
		{`$.items > $.items`, `cannot compare array with array using >`},
		{`$.obj < 1`, `cannot compare object with number using <`},
		{`ctx.request > 1`, `cannot compare object with number using >`},
		{`"a" + 1`, `cannot use + on string and number`},
		{`1 + "a"`, `cannot use + on number and string`},
		{`null + 1`, `cannot use + on null and number`},
		{`$.items + [1]`, `cannot use + on array and array`},
		{`"a" - "b"`, `cannot use - on string and string`},
		{`true * 2`, `cannot use * on boolean and number`},
		{`"a" / 2`, `cannot use / on string and number`},
		{`-"x"`, `cannot use - on string`},
		{`-null`, `cannot use - on null`},
		{`1 / 0`, `division by zero`},
		{`$.n / $.zero`, `division by zero`},
		{`1 / 0.0`, `division by zero`},
		{`"a" / 0`, `cannot use / on string and number`},
		// a literal operand that is never a boolean is refused at compile
		// time (TestBooleanOperandNeverBoolean); a path's value at run time
		{`$.one && true`, `expected true or false, got number 1`},
		{`true && $.s`, `expected true or false, got string "hello"`},
		{`!$.s`, `expected true or false, got string "hello"`},
		{`$.items || false`, `expected true or false, got an array`},
		{`1 in "abc"`, `cannot look for number in a string`},
		{`"a" in 5`, `cannot use in on number`},
		{`"a" in true`, `cannot use in on boolean`},
		{`len(1)`, `len needs a string, an array or an object, got number`},
		{`len(true)`, `len needs a string, an array or an object, got boolean`},
		{`lower(1)`, `lower needs a string, got number`},
		{`upper($.items)`, `upper needs a string, got array`},
		{`matches(1, "x")`, `matches needs a string, got number`},
		{`matches("a", 1)`, `matches needs a string pattern, got number`},
		{`matches("a", null)`, `matches needs a string pattern, got null`},
		{`matches($.s, $.badpattern)`, `invalid regular expression "a(b": missing closing )`},
		{`matches($.s, "[" + "a")`, `invalid regular expression "[a": missing closing ]`},
		{`true && null > 0`, `cannot compare null with number using >`},
		{`false || $.one`, `expected true or false, got number 1`},
	}
	env := &Env{Doc: exprDoc(), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			got, err := evalExpr(t, tt.src, env)
			if err == nil {
				t.Fatalf("Eval(%q) = %#v, want the error %q", tt.src, got, tt.want)
			}
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Errorf("Eval(%q) error is %T, want *EvalError", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("Eval(%q) error (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestExprEvalBool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src     string
		want    bool
		wantErr string
	}{
		{src: `true`, want: true},
		{src: `false`, want: false},
		{src: `null`, want: false},
		{src: `$.missing`, want: false},
		{src: `$.t`, want: true},
		{src: `$.n > 1`, want: true},
		{src: `$.x != null && $.x > 0`, want: false},
		{src: `"x"`, wantErr: `expected true or false, got string "x"`},
		{src: `$.empty`, wantErr: `expected true or false, got string ""`},
		{src: `"` + strings.Repeat("y", 40) + `"`, wantErr: `expected true or false, got a string`},
		{src: `0`, wantErr: `expected true or false, got number 0`},
		{src: `$.f`, wantErr: `expected true or false, got number 2.5`},
		{src: `$.items`, wantErr: `expected true or false, got an array`},
		{src: `$.obj`, wantErr: `expected true or false, got an object`},
		{src: `ctx`, wantErr: `expected true or false, got an object`},
		{src: `null > 0`, wantErr: `cannot compare null with number using >`},
	}
	env := &Env{Doc: exprDoc(), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			e, err := CompileExpr(tt.src)
			if err != nil {
				t.Fatalf("CompileExpr(%q): %v", tt.src, err)
			}
			got, err := e.EvalBool(env)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("EvalBool(%q) = %v, want the error %q", tt.src, got, tt.wantErr)
				}
				var ee *EvalError
				if !errors.As(err, &ee) {
					t.Errorf("EvalBool(%q) error is %T, want *EvalError", tt.src, err)
				}
				if diff := cmp.Diff(tt.wantErr, err.Error()); diff != "" {
					t.Errorf("EvalBool(%q) error (-want +got):\n%s", tt.src, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("EvalBool(%q): %v", tt.src, err)
			}
			if got != tt.want {
				t.Errorf("EvalBool(%q) = %v, want %v", tt.src, got, tt.want)
			}
		})
	}
}

func TestCompileExprErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want string
	}{
		{``, `empty expression`},
		{`   `, `empty expression`},
		{`$.a =`, `'=' at column 5: compare with ==`},
		{`$.a = 1`, `'=' at column 5: compare with ==`},
		{`$.a == `, `unexpected end of expression, expected a value`},
		{`$.a in`, `unexpected end of expression, expected a value`},
		{`1 +`, `unexpected end of expression, expected a value`},
		{`!`, `unexpected end of expression, expected a value`},
		{`foo`, `unknown name "foo" at column 1: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`},
		{`$.a == nil`, `unknown name "nil" at column 8: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`},
		{`a == b == c`, `unknown name "a" at column 1: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`},
		// a header's name read as a member: a minus, said with the way to read it
		{`ctx.HTTP_RESPONSE_HEADERS.Retry-After`, `unknown name "After" at column 33: the - before it is a minus; a name holding a - is read with quotes: ["Retry-After"]`},
		{`$.order-id == 1`, `unknown name "id" at column 9: the - before it is a minus; a name holding a - is read with quotes: ["order-id"]`},
		{`$.a - b`, `unknown name "b" at column 7: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`},
		{`$.a == $.b == $.c`, `comparisons cannot be chained (column 12): use && between them`},
		{`1 < 2 < 3`, `comparisons cannot be chained (column 7): use && between them`},
		{`$.a in $.b in $.c`, `comparisons cannot be chained (column 12): use && between them`},
		{`len()`, `len takes 1 argument, not 0 (column 1)`},
		{`len(1, 2)`, `len takes 1 argument, not 2 (column 1)`},
		{`$.a == matches($.b)`, `matches takes 2 arguments, not 1 (column 8)`},
		{`uuid(1)`, `uuid takes 0 arguments, not 1 (column 1)`},
		{`now`, `function now at column 1 needs parentheses: now(…)`},
		{`now > "2024"`, `function now at column 1 needs parentheses: now(…)`},
		{`$.a == len`, `function len at column 8 needs parentheses: len(…)`},
		{`'single'`, `strings are written in double quotes (column 1)`},
		{`$.a == 'x'`, `strings are written in double quotes (column 8)`},
		{`$.a & $.b`, `"&" at column 5: write &&`},
		{`$.a | $.b`, `"|" at column 5: write ||`},
		{`$.a ?? 1`, `unexpected character '?' at column 5`},
		{`$.a % 2`, `unexpected character '%' at column 5`},
		{`$.a × 2`, `unexpected character '×' at column 5`},
		{`"abc`, `string starting at column 1 is not closed`},
		{`$.a == "abc`, `string starting at column 8 is not closed`},
		{`"abc\"`, `string starting at column 1 is not closed`},
		{`"\x"`, `invalid string at column 1: invalid escape "\\x"`},
		{"\"a\tb\"", `invalid string at column 1: control character '\t' in a string`},
		{`$.a[0`, `unexpected end of expression, expected ']'`},
		{`$.a[0 1]`, `unexpected number 1 at column 7, expected ']'`},
		{`(1 + 2`, `unexpected end of expression, expected ')'`},
		{`((1)`, `unexpected end of expression, expected ')'`},
		{`len(1`, `unexpected end of expression, expected ',' or ')'`},
		{`[1, 2`, `unexpected end of expression, expected ',' or ']'`},
		{`(1))`, `unexpected ")" at column 4`},
		{`$.`, `unexpected end of expression, expected a field name after '.'`},
		{`$.1`, `unexpected number 1 at column 3, expected a field name after '.'`},
		{`$."a"`, `unexpected string "a" at column 3, expected a field name after '.'`},
		{`$.a.`, `unexpected end of expression, expected a field name after '.'`},
		{`1 2`, `unexpected number 2 at column 3`},
		{`$.a $.b`, `unexpected "$" at column 5`},
		{`true()`, `unexpected "(" at column 5`},
		{`)`, `unexpected ")" at column 1, expected a value`},
		{`,`, `unexpected "," at column 1, expected a value`},
		{`01`, `invalid number 01 at column 1`},
		{`matches($.s, "a(b")`, `invalid regular expression "a(b" in matches (column 1): missing closing )`},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			e, err := CompileExpr(tt.src)
			if err == nil {
				t.Fatalf("CompileExpr(%q) succeeded (%v), want the error %q", tt.src, e, tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("CompileExpr(%q) error (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

// TestExprLongExpressions: expressions a flow author may plausibly write
// (a long allow-list, many rules joined with &&) compile and run.
func TestExprLongExpressions(t *testing.T) {
	t.Parallel()
	var items []string
	for i := range 1000 {
		items = append(items, fmt.Sprintf("%d", i))
	}
	var terms []string
	for i := range 200 {
		terms = append(terms, fmt.Sprintf("$.n != %d", 1000+i))
	}
	tests := []struct {
		name string
		src  string
	}{
		{"allow-list of 1000 numbers", `$.n in [` + strings.Join(items, ", ") + `]`},
		{"200 conditions joined with &&", strings.Join(terms, " && ")},
		{"parentheses nested 100 deep", strings.Repeat("(", 100) + "$.t" + strings.Repeat(")", 100)},
	}
	env := &Env{Doc: exprDoc()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := CompileExpr(tt.src)
			if err != nil {
				t.Fatalf("CompileExpr: %v", err)
			}
			got, err := e.EvalBool(env)
			if err != nil || !got {
				t.Errorf("EvalBool = %v, %v, want true", got, err)
			}
		})
	}
}

// TestExprTooLarge: an expression too large to run is refused with one line
// of our own, not with the translation-defect error and the library's
// multi-line text.
func TestExprTooLarge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
	}{
		{"1500 conditions joined with &&", strings.Repeat("$.n != 1 && ", 1500) + "true"},
		{"5000 minus signs", strings.Repeat("-", 5000) + "1"},
		{"allow-list of 10001 numbers", "$.n in [0" + strings.Repeat(", 1", 10000) + "]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := CompileExpr(tt.src)
			if err == nil {
				return
			}
			// an error, if any, is CompileExpr's own: not expr-lang refusing
			// the translation (more than its 10,000 AST nodes) with the whole
			// source and the library's excerpt, three lines and tens of
			// kilobytes, as it once did
			msg := err.Error()
			if strings.Contains(msg, "could not be compiled") || strings.Contains(msg, "\n") {
				t.Errorf("CompileExpr error is the translation defect (%d bytes, %d lines): %.150s…", len(msg), strings.Count(msg, "\n")+1, msg)
			}
		})
	}
}

// TestExprConcurrentEval runs one compiled Expr from many goroutines; run
// it with -race.
func TestExprConcurrentEval(t *testing.T) {
	t.Parallel()
	srcs := []string{
		`$.n * 2 + len($.items) - ctx.attempt`,
		`matches($.s, $.pattern) && matches($.s, "^h") && lower(upper($.s)) == $.s`,
		`ctx.request.orderId + "-" + now() + "-" + uuid()`,
		`$.obj[$.key] in $.items || "x" in $.obj`,
		`null > 0`,
	}
	exprs := make([]*Expr, len(srcs))
	for i, src := range srcs {
		e, err := CompileExpr(src)
		if err != nil {
			t.Fatalf("CompileExpr(%q): %v", src, err)
		}
		exprs[i] = e
	}
	clock := func() time.Time { return time.Unix(0, 0) }
	env := &Env{Doc: exprDoc(), Ctx: exprCtx(), Now: clock}
	want := make([]string, len(exprs))
	for i, e := range exprs {
		want[i] = evalSummary(e, env)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 1000 {
				i := (g + n) % len(exprs)
				got := evalSummary(exprs[i], env)
				if i == 2 {
					got, want := got[:len("o-17-1970-01-01T00:00:00Z-")], want[i][:len("o-17-1970-01-01T00:00:00Z-")]
					if got != want {
						errs <- fmt.Sprintf("%s: got %s, want %s", srcs[i], got, want)
						return
					}
					continue
				}
				if got != want[i] {
					errs <- fmt.Sprintf("%s: got %s, want %s", srcs[i], got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func evalSummary(e *Expr, env *Env) string {
	v, err := e.Eval(env)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(AppendJSON(nil, v))
}

func FuzzCompileExpr(f *testing.F) {
	for _, seed := range []string{
		`$.a.b[0] == "x" && ctx.request.orderId != null`,
		`1 + 2 * 3 - -4 / 5`,
		`!($.t || $.fa) && len($.items) >= 2`,
		`lower($.s) in ["hello", "bye"] || matches($.s, "^h.*o$")`,
		`now() > "2024" && uuid() != ""`,
		`$["k-1"] + "x"`,
		`$.a == $.b == $.c`,
		`'x'`,
		`"unclosed`,
		`len(`,
		`1e400`,
		`$.items[-1]`,
		`matches($.s, $.badpattern)`,
	} {
		f.Add(seed)
	}
	env := &Env{Doc: exprDoc(), Ctx: exprCtx(), Now: func() time.Time { return time.Unix(1700000000, 0) }}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := CompileExpr(src)
		if err != nil {
			if strings.Contains(err.Error(), "could not be compiled") {
				t.Fatalf("CompileExpr(%q) accepted an expression it cannot translate: %v", src, err)
			}
			return
		}
		if _, err := e.Eval(env); err != nil {
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Fatalf("Eval(%q) error is %T, want *EvalError: %v", src, err, err)
			}
		}
		if _, err := e.EvalBool(env); err != nil {
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Fatalf("EvalBool(%q) error is %T, want *EvalError: %v", src, err, err)
			}
		}
	})
}

// TestExprConcatenationBounded: + on strings makes a string of at most
// maxStringBytes. The duration ceiling cannot stop one expression, and a
// caller's 1 MiB field added to itself a few thousand times, as an author
// may write it, built gigabytes, copying them over and over.
func TestExprConcatenationBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<20)
	env := &Env{Doc: map[string]any{"big": big}}
	src := strings.TrimSuffix(strings.Repeat("$.big + ", 20), " + ")
	got, err := evalExpr(t, src, env)
	want := fmt.Sprintf("the result of + would be %d bytes, more than a string holds (%d)", (maxStringBytes/(1<<20)+1)<<20, maxStringBytes)
	if err == nil || err.Error() != want {
		t.Errorf("20 × 1 MiB: %T (%v), want the error %q", got, err, want)
	}
	// up to the bound, as before
	ok := strings.TrimSuffix(strings.Repeat("$.big + ", maxStringBytes>>20), " + ")
	if got, err := evalExpr(t, ok, env); err != nil || len(got.(string)) != maxStringBytes {
		t.Errorf("%d × 1 MiB: %v, want a string of %d bytes", maxStringBytes>>20, err, maxStringBytes)
	}
}
