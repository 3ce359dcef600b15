package flow

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// obj builds an *Object from alternating keys and values.
func obj(kv ...any) *Object {
	keys := make([]string, 0, len(kv)/2)
	vals := make([]any, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		keys = append(keys, kv[i].(string))
		vals = append(vals, kv[i+1])
	}
	return NewObject(keys, vals)
}

// docOpts lets cmp compare document values: two objects are equal when
// they have the same keys in the same order with equal values (ints and
// floats are told apart).
var docOpts cmp.Option

func init() {
	docOpts = cmp.Options{cmp.Comparer(func(a, b exactNumber) bool { return a == b }), cmp.Comparer(func(a, b *Object) bool {
		if a == nil || b == nil {
			return a == b
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			ka, va := a.Key(i)
			kb, vb := b.Key(i)
			if ka != kb || !cmp.Equal(va, vb, docOpts) {
				return false
			}
		}
		return true
	})}
}

func TestEqual(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"null and null", nil, nil, true},
		{"null and false", nil, false, false},
		{"null and zero", nil, 0, false},
		{"null and empty string", nil, "", false},
		{"true and true", true, true, true},
		{"true and false", true, false, false},
		{"int and equal float", 1, 1.0, true},
		{"float and equal int", 1.0, 1, true},
		{"int and int", 42, 42, true},
		{"int and other int", 42, 43, false},
		{"float and float", 0.5, 0.5, true},
		{"int and other float", 1, 1.5, false},
		{"zero and minus zero", 0, math.Copysign(0, -1), true},
		{"max int64 and max int64", math.MaxInt64, math.MaxInt64, true},
		{"max int64 and its neighbour", math.MaxInt64, math.MaxInt64 - 1, false},
		// an int beyond 2^53 is compared with a float exactly, not by
		// rounding it to float64 (which made 9007199254740993 equal
		// 9007199254740992.0)
		{"int beyond 2^53 and a different float", 1<<53 + 1, float64(1 << 53), false},
		{"number and string", 1, "1", false},
		{"string and number", "1", 1, false},
		{"bool and number", true, 1, false},
		{"string and string", "a", "a", true},
		{"string and other string", "a", "A", false},
		{"array and array", []any{1, "x", nil}, []any{1.0, "x", nil}, true},
		{"arrays of different lengths", []any{1}, []any{1, 1}, false},
		{"arrays in a different order", []any{1, 2}, []any{2, 1}, false},
		{"empty arrays", []any{}, []any{}, true},
		{"array and object", []any{}, obj(), false},
		{"objects with a different key order", obj("a", 1, "b", "x"), obj("b", "x", "a", 1.0), true},
		{"objects with different values", obj("a", 1), obj("a", 2), false},
		{"objects with different keys", obj("a", 1), obj("b", 1), false},
		{"object and a larger object", obj("a", 1), obj("a", 1, "b", 2), false},
		{"larger object and an object", obj("a", 1, "b", 2), obj("a", 1), false},
		{"empty objects", obj(), obj(), true},
		{"null member and missing member", obj("a", nil), obj("b", nil), false},
		{"nested", obj("a", []any{obj("x", 1, "y", []any{true})}), obj("a", []any{obj("y", []any{true}, "x", 1.0)}), true},
		{"nested difference", obj("a", []any{obj("x", 1)}), obj("a", []any{obj("x", 2)}), false},
		{"large objects with a different key order", bigObject(false), bigObject(true), true},
		{"object and string", obj(), "{}", false},
		// a map[string]any (a ctx value) is an object to every function,
		// Equal included: two equal maps are equal
		{"map and an equal map", map[string]any{"a": 1}, map[string]any{"a": 1}, true},
		// and an *Object equals a map[string]any with the same members
		{"object and an equal map", obj("a", 1), map[string]any{"a": 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Equal(tt.a, tt.b); got != tt.want {
				t.Errorf("Equal(%s, %s) = %v, want %v", AppendJSON(nil, tt.a), AppendJSON(nil, tt.b), got, tt.want)
			}
		})
	}
}

// bigObject has enough keys for the object to keep an index.
func bigObject(reversed bool) *Object {
	var kv []any
	for i := range 20 {
		n := i
		if reversed {
			n = 19 - i
		}
		kv = append(kv, string(rune('a'+n)), n)
	}
	return obj(kv...)
}

