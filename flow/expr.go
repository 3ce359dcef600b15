package flow

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// Expressions are the language of validate rules, condition fences, when:
// and template holes. The compiler parses them with its own small parser
// (so that errors carry our texts and the language stays exactly the one the
// documentation describes) and translates them into github.com/expr-lang/expr
// source in which every path, operator and function is a call to one of the
// functions below. expr compiles that source to bytecode once, at
// publication, and runs it per message.
//
// The translation, by example:
//
//	$.total > 0                 _gt(_path(_doc, "total"), 0)
//	ctx.request.orderId         _path(_ctx, "request", "orderId")
//	$.a != null && !$.b         (_bool(_ne(_path(_doc, "a"), nil)) && !_bool(_path(_doc, "b")))
//	lower($.s) in ["a", "b"]    _in(_lower(_path(_doc, "s")), ["a", "b"])

// Env is what an expression sees when it runs: the current document ($),
// the execution variables (ctx: a *Object, a map[string]any, or a LazyCtx
// that builds one of those) and the clock behind now().
type Env struct {
	Doc any
	Ctx any
	Now func() time.Time // nil means time.Now
}

// LazyCtx is an Env.Ctx built only when it is needed: an expression that
// names ctx sees what Ctx returns, and one that does not never calls it.
type LazyCtx interface {
	Ctx() any
}

// exprEnv is the value expr runs against: the Env plus a pointer to it for
// the functions that need the clock.
type exprEnv struct {
	Doc any  `expr:"_doc"`
	Ctx any  `expr:"_ctx"`
	RT  *Env `expr:"_rt"`
}

// Expr is a compiled expression. It is safe for concurrent use.
type Expr struct {
	src     string
	program *vm.Program
	regexps map[string]*regexp.Regexp // literal patterns of matches(), compiled once
	usesCtx bool                      // the expression names ctx
	kind    valueKind                 // what the parser knows of its value
}

// String returns the expression as written.
func (e *Expr) String() string { return e.src }

// EvalError is an expression that failed at run time, with our own text
// (for example "cannot compare null with number using >").
type EvalError struct{ Msg string }

func (e *EvalError) Error() string { return e.Msg }

func evalErrorf(format string, args ...any) error {
	return &EvalError{Msg: fmt.Sprintf(format, args...)}
}

// evalState is what one evaluation needs besides the program: expr's
// virtual machine, whose stack is kept between runs, and the environment
// it reads. Both are pooled, so that an evaluation allocates neither.
type evalState struct {
	vm  vm.VM
	env exprEnv
}

var evalStates = sync.Pool{New: func() any { return new(evalState) }}

// Eval runs the expression and returns its value.
func (e *Expr) Eval(env *Env) (any, error) {
	ctx := env.Ctx
	if lazy, ok := ctx.(LazyCtx); ok {
		ctx = nil
		if e.usesCtx {
			ctx = lazy.Ctx()
		}
	}
	st := evalStates.Get().(*evalState)
	st.env = exprEnv{Doc: env.Doc, Ctx: ctx, RT: env}
	out, err := st.vm.Run(e.program, &st.env)
	// drop the references to this run's values before the state is shared
	st.env = exprEnv{}
	clear(st.vm.Stack[:cap(st.vm.Stack)])
	clear(st.vm.Variables)
	evalStates.Put(st)
	if err != nil {
		var ee *EvalError
		if errors.As(err, &ee) {
			return nil, ee
		}
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, &EvalError{Msg: "expression failed: " + msg}
	}
	return out, nil
}

// EvalBool runs the expression where true or false is expected: null counts
// as false, any other non-boolean value is an error.
func (e *Expr) EvalBool(env *Env) (bool, error) {
	v, err := e.Eval(env)
	if err != nil {
		return false, err
	}
	b, err := truth(v)
	if err != nil {
		return false, err
	}
	return b, nil
}

