package flow

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func templateDoc() *Object {
	return obj(
		"id", 7,
		"orderId", "a\"b\nc",
		"path", "a b/c?d&e",
		"unicode", "é/😀",
		"total", 12.5,
		"count", 3,
		"ok", true,
		"nul", nil,
		"cust", obj("z", 1, "a", 2),
		"lines", []any{1, "x"},
		"k1", "x",
		"k2", "x",
		"k3", "y",
		"html", "<b>&",
	)
}

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"empty", ``, ``},
		{"literal only", `https://example.com/a?b=c`, `https://example.com/a?b=c`},
		{"literal braces", `a { b } }} c`, `a { b } }} c`},
		{"single hole", `{{ $.id }}`, `7`},
		{"hole without spaces", `{{$.id}}`, `7`},
		{"holes and literals", `order-{{ $.id }}-{{ $.k3 }}!`, `order-7-y!`},
		{"adjacent holes", `{{ $.k1 }}{{ $.k3 }}`, `xy`},
		{"null", `[{{ $.nul }}]`, `[]`},
		{"missing", `[{{ $.missing }}]`, `[]`},
		{"string kept raw", `{{ $.orderId }}`, "a\"b\nc"},
		{"html kept raw", `{{ $.html }}`, `<b>&`},
		{"float", `{{ $.total }}`, `12.5`},
		{"int", `{{ $.count }}`, `3`},
		{"arithmetic", `{{ $.count * 2 + 1 }}`, `7`},
		{"bool", `{{ $.ok }}`, `true`},
		{"object as compact JSON in key order", `{{ $.cust }}`, `{"z":1,"a":2}`},
		{"array as compact JSON", `{{ $.lines }}`, `[1,"x"]`},
		{"closing braces inside a string literal", `{{ "}}" }}`, `}}`},
		{"escaped quote inside a string literal", `{{ "a\"}}" }}!`, `a"}}!`},
		{"ctx", `{{ ctx.tenant }}/{{ ctx.request.orderId }}`, `acme/o-17`},
	}
	env := &Env{Doc: templateDoc(), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := CompileTemplate(tt.src)
			if err != nil {
				t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
			}
			if tmpl.String() != tt.src {
				t.Errorf("String() = %q, want %q", tmpl.String(), tt.src)
			}
			got, err := tmpl.Render(env)
			if err != nil {
				t.Fatalf("Render(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Render(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestTemplateLiteral(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src    string
		want   string
		wantOK bool
	}{
		{``, ``, true},
		{`plain`, `plain`, true},
		{`a {{ $.x }}`, ``, false},
		{`{{ 1 }}`, ``, false},
	}
	for _, tt := range tests {
		tmpl, err := CompileTemplate(tt.src)
		if err != nil {
			t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
		}
		got, ok := tmpl.Literal()
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Literal() of %q = %q, %v, want %q, %v", tt.src, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestTemplateRenderURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"reserved characters escaped", `https://example.com/orders/{{ $.path }}`, `https://example.com/orders/a%20b%2Fc%3Fd%26e`},
		{"literal parts kept where a URL carries them", `https://example.com/a;b=c:d@e!$'()*+,?x=1&y={{ $.k1 }}#f`, `https://example.com/a;b=c:d@e!$'()*+,?x=1&y=x#f`},
		{"literal parts encoded where a URL cannot carry them", `https://example.com/a b|c^é[]/{{ $.k1 }}?q=<x>`, `https://example.com/a%20b%7Cc%5E%C3%A9%5B%5D/x?q=%3Cx%3E`},
		{"the host and its port as written", `https://user:pw@example.com:8443/{{ $.k1 }}`, `https://user:pw@example.com:8443/x`},
		{"a dot-dot beside a slash stays in the segment", `https://example.com/a/{{ "../b" }}/{{ "x/." }}/{{ "..\\c" }}`, `https://example.com/a/%2E%2E%2Fb/x%2F%2E/%2E%2E%5Cc`},
		{"non-ASCII escaped byte by byte", `https://example.com/{{ $.unicode }}`, `https://example.com/%C3%A9%2F%F0%9F%98%80`},
		{"unreserved characters kept", `https://example.com/{{ "AZaz09-._~" }}`, `https://example.com/AZaz09-._~`},
		{"quote and newline", `https://example.com/{{ $.orderId }}`, `https://example.com/a%22b%0Ac`},
		{"number", `https://example.com/{{ $.id }}/{{ $.total }}`, `https://example.com/7/12.5`},
		{"null", `https://example.com/x{{ $.nul }}y`, `https://example.com/xy`},
		{"object", `https://example.com/?q={{ $.cust }}`, `https://example.com/?q=%7B%22z%22%3A1%2C%22a%22%3A2%7D`},
		{"literal template", `https://example.com/a b`, `https://example.com/a%20b`},
		// a path segment "." or ".." names another resource: refused
		{"a hole of two dots", `https://example.com/customers/{{ ".." }}/orders`, "error"},
		{"a hole of one dot", `https://example.com/customers/{{ "." }}/orders`, "error"},
		{"a hole of two dots at the end", `https://example.com/customers/{{ ".." }}`, "error"},
		{"a dot beside a hole of one dot", `https://example.com/a/.{{ "." }}/b`, "error"},
		{"encoded dots", `https://example.com/a/{{ "x" }}/%2e%2E/b`, "error"},
		{"a hole of two dots in the query", `https://example.com/find?id={{ ".." }}`, `https://example.com/find?id=..`},
		{"in the fragment", `https://example.com/a?x={{ "1" }}#/../b`, `https://example.com/a?x=1#/../b`},
		{"three dots are no dot-segment", `https://example.com/{{ "..." }}`, `https://example.com/...`},
		{"dots beside other text", `https://example.com/{{ "..x" }}/{{ "a.b" }}/{{ ".hidden" }}`, `https://example.com/..x/a.b/.hidden`},
	}
	env := &Env{Doc: templateDoc()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := CompileTemplate(tt.src)
			if err != nil {
				t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
			}
			got, err := tmpl.RenderURL(env)
			if tt.want == "error" {
				if err == nil || !strings.Contains(err.Error(), "which would name another resource") {
					t.Errorf("RenderURL(%q) = %q, %v; want the dot-segment refused", tt.src, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("RenderURL(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("RenderURL(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestTemplateRenderError(t *testing.T) {
	t.Parallel()
	tmpl, err := CompileTemplate(`x-{{ $.count > null }}`)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Doc: templateDoc()}
	for name, render := range map[string]func(*Env) (string, error){"Render": tmpl.Render, "RenderURL": tmpl.RenderURL} {
		_, err := render(env)
		var ee *EvalError
		if !errors.As(err, &ee) || err.Error() != `cannot compare number with null using >` {
			t.Errorf("%s error = %v, want the *EvalError cannot compare number with null using >", name, err)
		}
	}
}

func TestCompileTemplateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want TemplateError
	}{
		{"unclosed hole", `https://example.com/{{ $.id`, TemplateError{Line: 0, Msg: `unclosed {{: a hole ends with }}`}},
		{"unclosed hole after a closed one", `{{ $.a }}/{{ $.b }`, TemplateError{Line: 0, Msg: `unclosed {{: a hole ends with }}`}},
		{"unclosed hole on the third line", "a\nb\nc {{ $.x", TemplateError{Line: 2, Msg: `unclosed {{: a hole ends with }}`}},
		{"hole across lines", "{{ $.x\n}}", TemplateError{Line: 0, Msg: `unclosed {{: a hole ends with }}`}},
		{"unclosed string in a hole", `{{ "}} }}`, TemplateError{Line: 0, Msg: `unclosed {{: a hole ends with }}`}},
		{"empty hole", `a{{ }}b`, TemplateError{Line: 0, Msg: `empty {{ }} hole`}},
		{"empty hole without spaces", `{{}}`, TemplateError{Line: 0, Msg: `empty {{ }} hole`}},
		{"expression error", `{{ $.a = 1 }}`, TemplateError{Line: 0, Msg: `expression "$.a = 1" does not parse: '=' at column 5: compare with ==`}},
		{"unknown name", "x\n{{ foo }}", TemplateError{Line: 1, Msg: `expression "foo" does not parse: unknown name "foo" at column 1: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := CompileTemplate(tt.src)
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("CompileTemplate(%q) error = %v (%T), want a *TemplateError", tt.src, err, err)
			}
			if diff := cmp.Diff(tt.want, *te); diff != "" {
				t.Errorf("CompileTemplate(%q) error (-want +got):\n%s", tt.src, diff)
			}
			if te.Error() != tt.want.Msg {
				t.Errorf("Error() = %q, want %q", te.Error(), tt.want.Msg)
			}
		})
	}
}

func renderNTD(t *testing.T, src string, env *Env) (any, error) {
	t.Helper()
	n, err := CompileNTD(src)
	if err != nil {
		t.Fatalf("CompileNTD(%q): %v", src, err)
	}
	if n.String() != src {
		t.Errorf("String() = %q, want %q", n.String(), src)
	}
	return n.Render(env)
}

func TestTemplateNTDRender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want string // AppendJSON of the rendered value
	}{
		{"string hole JSON-escaped", `{"id": "{{ $.orderId }}"}`, `{"id":"a\"b\nc"}`},
		{"string hole with literal text", `{"msg": "Order {{ $.id }} ({{ $.k3 }})\t\u0041"}`, `{"msg":"Order 7 (y)\tA"}`},
		{"string hole with an object", `{"c": "{{ $.cust }}", "l": "{{ $.lines }}"}`, `{"c":"{\"z\":1,\"a\":2}","l":"[1,\"x\"]"}`},
		{"string hole with a number", `{"n": "{{ $.total }}", "b": "{{ $.ok }}"}`, `{"n":"12.5","b":"true"}`},
		{"html in a string hole", `{"h": "{{ $.html }}"}`, `{"h":"<b>&"}`},
		{"whole-value holes keep the type", `{"total": {{ $.total }}, "count": {{ $.count }}, "ok": {{ $.ok }}, "n": {{ $.nul }}, "cust": {{ $.cust }}, "lines": {{ $.lines }}, "s": {{ $.orderId }}}`, `{"total":12.5,"count":3,"ok":true,"n":null,"cust":{"z":1,"a":2},"lines":[1,"x"],"s":"a\"b\nc"}`},
		{"expressions in holes", `{"double": {{ $.count * 2 }}, "big": {{ $.count > 2 }}, "up": "{{ upper($.k3) }}"}`, `{"double":6,"big":true,"up":"Y"}`},
		{"missing path", `{"s": "{{ $.missing }}", "v": {{ $.missing }}, "t": "x{{ $.nul }}y"}`, `{"s":"","v":null,"t":"xy"}`},
		{"array with holes", `[{{ $.count }}, "{{ $.id }}", 1, [2, {{ $.ok }}], {"a": {{ $.nul }}}]`, `[3,"7",1,[2,true],{"a":null}]`},
		{"template key order kept", "{\n  \"z\": 1,\n  \"a\": {{ $.count }},\n  \"m\": \"{{ $.id }}\",\n  \"b\": {\"y\": 1, \"x\": 2}\n}", `{"z":1,"a":3,"m":"7","b":{"y":1,"x":2}}`},
		{"string key with a hole", `{"k_{{ $.id }}": 1, "{{ $.k3 }}": {{ $.ok }}}`, `{"k_7":1,"y":true}`},
		{"static document", ` { "a" : [ 1.50 , true , null , "x" ] , "b" : { } } `, `{"a":[1.5,true,null,"x"],"b":{}}`},
		{"empty containers", `{"o": {}, "a": [], "h": {{ $.count }}}`, `{"o":{},"a":[],"h":3}`},
		{"whole hole as an array item", `[{{ $ }}]`, `[{"id":7,"orderId":"a\"b\nc","path":"a b/c?d&e","unicode":"é/😀","total":12.5,"count":3,"ok":true,"nul":null,"cust":{"z":1,"a":2},"lines":[1,"x"],"k1":"x","k2":"x","k3":"y","html":"<b>&"}]`},
		{"hole with closing braces in a string", `{"a": "{{ "}}" }}", "b": {{ "}" }}}`, `{"a":"}}","b":"}"}`},
		{"scalar block", `{{ $.count }}`, `3`},
		{"ctx", `{"t": "{{ ctx.tenant }}", "r": {{ ctx.request }}, "h": {{ ctx.headers }}}`, `{"t":"acme","r":{"orderId":"o-17","lines":[{"sku":"A"}]},"h":{"Content-Type":"application/json"}}`},
	}
	env := &Env{Doc: templateDoc(), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := renderNTD(t, tt.src, env)
			if err != nil {
				t.Fatalf("Render(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, string(AppendJSON(nil, got))); diff != "" {
				t.Errorf("Render(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

// TestTemplateNTDStringHoleValue checks the rendered value, not only its JSON: the
// text is inserted as is and escaped when the document is written.
func TestTemplateNTDStringHoleValue(t *testing.T) {
	t.Parallel()
	got, err := renderNTD(t, `{"id": "<{{ $.orderId }}>"}`, &Env{Doc: templateDoc()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(obj("id", "<a\"b\nc>"), got, docOpts); diff != "" {
		t.Errorf("Render (-want +got):\n%s", diff)
	}
}

func TestTemplateNTDWholeDocument(t *testing.T) {
	t.Parallel()
	doc := templateDoc()
	for _, src := range []string{`{{ $ }}`, "\n  {{$}}  \n", "{{ $ }}\n"} {
		got, err := renderNTD(t, src, &Env{Doc: doc})
		if err != nil {
			t.Fatalf("Render(%q): %v", src, err)
		}
		if o, ok := got.(*Object); !ok || o != doc {
			t.Errorf("Render(%q) is not the document itself", src)
		}
	}
	// any document, not only an object
	for _, doc := range []any{nil, "text", 4.5, []any{1}} {
		got, err := renderNTD(t, `{{ $ }}`, &Env{Doc: doc})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(doc, got); diff != "" {
			t.Errorf("{{ $ }} of %s (-want +got):\n%s", AppendJSON(nil, doc), diff)
		}
	}
}

func TestTemplateNTDStaticSubtreesShared(t *testing.T) {
	t.Parallel()
	n, err := CompileNTD(`{"static": {"a": [1, {"b": 2}]}, "list": [1, 2], "dyn": {{ $.count }}}`)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Doc: templateDoc()}
	first, err := n.Render(env)
	if err != nil {
		t.Fatal(err)
	}
	second, err := n.Render(env)
	if err != nil {
		t.Fatal(err)
	}
	f, s := first.(*Object), second.(*Object)
	if f == s {
		t.Errorf("a template with a hole returned the same object twice")
	}
	fs, _ := f.Get("static")
	ss, _ := s.Get("static")
	if fs.(*Object) != ss.(*Object) {
		t.Errorf("the static subtree is built anew on each render")
	}
	fl, _ := f.Get("list")
	sl, _ := s.Get("list")
	if &fl.([]any)[0] != &sl.([]any)[0] {
		t.Errorf("the static array is built anew on each render")
	}

	static, err := CompileNTD(`{"a": 1, "b": [true]}`)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := static.Render(env)
	b, _ := static.Render(env)
	if a.(*Object) != b.(*Object) {
		t.Errorf("a template without holes is built anew on each render")
	}
}

func TestTemplateNTDRenderErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"two holes render the same key", `{"{{ $.k1 }}": 1, "{{ $.k2 }}": 2}`, `the rendered JSON has the key "x" twice`},
		{"a hole renders a static key", `{"x": 1, "{{ $.k1 }}": 2}`, `the rendered JSON has the key "x" twice`},
		{"a static key after a hole", `{"{{ $.k1 }}": 1, "x": 2}`, `the rendered JSON has the key "x" twice`},
		{"nested duplicate", `{"o": {"a": 1, "{{ lower("A") }}": 2}}`, `the rendered JSON has the key "a" twice`},
		{"expression error in a value hole", `{"a": {{ null > 0 }}}`, `cannot compare null with number using >`},
		{"expression error in a string hole", `["{{ "a" + 1 }}"]`, `cannot use + on string and number`},
		{"expression error in a key", `{"{{ len(1) }}": 1}`, `len needs a string, an array or an object, got number`},
	}
	env := &Env{Doc: templateDoc()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := renderNTD(t, tt.src, env)
			if err == nil {
				t.Fatalf("Render(%q) = %s, want the error %q", tt.src, AppendJSON(nil, got), tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("Render(%q) error (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestTemplateCompileNTDErrors(t *testing.T) {
	t.Parallel()
	const notJSON = "ntd block is not valid JSON: "
	tests := []struct {
		name string
		src  string
		want TemplateError
	}{
		{"unclosed string hole on line 3", "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": \"{{ $.x\n}", TemplateError{Line: 3, Msg: `unclosed {{: a hole ends with }}`}},
		{"unclosed value hole on line 3", "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": {{ $.x\n}", TemplateError{Line: 3, Msg: `unclosed {{: a hole ends with }}`}},
		{"missing comma", "{\n  \"a\": 1\n  \"b\": 2\n}", TemplateError{Line: 2, Msg: notJSON + `unexpected '"', expected ',' or '}'`}},
		{"missing comma in an array", "[\n1\n2]", TemplateError{Line: 2, Msg: notJSON + `unexpected '2', expected ',' or ']'`}},
		{"trailing data", "{\"a\": 1}\n{\"b\": 2}", TemplateError{Line: 1, Msg: notJSON + `unexpected '{' after the JSON document`}},
		{"a hole as a key", "{\n  {{ $.k }}: 1\n}", TemplateError{Line: 1, Msg: notJSON + `a key must be a string: write "{{ … }}" to use a value as a key`}},
		{"empty block", "", TemplateError{Line: 0, Msg: notJSON + `the ntd block is empty: write the JSON document to produce`}},
		{"blank block", "  \t", TemplateError{Line: 0, Msg: notJSON + `the ntd block is empty: write the JSON document to produce`}},
		{"duplicate static key", "{\n  \"a\": 1,\n  \"a\": 2\n}", TemplateError{Line: 2, Msg: notJSON + `duplicate key "a"`}},
		{"bad expression in a hole", "{\n  \"a\": {{ $.x = 1 }}\n}", TemplateError{Line: 1, Msg: `expression "$.x = 1" does not parse: '=' at column 5: compare with ==`}},
		{"bad expression in a string hole", "{\n\n  \"a\": \"{{ foo }}\"\n}", TemplateError{Line: 2, Msg: `expression "foo" does not parse: unknown name "foo" at column 1: paths start with $ or ctx, functions are len, lower, upper, matches, now and uuid`}},
		{"empty hole", `{"a": {{ }}}`, TemplateError{Line: 0, Msg: `empty {{ }} hole`}},
		{"unclosed object", "{\"a\": 1\n", TemplateError{Line: 1, Msg: notJSON + `object is not closed: expected '}'`}},
		{"unclosed array", "[1,\n 2", TemplateError{Line: 1, Msg: notJSON + `array is not closed: expected ']'`}},
		{"value missing", `{"a": }`, TemplateError{Line: 0, Msg: notJSON + `unexpected '}', expected a value`}},
		{"value missing at the end", `{"a":`, TemplateError{Line: 0, Msg: notJSON + `unexpected end of block, expected a value`}},
		{"trailing comma", "[1,\n 2,\n]", TemplateError{Line: 2, Msg: notJSON + `unexpected ']', expected a value`}},
		{"bad literal", "{\n\"a\": tru}", TemplateError{Line: 1, Msg: notJSON + `unexpected "tru", expected a value`}},
		{"leading zero", `{"a": 01}`, TemplateError{Line: 0, Msg: notJSON + `unexpected "01", expected a value`}},
		{"single quotes", `{'a': 1}`, TemplateError{Line: 0, Msg: notJSON + `unexpected '\'', expected a string key`}},
		{"missing colon", "{\"a\" 1}", TemplateError{Line: 0, Msg: notJSON + `unexpected '1', expected ':' after a key`}},
		{"newline in a string", "{\"a\": \"x\ny\"}", TemplateError{Line: 0, Msg: notJSON + `string is not closed on its line`}},
		{"unclosed string", `{"a": "x`, TemplateError{Line: 0, Msg: notJSON + `string is not closed`}},
		{"bad escape", "{\n\"a\": \"\\x\"}", TemplateError{Line: 1, Msg: notJSON + `invalid string: invalid escape "\\x"`}},
		{"bad escape beside a hole", "{\n\"a\": \"\\x{{ $.id }}\"}", TemplateError{Line: 1, Msg: notJSON + `invalid string: invalid escape "\\x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := CompileNTD(tt.src)
			if err == nil {
				t.Fatalf("CompileNTD(%q) succeeded (%v), want the error %q", tt.src, n, tt.want.Msg)
			}
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("CompileNTD(%q) error = %v (%T), want a *TemplateError", tt.src, err, err)
			}
			if diff := cmp.Diff(tt.want, *te); diff != "" {
				t.Errorf("CompileNTD(%q) error (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestCheckHeaderName(t *testing.T) {
	t.Parallel()
	denied := map[string]string{
		"connection":        "Connection",
		"content-length":    "Content-Length",
		"host":              "Host",
		"keep-alive":        "Keep-Alive",
		"proxy-connection":  "Proxy-Connection",
		"te":                "TE",
		"trailer":           "Trailer",
		"transfer-encoding": "Transfer-Encoding",
		"upgrade":           "Upgrade",
	}
	for name, display := range denied {
		for _, spelling := range []string{name, strings.ToUpper(name), headerFromKey(name), mixedCase(name)} {
			err := CheckHeaderName(spelling)
			want := "header " + display + " is managed by the HTTP layer: a flow cannot set or remove it"
			if err == nil || err.Error() != want {
				t.Errorf("CheckHeaderName(%q) = %v, want %q", spelling, err, want)
			}
		}
	}
	reserved := map[string]string{
		"X-Nexus-Idempotent-Replay": "X-Nexus-Idempotent-Replay",
		"x-nexus-foo":               "X-Nexus-Foo",
		"X-NEXUS-FOO":               "X-Nexus-Foo",
		"x-Nexus-":                  "X-Nexus-",
	}
	for name, canonical := range reserved {
		want := "header " + canonical + " is reserved for the platform (the x-nexus- prefix): a flow cannot set or remove it"
		if err := CheckHeaderName(name); err == nil || err.Error() != want {
			t.Errorf("CheckHeaderName(%q) = %v, want %q", name, err, want)
		}
	}
	for _, name := range []string{
		"Content-Type", "content-type", "X-Correlation-Id", "X-Correlation-ID", "Authorization",
		"Accept", "X-Request-Id", "X-Nexus", "X-Nexusfoo", "Hostname", "Content-Length-Hint",
		"Upgrade-Insecure-Requests", "Te2", "X_Underscore", "Etag",
	} {
		if err := CheckHeaderName(name); err != nil {
			t.Errorf("CheckHeaderName(%q) = %v, want nil", name, err)
		}
	}
	invalid := map[string]string{
		"":         `a header name is empty`,
		"Bad Name": `header name "Bad Name" has the character ' ', which a header name cannot hold`,
		"a:b":      `header name "a:b" has the character ':', which a header name cannot hold`,
		"a\nb":     `header name "a\nb" has the character '\n', which a header name cannot hold`,
	}
	for name, want := range invalid {
		if err := CheckHeaderName(name); err == nil || err.Error() != want {
			t.Errorf("CheckHeaderName(%q) = %v, want %q", name, err, want)
		}
	}
}

// mixedCase alternates the case of the letters of s.
func mixedCase(s string) string {
	b := []byte(s)
	for i := range b {
		if i%2 == 1 {
			b[i] = strings.ToUpper(string(b[i]))[0]
		}
	}
	return string(b)
}

func TestHeaderFromKey(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"x_correlation_id": "X-Correlation-Id",
		"content_type":     "Content-Type",
		"CONTENT_TYPE":     "Content-Type",
		"etag":             "Etag",
		"cache_control":    "Cache-Control",
		"x_nexus_replay":   "X-Nexus-Replay",
	}
	for key, want := range tests {
		if got := headerFromKey(key); got != want {
			t.Errorf("headerFromKey(%q) = %q, want %q", key, got, want)
		}
	}
}