func TestValueObject(t *testing.T) {
	t.Parallel()
	for _, o := range []*Object{bigObject(false), obj("a", 0, "b", 1, "c", 2)} {
		for i := range o.Len() {
			k, v := o.Key(i)
			got, ok := o.Get(k)
			if !ok || got != v {
				t.Errorf("Get(%q) = %v, %v, want %v, true", k, got, ok, v)
			}
		}
		if v, ok := o.Get("zz"); ok || v != nil {
			t.Errorf("Get of a missing key = %v, %v, want nil, false", v, ok)
		}
	}
	var nilObject *Object
	if v, ok := nilObject.Get("a"); ok || v != nil {
		t.Errorf("Get on a nil *Object = %v, %v, want nil, false", v, ok)
	}
	o := obj("z", 1, "a", 2)
	if k, v := o.Key(0); k != "z" || v != 1 {
		t.Errorf("Key(0) = %q, %v, want \"z\", 1", k, v)
	}
	if o.Len() != 2 {
		t.Errorf("Len() = %d, want 2", o.Len())
	}
}

func TestAppendJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"null", nil, `null`},
		{"true", true, `true`},
		{"false", false, `false`},
		{"int", 42, `42`},
		{"negative int", -7, `-7`},
		{"max int64", math.MaxInt64, `9223372036854775807`},
		{"min int64", math.MinInt64, `-9223372036854775808`},
		{"float 1e-7", 1e-7, `1e-7`},
		{"float 1e21", 1e21, `1e+21`},
		{"float 0.1", 0.1, `0.1`},
		{"float 3.0", 3.0, `3`},
		{"float 1e20", 1e20, `100000000000000000000`},
		{"float 1e-6", 1e-6, `0.000001`},
		{"float -1e-7", -1e-7, `-1e-7`},
		{"float 1.5e-10", 1.5e-10, `1.5e-10`},
		{"float 1e100", 1e100, `1e+100`},
		{"float minus zero", math.Copysign(0, -1), `0`}, // as every zero (TestAppendJSONNegativeZeroIsZero)
		{"NaN", math.NaN(), `null`},
		{"infinity", math.Inf(1), `null`},
		{"string", "abc", `"abc"`},
		{"html characters as they are", "<a>&b", `"<a>&b"`},
		{"line separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"invalid utf-8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"quotes and backslashes", `say "hi" \o/`, `"say \"hi\" \\o/"`},
		{"short escapes", "\n\r\t", `"\n\r\t"`},
		{"control characters", "\x00\x1f\x7f", `"\u0000\u001f` + "\x7f" + `"`},
		{"unicode kept", "é中😀", `"é中😀"`},
		{"empty array", []any{}, `[]`},
		{"nil array", []any(nil), `[]`},
		{"array", []any{1, "a", nil, []any{true}}, `[1,"a",null,[true]]`},
		{"empty object", obj(), `{}`},
		{"object keeps key order", obj("z", 1, "a", obj("y", 2.5, "b", []any{})), `{"z":1,"a":{"y":2.5,"b":[]}}`},
		{"object keys escaped", obj("<k>\n", "\n"), `{"<k>\n":"\n"}`},
		{"map sorted by key", map[string]any{"b": 1, "a": map[string]any{"d": nil, "c": true}}, `{"a":{"c":true,"d":null},"b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, string(AppendJSON(nil, tt.v))); diff != "" {
				t.Errorf("AppendJSON (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendJSONAppends(t *testing.T) {
	t.Parallel()
	got := string(AppendJSON([]byte("prefix:"), obj("a", 1e-7)))
	if diff := cmp.Diff(`prefix:{"a":1e-7}`, got); diff != "" {
		t.Errorf("AppendJSON with a prefix (-want +got):\n%s", diff)
	}
}

// TestAppendJSONFloatsLikeEncodingJSON compares the number form with the
// standard library's.
func TestAppendJSONFloatsLikeEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{
		0, 0.1, 0.5, 1.5, 3, 100, 123.456, -2.25,
		1e-7, 1e-6, 1.234e-6, 9.99e-7, 1e-9, 1e-10, 1e-100, 5e-324,
		1e20, 1e21, 1.5e21, 1e22, 1e100, math.MaxFloat64, -1e21, -1e-7,
		1 << 53, 1<<53 + 2, 12345678901234567890, 0.30000000000000004,
	} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSON(nil, f); string(got) != string(want) {
			t.Errorf("AppendJSON(%v) = %s, encoding/json writes %s", f, got, want)
		}
	}
}

// A negative zero is written 0, as every zero is, whatever the document
// wrote (encoding/json writes -0): written -0, it read back as the int 0,
// so a flow answered -0 for a body's -0.0 at the door and 0 for the same
// document read from a queue.
func TestAppendJSONNegativeZeroIsZero(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"-0.0", "-0e0", "-0", "0.0", "-0.000e-5"} {
		doc, err := ParseJSON([]byte(`{"x":`+in+`}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		out := AppendJSON(nil, doc)
		again, err := ParseJSON(out, 0)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != `{"x":0}` || string(AppendJSON(nil, again)) != string(out) || Text(doc.(*Object).vals[0]) != "0" {
			t.Errorf("%s: written %s, again %s, as text %q; want {\"x\":0} both times and 0", in, out, AppendJSON(nil, again), Text(doc.(*Object).vals[0]))
		}
	}
}

