package flow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A Template is a string with {{ EXPRESSION }} holes: an endpoint, a header
// value, dedup_key, a response_status. Holes are compiled once; rendering
// evaluates them and writes each value's text (see Text).
type Template struct {
	src   string
	parts []textPart
}

type textPart struct {
	lit  string
	expr *Expr // nil for a literal part
}

// TemplateError is a template that does not compile. Line counts from the
// first line of the template's text, 0-based.
type TemplateError struct {
	Line int
	Msg  string
}

func (e *TemplateError) Error() string { return e.Msg }

// CompileTemplate compiles a text template.
func CompileTemplate(src string) (*Template, error) {
	t := &Template{src: src}
	rest := src
	offset := 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, textPart{lit: rest})
			}
			return t, nil
		}
		if i > 0 {
			t.parts = append(t.parts, textPart{lit: rest[:i]})
		}
		e, n, err := compileHole(rest[i:], src, offset+i)
		if err != nil {
			return nil, err
		}
		t.parts = append(t.parts, textPart{expr: e})
		rest = rest[i+n:]
		offset += i + n
	}
}

// compileHole compiles the hole at the start of s ("{{ … }}") and returns
// its length. whole and at locate it for line numbers. A hole that is
// closed on its line but does not compile has its length returned with
// the error, so that a reader may go on past it.
func compileHole(s, whole string, at int) (*Expr, int, error) {
	line := strings.Count(whole[:at], "\n")
	end := holeEnd(s)
	if end < 0 {
		return nil, 0, &TemplateError{Line: line, Msg: "unclosed {{: a hole ends with }}"}
	}
	inner := strings.TrimSpace(s[2:end])
	if strings.Contains(inner, "\n") {
		return nil, 0, &TemplateError{Line: line, Msg: "a {{ }} hole must stay on one line"}
	}
	if inner == "" {
		return nil, end + 2, &TemplateError{Line: line, Msg: "empty {{ }} hole"}
	}
	e, err := CompileExpr(inner)
	if parses(err) {
		return nil, end + 2, &TemplateError{Line: line, Msg: fmt.Sprintf("expression %s: %v", quoted(inner), err)}
	}
	if err != nil {
		return nil, end + 2, &TemplateError{Line: line, Msg: fmt.Sprintf("expression %s does not parse: %v", quoted(inner), err)}
	}
	return e, end + 2, nil
}

// holeEnd finds the "}}" closing the hole that starts s, skipping string
// literals of the expression; -1 when there is none on the hole's line.
func holeEnd(s string) int {
	inString := false
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			return -1
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && c == '}' && i+1 < len(s) && s[i+1] == '}':
			return i
		}
	}
	return -1
}

// String returns the template as written.
func (t *Template) String() string { return t.src }

// Literal returns the template's text and true when it has no holes.
func (t *Template) Literal() (string, bool) {
	switch len(t.parts) {
	case 0:
		return "", true
	case 1:
		if t.parts[0].expr == nil {
			return t.parts[0].lit, true
		}
	}
	return "", false
}

// Render evaluates the holes and returns the text.
func (t *Template) Render(env *Env) (string, error) {
	s, _, err := t.RenderKey(env)
	return s, err
}

// errTextTooLarge is a text template (Render, RenderKey, RenderURL) whose
// text passed maxStringBytes, the most a string + makes: a header value
// of a thousand holes of a 10 MiB message was 10 GB.
var errTextTooLarge = fmt.Errorf("the rendered text is larger than the limit of %d bytes", maxStringBytes)

// RenderKey renders a key (dedup_key): the text, as Render's, and whether a
// hole produced any of it that is not blank. A key whose holes all rendered
// blank (null, missing, spaces) is the template's literal text alone, the
// same for every such message: filled is false then.
func (t *Template) RenderKey(env *Env) (key string, filled bool, err error) {
	key, filled, err = t.render(env, maxStringBytes)
	if err == errOver {
		return "", false, errTextTooLarge
	}
	return key, filled, err
}

// literalHas reports whether the template's literal text (its parts
// outside the holes) holds a rune f accepts.
func (t *Template) literalHas(f func(rune) bool) bool {
	for _, p := range t.parts {
		if p.expr == nil && strings.ContainsFunc(p.lit, f) {
			return true
		}
	}
	return false
}

