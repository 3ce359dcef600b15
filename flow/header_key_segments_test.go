package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A response_header_<name> key whose suffix has an empty segment (a
// leading, trailing or doubled underscore) is a compile error naming the
// key: the suffix's segments are the header name's, and an empty one made
// a name no header has (response_header__x sent "-X", response_header_x__y
// "X--Y"), from what is most likely a typing slip.
func TestResponseHeaderKeyWithAnEmptySegment(t *testing.T) {
	type result struct {
		Line int
		Msg  string
	}
	for _, c := range []struct {
		key  string
		want []result
	}{
		{"response_header__x", []result{{9, `response_header__x: the header name "-X" has an empty segment: a key's underscores stand one each between the name's words`}}},
		{"response_header_x_", []result{{9, `response_header_x_: the header name "X-" has an empty segment: a key's underscores stand one each between the name's words`}}},
		{"response_header_x__y", []result{{9, `response_header_x__y: the header name "X--Y" has an empty segment: a key's underscores stand one each between the name's words`}}},
		{"response_header_x_y", nil},
		{"response_header_retry_after", nil},
	} {
		t.Run(c.key, func(t *testing.T) {
			var got []result
			for _, e := range compileErrs(t, rv6Head+"## Step: s\n"+c.key+": v\n```ntd\n{}\n```\n") {
				got = append(got, result{e.Line, e.Msg})
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	// the deprecated spelling, in a fault section, is refused alike
	src := rv6Head + "## Step: s\n```ntd\n{}\n```\n\n## Fault: f\nfault_header__x: v\n```ntd\n{}\n```\n"
	errs := compileErrs(t, src)
	if len(errs) != 1 || errs[0].Line != 14 || errs[0].Msg != `fault_header__x: the header name "-X" has an empty segment: a key's underscores stand one each between the name's words` {
		t.Errorf("fault_header__x: errors %v, want one on line 14", errs)
	}
}

// A response_header_remove (or fault_header_remove) entry with an empty
// segment (a leading, trailing or doubled underscore or hyphen) is refused
// as the response_header_<name> keys refuse one: it named a header no
// answer has (x__y removed "X--Y"), from what is most likely a typing
// slip. A key whose suffix holds a hyphen is held to the same rule.
func TestHeaderNameWithAnEmptySegmentRemovedOrSet(t *testing.T) {
	type result struct {
		Line int
		Msg  string
	}
	const (
		removeWhy = `: each underscore or hyphen of an entry stands between two of the name's words`
		keyWhy    = `: a key's underscores stand one each between the name's words`
	)
	for _, c := range []struct {
		line string
		want []result
	}{
		{"response_header_remove: [x__y]", []result{{9, `response_header_remove: the header name "X--Y" has an empty segment` + removeWhy}}},
		{"response_header_remove: [_x]", []result{{9, `response_header_remove: the header name "-X" has an empty segment` + removeWhy}}},
		{"response_header_remove: [x_]", []result{{9, `response_header_remove: the header name "X-" has an empty segment` + removeWhy}}},
		{"response_header_remove: [x--y]", []result{{9, `response_header_remove: the header name "X--Y" has an empty segment` + removeWhy}}},
		{"response_header_remove: [x-_y]", []result{{9, `response_header_remove: the header name "X--Y" has an empty segment` + removeWhy}}},
		{"response_header_remove: [-x, y_, ok]", []result{
			{9, `response_header_remove: the header name "-X" has an empty segment` + removeWhy},
			{9, `response_header_remove: the header name "Y-" has an empty segment` + removeWhy},
		}},
		{"response_header_remove: [x_y, x-y, X-Correlation-Id]", nil},
		{"response_header_x-: v", []result{{9, `response_header_x-: the header name "X-" has an empty segment` + keyWhy}}},
		{"response_header_x-_y: v", []result{{9, `response_header_x-_y: the header name "X--Y" has an empty segment` + keyWhy}}},
		{"response_header_-x: v", []result{{9, `response_header_-x: the header name "-X" has an empty segment` + keyWhy}}},
		{"response_header_x-y: v", nil},
	} {
		t.Run(c.line, func(t *testing.T) {
			var got []result
			for _, e := range compileErrs(t, rv6Head+"## Step: s\n"+c.line+"\n```ntd\n{}\n```\n") {
				got = append(got, result{e.Line, e.Msg})
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	// the deprecated spelling, in a fault section, is refused alike
	src := rv6Head + "## Step: s\n```ntd\n{}\n```\n\n## Fault: f\nfault_header_remove: [x__y]\n```ntd\n{}\n```\n"
	errs := compileErrs(t, src)
	if len(errs) != 1 || errs[0].Line != 14 || errs[0].Msg != `fault_header_remove: the header name "X--Y" has an empty segment`+removeWhy {
		t.Errorf("fault_header_remove: [x__y]: errors %v, want one on line 14", errs)
	}
}
