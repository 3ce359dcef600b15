package flow

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

const rv6Head = "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\neffects: [http_egress]\n---\n\n"

func compileErrs(t *testing.T, src string) ErrorList {
	t.Helper()
	_, err := Compile("f.md", []byte(src))
	if err == nil {
		return nil
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Compile: %v", err)
	}
	return list
}

// TestIntegerArithmeticExact: "integers are exact up to 64 bits"
// (decisions.md): + - * on two integers stay integers while they fit.
func TestIntegerArithmeticExact(t *testing.T) {
	doc, _ := ParseJSON([]byte(`{"id":9007199254740993}`), 0)
	for src, want := range map[string]string{
		`$.id + 1`:                     "9007199254740994",
		`$.id * 1`:                     "9007199254740993",
		`9223372036854775807 + 0`:      "9223372036854775807",
		`$.id + 1 == 9007199254740994`: "true",
	} {
		e, err := CompileExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.Eval(&Env{Doc: doc})
		if got := string(AppendJSON(nil, v)); err != nil || got != want {
			t.Errorf("%s = %s (err %v), want %s", src, got, err, want)
		}
	}
}

// TestArithmeticOverflowIsAnError: a result too large for a number is an
// evaluation error, not an infinity written as null (or "null").
func TestArithmeticOverflowIsAnError(t *testing.T) {
	e, _ := CompileExpr(`1e308 * 10`)
	if v, err := e.Eval(&Env{}); err == nil {
		t.Errorf("1e308 * 10 = %v, want an evaluation error (Infinity is not a JSON number)", v)
	}
	n, err := CompileNTD(`{"s": "{{ 1e308 * 10 }}", "v": {{ 1 / 1e-320 }}}`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := n.Render(&Env{}); err == nil {
		t.Errorf("rendered %s, want a step error", AppendJSON(nil, v))
	}
}

// TestWhenStartingAndEndingWithAString: when: takes the rest of the line
// as the expression, even one that begins and ends with a string literal
// (YAML would keep only the first string).
func TestWhenStartingAndEndingWithAString(t *testing.T) {
	src := rv6Head + "## Step: s\nwhen: \"urgent\" in $.tags && $.priority == \"high\"\n"
	if errs := compileErrs(t, src); errs != nil {
		t.Errorf("valid when: refused: %v", errs)
	}
}

// TestYAMLErrorLineAfterMultilineMapping: a front matter error is reported
// on its own line, not on an earlier multi-line mapping's first line.
func TestYAMLErrorLineAfterMultilineMapping(t *testing.T) {
	src := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nschedule: \"@hourly\"\nschedule_input: {\n  \"x\": 1\n}\neffects: [http_egress\n---\n\n## Step: s\n"
	errs := compileErrs(t, src)
	if len(errs) == 0 || errs[0].Line != 9 {
		t.Errorf("got %v, want the error on line 9 (effects: [http_egress)", errs)
	}
}

// TestYAMLErrorLineInALargeFrontMatter: in a large front matter the error
// is found on its line (with a few parses from the end, not one per line:
// 43 KB once took seconds).
func TestYAMLErrorLineInALargeFrontMatter(t *testing.T) {
	var b strings.Builder
	b.WriteString("---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\nschedule: \"@hourly\"\nschedule_input:\n")
	for i := 0; i < 4000; i++ {
		fmt.Fprintf(&b, "  k%d: v\n", i)
	}
	b.WriteString("effects: [http_egress\n---\n\n## Step: s\n")
	errs := compileErrs(t, b.String()) // 43 KB
	if want := "f.md:4007: front matter is not valid YAML"; len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("errors %v, want one beginning %q", errs, want)
	}
}

// TestConditionErrorLine: a condition's parse error is reported on the
// expression's first line, past the block's comments.
func TestConditionErrorLine(t *testing.T) {
	src := rv6Head + "## Step: s\n```condition\n# only orders\n# from the shop\n$.a == \n```\n"
	errs := compileErrs(t, src)
	if len(errs) != 1 || errs[0].Line != 12 {
		t.Errorf("got %v, want one error on line 12 (the expression)", errs)
	}
}

// TestEndpointMustParse: an endpoint Go cannot parse is a compile error,
// not a failure of every call at run time.
func TestEndpointMustParse(t *testing.T) {
	for _, ep := range []string{"https://api.example.com/a%zz", "https://[::1/x", "https://api.example.com:abc/x"} {
		if _, perr := url.Parse(ep); perr == nil {
			t.Fatalf("%s parses", ep)
		}
		src := rv6Head + "## Step: s\neffects: [http_egress]\nendpoint: " + ep + "\n"
		if errs := compileErrs(t, src); errs == nil {
			t.Errorf("endpoint %s accepted", ep)
		}
	}
}

// TestEgressHeaderValueWithNewline: a literal header value net/http would
// refuse (a line break) is a compile error.
func TestEgressHeaderValueWithNewline(t *testing.T) {
	src := rv6Head + "## Step: s\neffects: [http_egress]\nendpoint: https://api.example.com/\nheaders: {\"X-A\": \"a\\nb\"}\n"
	if errs := compileErrs(t, src); errs == nil {
		t.Errorf("headers value with a newline accepted")
	}
}

// TestStepKeyCommentAfterApostrophe: an apostrophe inside a plain value
// (don't) opens no string, so a comment after it is dropped.
func TestStepKeyCommentAfterApostrophe(t *testing.T) {
	f, err := Compile("f.md", []byte(rv6Head+"## Step: s\nresponse_header_warning: don't cache # internal note\n"))
	if err != nil {
		t.Fatal(err)
	}
	for s := range f.Steps() {
		for h := range s.Headers() {
			if h.Value != "don't cache" {
				t.Errorf("Warning = %q, want %q", h.Value, "don't cache")
			}
		}
	}
}

// TestNTDManyDynamicKeys: an object of 40,000 templated keys renders
// whole, in order (its duplicate check is a map past a few keys, not a
// comparison of every key with every other: once 2.8 s a render), and a
// key rendered twice is still refused.
func TestNTDManyDynamicKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 40000; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\"k%d{{ 1 }}\": 0", i)
	}
	b.WriteString("}") // about 750 KB
	n, err := CompileNTD(b.String())
	if err != nil {
		t.Fatal(err)
	}
	v, err := n.Render(&Env{})
	if err != nil {
		t.Fatal(err)
	}
	o, ok := v.(*Object)
	if !ok || o.Len() != 40000 || o.keys[0] != "k01" || o.keys[39999] != "k399991" {
		t.Fatalf("rendered %T with %d keys", v, o.Len())
	}
	dup, err := CompileNTD(`{"a{{ 1 }}": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": 10, "k": 11, "l": 12, "a1": 13}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dup.Render(&Env{}); err == nil || !strings.Contains(err.Error(), `the key "a1" twice`) {
		t.Errorf("a key rendered twice past the index threshold: %v", err)
	}
}
