package flow

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nexushq/nexus/lineerr"
)

// The expression language, lowest precedence first:
//
//	or      = and { "||" and }
//	and     = cmp { "&&" cmp }
//	cmp     = sum [ ("==" | "!=" | "<" | "<=" | ">" | ">=" | "in") sum ]
//	sum     = product { ("+" | "-") product }
//	product = unary { ("*" | "/") unary }
//	unary   = ("!" | "-") unary | postfix
//	postfix = primary { "." name | "[" or "]" }
//	primary = number | string | "null" | "true" | "false" | "$" | "ctx"
//	        | function "(" [ or { "," or } ] ")" | "(" or ")" | "[" [ or { "," or } ] "]"
//
// Numbers are JSON's, so a point is followed by a digit (1.e5 is member e5
// of 1). A member of a primary that never has one (a literal other than $
// and ctx, the result of an operator or a function, a name of an array
// literal) is refused: it would always be null.

type tokKind int

const (
	tokNumber tokKind = iota
	tokString
	tokIdent
	tokDollar
	tokPunct // . [ ] ( ) ,
	tokOp
)

type token struct {
	kind tokKind
	text string // as written (for strings: the decoded value)
	col  int    // 1-based column of the first character
	end  int    // byte offset just past the last character
	val  any    // numbers and strings: the value
}

func (t token) describe() string {
	switch t.kind {
	case tokNumber:
		return "number " + clipped(t.text)
	case tokString:
		return "string " + quoted(t.text)
	case tokIdent:
		return "name " + quoted(t.text)
	}
	return strconv.Quote(t.text)
}

type exprParser struct {
	src     string
	toks    []token
	pos     int
	regexps map[string]*regexp.Regexp
}

var twoCharOps = []string{"==", "!=", "<=", ">=", "&&", "||"}

func (p *exprParser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		if len(p.toks) > maxTokens {
			// refused whatever follows: reading on would only cost
			// (a 1 MiB expression lexed whole took about 260 MB)
			return errTooLong
		}
		c := s[i]
		col := i + 1
		switch {
		case c == ' ' || c == '\t':
			i++
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
				j++
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					j++
				}
			}
			if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
				k := j + 1
				if k < len(s) && (s[k] == '+' || s[k] == '-') {
					k++
				}
				if k < len(s) && s[k] >= '0' && s[k] <= '9' {
					for k < len(s) && s[k] >= '0' && s[k] <= '9' {
						k++
					}
					j = k
				}
			}
			v, err := ParseJSON([]byte(s[i:j]), 1)
			if err != nil {
				return fmt.Errorf("invalid number %s at column %d", clipped(s[i:j]), col)
			}
			p.toks = append(p.toks, token{kind: tokNumber, text: s[i:j], col: col, end: j, val: v})
			i = j
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return fmt.Errorf("string starting at column %d is not closed", col)
			}
			v, err := ParseJSON([]byte(s[i:j+1]), 1)
			if err != nil {
				return fmt.Errorf("invalid string at column %d: %s", col, err.(*JSONError).Msg)
			}
			p.toks = append(p.toks, token{kind: tokString, text: v.(string), col: col, end: j + 1, val: v})
			i = j + 1
		case c == '\'':
			return fmt.Errorf("strings are written in double quotes (column %d)", col)
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			p.toks = append(p.toks, token{kind: tokIdent, text: s[i:j], col: col, end: j})
			i = j
		case c == '$':
			p.toks = append(p.toks, token{kind: tokDollar, text: "$", col: col, end: i + 1})
			i++
		case strings.IndexByte(".[](),", c) >= 0:
			p.toks = append(p.toks, token{kind: tokPunct, text: s[i : i+1], col: col, end: i + 1})
			i++
		default:
			if i+1 < len(s) {
				two := s[i : i+2]
				found := false
				for _, op := range twoCharOps {
					if two == op {
						found = true
					}
				}
				if found {
					p.toks = append(p.toks, token{kind: tokOp, text: two, col: col, end: i + 2})
					i += 2
					continue
				}
			}
			if strings.IndexByte("<>!+-*/", c) >= 0 {
				p.toks = append(p.toks, token{kind: tokOp, text: s[i : i+1], col: col, end: i + 1})
				i++
				continue
			}
			switch c {
			case '=':
				return fmt.Errorf("'=' at column %d: compare with ==", col)
			case '&', '|':
				return fmt.Errorf("%q at column %d: write %s%s", string(c), col, string(c), string(c))
			}
			r := []rune(s[i:])[0]
			return fmt.Errorf("unexpected character %s at column %d", strconv.QuoteRune(r), col)
		}
	}
	return nil
}

