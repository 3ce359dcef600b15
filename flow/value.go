package flow

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A document value is one of: nil (JSON null), bool, int, float64,
// exactNumber, string, []any, *Object, or *XMLDocument (an answer kept as
// XML). Integers that fit an int are held as int so that ids and counts keep
// every digit; a number no float64 holds digit for digit is an exactNumber
// (number.go); every other number is a float64. Values are never modified
// once built: steps derive new values instead.

// Object is a JSON object that keeps the order of its keys, so that an
// answer built from a template keeps the template's key order. An Object is
// immutable once built.
type Object struct {
	keys  []string
	vals  []any
	index map[string]int // built for larger objects only
	// size is the length of the object's compact JSON when it was counted
	// as the object was built (jsonSize), 0 when it was not: a template
	// counts what it renders, the JSON parser what it reads, compact and
	// its strings and numbers as jsonSize counts them (a string its bytes
	// and not its escapes, a number as it is answered), the XML flattener
	// what it flattens, once its children are counted (an array keeps its
	// size through withSize). Set once, before the object is shared.
	size int
}

// objectIndexMin is the size from which an Object keeps a map index;
// smaller objects are searched linearly, which is faster.
const objectIndexMin = 12

// NewObject builds an Object from parallel key and value slices, which it
// takes ownership of. The keys must be distinct: every caller (the JSON
// parser, templates, the XML flattener) refuses or merges duplicates first.
func NewObject(keys []string, vals []any) *Object {
	o := &Object{keys: keys, vals: vals}
	if len(keys) >= objectIndexMin {
		o.index = make(map[string]int, len(keys))
		for i, k := range keys {
			o.index[k] = i
		}
	}
	return o
}

// objectBuilder collects an object's keys and values in order while it is
// read (the JSON parser, the XML flattener, a YAML mapping), and finds a key
// already collected: by a scan while the object is small, through a map
// index from objectIndexMin keys on, so that a document of n keys costs
// linear time, not quadratic. The index is the one the Object keeps.
type objectBuilder struct {
	keys  []string
	vals  []any
	index map[string]int // built once the object reaches objectIndexMin keys
}

// find returns the position of key, or -1 when it has not been added.
func (b *objectBuilder) find(key string) int {
	if b.index == nil && len(b.keys) >= objectIndexMin {
		b.index = make(map[string]int, 2*len(b.keys))
		for i, k := range b.keys {
			b.index[k] = i
		}
	}
	if b.index != nil {
		if i, ok := b.index[key]; ok {
			return i
		}
		return -1
	}
	for i, k := range b.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// add appends a key that find does not know.
func (b *objectBuilder) add(key string, v any) {
	if b.index != nil {
		b.index[key] = len(b.keys)
	}
	b.keys = append(b.keys, key)
	b.vals = append(b.vals, v)
}

// object returns the Object built, which owns the builder's slices and
// index from then on.
func (b *objectBuilder) object() *Object {
	if b.index == nil {
		return NewObject(b.keys, b.vals)
	}
	return &Object{keys: b.keys, vals: b.vals, index: b.index}
}

// Len is the number of keys.
func (o *Object) Len() int { return len(o.keys) }

// Key returns the i-th key and its value, in order.
func (o *Object) Key(i int) (string, any) { return o.keys[i], o.vals[i] }

// Get returns the value of key and whether the key is present.
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	if o.index != nil {
		i, ok := o.index[key]
		if !ok {
			return nil, false
		}
		return o.vals[i], true
	}
	for i, k := range o.keys {
		if k == key {
			return o.vals[i], true
		}
	}
	return nil, false
}

// TypeName names the type of a document value as error texts write it:
// null, boolean, number, string, array or object.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int, float64, exactNumber:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case *Object, map[string]any:
		return "object"
	case *XMLDocument:
		return "XML document"
	}
	return "value"
}

// Equal reports whether two document values are equal: numbers compare by
// value whatever their Go type, arrays and objects element by element
// (object key order does not matter), and values of different types are
// never equal.
func Equal(a, b any) bool {
	if m, ok := a.(map[string]any); ok {
		a = objectFromMap(m)
	}
	if m, ok := b.(map[string]any); ok {
		b = objectFromMap(m)
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int, float64, exactNumber:
		c, ok := compareNumbers(a, b)
		return ok && c == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Object:
		y, ok := b.(*Object)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.Get(k)
			if !ok || !Equal(x.vals[i], v) {
				return false
			}
		}
		return true
	case *XMLDocument:
		y, ok := b.(*XMLDocument)
		return ok && string(x.raw) == string(y.raw)
	}
	return false
}

