package flow

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/nexushq/nexus/naming"
)

// DefaultMaxDepth is the deepest nesting of arrays and objects ParseJSON
// accepts when no other limit is given.
const DefaultMaxDepth = 64

// ParseJSON parses one JSON document strictly into a document value: an
// object with a duplicate key, invalid UTF-8, nesting deeper than maxDepth
// (DefaultMaxDepth when maxDepth <= 0) and data after the document are
// refused. The error is one line naming the problem and its byte offset.
func ParseJSON(data []byte, maxDepth int) (any, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	p := jsonParser{data: data, maxDepth: maxDepth}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, p.errorf("unexpected data after the document")
	}
	return v, nil
}

type jsonParser struct {
	data     []byte
	pos      int
	maxDepth int
	// space is the bytes read so far that an object's compact JSON, as
	// jsonSize counts it, does not hold: white space skipped, the bytes by
	// which a string as written is longer than its bytes (its escapes),
	// and by which a number as written is longer than as written again
	// (less when shorter)
	space int
}

// JSONError is a refused JSON document.
type JSONError struct {
	Offset int
	Msg    string
}

func (e *JSONError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return &JSONError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *jsonParser) skipSpace() {
	start := p.pos
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			p.space += p.pos - start
			return
		}
	}
	p.space += p.pos - start
}

func (p *jsonParser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, err := p.string()
		if err != nil {
			return nil, err
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	default:
		return nil, p.errorf("unexpected character %s", quoteByte(c))
	}
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf(`'\x%02x'`, c)
}

func (p *jsonParser) literal(word string, v any) (any, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return nil, p.errorf("unexpected character %s", quoteByte(p.data[p.pos]))
	}
	p.pos += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int) (any, error) {
	if depth > p.maxDepth {
		return nil, p.errorf("nesting deeper than %d levels", p.maxDepth)
	}
	start, space := p.pos, p.space
	p.pos++ // {
	var obj objectBuilder
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return NewObject(nil, nil), nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			if p.pos >= len(p.data) {
				return nil, p.errorf("unexpected end of input in an object")
			}
			return nil, p.errorf("expected a string key, found %s", quoteByte(p.data[p.pos]))
		}
		keyAt := p.pos
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		if obj.find(key) >= 0 {
			p.pos = keyAt
			return nil, p.errorf("duplicate key %s", strconv.Quote(key))
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':' after an object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		obj.add(key, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in an object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			o := obj.object()
			o.size = p.pos - start - (p.space - space) // compact, as answered
			return o, nil
		default:
			return nil, p.errorf("expected ',' or '}' in an object, found %s", quoteByte(p.data[p.pos]))
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	if depth > p.maxDepth {
		return nil, p.errorf("nesting deeper than %d levels", p.maxDepth)
	}
	start, space := p.pos, p.space
	p.pos++ // [
	vals := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return vals, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in an array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return withSize(vals, p.pos-start-(p.space-space)), nil // compact, as answered
		default:
			return nil, p.errorf("expected ',' or ']' in an array, found %s", quoteByte(p.data[p.pos]))
		}
	}
}

func (p *jsonParser) number() (any, error) {
	start := p.pos
	d := p.data
	if d[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.pos < len(d) && d[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.errorf("invalid number")
	}
	integer := true
	if p.pos < len(d) && d[p.pos] == '.' {
		integer = false
		p.pos++
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		integer = false
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errorf("invalid number")
		}
	}
	text := string(d[start:p.pos])
	if integer {
		if n, err := strconv.ParseInt(text, 10, 0); err == nil {
			if n == 0 && len(text) == 2 {
				p.space++ // -0 is answered 0
			}
			return int(n), nil
		}
	}
	v, ok := readNumber(text)
	if !ok {
		p.pos = start
		return nil, p.errorf("number %s is out of range", naming.Shorten(text)) // a digit string may be 1 MiB
	}
	// an object's or an array's size counts the number as it is
	// answered: 1e20 is 4 bytes written and 21 answered, 1.50 is 4 and 3
	p.space += len(text) - jsonSize(v, unbounded)
	return v, nil
}

// string reads a string; it returns a string, not an any, so that an
// object's keys are not boxed.
func (p *jsonParser) string() (string, error) {
	p.pos++ // opening quote
	d := p.data
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(d) {
		c := d[p.pos]
		if c == '"' {
			s := d[start:p.pos]
			p.pos++
			if !utf8.Valid(s) {
				p.pos = start
				return "", p.errorf("invalid UTF-8 in a string")
			}
			return string(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.pos++
	}
	buf := append([]byte(nil), d[start:p.pos]...)
	for p.pos < len(d) {
		c := d[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(buf) {
				p.pos = start
				return "", p.errorf("invalid UTF-8 in a string")
			}
			// an object's or an array's size counts the string as
			// jsonSize does, its bytes and not its escapes: "\u4e2d" is 6
			// bytes written and 3 counted, "\n" 2 and 1
			str := string(buf)
			p.space += p.pos - 1 - start - len(str)
			return str, nil
		case c < 0x20:
			return "", p.errorf("control character %s in a string", quoteByte(c))
		case c == '\\':
			p.pos++
			if p.pos >= len(d) {
				return "", p.errorf("unexpected end of input in a string")
			}
			e := d[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.pos+1 < len(d) && d[p.pos] == '\\' && d[p.pos+1] == 'u' {
						p.pos += 2
						if r2, ok = p.hex4(); !ok {
							return "", p.errorf("invalid \\u escape")
						}
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return "", p.errorf("invalid surrogate pair in a \\u escape")
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.pos -= 2
				return "", p.errorf("invalid escape %s", strconv.Quote(string(d[p.pos:p.pos+2])))
			}
		default:
			buf = append(buf, c)
			p.pos++
		}
	}
	return "", p.errorf("unexpected end of input in a string")
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}