// A float64 between 2^53 and 2^63 whose whole-number form does not hold
// its value is written with an exponent, so that it reads back as itself
// (the whole-number form would read back as an int of other digits); one
// whose whole-number form is exact is written as encoding/json writes it.
func TestAppendJSONLargeFloatsReadBackAsThemselves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"1200000000010E6", "1.20000000001e+18"},
		{"-1200000000010E6", "-1.20000000001e+18"},
		{"9007199254740994.0", "9007199254740994"},
		{"4.611686018427388e18", "4.611686018427388e+18"}, // 2^62: its shortest digits, 4611686018427388000, are not it
	} {
		// a float64 as arithmetic makes it (read from a document, such a
		// literal is the int it spells)
		f, err := strconv.ParseFloat(tc.in, 64)
		if err != nil {
			t.Fatal(err)
		}
		v := any(f)
		out := AppendJSON(nil, v)
		again, err := ParseJSON(out, 0)
		if string(out) != tc.want || err != nil || !Equal(v, again) {
			t.Errorf("%s: written %s (want %s), read back %v equal %v", tc.in, out, tc.want, again, Equal(v, again))
		}
	}
}

// TestAppendJSONStringsLikeEncodingJSON holds appendString to its comment:
// strings are escaped as encoding/json escapes them with
// SetEscapeHTML(false).
func TestAppendJSONStringsLikeEncodingJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    string
	}{
		{"printable ASCII", " !#$%'()*+,-./0123456789:;=?@ABCXYZ[]^_`abcxyz{|}~"},
		{"html", "<script>&amp;</script>"},
		{"quotes and backslash", `"\`},
		{"newline, return, tab", "\n\r\t"},
		{"other control characters", "\x00\x01\x07\x0b\x0e\x1b\x1f"},
		{"DEL", "\x7f"},
		{"line separators", "\u2028\u2029"},
		{"invalid utf-8", "\xff\xfe\xc3(\xed\xa0\x80"},
		{"unicode", "é中😀\ufeff\ufffd"},
		// backspace and form feed are written \b and \f, as encoding/json
		// writes them (they were once \u0008 and \u000c)
		{"backspace and form feed", "\b\f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tt.s); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.TrimSuffix(want.String(), "\n"), string(AppendJSON(nil, tt.s))); diff != "" {
				t.Errorf("AppendJSON(%q) (-encoding/json +got):\n%s", tt.s, diff)
			}
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"null", nil, ""},
		{"string", "a \"b\" <c>", "a \"b\" <c>"},
		{"empty string", "", ""},
		{"true", true, "true"},
		{"false", false, "false"},
		{"int", -42, "-42"},
		{"big int", math.MaxInt64, "9223372036854775807"},
		{"float", 2.5, "2.5"},
		{"integral float", 3.0, "3"},
		{"small float", 1e-7, "1e-7"},
		{"large float", 1e21, "1e+21"},
		{"array", []any{1, "a", nil}, `[1,"a",null]`},
		{"empty array", []any{}, `[]`},
		{"object keeps key order", obj("b", 1, "a", []any{true}), `{"b":1,"a":[true]}`},
		{"object strings are JSON-escaped", obj("k", "<\n>"), `{"k":"<\n>"}`},
		{"empty object", obj(), `{}`},
		{"map", map[string]any{"b": 2, "a": 1}, `{"a":1,"b":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Text(tt.v)); diff != "" {
				t.Errorf("Text (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValueTypeName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    any
		want string
	}{
		{nil, "null"},
		{true, "boolean"},
		{false, "boolean"},
		{0, "number"},
		{1.5, "number"},
		{"", "string"},
		{"x", "string"},
		{[]any{}, "array"},
		{[]any(nil), "array"},
		{obj(), "object"},
		{map[string]any{}, "object"},
		{int64(1), "value"},
		{struct{}{}, "value"},
	}
	for _, tt := range tests {
		if got := TypeName(tt.v); got != tt.want {
			t.Errorf("TypeName(%#v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}