// compareNumbers compares two numbers exactly, an int with a float64
// included (9007199254740993 is more than 9007199254740992.0), an
// exactNumber by its digits; ok is false when either is not a number.
func compareNumbers(a, b any) (c int, ok bool) {
	_, ea := a.(exactNumber)
	_, eb := b.(exactNumber)
	if ea || eb {
		da, oka := decimalOf(a)
		db, okb := decimalOf(b)
		return compareDecimals(da, db), oka && okb
	}
	switch x := a.(type) {
	case int:
		switch y := b.(type) {
		case int:
			return cmp.Compare(x, y), true
		case float64:
			return -compareFloatInt(y, x), true
		}
	case float64:
		switch y := b.(type) {
		case int:
			return compareFloatInt(x, y), true
		case float64:
			return cmp.Compare(x, y), true
		}
	}
	return 0, false
}

// compareFloatInt compares f with i without rounding i to a float64; from
// 2^53 on, f is the value of its shortest form, as JSON writes it.
func compareFloatInt(f float64, i int) int {
	switch {
	case math.IsNaN(f):
		return -1
	case f >= 1<<63:
		return 1
	case f < -(1 << 63):
		return -1
	}
	if math.Abs(f) >= 1<<53 {
		// a float64 is the value of its shortest form, as it is against
		// an exactNumber (1.2345678901234568e18 is 1234567890123456800,
		// not its binary 1234567890123456768), or an int, an exactNumber
		// and a float64 would not be ordered
		df, _ := decimalOf(f)
		di, _ := decimalOf(i)
		return compareDecimals(df, di)
	}
	t := math.Trunc(f)
	if c := cmp.Compare(int(t), i); c != 0 {
		return c
	}
	return cmp.Compare(f, t) // the fraction decides
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	case exactNumber:
		return n.f, true
	}
	return 0, false
}

// normalNumber returns f as an int when it is integral and exactly
// representable, so that 84/2 prints as 42 and equals the integer 42. A
// whole float64 from 2^53 up that an int holds is the int of its shortest
// form, as that form reads (readNumber): a result is the same number in
// the flow that made it and after a queue (1.5e18 + 1 is exact in both).
func normalNumber(f float64) any {
	if f != math.Trunc(f) {
		return f
	}
	if math.Abs(f) < 1<<53 {
		return int(f)
	}
	if math.Abs(f) < 1<<63 {
		var buf [32]byte
		if v, ok := readNumber(string(strconv.AppendFloat(buf[:0], f, 'e', -1, 64))); ok {
			return v
		}
	}
	return f
}

// AppendJSON appends the compact JSON form of v to dst. Object keys keep
// their order; strings are escaped as encoding/json escapes them with
// SetEscapeHTML(false): quotes, backslashes, control characters, U+2028
// and U+2029, and invalid UTF-8 as U+FFFD, while <, > and & stay as they
// are (an answer is not HTML, and a URL's & reads as written). An XML
// document is written as a JSON string of its bytes.
func AppendJSON(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case int:
		return strconv.AppendInt(dst, int64(x), 10)
	case float64:
		return appendFloat(dst, x)
	case exactNumber:
		return x.d.appendJSON(dst)
	case string:
		return appendString(dst, x)
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSON(dst, e)
		}
		return append(dst, ']')
	case *Object:
		dst = append(dst, '{')
		for i, k := range x.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = AppendJSON(dst, x.vals[i])
		}
		return append(dst, '}')
	case map[string]any:
		return AppendJSON(dst, objectFromMap(x))
	case *XMLDocument:
		return appendString(dst, string(x.raw))
	}
	return append(dst, "null"...)
}

// objectFromMap orders a Go map's keys so its JSON form is stable.
func objectFromMap(m map[string]any) *Object {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = m[k]
	}
	return NewObject(keys, vals)
}

// appendFloat formats like encoding/json (no exponent between 1e-6 and
// 1e21), except for a float64 between 2^53 and 2^63 whose whole-number
// form does not hold its exact value: that form would read back as an int
// of the digits written (1.20000000001e18 would come back 128 less), and a
// document would change between the door that stores it and the worker
// that reads it; such a float takes the exponent form, which reads back as
// itself.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		// -0 too (a document's -0.0): written -0, it read back as the
		// int 0, so the flow that read the body wrote -0 and a worker
		// reading the same document from a queue wrote 0
		return append(dst, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'f' && abs >= 1<<53 && abs < 1<<63 {
		if n, err := strconv.ParseInt(string(dst[start:]), 10, 64); err != nil || n != int64(f) {
			format = 'e'
			dst = strconv.AppendFloat(dst[:start], f, format, -1, 64)
		}
	}
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// escapedLen is the length of s as appendString writes it, without its
// quotes, counted without writing it.
func escapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\':
				n++
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			default:
				n += 6
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Text is the form of a value inside a string: a string as itself, null as
// the empty string, an XML document as its bytes, everything else as its
// compact JSON.
func Text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case *XMLDocument:
		return string(x.raw)
	}
	return string(AppendJSON(nil, v))
}