func (p *exprParser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *exprParser) accept(kind tokKind, text string) bool {
	if t, ok := p.peek(); ok && t.kind == kind && t.text == text {
		p.pos++
		return true
	}
	return false
}

func (p *exprParser) expect(kind tokKind, text, what string) error {
	if p.accept(kind, text) {
		return nil
	}
	return p.unexpected(what)
}

func (p *exprParser) unexpected(what string) error {
	t, ok := p.peek()
	if !ok {
		return fmt.Errorf("unexpected end of expression, expected %s", what)
	}
	return fmt.Errorf("unexpected %s at column %d, expected %s", t.describe(), t.col, what)
}

// node is a parsed expression; emit writes it as expr source.
type node interface{ emit() string }

type (
	litNode struct {
		src  string    // already in expr syntax
		kind valueKind // what the literal is (kindAny for $, ctx and _rt)
	}
	callNode struct {
		fn   string
		args []node
	}
	logicNode struct {
		op   string
		l, r node
	}
	notNode   struct{ x node }
	arrayNode struct{ items []node }
)

func (n litNode) emit() string { return n.src }

// valueKind is what the parser knows of an expression's value before it
// runs: kindAny for a path (the document decides what it is), otherwise the
// kind every run gives. It is what refuses a member of a value that can
// have none (1.x, "a".b, len($.s).x), which would always be null.
type valueKind int

const (
	kindAny valueKind = iota // may have members: a path, $, ctx
	kindNumber
	kindString
	kindBool
	kindNull
	kindArray
	kindNumberOrString // the result of +
	kindStringOrNull   // the result of lower and upper
)

func (k valueKind) String() string {
	switch k {
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	case kindArray:
		return "an array"
	case kindNumberOrString:
		return "a number or a string"
	case kindStringOrNull:
		return "a string or null"
	}
	return "any value"
}

// callKinds is the kind of each translated function's result; _path's
// is kindAny (missing here).
var callKinds = map[string]valueKind{
	"_eq": kindBool, "_ne": kindBool, "_lt": kindBool, "_le": kindBool, "_gt": kindBool, "_ge": kindBool,
	"_in": kindBool, "_matches": kindBool,
	"_add": kindNumberOrString,
	"_sub": kindNumber, "_mul": kindNumber, "_div": kindNumber, "_neg": kindNumber, "_len": kindNumber, "_num": kindNumber,
	"_lower": kindStringOrNull, "_upper": kindStringOrNull,
	"_now": kindString, "_uuid": kindString,
}

// kindOf is the kind of n's value, as far as the parser knows it.
func kindOf(n node) valueKind {
	switch n := n.(type) {
	case litNode:
		return n.kind
	case logicNode, notNode:
		return kindBool
	case arrayNode:
		return kindArray
	case callNode:
		return callKinds[n.fn]
	}
	return kindAny
}

func (n callNode) emit() string {
	parts := make([]string, len(n.args))
	for i, a := range n.args {
		parts[i] = a.emit()
	}
	return n.fn + "(" + strings.Join(parts, ", ") + ")"
}

func (n logicNode) emit() string {
	return "(_bool(" + n.l.emit() + ") " + n.op + " _bool(" + n.r.emit() + "))"
}

func (n notNode) emit() string { return "!_bool(" + n.x.emit() + ")" }

