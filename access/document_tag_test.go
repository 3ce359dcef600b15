package access_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nexushq/nexus/access"
)

// TestDocumentTag: a YAML tag on the whole document (`--- !foo`, or on the
// line before keys:, the non-specific `!` too) is refused on the line it
// is written on, as a tag on any other value of the file is; the file was
// read as if it had none. `!!map`, the tag a mapping has without it,
// changes nothing.
func TestDocumentTag(t *testing.T) {
	entry := "keys:\n  - {id: a, tenant: acme, sha256: " + strings.Repeat("ab", 32) + `, flows: ["*"]}` + "\n"
	for _, tt := range []struct {
		src  string
		want string // "" for none
	}{
		{"--- !foo\n" + entry, "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !foo"},
		{"--- !\n" + entry, "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !"},
		{"!foo\n" + entry, "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !foo"},
		{"# access\n! \n" + entry, "access.yaml:2: the file must be a mapping with a keys: list, not a value tagged !"},
		{"--- !!set\n" + entry, "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !!set"},
		{"--- !nxk_0123456789abcdef\n" + entry, "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged with an API key (replace it: it is now in the repository)"},
		{"--- !foo {keys: []}\n", "access.yaml:1: the file must be a mapping with a keys: list, not a value tagged !foo"},
		{"--- !!map\n" + entry, ""},
		{"!!map\n" + entry, ""},
		{"--- !!map {keys: []}\n", ""},
	} {
		got := ""
		if _, err := access.Parse("access.yaml", []byte(tt.src)); err != nil {
			got = err.Error()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q: error (-want +got):\n%s", tt.src, diff)
		}
	}
}