// RenderURL renders an endpoint: each hole's text is percent-encoded, every
// byte but A-Z a-z 0-9 - . _ ~, so a value cannot change the URL's shape:
// a / is %2F, and a "." or ".." beside a / or a \ has its dots encoded too
// ("../admin" is %2E%2E%2Fadmin), so that a backend that decodes the path
// before it normalizes it still sees one segment. The literal text past
// the host is percent-encoded where a URL cannot carry a character as it
// is (| ^ é, a space): left to Go's client, one such character made it
// write the whole path again from its decoded form, a hole's %2F as a /.
// A path with a segment "." or ".." (a hole that renders one, or makes one
// with a dot beside it) is refused.
func (t *Template) RenderURL(env *Env) (string, error) {
	if s, ok := t.Literal(); ok && !strings.ContainsFunc(s[authorityEnd(s):], needsURLEscape) {
		return s, nil // as written: most endpoints, on every call
	}
	var b strings.Builder
	// the path's current segment: where it starts in b, and its first
	// hole; a segment that holes alone make must not render empty
	inPath, segStart := false, 0
	var segHole *Expr
	endSegment := func() error {
		if segHole != nil && b.Len() == segStart {
			return fmt.Errorf("the hole {{ %s }} renders an empty path segment, so the URL would name another resource: refused", clipped(segHole.src))
		}
		return nil
	}
	for i, p := range t.parts {
		if p.expr == nil {
			lit := p.lit
			if i == 0 {
				// the scheme and the host, which are literal, as written
				n := authorityEnd(lit)
				b.WriteString(lit[:n])
				lit = lit[n:]
				inPath = strings.HasPrefix(lit, "/")
			}
			for inPath && lit != "" {
				j := strings.IndexAny(lit, "/?#")
				if j != 0 {
					// text of the segment: it is not empty
					segHole = nil
				}
				if j < 0 {
					appendURLLiteral(&b, lit)
					lit = ""
					break
				}
				appendURLLiteral(&b, lit[:j])
				if err := endSegment(); err != nil {
					return "", err
				}
				inPath = lit[j] == '/'
				b.WriteByte(lit[j])
				segStart, segHole = b.Len(), nil
				lit = lit[j+1:]
			}
			appendURLLiteral(&b, lit)
			continue
		}
		v, err := p.expr.Eval(env)
		if err != nil {
			return "", err
		}
		if inPath && segHole == nil && b.Len() == segStart {
			segHole = p.expr
		}
		text, ok := textUpTo(v, maxStringBytes-b.Len())
		if !ok {
			return "", errTextTooLarge
		}
		if appendURLHole(&b, text); b.Len() > maxStringBytes {
			return "", errTextTooLarge
		}
	}
	if inPath {
		if err := endSegment(); err != nil {
			return "", err
		}
	}
	u := b.String()
	if len(t.parts) > 1 {
		// a hole that renders "." or ".." (or one that makes one with a
		// dot beside it) would address another resource than the one the
		// endpoint names: /customers/{{ $.id }}/orders with the id ".."
		// is /orders to the backend, %2E%2E too once it normalizes
		if seg, ok := dotSegment(u); ok {
			return "", fmt.Errorf("the URL's path holds the segment %s, which would name another resource: refused", quoted(seg))
		}
	}
	return u, nil
}

// authorityEnd is the length of the scheme and the authority at the start
// of an endpoint's text (up to the first / ? or # past "://"), 0 when it
// has none.
func authorityEnd(s string) int {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0
	}
	j := strings.IndexAny(s[i+3:], "/?#")
	if j < 0 {
		return len(s)
	}
	return i + 3 + j
}

// appendURLLiteral writes the literal text of an endpoint's path, query or
// fragment with every byte RFC 3986 does not allow there as it is
// percent-encoded: allowed are the unreserved characters, the
// sub-delimiters, : @ / ? # and % (an escape already written).
func appendURLLiteral(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; urlLiteralByte(c) {
			b.WriteByte(c)
		} else {
			appendEscaped(b, c)
		}
	}
}

// urlLiteralByte reports whether c may stand as it is in the literal text
// of an endpoint past its host (appendURLLiteral).
func urlLiteralByte(c byte) bool {
	return unreservedURL(c) || strings.IndexByte("!$&'()*+,;=:@/?#%", c) >= 0
}

// needsURLEscape reports whether r is written percent-encoded in the
// literal text of an endpoint past its host.
func needsURLEscape(r rune) bool { return r >= utf8.RuneSelf || !urlLiteralByte(byte(r)) }

