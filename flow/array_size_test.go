package flow

import (
	"errors"
	"strings"
	"testing"
)

// repeated is n copies of item joined by sep.
func repeated(item, sep string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+sep, n), sep)
}

// A large array the JSON parser or the XML flattener built, and an object
// the XML flattener built, count in one step (they keep their size) and
// count exactly: a template of many holes that hold them renders under a
// limit of its compact JSON's size and is refused one byte under it, and
// a document built from them repeated past the limit is refused.
func TestRenderLimitCountsKeptSizes(t *testing.T) {
	jsonDoc := func(t *testing.T, src string) any {
		v, err := ParseJSON([]byte(src), 0)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	xmlDoc := func(t *testing.T, src string) any {
		v, err := FlattenXML([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name string
		doc  func(*testing.T) any
		ntd  string
	}{
		{"json array of numbers", func(t *testing.T) any {
			return jsonDoc(t, "[ "+repeated("12", " ,\n ", 40)+" ]")
		}, `{"a": {{ $ }}, "b": [{{ $ }}, {{ $ }}]}`},
		{"json array of arrays", func(t *testing.T) any {
			return jsonDoc(t, "["+repeated(`["x", {"k": [`+repeated("1", ", ", 20)+`]}]`, ", ", 30)+"]")
		}, `[{{ $ }}, {{ $[0] }}, {{ $[0][1] }}, {{ $[0][1].k }}, "{{ $[0][1].k }}"]`},
		{"json array in an object", func(t *testing.T) any {
			return jsonDoc(t, `{"items": [`+repeated(`{"id": "a-1", "n": 0}`, ",", 100)+`], "total": 3}`)
		}, `{"one": {{ $.items }}, "two": {{ $.items }}, "all": {{ $ }}}`},
		{"a slice of a json array", func(t *testing.T) any {
			v := jsonDoc(t, "["+repeated(`"abcdefghij"`, ",", 20)+"]")
			return map[string]any{"tail": v.([]any)[3:], "head": v.([]any)[:17], "mid": v.([]any)[2:18]}
		}, `[{{ $.tail }}, {{ $.head }}, {{ $.mid }}]`},
		{"xml siblings", func(t *testing.T) any {
			return xmlDoc(t, "<list>"+strings.Repeat(`<item id="7"><name>item</name><tag>a</tag><tag>b</tag></item>`, 50)+"</list>")
		}, `{"a": {{ $ }}, "b": {{ $.item }}, "c": [{{ $.item }}, {{ $.item[0] }}], "d": {{ $.item[0].tag }}}`},
		{"xml object with text", func(t *testing.T) any {
			return xmlDoc(t, `<a x="1">text <b>in</b> b<c/></a>`)
		}, `[{{ $ }}, {{ $.b }}, {{ $["#text"] }}, {{ $["@x"] }}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Doc: c.doc(t)}
			ntd, err := CompileNTD(c.ntd)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ntd.Render(env)
			if err != nil {
				t.Fatal(err)
			}
			text := string(AppendJSON(nil, out))
			if strings.Contains(text, "null") {
				t.Fatalf("a hole holds nothing: %s", text)
			}
			n := len(text)
			if _, err := ntd.RenderLimit(env, n); err != nil {
				t.Errorf("under a limit of its own size %d: %v", n, err)
			}
			var le *LimitError
			if _, err := ntd.RenderLimit(env, n-1); !errors.As(err, &le) || le.Limit != n-1 {
				t.Errorf("under a limit of %d, one byte less than its size: %v, want a *LimitError", n-1, err)
			}
			// the same holes repeated until the document is ten times the
			// limit: refused, and found so without a walk
			many, err := CompileNTD("[" + repeated(c.ntd, ",", 10) + "]")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := many.RenderLimit(env, n); !errors.As(err, &le) || le.Limit != n {
				t.Errorf("ten times the document under a limit of %d: %v, want a *LimitError", n, err)
			}
		})
	}
}

// A large array keeps its size; a slice of it, a short array and an array
// not built by the parser or the flattener do not, and are walked.
func TestArraySizeKept(t *testing.T) {
	long := "[" + repeated("1", ",", sizedArrayMin) + "]"
	v, err := ParseJSON([]byte(long), 0)
	if err != nil {
		t.Fatal(err)
	}
	a := v.([]any)
	if n, ok := arraySize(a); !ok || n != len(long) {
		t.Errorf("arraySize(%s) = %d, %v; want %d, true", long, n, ok, len(long))
	}
	short, err := ParseJSON([]byte("["+repeated("1", ",", sizedArrayMin-1)+"]"), 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string][]any{
		"a[1:]":            a[1:],
		"a[:len(a)-1]":     a[:len(a)-1],
		"a short array":    short.([]any),
		"a built array":    make([]any, 2*sizedArrayMin),
		"a copy of a[0:1]": append([]any(nil), a[0:1]...),
	} {
		if n, ok := arraySize(x); ok {
			t.Errorf("%s: arraySize = %d, true; want none kept", name, n)
		}
		if got, want := jsonSize(x, unbounded), len(AppendJSON(nil, x)); got != want {
			t.Errorf("%s: jsonSize = %d, want %d", name, got, want)
		}
	}
}

// A number the JSON parser read counts as it is answered, not as it was
// written: 1e20 is 4 bytes written and 21 answered (100000000000000000000),
// so an array or an object of them that kept the size as written counted
// a fifth of what a hole that holds it writes, and a document past the
// limit was rendered. A number no float64 holds (exactNumber) counts as
// jsonSize counts it, never less than it is written.
func TestKeptSizeCountsNumbersAsAnswered(t *testing.T) {
	for _, c := range []struct {
		item  string
		exact bool // counted to the byte
	}{
		{"1e20", true}, {"-9.5E+20", true}, {"1e-7", true}, {"1.50", true},
		{"-0", true}, {"0.0", true}, {"-0.0", true}, {"2E0", true}, {"1e18", true},
		{"1e-400", false}, {"12345678901234567890123", false}, {"1.0000000000000000000001", false},
	} {
		for _, src := range []string{
			"[" + repeated(c.item, ",", 2*sizedArrayMin) + "]",
			`{"a": ` + c.item + `, "b": [` + c.item + `]}`,
		} {
			doc, err := ParseJSON([]byte(src), 0)
			if err != nil {
				t.Fatal(err)
			}
			got, want := jsonSize(doc, unbounded), len(AppendJSON(nil, doc))
			if got < want || c.exact && got != want {
				t.Errorf("%.30s: jsonSize = %d, the answer holds %d bytes", src, got, want)
			}
		}
	}
}