func (n arrayNode) emit() string {
	parts := make([]string, len(n.items))
	for i, a := range n.items {
		parts[i] = a.emit()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (p *exprParser) parseOr() (node, error) {
	return p.parseLogic("||", p.parseAnd)
}

func (p *exprParser) parseAnd() (node, error) {
	return p.parseLogic("&&", p.parseCmp)
}

// parseLogic reads operands (each read by operand) joined by op, && or
// ||, refusing an operand that is never true or false.
func (p *exprParser) parseLogic(op string, operand func() (node, error)) (node, error) {
	start := p.pos
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for p.accept(tokOp, op) {
		at := p.pos - 1
		if err := p.boolOperand(l, start, at, at, "left side"); err != nil {
			return nil, err
		}
		from := p.pos
		r, err := operand()
		if err != nil {
			return nil, err
		}
		if err := p.boolOperand(r, from, p.pos, at, "right side"); err != nil {
			return nil, err
		}
		l = logicNode{op: op, l: l, r: r}
	}
	return l, nil
}

// operandError is the error of an expression that parses but whose
// operand of &&, || or ! can never be true or false ("a" && true, !5):
// reached, it fails every message; never reached (false && 5), it is
// dead text. Its text names the operator, its column and the operand.
type operandError struct{ Msg string }

func (e *operandError) Error() string { return e.Msg }

// parses reports whether err, an error of CompileExpr, is of an
// expression that parses but cannot run (an operand of && never true or
// false): its text follows the place's name, without "does not parse".
func parses(err error) bool {
	var oe *operandError
	return errors.As(err, &oe)
}

// boolOperand refuses x, an operand of the operator p.toks[op] written as
// p.toks[from:to], when its value is never true or false: as neverBoolean
// judges a when:, a path (which the document decides), null, a boolean
// and a comparison pass. side names the operand: "left side", "right
// side", "operand".
func (p *exprParser) boolOperand(x node, from, to, op int, side string) error {
	switch k := kindOf(x); k {
	case kindAny, kindBool, kindNull:
		return nil
	default:
		t := p.toks[op]
		src := p.src[p.toks[from].col-1 : p.toks[to-1].end]
		return &operandError{Msg: fmt.Sprintf("the %s of %s at column %d, %s, is %s, never true or false: write a comparison (==, <, in …)", side, t.text, t.col, quoted(src), k)}
	}
}

var cmpFuncs = map[string]string{"==": "_eq", "!=": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}

func (p *exprParser) parseCmp() (node, error) {
	l, err := p.parseSum()
	if err != nil {
		return nil, err
	}
	t, ok := p.peek()
	if !ok {
		return l, nil
	}
	fn := ""
	switch {
	case t.kind == tokOp && cmpFuncs[t.text] != "":
		fn = cmpFuncs[t.text]
	case t.kind == tokIdent && t.text == "in":
		fn = "_in"
	default:
		return l, nil
	}
	p.pos++
	r, err := p.parseSum()
	if err != nil {
		return nil, err
	}
	if t2, ok := p.peek(); ok && (t2.kind == tokOp && cmpFuncs[t2.text] != "" || t2.kind == tokIdent && t2.text == "in") {
		return nil, fmt.Errorf("comparisons cannot be chained (column %d): use && between them", t2.col)
	}
	return callNode{fn: fn, args: []node{l, r}}, nil
}

func (p *exprParser) parseSum() (node, error) {
	l, err := p.parseProduct()
	if err != nil {
		return nil, err
	}
	for {
		fn := ""
		switch {
		case p.accept(tokOp, "+"):
			fn = "_add"
		case p.accept(tokOp, "-"):
			fn = "_sub"
		default:
			return l, nil
		}
		r, err := p.parseProduct()
		if err != nil {
			return nil, err
		}
		l = callNode{fn: fn, args: []node{l, r}}
	}
}

func (p *exprParser) parseProduct() (node, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		fn := ""
		switch {
		case p.accept(tokOp, "*"):
			fn = "_mul"
		case p.accept(tokOp, "/"):
			fn = "_div"
		default:
			return l, nil
		}
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = callNode{fn: fn, args: []node{l, r}}
	}
}

func (p *exprParser) parseUnary() (node, error) {
	if p.accept(tokOp, "!") {
		at := p.pos - 1
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		if err := p.boolOperand(x, at+1, p.pos, at, "operand"); err != nil {
			return nil, err
		}
		return notNode{x: x}, nil
	}
	if p.accept(tokOp, "-") {
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		return callNode{fn: "_neg", args: []node{x}}, nil
	}
	return p.parsePostfix()
}

func (p *exprParser) parsePostfix() (node, error) {
	start := p.pos
	x, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	kind := kindOf(x)
	var keys []node
	for {
		recvEnd := p.pos - 1 // the receiver's last token
		if p.accept(tokPunct, ".") {
			t, ok := p.peek()
			if !ok || t.kind != tokIdent {
				return nil, p.unexpected("a field name after '.'")
			}
			p.pos++
			if kind != kindAny {
				return nil, p.noMembers(start, recvEnd, kind)
			}
			keys = append(keys, litNode{src: strconv.QuoteToASCII(t.text), kind: kindString})
			continue
		}
		if p.accept(tokPunct, "[") {
			k, err := p.parseOr()
			if err != nil {
				return nil, err
			}
			if err := p.expect(tokPunct, "]", "']'"); err != nil {
				return nil, err
			}
			if kind != kindAny && !(kind == kindArray && numberKey(kindOf(k))) {
				return nil, p.noMembers(start, recvEnd, kind)
			}
			kind = kindAny
			keys = append(keys, k)
			continue
		}
		break
	}
	if len(keys) == 0 {
		return x, nil
	}
	return callNode{fn: "_path", args: append([]node{x}, keys...)}, nil
}

// numberKey reports whether a key of kind k can be a number, and so can
// index an array.
func numberKey(k valueKind) bool {
	return k == kindAny || k == kindNumber || k == kindNumberOrString
}

// noMembers refuses a member (.name or [key]) of a value that never has
// one, which would always be null: tokens start..recvEnd are the value,
// and the member ends at the token just read.
func (p *exprParser) noMembers(start, recvEnd int, kind valueKind) error {
	from := p.toks[start].col - 1
	whole := clipped(p.src[from:p.toks[p.pos-1].end])
	recv := lineerr.Cut(p.src[from:p.toks[recvEnd].end], 48)
	var why string
	switch kind {
	case kindNull:
		why = "null has no members"
	case kindArray:
		why = recv + " is an array, whose members are numbered: [0], [1], …"
	default:
		why = recv + " is " + kind.String() + ", which has no members"
	}
	if hint := p.exponentHint(start, recvEnd); hint != "" {
		why += "; " + hint
	}
	return fmt.Errorf("%s at column %d is always null: %s", whole, p.toks[start].col, why)
}

// exponentHint reads 1.e5 (a number, a point and a name like e5, written
// together, which the number's grammar reads as member e5 of 1, since a
// point is followed by a digit) as the number its author meant, and says
// how that is written.
func (p *exprParser) exponentHint(start, recvEnd int) string {
	if start != recvEnd || p.pos-start != 3 {
		return ""
	}
	num, dot, name := p.toks[start], p.toks[start+1], p.toks[start+2]
	if num.kind != tokNumber || strings.ContainsAny(num.text, "eE") || num.end+1 != dot.col || dot.end+1 != name.col {
		return ""
	}
	if name.text[0] != 'e' && name.text[0] != 'E' || strings.Trim(name.text[1:], "0123456789") != "" {
		return ""
	}
	exp := name.text
	if len(name.text) == 1 && p.pos+1 < len(p.toks) {
		// 1.e+5: the exponent's sign and digits are tokens of their own
		sign, digits := p.toks[p.pos], p.toks[p.pos+1]
		if sign.kind == tokOp && (sign.text == "+" || sign.text == "-") && sign.col == name.end+1 &&
			digits.kind == tokNumber && digits.col == sign.end+1 && strings.Trim(digits.text, "0123456789") == "" {
			exp += sign.text + digits.text
		}
	}
	if strings.Trim(exp[1:], "+-") == "" {
		return ""
	}
	if strings.Contains(num.text, ".") {
		return fmt.Sprintf("a number's exponent follows its digits: %s%s", num.text, exp)
	}
	return fmt.Sprintf("a point in a number is followed by a digit: %s%s or %s.0%s", num.text, exp, num.text, exp)
}

// quoted is s quoted as an error shows a value of the file (cut,
// lineerr.Quote).
func quoted(s string) string { return lineerr.Quote(s) }

// clipped is s as an error shows a value of the file, unquoted (cut,
// lineerr.Clip).
func clipped(s string) string { return lineerr.Clip(s) }

// functions maps the language's functions to their arity and translation.
var functions = map[string]struct {
	arity int
	fn    string
}{
	"len":     {1, "_len"},
	"lower":   {1, "_lower"},
	"upper":   {1, "_upper"},
	"matches": {2, "_matches"},
	"now":     {0, "_now"},
	"uuid":    {0, "_uuid"},
}

// hyphenated reports whether the name just read (p.toks[p.pos-1]) follows
// a path's member and a minus with no blank between them, as in
// .Retry-After, and returns the name the path's author meant.
func (p *exprParser) hyphenated() (string, bool) {
	if p.pos < 4 {
		return "", false
	}
	dot, member, minus, name := p.toks[p.pos-4], p.toks[p.pos-3], p.toks[p.pos-2], p.toks[p.pos-1]
	if dot.kind != tokPunct || dot.text != "." || member.kind != tokIdent || minus.kind != tokOp || minus.text != "-" {
		return "", false
	}
	if member.col+len(member.text) != minus.col || minus.col+1 != name.col {
		return "", false
	}
	return member.text + "-" + name.text, true
}

func (p *exprParser) parsePrimary() (node, error) {
	t, ok := p.peek()
	if !ok {
		return nil, p.unexpected("a value")
	}
	p.pos++
	switch t.kind {
	case tokNumber:
		switch v := t.val.(type) {
		case int:
			return litNode{src: strconv.Itoa(v), kind: kindNumber}, nil
		case exactNumber:
			return litNode{src: "_num(" + strconv.Quote(Text(v)) + ")", kind: kindNumber}, nil
		default:
			return litNode{src: strconv.FormatFloat(v.(float64), 'e', -1, 64), kind: kindNumber}, nil
		}
	case tokString:
		return litNode{src: strconv.QuoteToASCII(t.text), kind: kindString}, nil
	case tokDollar:
		return litNode{src: "_doc"}, nil
	case tokIdent:
		switch t.text {
		case "null":
			return litNode{src: "nil", kind: kindNull}, nil
		case "true", "false":
			return litNode{src: t.text, kind: kindBool}, nil
		case "ctx":
			return litNode{src: "_ctx"}, nil
		}
		f, isFunc := functions[t.text]
		if !isFunc || !p.accept(tokPunct, "(") {
			if isFunc {
				return nil, fmt.Errorf("function %s at column %d needs parentheses: %s(…)", t.text, t.col, t.text)
			}
			if name, ok := p.hyphenated(); ok {
				// ctx.HTTP_RESPONSE_HEADERS.Retry-After: a minus
				return nil, fmt.Errorf("unknown name %s at column %d: the - before it is a minus; a name holding a - is read with quotes: [%s]", quoted(t.text), t.col, quoted(name))
			}
			return nil, fmt.Errorf("unknown name %s at column %d: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid", quoted(t.text), t.col)
		}
		var args []node
		if !p.accept(tokPunct, ")") {
			for {
				a, err := p.parseOr()
				if err != nil {
					return nil, err
				}
				args = append(args, a)
				if p.accept(tokPunct, ")") {
					break
				}
				if err := p.expect(tokPunct, ",", "',' or ')'"); err != nil {
					return nil, err
				}
			}
		}
		if len(args) != f.arity {
			return nil, fmt.Errorf("%s takes %d argument%s, not %d (column %d)", t.text, f.arity, plural(f.arity), len(args), t.col)
		}
		if t.text == "now" {
			args = []node{litNode{src: "_rt"}}
		}
		if t.text == "matches" {
			if lit, ok := args[1].(litNode); ok && strings.HasPrefix(lit.src, `"`) {
				pattern, _ := strconv.Unquote(lit.src)
				re, err := regexp.Compile(pattern)
				if err != nil {
					return nil, fmt.Errorf("invalid regular expression %s in matches (column %d): %s", quoted(pattern), t.col, regexpReason(err))
				}
				if p.regexps == nil {
					p.regexps = map[string]*regexp.Regexp{}
				}
				p.regexps[pattern] = re
			}
		}
		return callNode{fn: f.fn, args: args}, nil
	case tokPunct:
		switch t.text {
		case "(":
			x, err := p.parseOr()
			if err != nil {
				return nil, err
			}
			return x, p.expect(tokPunct, ")", "')'")
		case "[":
			var items []node
			if p.accept(tokPunct, "]") {
				return arrayNode{}, nil
			}
			for {
				x, err := p.parseOr()
				if err != nil {
					return nil, err
				}
				items = append(items, x)
				if p.accept(tokPunct, "]") {
					return arrayNode{items: items}, nil
				}
				if err := p.expect(tokPunct, ",", "',' or ']'"); err != nil {
					return nil, err
				}
			}
		}
	}
	p.pos--
	return nil, p.unexpected("a value")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
