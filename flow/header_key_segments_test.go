package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A response_header_<name> key, or a response_header_remove (or
// fault_header_remove) entry, whose name has an empty segment (a leading,
// trailing or doubled underscore or hyphen) is a compile error naming it:
// it named a header no answer has (response_header__x sent "-X", x__y
// removed "X--Y"), from what is most likely a typing slip.
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
		{"response_header__x: v", []result{{9, `response_header__x: the header name "-X" has an empty segment` + keyWhy}}},
		{"response_header_x_: v", []result{{9, `response_header_x_: the header name "X-" has an empty segment` + keyWhy}}},
		{"response_header_x__y: v", []result{{9, `response_header_x__y: the header name "X--Y" has an empty segment` + keyWhy}}},
		{"response_header_x_y: v", nil},
		{"response_header_retry_after: v", nil},
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
	// the deprecated spellings, in a fault section, are refused alike
	for _, c := range []struct{ line, want string }{
		{"fault_header__x: v", `fault_header__x: the header name "-X" has an empty segment` + keyWhy},
		{"fault_header_remove: [x__y]", `fault_header_remove: the header name "X--Y" has an empty segment` + removeWhy},
	} {
		src := rv6Head + "## Step: s\n```ntd\n{}\n```\n\n## Fault: f\n" + c.line + "\n```ntd\n{}\n```\n"
		errs := compileErrs(t, src)
		if len(errs) != 1 || errs[0].Line != 14 || errs[0].Msg != c.want {
			t.Errorf("%s: errors %v, want one on line 14: %s", c.line, errs, c.want)
		}
	}
}
