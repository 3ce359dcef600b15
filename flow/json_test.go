package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestParseJSONRoundTrip parses each document and writes it back: the
// compact output keeps the key order of the input. want is the expected
// output when it differs from the input.
func TestParseJSONRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty object", in: `{}`},
		{name: "empty array", in: `[]`},
		{name: "null", in: `null`},
		{name: "true", in: `true`},
		{name: "false", in: `false`},
		{name: "zero", in: `0`},
		{name: "negative int", in: `-17`},
		{name: "empty string", in: `""`},
		{name: "key order kept", in: `{"b":1,"a":2,"c":[1,2,{"z":null,"y":true}]}`},
		{name: "empty key", in: `{"":""}`},
		{name: "whitespace dropped", in: " \t\r\n{ \"a\" : [ 1 , 2 ] ,\n\"b\":{ } }\n", want: `{"a":[1,2],"b":{}}`},
		{name: "nested arrays", in: `[[[]],[[1],[2,[3,[4]]]],[[],[]]]`},
		{name: "same key at each level", in: `{"a":{"a":{"a":1}}}`},
		{name: "unicode escapes", in: `"\u00e9\u4e2d\u0041"`, want: `"é中A"`},
		{name: "surrogate pair", in: `"\ud83d\ude00 \uD83D\uDE00"`, want: `"😀 😀"`},
		{name: "raw utf-8 kept", in: `"héllo 中文 😀"`},
		{name: "short escapes", in: `"\"\\\/\n\r\t"`, want: `"\"\\/\n\r\t"`},
		{name: "control characters", in: `"\u0000\u001f"`},
		{name: "html characters as they are", in: `"<a href=x>&\u003c"`, want: `"<a href=x>&<"`},
		{name: "line separators escaped", in: "\"\u2028\u2029\"", want: `"\u2028\u2029"`},
		{name: "max int64", in: `9223372036854775807`},
		{name: "min int64", in: `-9223372036854775808`},
		{name: "int64 plus one kept as written", in: `9223372036854775808`},
		{name: "unsigned 64-bit id kept as written", in: `12345678901234567890`},
		{name: "integer beyond 64 bits kept as written", in: `[123456789012345678901234567890,-98765432109876543210]`},
		{name: "long decimal kept as written", in: `{"amount":0.1000000000000000000001,"pi":-3.14159265358979323846264}`},
		{name: "number under float64's range kept as written", in: `1e-400`},
		{name: "long number in exponent form written whole", in: `1.2345678901234567890E+30`, want: `1234567890123456789000000000000`},
		{name: "long number written in one form for its value", in: `[12345678901234567890.000,-0.00012345678901234567890e4,123456789.01234567890123e-2]`, want: `[12345678901234567890,-1.234567890123456789,1234567.8901234567890123]`},
		{name: "long tiny number with an exponent", in: `0.0000001234567890123456789`, want: `1.234567890123456789e-7`},
		{name: "long decimal that a float64 holds", in: `1.50000000000000000000`, want: `1.5`},
		{name: "seventeen digits that a float64 holds", in: `0.30000000000000004`},
		{name: "long zero", in: `-0.00000000000000000000e-400`, want: `0`},
		{name: "whole float beyond 2^63 as a float64 writes it", in: `1e19`, want: `10000000000000000000`},
		{name: "minus zero integer", in: `-0`, want: `0`},
		{name: "minus zero float", in: `-0.0`, want: `0`}, // as it reads back
		{name: "1e21", in: `1e21`, want: `1e+21`},
		{name: "1E+21", in: `1E+21`, want: `1e+21`},
		{name: "1e20 without exponent", in: `1e20`, want: `100000000000000000000`},
		{name: "small float", in: `1.5e-7`, want: `1.5e-7`},
		{name: "1e-6 without exponent", in: `0.000001`},
		{name: "float with zero fraction", in: `1.0`, want: `1`},
		{name: "trailing zeros dropped", in: `[2.50,1e2,-0.5]`, want: `[2.5,100,-0.5]`},
		{name: "large object", in: `{"k12":12,"k11":11,"k10":10,"k9":9,"k8":8,"k7":7,"k6":6,"k5":5,"k4":4,"k3":3,"k2":2,"k1":1,"k0":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := ParseJSON([]byte(tt.in), 0)
			if err != nil {
				t.Fatalf("ParseJSON(%q): %v", tt.in, err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if diff := cmp.Diff(want, string(AppendJSON(nil, v))); diff != "" {
				t.Errorf("AppendJSON(ParseJSON(%q)) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestParseJSONValues checks the Go values ParseJSON builds: ints for
// integers that fit, float64 for everything else.
func TestParseJSONValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want any
	}{
		{`42`, 42},
		{`-1`, -1},
		{`-0`, 0},
		{`1.0`, 1.0},
		{`1e2`, 100.0},
		{`9223372036854775807`, 9223372036854775807},
		{`9223372036854775808`, exact(`9223372036854775808`, 9223372036854775808.0)},
		{`12345678901234567890`, exact(`12345678901234567890`, 12345678901234567890.0)},
		{`1.50000000000000000000`, 1.5},
		{`1e-400`, exact(`1e-400`, 0)},
		{`"\ud83d\ude00"`, "😀"},
		{`[1,"a",null,true]`, []any{1, "a", nil, true}},
		{`{"b":1,"a":[2.5]}`, obj("b", 1, "a", []any{2.5})},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseJSON([]byte(tt.in), 0)
			if err != nil {
				t.Fatalf("ParseJSON(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, docOpts); diff != "" {
				t.Errorf("ParseJSON(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseJSONErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		maxDepth int
		want     string
	}{
		{name: "empty input", in: ``, want: `invalid JSON at byte 0: unexpected end of input`},
		{name: "only whitespace", in: "  \n", want: `invalid JSON at byte 3: unexpected end of input`},
		{name: "duplicate key", in: `{"a":1,"a":2}`, want: `invalid JSON at byte 7: duplicate key "a"`},
		{name: "duplicate key through an escape", in: `{"a":1,"\u0061":2}`, want: `invalid JSON at byte 7: duplicate key "a"`},
		{name: "duplicate key nested", in: `{"x":{"b":1,"c":2,"b":3}}`, want: `invalid JSON at byte 18: duplicate key "b"`},
		{name: "invalid utf-8 in a string", in: "\"a\xffb\"", want: `invalid JSON at byte 1: invalid UTF-8 in a string`},
		{name: "truncated utf-8 sequence", in: "\"a\xc3\"", want: `invalid JSON at byte 1: invalid UTF-8 in a string`},
		{name: "utf-8 encoded surrogate", in: "\"\xed\xa0\x80\"", want: `invalid JSON at byte 1: invalid UTF-8 in a string`},
		{name: "invalid utf-8 in a key", in: "{\"k\xff\":1}", want: `invalid JSON at byte 2: invalid UTF-8 in a string`},
		{name: "invalid utf-8 after an escape", in: "\"\\n\xff\"", want: `invalid JSON at byte 1: invalid UTF-8 in a string`},
		{name: "invalid utf-8 outside a string", in: "\xff", want: `invalid JSON at byte 0: unexpected character '\xff'`},
		{name: "depth 65 arrays", in: strings.Repeat("[", 65) + strings.Repeat("]", 65), maxDepth: 64, want: `invalid JSON at byte 64: nesting deeper than 64 levels`},
		{name: "depth 65 objects", in: strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), maxDepth: 64, want: `invalid JSON at byte 320: nesting deeper than 64 levels`},
		{name: "depth 65 with the default limit", in: strings.Repeat("[", 65) + strings.Repeat("]", 65), want: `invalid JSON at byte 64: nesting deeper than 64 levels`},
		{name: "depth 2 with limit 1", in: `[[1]]`, maxDepth: 1, want: `invalid JSON at byte 1: nesting deeper than 1 levels`},
		{name: "trailing document", in: `{} {}`, want: `invalid JSON at byte 3: unexpected data after the document`},
		{name: "trailing garbage", in: `[1]x`, want: `invalid JSON at byte 3: unexpected data after the document`},
		{name: "byte order mark", in: "\xef\xbb\xbf{}", want: `invalid JSON at byte 0: unexpected character '\xef'`},
		{name: "raw tab in a string", in: "\"a\tb\"", want: `invalid JSON at byte 2: control character '\t' in a string`},
		{name: "raw newline in a string", in: "\"a\nb\"", want: `invalid JSON at byte 2: control character '\n' in a string`},
		{name: "raw control byte in a string", in: "\"a\x01\"", want: `invalid JSON at byte 2: control character '\x01' in a string`},
		{name: "bad escape", in: `"a\x"`, want: `invalid JSON at byte 2: invalid escape "\\x"`},
		{name: "single quote escape", in: `"\'"`, want: `invalid JSON at byte 1: invalid escape "\\'"`},
		{name: "short unicode escape", in: `"\u12"`, want: `invalid JSON at byte 3: invalid \u escape`},
		{name: "non-hex unicode escape", in: `"\u12G4"`, want: `invalid JSON at byte 3: invalid \u escape`},
		{name: "lone high surrogate", in: `"\ud800"`, want: `invalid JSON at byte 7: invalid surrogate pair in a \u escape`},
		{name: "lone low surrogate", in: `"\udc00"`, want: `invalid JSON at byte 7: invalid surrogate pair in a \u escape`},
		{name: "high surrogate then a letter", in: `"\ud800x"`, want: `invalid JSON at byte 7: invalid surrogate pair in a \u escape`},
		{name: "high surrogate then a non-surrogate escape", in: `"\ud800\u0041"`, want: `invalid JSON at byte 13: invalid surrogate pair in a \u escape`},
		{name: "leading zero", in: `01`, want: `invalid JSON at byte 1: unexpected data after the document`},
		{name: "negative leading zero", in: `-01`, want: `invalid JSON at byte 2: unexpected data after the document`},
		{name: "dot without fraction", in: `1.`, want: `invalid JSON at byte 2: invalid number`},
		{name: "dot without integer", in: `.5`, want: `invalid JSON at byte 0: unexpected character '.'`},
		{name: "plus sign", in: `+1`, want: `invalid JSON at byte 0: unexpected character '+'`},
		{name: "lone minus", in: `-`, want: `invalid JSON at byte 1: invalid number`},
		{name: "exponent without digits", in: `1e`, want: `invalid JSON at byte 2: invalid number`},
		{name: "signed exponent without digits", in: `1e+`, want: `invalid JSON at byte 3: invalid number`},
		{name: "NaN", in: `NaN`, want: `invalid JSON at byte 0: unexpected character 'N'`},
		{name: "Infinity", in: `Infinity`, want: `invalid JSON at byte 0: unexpected character 'I'`},
		{name: "minus Infinity", in: `-Infinity`, want: `invalid JSON at byte 1: invalid number`},
		{name: "number out of range", in: `1e400`, want: `invalid JSON at byte 0: number 1e400 is out of range`},
		{name: "hex number", in: `0x10`, want: `invalid JSON at byte 1: unexpected data after the document`},
		{name: "truncated literal", in: `tru`, want: `invalid JSON at byte 0: unexpected character 't'`},
		{name: "capitalised literal", in: `True`, want: `invalid JSON at byte 0: unexpected character 'T'`},
		{name: "literal with trailing letters", in: `nullx`, want: `invalid JSON at byte 4: unexpected data after the document`},
		{name: "single-quoted string", in: `'a'`, want: `invalid JSON at byte 0: unexpected character '\''`},
		{name: "unterminated string", in: `"abc`, want: `invalid JSON at byte 4: unexpected end of input in a string`},
		{name: "unterminated string after an escape", in: `"a\n`, want: `invalid JSON at byte 4: unexpected end of input in a string`},
		{name: "unterminated escape", in: `"abc\`, want: `invalid JSON at byte 5: unexpected end of input in a string`},
		{name: "unterminated object", in: `{"a":1`, want: `invalid JSON at byte 6: unexpected end of input in an object`},
		{name: "lone open brace", in: `{`, want: `invalid JSON at byte 1: unexpected end of input in an object`},
		{name: "object without value", in: `{"a":`, want: `invalid JSON at byte 5: unexpected end of input`},
		{name: "object key without colon", in: `{"a" 1}`, want: `invalid JSON at byte 5: expected ':' after an object key`},
		{name: "unterminated array", in: `[1,2`, want: `invalid JSON at byte 4: unexpected end of input in an array`},
		{name: "lone open bracket", in: `[`, want: `invalid JSON at byte 1: unexpected end of input`},
		{name: "trailing comma in an array", in: `[1,]`, want: `invalid JSON at byte 3: unexpected character ']'`},
		{name: "trailing comma in an object", in: `{"a":1,}`, want: `invalid JSON at byte 7: expected a string key, found '}'`},
		{name: "unquoted key", in: `{a:1}`, want: `invalid JSON at byte 1: expected a string key, found 'a'`},
		{name: "missing comma in an array", in: `[1 2]`, want: `invalid JSON at byte 3: expected ',' or ']' in an array, found '2'`},
		{name: "missing comma in an object", in: `{"a":1 "b":2}`, want: `invalid JSON at byte 7: expected ',' or '}' in an object, found '"'`},
		{name: "lone close bracket", in: `]`, want: `invalid JSON at byte 0: unexpected character ']'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := ParseJSON([]byte(tt.in), tt.maxDepth)
			if err == nil {
				t.Fatalf("ParseJSON(%q) = %s, want the error %q", tt.in, AppendJSON(nil, v), tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("ParseJSON(%q) error (-want +got):\n%s", tt.in, diff)
			}
			var je *JSONError
			if !errors.As(err, &je) {
				t.Errorf("ParseJSON(%q) error is %T, want *JSONError", tt.in, err)
			}
		})
	}
}

func TestParseJSONDepthLimit(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{1, 2, 63, 64} {
		arrays := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		if _, err := ParseJSON([]byte(arrays), 64); err != nil {
			t.Errorf("arrays nested %d deep with maxDepth 64: %v", depth, err)
		}
		objects := strings.Repeat(`{"a":`, depth) + "null" + strings.Repeat("}", depth)
		if _, err := ParseJSON([]byte(objects), 64); err != nil {
			t.Errorf("objects nested %d deep with maxDepth 64: %v", depth, err)
		}
	}
	// scalars do not count as a level
	if _, err := ParseJSON([]byte(`[1]`), 1); err != nil {
		t.Errorf("[1] with maxDepth 1: %v", err)
	}
	// a larger limit is honoured
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	if _, err := ParseJSON([]byte(deep), 100); err != nil {
		t.Errorf("100 levels with maxDepth 100: %v", err)
	}
}

// TestParseJSONManyKeys parses an object with many keys, as a request body
// within the default 1 MiB ceiling may hold, whole and in order. (A
// duplicate-key check that compared each key with every earlier one was
// quadratic: it once took about 10 s for 100,000 keys. How long it takes
// is no pass/fail matter on a shared machine: run it with -v to see.)
func TestParseJSONManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 90000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":0`, i)
	}
	b.WriteString("}")
	data := []byte(b.String())
	if len(data) > 1<<20 {
		t.Fatalf("the body is %d bytes, more than 1 MiB", len(data))
	}
	start := time.Now()
	v, err := ParseJSON(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("parsed a %d-byte object in %v", len(data), time.Since(start).Round(time.Millisecond))
	o, ok := v.(*Object)
	if !ok {
		t.Fatalf("parsed a %T, want an object", v)
	}
	if o.Len() != 90000 {
		t.Fatalf("parsed %d keys, want 90000", o.Len())
	}
	for i := range o.Len() {
		if k, _ := o.Key(i); k != "k"+strconv.Itoa(i) {
			t.Fatalf("key %d is %q, want k%d", i, k, i)
		}
	}
}

func TestJSONErrorOffset(t *testing.T) {
	t.Parallel()
	_, err := ParseJSON([]byte(`{"a":1,"a":2}`), 0)
	var je *JSONError
	if !errors.As(err, &je) {
		t.Fatalf("error %v is not a *JSONError", err)
	}
	if diff := cmp.Diff(&JSONError{Offset: 7, Msg: `duplicate key "a"`}, je); diff != "" {
		t.Errorf("JSONError (-want +got):\n%s", diff)
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`{"b":1,"a":[1,2.5,-0,1e21,"x"]}`,
		`"\ud83d\ude00\u00e9\u2028<>&"`,
		`[[[[null,true,false]]]]`,
		`12345678901234567890`,
		`0.1000000000000000000001`,
		`1e-400`,
		`-0.0`,
		`1e-7`,
		`{"a":1,"a":2}`,
		"\"\xff\"",
		`"\ud800"`,
		`{"k":{"k":[{"k":""}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseJSON(data, 0)
		if err != nil {
			var je *JSONError
			if !errors.As(err, &je) {
				t.Fatalf("error %v is %T, want *JSONError", err, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is more than one line", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("ParseJSON accepted %q, which encoding/json finds invalid", data)
		}
		out := AppendJSON(nil, v)
		if !json.Valid(out) {
			t.Fatalf("AppendJSON wrote invalid JSON %q for input %q", out, data)
		}
		again, err := ParseJSON(out, 0)
		if err != nil {
			t.Fatalf("output %q of input %q does not parse: %v", out, data, err)
		}
		if !Equal(v, again) {
			t.Fatalf("round trip changed the value: input %q, output %q, again %q", data, out, AppendJSON(nil, again))
		}
		// A number keeps its exact value, digit for digit.
		if text := strings.TrimSpace(string(data)); len(text) > 0 && (text[0] == '-' || text[0] >= '0' && text[0] <= '9') {
			if d, ok := decimalOf(v); !ok || compareDecimals(parseDecimal(text), d) != 0 {
				t.Fatalf("number %s came back as %s", text, out)
			}
		}
	})
}