// appendURLHole writes a hole's text percent-encoded, every byte but the
// unreserved characters; a "." or ".." between separators (/ or \) has its
// dots encoded as well.
func appendURLHole(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "/\\") {
		b.WriteString(escapeURLComponent(s))
		return
	}
	for {
		i := strings.IndexAny(s, "/\\")
		piece := s
		if i >= 0 {
			piece = s[:i]
		}
		if piece == "." || piece == ".." {
			b.WriteString(strings.Repeat("%2E", len(piece)))
		} else {
			b.WriteString(escapeURLComponent(piece))
		}
		if i < 0 {
			return
		}
		appendEscaped(b, s[i])
		s = s[i+1:]
	}
}

func unreservedURL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func appendEscaped(b *strings.Builder, c byte) {
	b.WriteByte('%')
	b.WriteByte("0123456789ABCDEF"[c>>4])
	b.WriteByte("0123456789ABCDEF"[c&0xf])
}

// dotSegment returns the first segment of u's path that is "." or "..",
// percent-encoded dots included (RFC 3986 §6.2.2.2 decodes them before
// §5.2.4 removes dot-segments).
func dotSegment(u string) (string, bool) {
	rest := u
	if i := strings.Index(rest, "://"); i >= 0 {
		// the authority ends at the first of / ? #: a path only if it is /
		rest = rest[i+3:]
		j := strings.IndexAny(rest, "/?#")
		if j < 0 || rest[j] != '/' {
			return "", false
		}
		rest = rest[j:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	for seg := range strings.SplitSeq(rest, "/") {
		d := strings.ReplaceAll(strings.ReplaceAll(seg, "%2E", "."), "%2e", ".")
		if d == "." || d == ".." {
			return seg, true
		}
	}
	return "", false
}

// render is Render's and RenderKey's: the text, and whether a hole
// produced any of it that is not blank. It stops with errOver as soon as
// the text passes limit bytes.
func (t *Template) render(env *Env, limit int) (text string, filled bool, err error) {
	if s, ok := t.Literal(); ok {
		if len(s) > limit {
			return "", false, errOver
		}
		return s, false, nil
	}
	var b strings.Builder
	size := 0
	for _, p := range t.parts {
		size += len(p.lit) + 16 // room for a short value in each hole
	}
	b.Grow(size)
	for _, p := range t.parts {
		if p.expr == nil {
			if len(p.lit) > limit-b.Len() {
				return "", false, errOver
			}
			b.WriteString(p.lit)
			continue
		}
		v, err := p.expr.Eval(env)
		if err != nil {
			return "", false, err
		}
		n := b.Len()
		if !appendText(&b, v, limit) {
			return "", false, errOver
		}
		if !filled && strings.TrimSpace(b.String()[n:]) != "" {
			filled = true
		}
	}
	return b.String(), filled, nil
}

// textUpTo is Text(v) when it holds at most limit bytes; false otherwise,
// found without writing more than limit bytes of it.
func textUpTo(v any, limit int) (string, bool) {
	switch v.(type) {
	case []any, *Object, map[string]any:
		var b strings.Builder
		if !appendText(&b, v, limit) {
			return "", false
		}
		return b.String(), true
	}
	s := Text(v)
	return s, len(s) <= limit
}

// appendText writes Text(v) to b when b then holds at most limit bytes;
// false otherwise, found without writing more than limit bytes. An array
// or an object is written once, into a buffer of its counted size.
func appendText(b *strings.Builder, v any, limit int) bool {
	switch v.(type) {
	case []any, *Object, map[string]any:
		if limit == unbounded {
			break
		}
		n := jsonSize(v, limit-b.Len())
		if n > limit-b.Len() {
			return false
		}
		buf, ok := AppendJSONLimit(make([]byte, 0, n+n/8), v, limit-b.Len())
		if !ok {
			return false
		}
		b.Write(buf)
		return true
	}
	s := Text(v)
	if len(s) > limit-b.Len() {
		return false
	}
	b.WriteString(s)
	return true
}

func escapeURLComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; unreservedURL(c) {
			b.WriteByte(c)
		} else {
			appendEscaped(&b, c)
		}
	}
	return b.String()
}

// NTD is a compiled ntd block: JSON with holes, parsed once into a tree
// that renders without re-parsing. A hole inside a JSON string inserts the
// value's text, JSON-escaped; a hole standing as a whole value inserts the
// value itself. Parts without holes are built once and shared.
type NTD struct {
	src  string
	root ntdNode
}

