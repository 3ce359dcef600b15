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
