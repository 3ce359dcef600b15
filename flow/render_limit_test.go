package flow

import (
	"errors"
	"strings"
	"testing"
)

// RenderLimit counts the document it renders as its compact JSON, each
// part once, a string's escapes aside (the quotes a string hole's object
// text holds): a limit of exactly that many bytes renders it, one byte
// less fails with a *LimitError, whatever the parts (static values, keys
// with holes, whole-value holes of a parsed object, of a rendered one, of
// an array, string holes of objects).
func TestRenderLimitCountsTheCompactJSON(t *testing.T) {
	doc, err := ParseJSON([]byte(`{ "id" : "A-1", "n": 12.5, "tags": ["x", "y"], "deep": {"k": [1, {"z": null}]}, "ok": true }`), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{
		`{"a": 1, "b": [true, null, "s"], "c": {}}`,
		`{{ $ }}`,
		`{"a": {{ $ }}, "b": {{ $ }}}`,
		`[{{ $.tags }}, {{ $.tags }}, {{ $.n }}, {{ $.id }}]`,
		`{"{{ $.id }}-key": {{ $.deep }}, "x": "id {{ $.id }} and {{ $.deep }}"}`,
		`{"s": "{{ $ }}{{ $.tags }}", "t": "{{ $.ok }}{{ $.missing }}"}`,
		`{"inner": {"again": {"a": {{ $.deep }}}}, "list": [[], {}, [{{ $.n }}]]}`,
	} {
		t.Run(src, func(t *testing.T) {
			ntd, err := CompileNTD(src)
			if err != nil {
				t.Fatal(err)
			}
			env := &Env{Doc: doc}
			out, err := ntd.Render(env)
			if err != nil {
				t.Fatal(err)
			}
			text := string(AppendJSON(nil, out))
			n := len(text) - strings.Count(text, `\"`)
			if _, err := ntd.RenderLimit(env, n); err != nil {
				t.Errorf("under a limit of its own size %d: %v", n, err)
			}
			var le *LimitError
			if _, err := ntd.RenderLimit(env, n-1); !errors.As(err, &le) || le.Limit != n-1 {
				t.Errorf("under a limit of %d, one byte less than its size: %v, want a *LimitError", n-1, err)
			}
			// a document made by the template counts as it was made when a
			// hole of the next step holds it
			wrap, _ := CompileNTD(`[{{ $ }}]`)
			if _, err := wrap.RenderLimit(&Env{Doc: out}, n+2); err != nil {
				t.Errorf("the document wrapped under a limit of %d: %v", n+2, err)
			}
			if _, err := wrap.RenderLimit(&Env{Doc: out}, n+1); !errors.As(err, &le) {
				t.Errorf("the document wrapped under a limit of %d: %v, want a *LimitError", n+1, err)
			}
		})
	}
}

// AppendJSONLimit writes a document that fits whole, and stops one that
// does not before it writes the string that would pass the limit.
func TestAppendJSONLimit(t *testing.T) {
	doc, _ := ParseJSON([]byte(`{"a": ["`+strings.Repeat("x", 1000)+`", 1], "b": "\u2028"}`), 0)
	want := AppendJSON(nil, doc)
	if got, ok := AppendJSONLimit([]byte("pre"), doc, len(want)); !ok || string(got) != "pre"+string(want) {
		t.Errorf("a limit of its size: %v %.40s", ok, got)
	}
	got, ok := AppendJSONLimit(nil, doc, len(want)-1)
	if ok {
		t.Errorf("a limit one byte short: written whole")
	}
	if got, _ := AppendJSONLimit(nil, doc, 500); len(got) > 500 {
		t.Errorf("a limit of 500 wrote %d bytes", len(got))
	}
	_ = got
}

// AppendJSONLimit writes no more than its limit whatever a string's
// escapes (a control character, invalid UTF-8 and U+2028 take 6 bytes
// each): a string whose bytes fit but whose escapes do not is not written.
// It was written whole, escapes and all, before the limit was looked at:
// a string of 10 MiB of control characters wrote 60 MiB under a limit of
// 10 MiB.
func TestAppendJSONLimitCountsEscapes(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("\x01", 1000),
		strings.Repeat("\xff", 1000),
		strings.Repeat("\u2028", 1000),
		strings.Repeat(`"\`, 1000),
		strings.Repeat("a\n", 1000),
		strings.Repeat("é", 1000),
	} {
		if n, want := escapedLen(s), len(AppendJSON(nil, s))-2; n != want {
			t.Errorf("escapedLen(%.12q) = %d, appendString writes %d", s, n, want)
		}
		for _, doc := range []any{s, []any{s}, NewObject([]string{"k"}, []any{s}), NewObject([]string{s}, []any{1}), []any{[]any{}, NewObject(nil, nil), s}} {
			want := AppendJSON(nil, doc)
			if got, ok := AppendJSONLimit(nil, doc, len(want)); !ok || string(got) != string(want) {
				t.Errorf("%.12q: a limit of its size: %v, %d bytes, want %d", s, ok, len(got), len(want))
			}
			for _, limit := range []int{len(want) - 1, len(s) + 8, 100} {
				if limit >= len(want) {
					continue // it fits
				}
				if got, ok := AppendJSONLimit([]byte("pre"), doc, limit); ok || len(got) > 3+limit {
					t.Errorf("%.12q under a limit of %d (its JSON %d bytes): %v, %d bytes written", s, limit, len(want), ok, len(got)-3)
				}
			}
		}
	}
}

// An object the JSON parser read counts its strings, keys and values, by
// their bytes as jsonSize counts any string, not as they were written
// nor as they are escaped again (see FuzzKeptSizes): a message whose text is
// written with escapes (Python's json.dumps writes "中" as "\u4e2d", 6
// bytes for 3) rendered twice under a limit of the answer's size is not
// refused. It was counted as written, twice its size and more, and a
// legitimate document was refused far below the limit.
func TestRenderLimitCountsParsedStringsAsAnswered(t *testing.T) {
	for _, body := range []string{
		`{"text": "` + strings.Repeat(`\u4e2d`, 100) + `"}`,
		`{"\u00e9t\u00e9": "caf\u00e9", "path": "a\/b\/c", "q": "\"x\""}`,
		`{"nested": {"k\u0041": ["\u0041\u0042", {"z": "\t\n"}]}, "ctl": "\u0001\u001f"}`,
		`{"raw": "é  中", "sep": "\u2028 raw  "}`,
	} {
		t.Run(body, func(t *testing.T) {
			doc, err := ParseJSON([]byte(body), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := jsonSize(doc, unbounded), walkedSize(doc); got != want {
				t.Errorf("jsonSize = %d, a walk of the document gives %d", got, want)
			}
			ntd, err := CompileNTD(`[{{ $ }}, {{ $ }}]`)
			if err != nil {
				t.Fatal(err)
			}
			n := len(AppendJSON(nil, []any{doc, doc}))
			if _, err := ntd.RenderLimit(&Env{Doc: doc}, n); err != nil {
				t.Errorf("under a limit of the answer's size %d: %v", n, err)
			}
		})
	}
}
