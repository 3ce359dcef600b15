package flow

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// LimitError is a document that grew past the limit it is rendered or
// written under (NTD.RenderLimit, AppendJSONLimit).
type LimitError struct {
	Limit int // in bytes
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("the document is larger than the limit of %d bytes", e.Limit)
}

// errOver stops a render whose budget is spent; RenderLimit reports it as
// a *LimitError.
var errOver = &LimitError{}

// unbounded is the budget of a render without a limit.
const unbounded = math.MaxInt

// jsonSize is the size of v's compact JSON, counted up to max: past max
// it returns a number larger than max, without looking further. A string
// counts its bytes and its quotes (escapes are not counted); an Object a
// template rendered or the JSON parser read knows its size (see
// Object.size) and is not walked, nor is a large array they read (see
// withSize), so a document that holds the same large
// part many times costs no more to count than to build.
func jsonSize(v any, max int) int {
	switch x := v.(type) {
	case nil:
		return 4
	case bool:
		if x {
			return 4
		}
		return 5
	case int:
		var buf [24]byte
		return len(strconv.AppendInt(buf[:0], int64(x), 10))
	case float64:
		var buf [32]byte
		return len(appendFloat(buf[:0], x))
	case exactNumber:
		return len(x.d.digits) + 8 // a sign, a point, an exponent
	case string:
		return len(x) + 2
	case *XMLDocument:
		return len(x.raw) + 2
	case []any:
		if n, ok := arraySize(x); ok {
			return n
		}
		n := 1 + len(x)
		if len(x) == 0 {
			n = 2
		}
		for _, e := range x {
			if n > max {
				return n
			}
			n += jsonSize(e, max-n)
		}
		return n
	case *Object:
		if x.size > 0 {
			return x.size
		}
		n := 1 + len(x.keys)
		if len(x.keys) == 0 {
			n = 2
		}
		for i, k := range x.keys {
			if n > max {
				return n
			}
			n += len(k) + 3 + jsonSize(x.vals[i], max-n-len(k)-3)
		}
		return n
	case map[string]any:
		n := 1 + len(x)
		if len(x) == 0 {
			n = 2
		}
		for k, e := range x {
			if n > max {
				return n
			}
			n += len(k) + 3 + jsonSize(e, max-n-len(k)-3)
		}
		return n
	}
	return 4
}

// sizedArrayMin is the length from which an array the JSON parser or the
// XML flattener builds keeps its size (withSize): a shorter one is walked,
// each of its elements counted in one step when it knows its size.
const sizedArrayMin = 16

// arrayEnd is the size of an array's compact JSON, kept in the slot past
// the array's last element, within its capacity: n is the array's length,
// so that a slice of it that ends where it ends (a[1:]) is not taken for it.
type arrayEnd struct{ n, size int }

// withSize returns vals with size, the length of its compact JSON as
// jsonSize counts it, kept past its end for arraySize, when it holds
// sizedArrayMin elements or more (growing it by one when it is full). It
// is called once, where the array is built and before it is shared;
// document values are never appended to, so the slot stays as written.
func withSize(vals []any, size int) []any {
	if len(vals) < sizedArrayMin {
		return vals
	}
	if len(vals) == cap(vals) {
		vals = slices.Grow(vals, 1)
	}
	vals[:len(vals)+1][len(vals)] = &arrayEnd{n: len(vals), size: size}
	return vals
}

// arraySize is the size withSize kept for x, and false when none was.
func arraySize(x []any) (int, bool) {
	if len(x) == cap(x) {
		return 0, false
	}
	e, ok := x[:len(x)+1][len(x)].(*arrayEnd)
	if !ok || e.n != len(x) {
		return 0, false
	}
	return e.size, true
}

// AppendJSONLimit is AppendJSON stopped as soon as what it appends to dst
// passes limit bytes: it returns false then, and dst holds a part of the
// document. A string is not written when it would pass the limit, its
// escapes counted, so no more than the limit and a number's digits is
// ever written.
func AppendJSONLimit(dst []byte, v any, limit int) ([]byte, bool) {
	end := len(dst) + limit
	if limit > math.MaxInt-len(dst) {
		end = math.MaxInt
	}
	return appendJSONUpTo(dst, v, end)
}

// appendJSONUpTo is AppendJSON that stops once dst would be longer than
// end: false then, dst never longer than end but by a number's digits.
func appendJSONUpTo(dst []byte, v any, end int) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		if !stringFits(x, end-len(dst)-2) { // the quotes
			return dst, false
		}
		dst = appendString(dst, x)
	case *XMLDocument:
		return appendJSONUpTo(dst, string(x.raw), end)
	case []any:
		for i, e := range x {
			if len(dst) >= end {
				return dst, false
			}
			dst = append(dst, separator(i, '['))
			var ok bool
			if dst, ok = appendJSONUpTo(dst, e, end); !ok {
				return dst, false
			}
		}
		return closeUpTo(dst, len(x) == 0, '[', ']', end)
	case *Object:
		for i, k := range x.keys {
			// the key, its quotes, the colon and the { or , before it
			if !stringFits(k, end-len(dst)-4) {
				return dst, false
			}
			dst = append(appendString(append(dst, separator(i, '{')), k), ':')
			var ok bool
			if dst, ok = appendJSONUpTo(dst, x.vals[i], end); !ok {
				return dst, false
			}
		}
		return closeUpTo(dst, len(x.keys) == 0, '{', '}', end)
	case map[string]any:
		return appendJSONUpTo(dst, objectFromMap(x), end)
	default:
		dst = AppendJSON(dst, v)
	}
	return dst, len(dst) <= end
}

// closeUpTo ends an array or an object (opened by open unless empty, when
// both brackets are written here) with close, when dst stays within end.
func closeUpTo(dst []byte, empty bool, open, close byte, end int) ([]byte, bool) {
	if empty {
		if len(dst)+2 > end {
			return dst, false
		}
		dst = append(dst, open)
	}
	if len(dst) >= end {
		return dst, false
	}
	return append(dst, close), true
}

// separator is what goes before the element i of an array or an object
// opened by open: open before the first, a comma before the others.
func separator(i int, open byte) byte {
	if i == 0 {
		return open
	}
	return ','
}

// stringFits reports whether s, as appendString writes it (its quotes
// aside), takes room bytes at most: its bytes, then, when its escapes
// could take it past room (each takes 6 bytes at most), the bytes it is
// written in, counted without writing them.
func stringFits(s string, room int) bool {
	return len(s) <= room && (len(s) <= room/6 || escapedLen(s) <= room)
}
