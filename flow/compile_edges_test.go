package flow

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
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
	const want = "out of range for a number"
	e, err := CompileExpr(`1e308 * 10`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := e.Eval(&Env{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("1e308 * 10 = %v, %v; want an evaluation error containing %q (Infinity is not a JSON number)", v, err, want)
	}
	n, err := CompileNTD(`{"s": "{{ 1e308 * 10 }}", "v": {{ 1 / 1e-320 }}}`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := n.Render(&Env{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("rendered %s, %v; want a step error containing %q", AppendJSON(nil, v), err, want)
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
		errs := compileErrs(t, src)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "does not parse") {
			t.Errorf("endpoint %s: errors %v, want one saying it does not parse", ep, errs)
		}
	}
}

// TestEgressHeaderValueWithNewline: a literal header value net/http would
// refuse (a line break) is a compile error.
func TestEgressHeaderValueWithNewline(t *testing.T) {
	src := rv6Head + "## Step: s\neffects: [http_egress]\nendpoint: https://api.example.com/\nheaders: {\"X-A\": \"a\\nb\"}\n"
	errs := compileErrs(t, src)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "holds a control character") {
		t.Errorf("headers value with a newline: errors %v, want one saying it holds a control character", errs)
	}
}

// TestStepKeyCommentAfterApostrophe: an apostrophe inside a plain value
// (don't) opens no string, so a comment after it is dropped.
func TestStepKeyCommentAfterApostrophe(t *testing.T) {
	f, err := Compile("f.md", []byte(rv6Head+"## Step: s\nresponse_header_warning: don't cache # internal note\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []HeaderOp
	for _, s := range f.Steps() {
		for h := range s.Headers() {
			got = append(got, h)
		}
	}
	if want := []HeaderOp{{Name: "Warning", Value: "don't cache"}}; !slices.Equal(got, want) {
		t.Errorf("headers %+v, want %+v", got, want)
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

// TestFrontMatterErrorOnTheKeyLine: flow-file.md, Precise answers:
// "a bad front-matter value → that key's line; a bad name → the `flow:` or
// `tenant:` line". A YAML value written on the line after its key is
// blamed on the value's line instead of the key's.
func TestFrontMatterErrorOnTheKeyLine(t *testing.T) {
	const head = "---\nflowmarkdown_version: \"0.1\"\n"
	const steps = "---\n\n## Step: a\n```ntd\n{}\n```\n"
	cases := []struct {
		name string
		src  string
		line int // the key's line
	}{
		{"bad flow name", head + "flow:\n  Orders\ntenant: acme\n" + steps, 3},
		{"bad tenant name", head + "flow: f\ntenant:\n  Acme\n" + steps, 4},
		{"schedule_input not an object", head + "flow: f\ntenant: acme\nschedule: \"@hourly\"\nschedule_input:\n  - 1\n  - 2\n" + steps, 6},
		{"schedule_timezone unknown", head + "flow: f\ntenant: acme\nschedule: \"@hourly\"\nschedule_timezone:\n  Mars/Base\n" + steps, 6},
		{"schedule not a cron expression", head + "flow: f\ntenant: acme\nschedule:\n  every day\n" + steps, 5},
		{"schedule_input without schedule", head + "flow: f\ntenant: acme\nschedule_input:\n  a: 1\n" + steps, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := compileErrs(t, c.src)
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(errs), errs)
			}
			if errs[0].Line != c.line {
				t.Errorf("error on line %d, want the key's line %d: %v", errs[0].Line, c.line, errs[0])
			}
		})
	}
}

// TestFlattenXMLByteOrderMark: an XML document encoded in UTF-8 may
// begin with a byte order mark (XML 1.0 §4.3.3, "Entities encoded in UTF-8
// MAY begin with the Byte Order Mark"); server.md: application/xml bodies
// are flattened, only an unparsable one is 400, and flow-file.md: a
// backend's XML answer is "kept as an XML document". FlattenXML takes the
// mark for text outside the root element and refuses the document, so the
// door answers 400 and an http_egress step turns the answer into a string.
func TestFlattenXMLByteOrderMark(t *testing.T) {
	for _, src := range []string{
		"\xef\xbb\xbf<order><id>7</id></order>",
		"\xef\xbb\xbf<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<order><id>7</id></order>",
	} {
		v, err := FlattenXML([]byte(src))
		if err != nil {
			t.Errorf("FlattenXML(%q): %v", src, err)
			continue
		}
		if got := string(AppendJSON(nil, v)); got != `{"id":"7"}` {
			t.Errorf("FlattenXML(%q) = %s, want {\"id\":\"7\"}", src, got)
		}
		if _, err := ParseXMLDocument([]byte(src)); err != nil {
			t.Errorf("ParseXMLDocument(%q): %v", src, err)
		}
	}
}

// TestQuotedVersionKeyIsAFlowFile: flow-file.md: "A file is a flow
// file when it starts with `---` and its front matter has
// `flowmarkdown_version`". A front matter whose key is written as a quoted
// YAML string ("flowmarkdown_version": "0.1", as JSON-minded authors
// write it) has the key, but IsFlowFile looks for a line starting with the
// bare word, so the file is skipped silently as documentation: nothing is
// published and nothing is reported.
func TestQuotedVersionKeyIsAFlowFile(t *testing.T) {
	src := "---\n\"flowmarkdown_version\": \"0.1\"\n\"flow\": \"orders\"\n\"tenant\": \"acme\"\n---\n\n## Step: a\n```ntd\n{}\n```\n"
	if !IsFlowFile([]byte(src)) {
		t.Errorf("IsFlowFile = false for a front matter holding the key \"flowmarkdown_version\"")
	}
	f, err := Compile("f.md", []byte(src))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if f.Tenant() != "acme" || f.Name() != "orders" {
		t.Errorf("compiled %s/%s, want acme/orders", f.Tenant(), f.Name())
	}
}

// TestFlowStyleFrontMatterIsAFlowFile: a front matter written in YAML's
// flow style, one mapping in braces, holds the key too. The file was
// skipped silently as documentation.
func TestFlowStyleFrontMatterIsAFlowFile(t *testing.T) {
	for _, fm := range []string{
		"{flowmarkdown_version: \"0.1\", flow: orders, tenant: acme}",
		"{\n  \"flowmarkdown_version\": \"0.1\",\n  \"flow\": \"orders\",\n  \"tenant\": \"acme\"\n}",
	} {
		src := "---\n" + fm + "\n---\n\n## Step: a\n```ntd\n{}\n```\n"
		if !IsFlowFile([]byte(src)) {
			t.Errorf("IsFlowFile = false for the front matter %q", fm)
		}
		f, err := Compile("f.md", []byte(src))
		if err != nil {
			t.Errorf("Compile(%q): %v", fm, err)
			continue
		}
		if f.Tenant() != "acme" || f.Name() != "orders" {
			t.Errorf("compiled %s/%s, want acme/orders", f.Tenant(), f.Name())
		}
	}
	// the key's name in a value, or in a nested mapping, is not the key
	for _, fm := range []string{"{title: flowmarkdown_version}", "{meta: {flowmarkdown_version: \"0.1\"}}", "title: \"{flowmarkdown_version: 1}\""} {
		if IsFlowFile([]byte("---\n" + fm + "\n---\n# Notes\n")) {
			t.Errorf("IsFlowFile = true for the front matter %q", fm)
		}
	}
}

// TestStepInsideHTMLCommentIsDocumentation: flow-file.md: "A flow is one
// Markdown file: ... `## Step:` sections ... Anything else in the file
// (prose, other headings) is documentation and is ignored." In Markdown a
// line inside an HTML comment (<!-- … -->, CommonMark's HTML block of kind
// 2) is not a heading, so a step "commented out" that way is no step (it
// once ran). The block ends on the line holding "-->", its opening line
// included: "<!-->" (an empty comment since CommonMark 0.31, and GitHub's)
// ends where it begins, and the steps below it count.
func TestStepInsideHTMLCommentIsDocumentation(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n---\n\n"
	answer := "## Step: answer\n```ntd\n{\"v\": 1}\n```\n\n"
	for name, src := range map[string]string{
		"a step in a comment":         head + answer + "<!--\n## Step: old-answer\n```ntd\n{\"v\": 0}\n```\n-->\n",
		"a step after <!-->":          head + "<!-->\n\n" + answer,
		"a step after <!-- x -->":     head + "<!-- the old answer was removed -->\n" + answer,
		"a step after a long <!---> ": head + "<!--->\n" + answer,
	} {
		f, err := Compile("f.md", []byte(src))
		if err != nil {
			t.Errorf("%s: Compile: %v", name, err)
			continue
		}
		var names []string
		for _, s := range f.Steps() {
			names = append(names, s.Name())
		}
		if len(names) != 1 || names[0] != "answer" {
			t.Errorf("%s: steps %q, want only [answer]", name, names)
		}
	}
}

// TestHTMLCommentLeftOpen: a comment that is never closed would hide the
// rest of the file; it is an error on its line, as an unclosed fence is.
func TestHTMLCommentLeftOpen(t *testing.T) {
	src := rv6Head + "## Step: s\n```ntd\n{}\n```\n\n<!-- old steps\n## Step: t\n"
	errs := compileErrs(t, src)
	if len(errs) != 1 || errs[0].Line != 13 || !strings.Contains(errs[0].Msg, "HTML comment") {
		t.Errorf("errors %v, want one on line 13 about the HTML comment", errs)
	}
}

// TestResponseHeaderValueWithControlCharacter: a response header's value
// is one line of text; a NUL or a line break (which net/http would write
// as it is, or as a space) is a compile error.
func TestResponseHeaderValueWithControlCharacter(t *testing.T) {
	for _, v := range []string{`"a\0b"`, `"a\r\nSet-Cookie: x=1"`, `"a\x7fb"`} {
		src := rv6Head + "## Step: s\nresponse_header_x_a: " + v + "\n```ntd\n{}\n```\n"
		if errs := compileErrs(t, src); len(errs) != 1 || errs[0].Line != 9 {
			t.Errorf("response_header_x_a: %s: errors %v, want one on line 9", v, errs)
		}
	}
	if errs := compileErrs(t, rv6Head+"## Step: s\nresponse_header_x_a: \"a\\tb\"\n```ntd\n{}\n```\n"); errs != nil {
		t.Errorf("a tab was refused: %v", errs)
	}
}

// TestFaultHeaderRemoveOutsideAFault: fault_header_remove is the old
// spelling of response_header_remove, confined to ## Fault: sections as
// the other fault_ keys are (it once compiled as a header named Remove).
func TestFaultHeaderRemoveOutsideAFault(t *testing.T) {
	errs := compileErrs(t, rv6Head+"## Step: s\nfault_header_remove: [x-internal]\n```ntd\n{}\n```\n")
	want := "fault_header_remove is only allowed in a ## Fault: section: use response_header_remove"
	if len(errs) != 1 || errs[0].Line != 9 || errs[0].Msg != want {
		t.Errorf("errors %v, want one on line 9: %s", errs, want)
	}
}

// TestEndpointWithADotSegment: an endpoint whose literal path has a "." or
// ".." segment (encoded or not) names another resource than it reads as:
// a compile error.
func TestEndpointWithADotSegment(t *testing.T) {
	for _, ep := range []string{"https://api.example.com/a/../b", "https://api.example.com/a/./{{ $.id }}", "https://api.example.com/a/%2E%2E/b"} {
		errs := compileErrs(t, rv6Head+"## Step: s\neffects: [http_egress]\nendpoint: "+ep+"\n")
		if len(errs) != 1 || !strings.Contains(errs[0].Msg, "which names another resource") {
			t.Errorf("endpoint %s: errors %v, want the dot-segment refused", ep, errs)
		}
	}
	if errs := compileErrs(t, rv6Head+"## Step: s\neffects: [http_egress]\nendpoint: https://api.example.com/a/...b?x=..#../\n"); errs != nil {
		t.Errorf("dots that are no segment refused: %v", errs)
	}
}

// TestScheduleChecks: what a cron tick would carry is checked at compile
// time: an @every period the cron library would round (it rounds to whole
// seconds: 1500ms ticked every second), a schedule_input nested deeper than
// a message's body may be (its worker dead-lettered every tick unread),
// one larger than the flow's own max_body_bytes (cron is one of its doors).
func TestScheduleChecks(t *testing.T) {
	head := "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n"
	steps := "---\n\n## Step: s\n```ntd\n{}\n```\n"
	deep := strings.Repeat(`{"a": `, DefaultMaxDepth+1) + "1" + strings.Repeat("}", DefaultMaxDepth+1)
	for _, c := range []struct {
		name, front string
		line        int
		want        string
	}{
		{"a fraction of a second", "schedule: \"@every 1500ms\"\n", 5, `schedule "@every 1500ms" is not a whole number of seconds`},
		{"too deep", "schedule: \"@every 10s\"\nschedule_input: " + deep + "\n", 6, "schedule_input nests 65 levels deep: at most 64"},
		{"over max_body_bytes", "max_body_bytes: 16\nschedule: \"@every 10s\"\nschedule_input: {\"text\": \"far more than sixteen bytes\"}\n", 7,
			"schedule_input is 38 bytes as JSON, over the flow's max_body_bytes (16)"},
	} {
		errs := compileErrs(t, head+c.front+steps)
		if len(errs) != 1 || errs[0].Line != c.line || !strings.HasPrefix(errs[0].Msg, c.want) {
			t.Errorf("%s: errors %v, want one on line %d beginning %q", c.name, errs, c.line, c.want)
		}
	}
	for _, ok := range []string{"schedule: \"@every 90s\"\n", "schedule: \"@every 1m30s\"\nschedule_input: {\"a\": [[1]]}\n"} {
		if errs := compileErrs(t, head+ok+steps); errs != nil {
			t.Errorf("%q: %v", ok, errs)
		}
	}
}

// aliasBomb is a front matter of a few hundred bytes whose schedule_input,
// its YAML aliases followed, holds 10^levels values: each level names the
// one before ten times.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("---\nflowmarkdown_version: \"0.1\"\nflow: laughs\ntenant: acme\nschedule: \"@hourly\"\nschedule_input:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("---\n\n## Step: s\n```ntd\n{{ $ }}\n```\n")
	return b.String()
}

// A schedule_input whose aliases stand for more than a message holds is
// refused on its line, within the budget, instead of being expanded: nine
// levels (about 600 bytes) stood for 10^9 values, 90 s and 38 GB to
// compile. Aliases that stand for a message's worth are still followed.
func TestScheduleInputAliasesAreBounded(t *testing.T) {
	for _, levels := range []int{6, 9} {
		src := aliasBomb(levels)
		errs := compileErrs(t, src)
		want := fmt.Sprintf("schedule_input is over %d bytes as JSON (YAML aliases followed), more than a message holds", maxScheduleInput)
		if len(errs) != 1 || errs[0].Line != 6 || errs[0].Msg != want {
			t.Errorf("%d levels (%d bytes): %v, want line 6: %s", levels, len(src), errs, want)
		}
	}
	f, err := Compile("f.md", []byte(aliasBomb(3))) // 1,000 values
	if err != nil {
		t.Fatalf("1,000 values through aliases: %v", err)
	}
	if n := len(AppendJSON(nil, f.Schedule().Input())); n < 4000 {
		t.Errorf("1,000 values through aliases made %d bytes of JSON", n)
	}
}

// The literal -9223372036854775808 is the least int, as the same value
// read from a document is, so arithmetic on it stays exact; it went
// through float64 (-9223372036854776000).
func TestLeastIntLiteralIsExact(t *testing.T) {
	doc, err := ParseJSON([]byte(`{"m":-9223372036854775808}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	eval := func(src string) string {
		e, err := CompileExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.Eval(&Env{Doc: doc})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		return string(AppendJSON(nil, v))
	}
	for _, tc := range []struct{ expr, want string }{
		{`$.m + 1`, "-9223372036854775807"},
		{`-9223372036854775808 + 1`, "-9223372036854775807"},
		{`-9223372036854775808`, "-9223372036854775808"},
		{`-9223372036854775808 == $.m`, "true"},
		{`-(-9223372036854775808) > 9223372036854775807`, "true"},
		{`-9223372036854775809`, "-9223372036854775809"},
	} {
		if got := eval(tc.expr); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.expr, got, tc.want)
		}
	}
}

// TestRefusedEndpointHidesCredentials: the error of a refused endpoint
// quotes it without its user information, query or fragment, where a
// downstream's password and API key live; it once quoted them whole.
func TestRefusedEndpointHidesCredentials(t *testing.T) {
	for _, tc := range []struct{ ep, shown string }{
		{"https://deploy:S3CRET@api.example.com/a b", `"https://redacted@api.example.com/a b" contains a space`},
		{"https://api.example.com/a b?api_key=S3CRET&x=1", `"https://api.example.com/a b?redacted" contains a space`},
		{"https://api.example.com/a b#S3CRET", `"https://api.example.com/a b#redacted" contains a space`},
		// a password holding '/' or '?' unescaped
		{"https://deploy:S3/CRET@api.example.com/a b", `"https://redacted@api.example.com/a b" contains a space`},
		{"https://deploy:S3?CRET@api.example.com/a b", `"https://redacted@api.example.com/a b" contains a space`},
		{"ftp://deploy:S3CRET@api.example.com/a", `"ftp://redacted@api.example.com/a" is not an absolute`},
		{"api.example.com/a?token=S3CRET", `"api.example.com/a?redacted" is not an absolute`},
		// Go's cause would quote a piece of the password (invalid port ":S3")
		{"https://deploy:S3/CRET@api.example.com/a", `"https://redacted@api.example.com/a" does not parse; in a user name or password`},
		// a hole is no user information: the '@' before it is
		{"https://u:S3CRET@api.example.com/{{ $.a }}/a b", `"https://redacted@api.example.com/{{ $.a }}/a b" contains a space`},
		// a hole in the password: the '@' after it ends the user information
		{"https://u:S3{{ $.a }}CRET@api.example.com/a", `"https://redacted@api.example.com/a" must name its host literally`},
		{"https://u:{{ $.a }}S3CRET@api.example.com/a", `"https://redacted@api.example.com/a" must name its host literally`},
	} {
		errs := compileErrs(t, rv6Head+"## Step: s\neffects: [http_egress]\nendpoint: "+tc.ep+"\n")
		if len(errs) != 1 || strings.Contains(errs[0].Error(), "S3") || !strings.Contains(errs[0].Error(), tc.shown) {
			t.Errorf("endpoint %s: errors %v, want one quoting %s", tc.ep, errs, tc.shown)
		}
	}
}
