package flow

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTaggedNames: flow, tenant, flowmarkdown_version, the entries of
// effects and the front matter's keys themselves refuse a YAML tag (`!foo
// x`, the non-specific `! x`, `!!int 42`) as the string keys do, on the
// line of the value (its key's); they took no notice of it (`flow: !foo f`
// compiled as the flow f). Tagged !!str (or !!seq, a list), a value is what
// it is without the tag.
func TestTaggedNames(t *testing.T) {
	const (
		version = "flowmarkdown_version: \"0.1\"\n"
		flow    = "flow: f\n"
		tenant  = "tenant: acme\n"
		steps   = "---\n\n## Step: s\n```ntd\n{}\n```\n"
	)
	for _, c := range []struct {
		front string
		line  int
		want  string
	}{
		{version + "flow: !foo f\n" + tenant, 3, "flow must be a name, not a value tagged !foo"},
		{version + "flow: ! f\n" + tenant, 3, "flow must be a name, not a value tagged !"},
		{version + "flow: !!int 42\n" + tenant, 3, "flow must be a name, not a value tagged !!int"},
		{version + "flow:\n  !foo f\n" + tenant, 3, "flow must be a name, not a value tagged !foo"},
		{version + flow + "tenant: !foo acme\n", 4, "tenant must be a name, not a value tagged !foo"},
		{version + flow + "tenant: &t ! acme\n", 4, "tenant must be a name, not a value tagged !"},
		{"flowmarkdown_version: !foo \"0.1\"\n" + flow + tenant, 2, "flowmarkdown_version must be a string, not a value tagged !foo"},
		{"flowmarkdown_version: ! \"0.1\"\n" + flow + tenant, 2, "flowmarkdown_version must be a string, not a value tagged !"},
		{version + flow + tenant + "effects: [!foo http_egress]\n", 5, "effects must be a list of effect names, not a value tagged !foo"},
		{version + flow + tenant + "effects: [! http_egress]\n", 5, "effects must be a list of effect names, not a value tagged !"},
		{version + flow + tenant + "effects:\n  - ! http_egress\n", 5, "effects must be a list of effect names, not a value tagged !"},
		{version + flow + tenant + "effects: !foo [http_egress]\n", 5, "effects must be a list, e.g. [http_egress], not a value tagged !foo"},
		{version + flow + tenant + "effects: ! [http_egress]\n", 5, "effects must be a list, e.g. [http_egress], not a value tagged !"},
		{version + flow + tenant + "!foo description: x\n", 5, "a front matter key is a name, not a value tagged !foo"},
		{version + flow + tenant + "! description: x\n", 5, "a front matter key is a name, not a value tagged !"},
		{version + "!foo flow: f\n" + tenant, 3, "a front matter key is a name, not a value tagged !foo"},
	} {
		var got []string
		for _, e := range compileErrs(t, "---\n"+c.front+steps) {
			if e.Line != c.line {
				t.Errorf("%q: error on line %d, want %d: %s", c.front, e.Line, c.line, e.Msg)
			}
			got = append(got, e.Msg)
		}
		if diff := cmp.Diff([]string{c.want}, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", c.front, diff)
		}
	}

	// !!str is a string's own tag, !!seq a list's
	f, err := Compile("f.md", []byte("---\nflowmarkdown_version: !!str \"0.1\"\nflow: !!str f\ntenant: !!str acme\n"+
		"effects: !!seq [!!str http_egress]\n!!str description: d\n"+steps))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"acme", "f", "d", "http_egress"}, []string{f.Tenant(), f.Name(), f.Description(), string(slices.Collect(f.Effects())[0])}); diff != "" {
		t.Errorf("tagged !!str (-want +got):\n%s", diff)
	}
}
