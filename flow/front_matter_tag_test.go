package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFrontMatterTagged: a YAML tag on the whole front matter (`!foo` on a
// line of its own before the keys, the non-specific `!` too) is refused on
// its line, as a tag on any of its keys or values is; the flow compiled as
// if it had none. `!!map`, the tag a mapping has without it, changes
// nothing.
func TestFrontMatterTagged(t *testing.T) {
	const keys = "flowmarkdown_version: \"0.1\"\nflow: f\ntenant: acme\n---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, tt := range []struct {
		tag  string
		want []string // "LINE: message"
	}{
		{"!foo\n", []string{"2: front matter must be a YAML mapping of keys to values, not a value tagged !foo"}},
		{"!\n", []string{"2: front matter must be a YAML mapping of keys to values, not a value tagged !"}},
		{"# flow\n!!set\n", []string{"3: front matter must be a YAML mapping of keys to values, not a value tagged !!set"}},
		{"!!map\n", nil},
	} {
		var got []string
		for _, e := range compileErrs(t, "---\n"+tt.tag+keys) {
			got = append(got, e.Error()[len("f.md:"):])
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", tt.tag, diff)
		}
	}
}

// TestFlowStyleFrontMatterTagged: a front matter in YAML's flow style
// written with a tag or an anchor before its brace (`! {…}`, `!!map {…}`,
// `&fm {…}`) is a flow file, as it is without them: the tag is then
// refused as on a front matter in block style (`!!map` and an anchor
// change nothing); the file was skipped as documentation, silently.
func TestFlowStyleFrontMatterTagged(t *testing.T) {
	const fm = `{flowmarkdown_version: "0.1", flow: f, tenant: acme}` + "\n---\n\n## Step: s\n```ntd\n{}\n```\n"
	for _, tt := range []struct {
		props string
		want  []string // "LINE: message"
	}{
		{"! ", []string{"2: front matter must be a YAML mapping of keys to values, not a value tagged !"}},
		{"!foo ", []string{"2: front matter must be a YAML mapping of keys to values, not a value tagged !foo"}},
		{"&fm !foo ", []string{"2: front matter must be a YAML mapping of keys to values, not a value tagged !foo"}},
		{"!!map ", nil},
		{"&fm ", nil},
	} {
		src := "---\n" + tt.props + fm
		if !IsFlowFile([]byte(src)) {
			t.Errorf("%q: not a flow file", tt.props)
			continue
		}
		var got []string
		for _, e := range compileErrs(t, src) {
			got = append(got, e.Error()[len("f.md:"):])
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", tt.props, diff)
		}
	}
	// prose that does not open with a brace, after its tags, is still
	// documentation
	if IsFlowFile([]byte("---\n!note see {flowmarkdown_version: \"0.1\"}\n---\n")) {
		t.Error("prose read as a flow file")
	}
}