func truth(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case nil:
		return false, nil
	}
	return false, evalErrorf("expected true or false, got %s", describe(v))
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		if utf8.RuneCountInString(x) > 32 {
			return "a string"
		}
		return "string " + strconv.Quote(x)
	case int, float64:
		return "number " + Text(x)
	case exactNumber:
		if t := Text(x); len(t) <= 32 {
			return "number " + t
		}
		return "a number" // as a long string is "a string"
	case []any:
		return "an array"
	case *Object, map[string]any:
		return "an object"
	}
	return TypeName(v)
}

// maxTokens bounds an expression, so that its translation stays well
// inside expr's own limits and its parse never recurses deeply.
const maxTokens = 4000

// errTooLong refuses an expression of more than maxTokens tokens.
var errTooLong = fmt.Errorf("expression is too long: more than %d tokens", maxTokens)

// CompileExpr compiles one expression. The error is one line, without a
// file or line: callers add those.
func CompileExpr(src string) (*Expr, error) {
	p := &exprParser{src: src}
	if err := p.lex(); err != nil {
		return nil, err
	}
	if len(p.toks) == 0 {
		return nil, errors.New("empty expression")
	}
	if len(p.toks) > maxTokens {
		return nil, errTooLong
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %s at column %d", p.toks[p.pos].describe(), p.toks[p.pos].col)
	}
	translated := n.emit()
	// _ctx appears in the translation exactly when the expression names ctx
	// (or, harmlessly, inside a string literal)
	e := &Expr{src: src, regexps: p.regexps, usesCtx: strings.Contains(translated, "_ctx"), kind: kindOf(n)}
	opts := append(baseOptions(), expr.Function("_matches", e.matches))
	program, err := expr.Compile(translated, opts...)
	if err != nil {
		// The parser above accepts only what translates; this is a defect.
		return nil, fmt.Errorf("expression %q could not be compiled: %v", src, err)
	}
	e.program = program
	return e, nil
}

var baseOptions = sync.OnceValue(func() []expr.Option {
	any1 := new(func(any) any)
	any2 := new(func(any, any) any)
	return []expr.Option{
		expr.Env(exprEnv{}),
		expr.MaxNodes(maxTokens * 8), // the translation of maxTokens fits
		expr.Function("_path", fnPath),
		expr.Function("_bool", func(a ...any) (any, error) { return truth(a[0]) }, new(func(any) bool)),
		expr.Function("_eq", func(a ...any) (any, error) { return Equal(a[0], a[1]), nil }, any2),
		expr.Function("_ne", func(a ...any) (any, error) { return !Equal(a[0], a[1]), nil }, any2),
		expr.Function("_lt", order("<", func(c int) bool { return c < 0 }), any2),
		expr.Function("_le", order("<=", func(c int) bool { return c <= 0 }), any2),
		expr.Function("_gt", order(">", func(c int) bool { return c > 0 }), any2),
		expr.Function("_ge", order(">=", func(c int) bool { return c >= 0 }), any2),
		expr.Function("_add", fnAdd, any2),
		expr.Function("_sub", arith("-", func(a, b float64) float64 { return a - b }, subInt), any2),
		expr.Function("_mul", arith("*", func(a, b float64) float64 { return a * b }, mulInt), any2),
		expr.Function("_div", fnDiv, any2),
		expr.Function("_neg", fnNeg, any1),
		expr.Function("_in", fnIn, any2),
		expr.Function("_len", fnLen, any1),
		expr.Function("_lower", caseFn("lower", strings.ToLower), any1),
		expr.Function("_upper", caseFn("upper", strings.ToUpper), any1),
		expr.Function("_now", fnNow, new(func(*Env) any)),
		expr.Function("_uuid", fnUUID, new(func() any)),
		expr.Function("_num", fnNum, new(func(string) any)),
	}
})

