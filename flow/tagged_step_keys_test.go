package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTaggedStepKeys: the step keys read as YAML (headers, a mapping;
// effects and response_header_remove, lists) refuse a YAML tag on the
// whole value, on a header's name or value, or on an entry of a list
// (`!foo x`, the non-specific `! 5`, `!!int 5`), as the front matter's
// keys do, on the key's line; they took no notice of it (`headers: {X-A:
// !foo x}` sent X-A: x). `!!str` on a string, `!!seq` on a list and
// `!!map` on a mapping change nothing and are taken.
func TestTaggedStepKeys(t *testing.T) {
	const head = "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\neffects: [http_egress]\n---\n\n## Step: s\n"
	const http = "effects: [http_egress]\nendpoint: https://api.example.com/\n"
	checkStepLineErrors(t, head, []stepLineError{
		{http + "headers: {X-A: !foo x}\n", 11, "headers: the value of X-A must be a string, not a value tagged !foo"},
		{http + "headers: {X-A: ok, X-B: ! 5}\n", 11, "headers: the value of X-B must be a string, not a value tagged !"},
		{http + "headers: {X-A: !!int 5}\n", 11, "headers: the value of X-A must be a string, not a value tagged !!int"},
		{http + "headers: {!foo X-A: x}\n", 11, "headers: the header name X-A must be a string, not a value tagged !foo"},
		{http + "headers: {! X-A: x}\n", 11, "headers: the header name X-A must be a string, not a value tagged !"},
		{http + "headers: !foo {X-A: x}\n", 11, "headers must be a JSON object of names to values, not a value tagged !foo"},
		{http + "headers: ! {X-A: x}\n", 11, "headers must be a JSON object of names to values, not a value tagged !"},
		{"effects: [!foo http_egress]\nendpoint: https://api.example.com/\n", 9, "effects of step \"s\" must be a list of names, not a value tagged !foo"},
		{"effects: [! http_egress]\nendpoint: https://api.example.com/\n", 9, "effects of step \"s\" must be a list of names, not a value tagged !"},
		{"effects: ! [http_egress]\nendpoint: https://api.example.com/\n", 9, "effects of step \"s\" must be a list, e.g. [http_egress], not a value tagged !"},
		{"response_header_remove: [!foo x-a]\n", 9, "response_header_remove of step \"s\" must be a list of names, not a value tagged !foo"},
		{"response_header_remove: [x-a, ! x-b]\n", 9, "response_header_remove of step \"s\" must be a list of names, not a value tagged !"},
		{"response_header_remove: !foo [x-a]\n", 9, "response_header_remove of step \"s\" must be a list, e.g. [x-internal, x-ephemeral], not a value tagged !foo"},
	})

	// an exclamation mark inside a value, or quoted, is text; !!str, !!seq
	// and !!map change nothing
	f, err := Compile("f.md", []byte(head+"effects: !!seq [!!str http_egress]\nendpoint: https://api.example.com/\n"+
		"headers: !!map {!!str X-A: \"! x\", X-B: 'y!', X-C: !!str z}\n```ntd\n{}\n```\n"+
		"\n## Step: t\nresponse_header_remove: [\"!x\", !!str x-y]\n```ntd\n{}\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range f.Steps()[0].HTTP().Headers {
		got = append(got, h.Name+": "+h.Value.src)
	}
	for h := range f.Steps()[1].Headers() {
		got = append(got, "remove "+h.Name)
	}
	if diff := cmp.Diff([]string{"X-A: ! x", "X-B: y!", "X-C: z", "remove !x", "remove X-Y"}, got); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

// stepLineError is a step's lines (after head's "## Step: s") and the one
// compile error they make, on its line.
type stepLineError struct {
	lines string
	line  int
	want  string
}

// checkStepLineErrors compiles head followed by each case's lines and an
// ntd block, and checks the one error each makes and its line.
func checkStepLineErrors(t *testing.T, head string, cases []stepLineError) {
	t.Helper()
	for _, c := range cases {
		var got []string
		for _, e := range compileErrs(t, head+c.lines+"```ntd\n{}\n```\n") {
			if e.Line != c.line {
				t.Errorf("%q: error on line %d, want %d: %s", c.lines, e.Line, c.line, e.Msg)
			}
			got = append(got, e.Msg)
		}
		if diff := cmp.Diff([]string{c.want}, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", c.lines, diff)
		}
	}
}