type ntdNode interface {
	// render renders the node under left bytes of compact JSON and
	// returns what is left of them: errOver as soon as the node's size
	// passes left.
	render(env *Env, left int) (v any, rest int, err error)
}

type (
	ntdStatic struct {
		v    any
		size int // of v's JSON
	}
	ntdHole   struct{ e *Expr }
	ntdString struct{ t *Template }
	ntdArray  struct{ items []ntdNode }
	ntdObject struct {
		keys []ntdNode // ntdStatic string or ntdString
		vals []ntdNode
		// when no key has a hole: the keys, and the index of an object
		// that large, shared by every rendered Object (Objects are
		// immutable)
		static *ntdKeys
	}
	ntdKeys struct {
		keys  []string
		index map[string]int
		size  int // of the keys' text, without their quotes
	}
)

// newStatic is the node of a value without holes.
func newStatic(v any) ntdStatic { return ntdStatic{v: v, size: len(AppendJSON(nil, v))} }

func (n ntdStatic) render(_ *Env, left int) (any, int, error) {
	if left -= n.size; left < 0 {
		return nil, left, errOver
	}
	return n.v, left, nil
}

func (n ntdHole) render(env *Env, left int) (any, int, error) {
	v, err := n.e.Eval(env)
	if err != nil {
		return nil, left, err
	}
	if left -= jsonSize(v, left); left < 0 {
		return nil, left, errOver
	}
	return v, left, nil
}

func (n ntdString) render(env *Env, left int) (any, int, error) {
	if left -= 2; left < 0 { // the quotes
		return nil, left, errOver
	}
	s, _, err := n.t.render(env, left)
	if err != nil {
		return nil, left, err
	}
	return s, left - len(s), nil
}

func (n ntdArray) render(env *Env, left int) (any, int, error) {
	if left -= 1 + len(n.items); left < 0 { // the brackets and commas
		return nil, left, errOver
	}
	out := make([]any, len(n.items))
	for i, it := range n.items {
		var err error
		if out[i], left, err = it.render(env, left); err != nil {
			return nil, left, err
		}
	}
	return out, left, nil
}

func (n ntdObject) render(env *Env, left int) (any, int, error) {
	// the braces, commas and colons (a key counts itself)
	start := left
	if left -= 1 + len(n.keys)*2; left < 0 {
		return nil, left, errOver
	}
	if n.static != nil {
		if left -= n.static.size + len(n.keys)*2; left < 0 { // the keys and their quotes
			return nil, left, errOver
		}
		vals := make([]any, len(n.vals))
		for i, v := range n.vals {
			var err error
			if vals[i], left, err = v.render(env, left); err != nil {
				return nil, left, err
			}
		}
		return &Object{keys: n.static.keys, vals: vals, index: n.static.index, size: start - left}, left, nil
	}
	obj := objectBuilder{keys: make([]string, 0, len(n.keys)), vals: make([]any, 0, len(n.vals))}
	for i := range n.keys {
		k, rest, err := n.keys[i].render(env, left)
		if err != nil {
			return nil, rest, err
		}
		if obj.find(k.(string)) >= 0 {
			return nil, rest, fmt.Errorf("the rendered JSON has the key %s twice", quoted(k.(string)))
		}
		v, rest, err := n.vals[i].render(env, rest)
		if err != nil {
			return nil, rest, err
		}
		left = rest
		obj.add(k.(string), v)
	}
	o := obj.object()
	o.size = start - left
	return o, left, nil
}

// String returns the block as written.
func (t *NTD) String() string { return t.src }

// Render evaluates the holes and returns the document. The only failures
// are an expression that fails and a rendered object with a duplicate key.
func (t *NTD) Render(env *Env) (any, error) { return t.RenderLimit(env, unbounded) }

// RenderLimit is Render stopped as soon as the document passes limit
// bytes of compact JSON, with a *LimitError. The document is counted as
// it is built, each part once: a part that holds the same large value
// twice counts it twice without writing it (strings count their bytes,
// not their escapes).
func (t *NTD) RenderLimit(env *Env, limit int) (any, error) {
	v, _, err := t.root.render(env, limit)
	if err == errOver {
		return nil, &LimitError{Limit: limit}
	}
	return v, err
}