// fnPath descends into a document: _path(root, key, …). A key that is
// missing, an index out of range, or a step into a value that has no
// members gives null, never an error.
func fnPath(a ...any) (any, error) {
	v := a[0]
	for _, k := range a[1:] {
		if x, ok := v.(*XMLDocument); ok {
			v = x.flat
		}
		switch x := v.(type) {
		case *Object:
			s, ok := k.(string)
			if !ok {
				return nil, nil
			}
			v, _ = x.Get(s)
		case map[string]any:
			s, ok := k.(string)
			if !ok {
				return nil, nil
			}
			v = x[s]
		case []any:
			i, ok := index(k)
			if !ok || i < 0 || i >= len(x) {
				return nil, nil
			}
			v = x[i]
		default:
			return nil, nil
		}
	}
	return v, nil
}

// index is the integer a number holds: an int, or a whole float64 below
// 2^53 (3.0, which a JSON body may hold for 3), which is exact as an int.
// It indexes an array, and makes arithmetic exact.
func index(k any) (int, bool) {
	switch n := k.(type) {
	case int:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int(n), true
		}
	}
	return 0, false
}

func order(op string, ok func(int) bool) func(a ...any) (any, error) {
	return func(a ...any) (any, error) {
		c, err := compare(a[0], a[1], op)
		if err != nil {
			return nil, err
		}
		return ok(c), nil
	}
}

func compare(x, y any, op string) (int, error) {
	if c, ok := compareNumbers(x, y); ok {
		return c, nil
	}
	if xs, ok := x.(string); ok {
		if ys, ok := y.(string); ok {
			return strings.Compare(xs, ys), nil
		}
	}
	msg := fmt.Sprintf("cannot compare %s with %s using %s", TypeName(x), TypeName(y), op)
	if hint := stringNotNumber(x, y); hint != "" {
		msg += ": " + hint
	} else if hint := stringNotNumber(y, x); hint != "" {
		msg += ": " + hint
	}
	return 0, &EvalError{Msg: msg}
}

// stringNotNumber explains why the string s is not ordered against the
// number n (a JSON string that holds digits, "5", is the usual mistake),
// or is "" when s is not a string or n not a number.
func stringNotNumber(s, n any) string {
	str, ok := s.(string)
	if !ok || TypeName(n) != "number" {
		return ""
	}
	if v, err := ParseJSON([]byte(str), 1); err == nil && TypeName(v) == "number" {
		return describe(str) + " is text, not a number (a JSON number is written without quotes)"
	}
	return describe(str) + " is not a number"
}

func fnAdd(a ...any) (any, error) {
	if xs, ok := a[0].(string); ok {
		if ys, ok := a[1].(string); ok {
			if n := len(xs) + len(ys); n > maxStringBytes {
				return nil, evalErrorf("the result of + would be %d bytes, more than a string holds (%d)", n, maxStringBytes)
			}
			return xs + ys, nil
		}
	}
	return arith("+", func(a, b float64) float64 { return a + b }, addInt)(a...)
}

// maxStringBytes is the longest string + makes (16 MiB): one expression
// runs to its end whatever the duration ceiling, and adding a caller's
// large field to itself over and over would otherwise build gigabytes.
const maxStringBytes = 16 << 20

// arith is an arithmetic operator: on two integers (a whole float64 below
// 2^53, 3.0, counts as one), exact (fi) while the result fits 64 bits;
// otherwise in float64 (f). A result too large for a number (an infinity)
// is an evaluation error: JSON has no such number.
func arith(op string, f func(a, b float64) float64, fi func(a, b int) (int, bool)) func(a ...any) (any, error) {
	return func(a ...any) (any, error) {
		if fi != nil {
			// a whole float64 below 2^53 (3.0 in a body) is the integer
			// it holds: 3.0 × 1000000000000000001 keeps its last digit
			if xi, ok := index(a[0]); ok {
				if yi, ok := index(a[1]); ok {
					if r, ok := fi(xi, yi); ok {
						return r, nil
					}
				}
			}
		}
		x, okx := number(a[0])
		y, oky := number(a[1])
		if !okx || !oky {
			return nil, evalErrorf("cannot use %s on %s and %s", op, TypeName(a[0]), TypeName(a[1]))
		}
		r := f(x, y)
		if math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, evalErrorf("the result of %s is out of range for a number", op)
		}
		return normalNumber(r), nil
	}
}

