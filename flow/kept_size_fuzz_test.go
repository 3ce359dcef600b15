package flow

import (
	"errors"
	"strings"
	"testing"
)

// walkedSize is jsonSize(v, unbounded) with every kept size ignored: each
// array and object is walked, its scalars counted by jsonSize's own rules
// (a string its bytes and quotes, a number as it is answered).
func walkedSize(v any) int {
	switch x := v.(type) {
	case []any:
		n := 1 + len(x)
		if len(x) == 0 {
			n = 2
		}
		for _, e := range x {
			n += walkedSize(e)
		}
		return n
	case *Object:
		n := 1 + len(x.keys)
		if len(x.keys) == 0 {
			n = 2
		}
		for i, k := range x.keys {
			n += len(k) + 3 + walkedSize(x.vals[i])
		}
		return n
	case map[string]any:
		n := 1 + len(x)
		if len(x) == 0 {
			n = 2
		}
		for k, e := range x {
			n += len(k) + 3 + walkedSize(e)
		}
		return n
	}
	return jsonSize(v, unbounded)
}

// containers calls f with every array and object of v, v first when it is
// one, parents before their children.
func containers(v any, path string, f func(path string, v any)) {
	switch x := v.(type) {
	case []any:
		f(path, x)
		for i, e := range x {
			containers(e, path+"["+itoa(i)+"]", f)
		}
	case *Object:
		f(path, x)
		for i, k := range x.keys {
			containers(x.vals[i], path+"."+k, f)
		}
	}
}

func itoa(i int) string { return string(AppendJSON(nil, i)) }

// FuzzKeptSizes holds the sizes the JSON parser and the XML flattener keep
// (an array of sizedArrayMin elements or more through withSize, an object
// in Object.size) to the size a walk of the value gives: for every array
// and object of a document either accepts, the kept size is the walked
// one, and a template hole that holds it renders under a limit of its
// walked size and is refused one byte under it, or under any limit below.
func FuzzKeptSizes(f *testing.F) {
	arr := func(item string, n int) string { return "[" + repeated(item, ",", n) + "]" }
	for _, seed := range []string{
		arr("1", 15), arr("1", 16), arr("1", 17), arr("1", 32), arr("1", 64),
		arr("1e20", 16), arr("-0", 16), arr("1.50", 17), arr("0.0", 32), arr("-0.0", 16),
		arr("1E+2", 16), arr("12345678901234567890123", 16), arr("1e-400", 16), arr("0.1000000000000000000001", 16),
		arr(`"\u4e2d"`, 16), arr(`"\n\t\"\\\/"`, 16), arr(`"\u0001"`, 17), arr(`"\u2028"`, 16), arr("\"\u2028\"", 16),
		arr(`"<>&é"`, 16), arr(`"\ud83d\ude00"`, 16),
		arr(arr("1", 16), 16), arr(arr(`"a"`, 3), 20), arr(`{"k": [1, 2], "\u0041": "\n"}`, 16),
		` [ ` + repeated(" 1 ", " ,\n", 16) + ` ] `,
		`{"a": ` + arr("1e20", 16) + `, "b\n": "\"x\"", "c": {"d": -0, "e": 1.50}}`,
		`{}`, `[]`, `[{}, [], {"": ""}]`,
	} {
		f.Add([]byte(seed), false, uint16(0))
	}
	for _, seed := range []string{
		"<a>" + strings.Repeat("<b>1</b>", 15) + "</a>",
		"<a>" + strings.Repeat("<b>1</b>", 16) + "</a>",
		"<a>" + strings.Repeat("<b>x</b>", 17) + "</a>",
		"<a>" + strings.Repeat(`<b i="7"><c>&amp;</c><c>"</c></b>`, 32) + "</a>",
		"<a>" + strings.Repeat("<b>\n\t&lt;\u2028</b>", 64) + "</a>",
		"<a>" + strings.Repeat("<b><c>1</c><c>2</c></b><d/>", 16) + " text </a>",
		`<a x="1">text <b>in</b> b<c/></a>`,
	} {
		f.Add([]byte(seed), true, uint16(0))
	}
	hole, err := CompileNTD(`{{ $ }}`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, asXML bool, limit uint16) {
		var doc any
		if asXML {
			doc, err = FlattenXML(data)
		} else {
			doc, err = ParseJSON(data, 0)
		}
		if err != nil {
			return
		}
		checked := 0
		containers(doc, "$", func(path string, v any) {
			want := walkedSize(v)
			switch x := v.(type) {
			case []any:
				n, ok := arraySize(x)
				if !ok && len(x) >= sizedArrayMin {
					t.Fatalf("%s: an array of %d elements keeps no size", path, len(x))
				}
				if ok && n != want {
					t.Fatalf("%s: an array of %d elements keeps the size %d, a walk gives %d (%s)", path, len(x), n, want, AppendJSON(nil, x))
				}
			case *Object:
				if len(x.keys) > 0 && x.size != want {
					t.Fatalf("%s: an object keeps the size %d, a walk gives %d (%s)", path, x.size, want, AppendJSON(nil, x))
				}
			}
			if got := jsonSize(v, unbounded); got != want {
				t.Fatalf("%s: jsonSize = %d, a walk gives %d", path, got, want)
			}
			if checked++; checked > 64 {
				return // the render of a few is enough for a large input
			}
			env := &Env{Doc: v}
			if _, err := hole.RenderLimit(env, want); err != nil {
				t.Fatalf("%s: {{ $ }} under a limit of its walked size %d: %v", path, want, err)
			}
			var le *LimitError
			for _, l := range []int{want - 1, int(limit) % want} {
				if _, err := hole.RenderLimit(env, l); !errors.As(err, &le) || le.Limit != l {
					t.Fatalf("%s: {{ $ }} of walked size %d under a limit of %d: %v, want a *LimitError", path, want, l, err)
				}
			}
		})
	})
}