// CompileNTD compiles an ntd block. Its error joins (errors.Join) a
// *TemplateError for each hole that does not compile and one for the JSON
// around them when that is not valid, where the block stops being read;
// each Line counts from the block's first line.
func CompileNTD(src string) (*NTD, error) {
	p := &ntdParser{src: src}
	p.space()
	if p.pos >= len(src) {
		return nil, p.errorf("the ntd block is empty: write the JSON document to produce")
	}
	root, err := p.value()
	if err == nil {
		if p.space(); p.pos < len(src) {
			err = p.errorf("unexpected %s after the JSON document", p.describe())
		}
	}
	if err != nil || len(p.holeErrs) > 0 {
		return nil, errors.Join(append(p.holeErrs, err)...)
	}
	return &NTD{src: src, root: root}, nil
}

// templateErrors lists the *TemplateErrors of a CompileNTD or
// CompileTemplate error, in the order of the text.
func templateErrors(err error) []*TemplateError {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []*TemplateError
		for _, e := range j.Unwrap() {
			all = append(all, templateErrors(e)...)
		}
		return all
	}
	var te *TemplateError
	if errors.As(err, &te) {
		return []*TemplateError{te}
	}
	return nil
}

// maxNTDDepth is the deepest nesting of arrays and objects in an ntd
// block. The parser recurses once a level: a 1 MiB block of [ took a
// 512 MB stack and 0.6 s to compile, and a little more would have ended
// the process (Go's stack limit is fatal, not an error).
const maxNTDDepth = 1000

type ntdParser struct {
	src   string
	pos   int
	depth int // arrays and objects open at pos
	// holeErrs are the errors of holes that do not compile, each passed
	// over so that the block's other errors are found too
	holeErrs []error
}

// hole compiles the hole at p.pos and moves past it; one that does not
// compile but is closed on its line is recorded in holeErrs and passed
// over (nil, nil).
func (p *ntdParser) hole(s string, at int) (*Expr, int, error) {
	e, n, err := compileHole(s, p.src, at)
	if err != nil && n > 0 {
		p.holeErrs = append(p.holeErrs, err)
		return nil, n, nil
	}
	return e, n, err
}

func (p *ntdParser) errorf(format string, args ...any) error {
	return &TemplateError{Line: strings.Count(p.src[:p.pos], "\n"), Msg: "ntd block is not valid JSON: " + fmt.Sprintf(format, args...)}
}

func (p *ntdParser) describe() string {
	if p.pos >= len(p.src) {
		return "end of block"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *ntdParser) space() {
	for p.pos < len(p.src) && strings.IndexByte(" \t\r\n", p.src[p.pos]) >= 0 {
		p.pos++
	}
}

func (p *ntdParser) value() (ntdNode, error) {
	p.space()
	if p.pos >= len(p.src) {
		return nil, p.errorf("unexpected end of block, expected a value")
	}
	switch c := p.src[p.pos]; {
	case strings.HasPrefix(p.src[p.pos:], "{{"):
		e, n, err := p.hole(p.src[p.pos:], p.pos)
		if err != nil {
			return nil, err
		}
		p.pos += n
		return ntdHole{e: e}, nil
	case c == '{' || c == '[':
		if p.depth == maxNTDDepth {
			return nil, &TemplateError{Line: strings.Count(p.src[:p.pos], "\n"), Msg: fmt.Sprintf("the ntd block nests arrays and objects deeper than %d levels", maxNTDDepth)}
		}
		p.depth++
		defer func() { p.depth-- }()
		if c == '{' {
			return p.object()
		}
		return p.array()
	case c == '"':
		return p.str()
	default:
		// a number or a literal: let the strict JSON parser judge the token
		start := p.pos
		for p.pos < len(p.src) && strings.IndexByte(" \t\r\n,]}", p.src[p.pos]) < 0 {
			p.pos++
		}
		if start == p.pos {
			return nil, p.errorf("unexpected %s, expected a value", p.describe())
		}
		v, err := ParseJSON([]byte(p.src[start:p.pos]), 1)
		if err != nil {
			p.pos = start
			return nil, p.errorf("unexpected %s, expected a value", strconv.Quote(p.token(start)))
		}
		return newStatic(v), nil
	}
}

func (p *ntdParser) token(start int) string {
	end := start
	for end < len(p.src) && strings.IndexByte(" \t\r\n,]}", p.src[end]) < 0 {
		end++
	}
	return p.src[start:end]
}

// str parses a JSON string that may hold holes.
func (p *ntdParser) str() (ntdNode, error) {
	start := p.pos
	p.pos++
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '\\':
			p.pos += 2
			continue
		case c == '\n':
			p.pos = start
			return nil, p.errorf("string is not closed on its line")
		case strings.HasPrefix(p.src[p.pos:], "{{"):
			end := holeEnd(p.src[p.pos:])
			if end < 0 {
				_, _, err := compileHole(p.src[p.pos:], p.src, p.pos)
				return nil, err
			}
			p.pos += end + 2
			continue
		case c == '"':
			p.pos++
			return p.stringNode(start, p.pos)
		}
		p.pos++
	}
	p.pos = start
	return nil, p.errorf("string is not closed")
}