// addInt, subInt and mulInt are exact integer arithmetic; false on
// overflow.
func addInt(a, b int) (int, bool) {
	r := a + b
	return r, (a >= 0) != (b >= 0) || (r >= 0) == (a >= 0)
}

func subInt(a, b int) (int, bool) {
	r := a - b
	return r, (a >= 0) == (b >= 0) || (r >= 0) == (a >= 0)
}

func mulInt(a, b int) (int, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	r := a * b
	return r, r/b == a && !(a == -1 && b == math.MinInt) && !(b == -1 && a == math.MinInt)
}

func fnDiv(a ...any) (any, error) {
	if y, ok := number(a[1]); ok && y == 0 {
		if _, ok := number(a[0]); ok {
			if _, tiny := a[1].(exactNumber); !tiny {
				return nil, evalErrorf("division by zero")
			}
			// a number under float64's range (1e-400) is not zero,
			// though its float64 is: the quotient is out of range, or 0
			if c, _ := compareNumbers(a[0], 0); c == 0 {
				return 0, nil
			}
			return nil, evalErrorf("the result of / is out of range for a number")
		}
	}
	return arith("/", func(a, b float64) float64 { return a / b }, divInt)(a...)
}

// divInt is exact integer division when the quotient is whole (an id or an
// amount in minor units above 2^53 keeps its digits); a fraction goes
// through float64.
func divInt(a, b int) (int, bool) {
	if b == 0 || a%b != 0 || a == math.MinInt && b == -1 {
		return 0, false
	}
	return a / b, true
}

func fnNeg(a ...any) (any, error) {
	if i, ok := a[0].(int); ok && i != math.MinInt {
		return -i, nil // exact, as 0 - i is: not through float64
	}
	if x, ok := a[0].(exactNumber); ok {
		if !x.d.neg && x.d.exp == 19 && x.d.digits == "9223372036854775808" {
			// 2^63, over an int, negated is the least int: an integer,
			// exact in arithmetic as the same value read from a document
			return math.MinInt, nil
		}
		return x.negate(), nil
	}
	x, ok := number(a[0])
	if !ok {
		return nil, evalErrorf("cannot use - on %s", TypeName(a[0]))
	}
	return normalNumber(-x), nil
}

// fnIn: an element of an array, a key of an object, a substring of a
// string; in null is always false.
func fnIn(a ...any) (any, error) {
	switch c := a[1].(type) {
	case nil:
		return false, nil
	case []any:
		for _, e := range c {
			if Equal(a[0], e) {
				return true, nil
			}
		}
		return false, nil
	case *Object:
		k, ok := a[0].(string)
		if !ok {
			return false, nil
		}
		_, found := c.Get(k)
		return found, nil
	case map[string]any:
		k, ok := a[0].(string)
		if !ok {
			return false, nil
		}
		_, found := c[k]
		return found, nil
	case string:
		s, ok := a[0].(string)
		if !ok {
			return nil, evalErrorf("cannot look for %s in a string", TypeName(a[0]))
		}
		return strings.Contains(c, s), nil
	}
	return nil, evalErrorf("cannot use in on %s", TypeName(a[1]))
}

func fnLen(a ...any) (any, error) {
	switch x := a[0].(type) {
	case nil:
		return 0, nil
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case *Object:
		return x.Len(), nil
	case map[string]any:
		return len(x), nil
	}
	return nil, evalErrorf("len needs a string, an array or an object, got %s", TypeName(a[0]))
}

