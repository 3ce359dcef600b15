package flow

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTaggedStepScalars: a step key's value is a YAML scalar (flow-file.md,
// "Step keys"), so one written with a YAML tag (`!foo x`, the non-specific
// `! x`) is refused on the key's line, as the front matter refuses it,
// naming the tag; they were read as text, the tag included: a response
// header was sent as "!foo x", and the others were refused as a name, a
// method or a URL that does not read, quoting the tag as part of it. The
// tag a value has without it (`!!str` on a string, `!!int` on a whole
// number, `!<tag:yaml.org,2002:str>` as `!!str` is) changes nothing and
// is taken. `when:` is an expression, in which `!` is the negation: it is
// read as written (TestWhenNegationIsNotATag).
func TestTaggedStepScalars(t *testing.T) {
	const head = "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\neffects: [http_egress, queue_publish]\n---\n\n## Step: s\n"
	const http = "effects: [http_egress]\n"
	const endpoint = "endpoint: https://api.example.com/\n"
	checkStepLineErrors(t, head, []stepLineError{
		{http + "endpoint: !foo https://api.example.com/\n", 10, "endpoint must be a string, not a value tagged !foo"},
		{http + endpoint + "method: ! POST\n", 11, "method must be a string, not a value tagged !"},
		{http + endpoint + "method: !!int 5\n", 11, "method must be a string, not a value tagged !!int"},
		{http + endpoint + "read_timeout_ms: !foo 5\n", 11, "read_timeout_ms must be a whole number, not a value tagged !foo"},
		{http + endpoint + "connect_timeout_ms: ! 5\n", 11, "connect_timeout_ms must be a whole number, not a value tagged !"},
		{"effects: [queue_publish]\nqueue: !foo orders\n", 10, "queue must be a name, not a value tagged !foo"},
		{"effects: [queue_publish]\nqueue: ! orders\n", 10, "queue must be a name, not a value tagged !"},
		{"save_body: !foo order\n", 9, "save_body must be a name, not a value tagged !foo"},
		{"response_status: ! 201\n", 9, "response_status must be a status code from 100 to 599 or a {{ }} template, not a value tagged !"},
		{"response_header_x_a: !foo bar\n", 9, "response_header_x_a must be a string, not a value tagged !foo"},
		{"response_header_x_a: !\n", 9, "response_header_x_a must be a string, not a value tagged !"},
		{"response_header_x_a: !<tag:yaml.org,2002:int> 5\n", 9, "response_header_x_a must be a string, not a value tagged !!int"},
		{"response_header_x_a: !<x> 5\n", 9, "response_header_x_a must be a string, not a value tagged !<x>"},
	})

	// !!str on a string and !!int on a whole number change nothing; an
	// exclamation mark inside a value, or quoted, is text
	f, err := Compile("f.md", []byte(head+http+"endpoint: !!str https://api.example.com/\nmethod: !!str put\nread_timeout_ms: !!int 7\n"+
		"response_status: !!int 201\nresponse_header_x_a: \"!foo bar\"\nresponse_header_x_b: !!str \"b c\"\nresponse_header_x_c: a!\nresponse_header_x_d: !<tag:yaml.org,2002:str> d\n```ntd\n{}\n```\n"+
		"\n## Step: t\neffects: [queue_publish]\nqueue: !!str orders\nsave_body: !!str kept\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Steps()[0]
	got := []string{s.HTTP().Endpoint.src, s.HTTP().Method, s.HTTP().ReadTimeout.String(), f.Steps()[1].queue, f.Steps()[1].saveBody}
	got = append(got, strconv.Itoa(s.status.Code))
	for h := range s.Headers() {
		got = append(got, h.Name+": "+h.Value)
	}
	want := []string{"https://api.example.com/", "PUT", "7ms", "orders", "kept", "201", "X-A: !foo bar", "X-B: b c", "X-C: a!", "X-D: d"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
}

// TestWhenNegationIsNotATag: `when:` takes the rest of the line as an
// expression (docs/decisions.md, "Values"), in which `!` is the negation,
// so `when: !$.done` and `when: ! $.done` are the negation of $.done, not a
// YAML tag: a step key's value is otherwise a YAML scalar, which refuses a
// tag (TestTaggedStepScalars).
func TestWhenNegationIsNotATag(t *testing.T) {
	const head = "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n---\n\n## Step: s\n"
	for _, when := range []string{"!$.done", "! $.done", "!($.done)"} {
		f, err := Compile("f.md", []byte(head+"when: "+when+"\n```ntd\n{}\n```\n"))
		if err != nil {
			t.Fatalf("when: %s: %v", when, err)
		}
		w := f.Steps()[0].when
		for doc, want := range map[string]bool{`{"done":true}`: false, `{"done":false}`: true} {
			v, err := ParseJSON([]byte(doc), 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.EvalBool(&Env{Doc: v})
			if err != nil || got != want {
				t.Errorf("when: %s on %s: %v, %v; want %v", when, doc, got, err, want)
			}
		}
	}
}