// stringNode builds the node of the string literal src[start:end] (quotes
// included): static when it has no holes, else a template of its decoded
// literal parts and holes.
func (p *ntdParser) stringNode(start, end int) (ntdNode, error) {
	lit := p.src[start:end]
	decode := func(at int, s string) (string, error) {
		v, err := ParseJSON([]byte(`"`+s+`"`), 1)
		if err != nil {
			p.pos = at
			return "", p.errorf("invalid string: %s", err.(*JSONError).Msg)
		}
		return v.(string), nil
	}
	if !strings.Contains(lit, "{{") {
		s, err := decode(start, lit[1:len(lit)-1])
		if err != nil {
			return nil, err
		}
		return newStatic(s), nil
	}
	t := &Template{src: lit}
	body, at := lit[1:len(lit)-1], start+1
	for body != "" {
		i := strings.Index(body, "{{")
		if i < 0 {
			i = len(body)
		}
		if i > 0 {
			s, err := decode(at, body[:i])
			if err != nil {
				return nil, err
			}
			t.parts = append(t.parts, textPart{lit: s})
		}
		if i == len(body) {
			break
		}
		e, n, err := p.hole(body[i:], at+i)
		if err != nil {
			return nil, err
		}
		t.parts = append(t.parts, textPart{expr: e})
		body, at = body[i+n:], at+i+n
	}
	return ntdString{t: t}, nil
}

func (p *ntdParser) object() (ntdNode, error) {
	p.pos++ // {
	obj := ntdObject{}
	static := true
	seen := map[string]bool{}
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return newStatic(NewObject(nil, nil)), nil
	}
	for {
		p.space()
		if p.pos >= len(p.src) {
			return nil, p.errorf("object is not closed: expected '}'")
		}
		if strings.HasPrefix(p.src[p.pos:], "{{") {
			return nil, p.errorf("a key must be a string: write \"{{ … }}\" to use a value as a key")
		}
		if p.src[p.pos] != '"' {
			return nil, p.errorf("unexpected %s, expected a string key", p.describe())
		}
		keyAt := p.pos
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if s, ok := k.(ntdStatic); ok {
			key := s.v.(string)
			if seen[key] {
				p.pos = keyAt
				return nil, p.errorf("duplicate key %s", quoted(key))
			}
			seen[key] = true
		} else {
			static = false
		}
		p.space()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.errorf("unexpected %s, expected ':' after a key", p.describe())
		}
		p.pos++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, ok := v.(ntdStatic); !ok {
			static = false
		}
		obj.keys = append(obj.keys, k)
		obj.vals = append(obj.vals, v)
		p.space()
		if p.pos >= len(p.src) {
			return nil, p.errorf("object is not closed: expected '}'")
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			if static {
				v, _, _ := obj.render(nil, unbounded)
				return newStatic(v), nil
			}
			if len(seen) == len(obj.keys) { // every key is static
				keys := make([]string, len(obj.keys))
				for i, k := range obj.keys {
					keys[i] = k.(ntdStatic).v.(string)
				}
				shared := NewObject(keys, nil)
				size := 0
				for _, k := range keys {
					size += len(k)
				}
				obj.static = &ntdKeys{keys: shared.keys, index: shared.index, size: size}
			}
			return obj, nil
		default:
			return nil, p.errorf("unexpected %s, expected ',' or '}'", p.describe())
		}
	}
}

func (p *ntdParser) array() (ntdNode, error) {
	p.pos++ // [
	arr := ntdArray{}
	static := true
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		return newStatic([]any{}), nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, ok := v.(ntdStatic); !ok {
			static = false
		}
		arr.items = append(arr.items, v)
		p.space()
		if p.pos >= len(p.src) {
			return nil, p.errorf("array is not closed: expected ']'")
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			if static {
				v, _, _ := arr.render(nil, unbounded)
				return newStatic(v), nil
			}
			return arr, nil
		default:
			return nil, p.errorf("unexpected %s, expected ',' or ']'", p.describe())
		}
	}
}