func caseFn(name string, f func(string) string) func(a ...any) (any, error) {
	return func(a ...any) (any, error) {
		switch x := a[0].(type) {
		case nil:
			return nil, nil
		case string:
			return f(x), nil
		}
		return nil, evalErrorf("%s needs a string, got %s", name, TypeName(a[0]))
	}
}

func (e *Expr) matches(a ...any) (any, error) {
	pattern, ok := a[1].(string)
	if !ok {
		return nil, evalErrorf("matches needs a string pattern, got %s", TypeName(a[1]))
	}
	var s string
	switch x := a[0].(type) {
	case nil:
		return false, nil
	case string:
		s = x
	default:
		return nil, evalErrorf("matches needs a string, got %s", TypeName(a[0]))
	}
	re := e.regexps[pattern]
	if re == nil {
		// a pattern from the message: its cost is bounded before it runs
		if err := checkDynamicPattern(pattern, len(s)); err != nil {
			return nil, err
		}
		var err error
		if re, err = regexp.Compile(pattern); err != nil {
			return nil, evalErrorf("invalid regular expression %s: %s", quoted(pattern), regexpReason(err))
		}
	}
	return re.MatchString(s), nil
}

// Bounds on a matches() pattern that comes from the message, not the
// flow: Go's regexps run in time linear in the text, times the size of
// the compiled pattern, and allocate with it, so a short pattern
// (a{1000}, repeated) on a long value could cost one message seconds of
// CPU and hundreds of MiB, beyond the duration ceiling (a match cannot be
// interrupted). The flow's own patterns are its author's, and compiled
// once.
const (
	maxDynamicPatternBytes = 1 << 10  // the pattern's source
	maxDynamicPatternInsts = 2000     // its compiled program
	maxDynamicPatternWork  = 20 << 20 // instructions × bytes of the value
)

// checkDynamicPattern refuses a pattern from the message that would cost
// too much to run on a value of n bytes.
func checkDynamicPattern(pattern string, n int) error {
	if len(pattern) > maxDynamicPatternBytes {
		return evalErrorf("matches: the pattern from the message is %d bytes, more than %d", len(pattern), maxDynamicPatternBytes)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return evalErrorf("invalid regular expression %s: %s", quoted(pattern), regexpReason(err))
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return evalErrorf("invalid regular expression %s: %s", quoted(pattern), regexpReason(err))
	}
	if insts := len(prog.Inst); insts > maxDynamicPatternInsts || insts*max(n, 1) > maxDynamicPatternWork {
		return evalErrorf("matches: the pattern from the message is too costly to run on this value (%d instructions on %d bytes)", insts, n)
	}
	return nil
}

// neverBoolean is the error of an expression written where true or false
// is wanted (when:, a condition, a validate rule) whose value can never be
// true: a number, a string, an array, lower() or upper() of anything. what
// names the place ("when:", "condition"); nil when the value may be a
// boolean.
func (e *Expr) neverBoolean(what string) error {
	switch e.kind {
	case kindAny, kindBool, kindNull:
		return nil
	}
	return fmt.Errorf("%s %s is %s, never true or false: write a comparison (==, <, in …)", what, quoted(e.src), e.kind)
}

func regexpReason(err error) string {
	var re *syntax.Error
	if errors.As(err, &re) {
		return string(re.Code)
	}
	return err.Error()
}

func fnNow(a ...any) (any, error) {
	env, _ := a[0].(*Env)
	now := time.Now
	if env != nil && env.Now != nil {
		now = env.Now
	}
	return now().UTC().Format(time.RFC3339), nil
}

func fnUUID(...any) (any, error) { return NewUUID(), nil }

// fnNum is a number literal that no float64 holds (an exactNumber), read
// again from its text when the expression runs: expr has no literal for it.
func fnNum(a ...any) (any, error) { return ParseJSON([]byte(a[0].(string)), 1) }

// NewUUID returns a random (version 4) UUID in lowercase.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(out[:])
}
