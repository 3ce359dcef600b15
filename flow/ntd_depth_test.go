package flow

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNTDNestingLimit: an ntd block nests arrays and objects at most
// maxNTDDepth levels; one level more is a one-line compile error naming
// the step and the limit, on the line of the bracket that goes too deep.
func TestNTDNestingLimit(t *testing.T) {
	t.Parallel()
	const head = "---\nflowmarkdown_version: \"0.1\"\nflow: f\ntenant: t\n---\n\n## Step: deep\n```ntd\n"
	arrays := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	objects := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	mixed := func(n int) string { // [{"a":[{"a":…}]}], n levels in all
		var open, closing strings.Builder
		for i := range n {
			if i%2 == 0 {
				open.WriteString("[")
				closing.WriteString("]")
			} else {
				open.WriteString(`{"a":`)
				closing.WriteString("}")
			}
		}
		c := []byte(closing.String())
		for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
			c[i], c[j] = c[j], c[i]
		}
		return open.String() + `"{{ $.x }}"` + string(c)
	}
	tests := []struct {
		name string
		ntd  string
		want string // "" when it compiles
	}{
		{"arrays at the limit", arrays(1000), ""},
		{"objects at the limit", objects(1000), ""},
		{"mixed at the limit, a hole at the bottom", mixed(1000), ""},
		{"arrays one over", arrays(1001), "f.md:9: step \"deep\": the ntd block nests arrays and objects deeper than 1000 levels"},
		{"objects one over", objects(1001), "f.md:9: step \"deep\": the ntd block nests arrays and objects deeper than 1000 levels"},
		{"mixed one over", mixed(1001), "f.md:9: step \"deep\": the ntd block nests arrays and objects deeper than 1000 levels"},
		{"over on a later line", "[\n" + strings.Repeat("[\n", 1000) + "1" + strings.Repeat("]", 1001), "f.md:1009: step \"deep\": the ntd block nests arrays and objects deeper than 1000 levels"},
		// a whole flow file at git sync's 1 MiB limit, every byte of its
		// block a [: it took about 0.6 s and 900 MB (a 512 MB stack)
		{"a 1 MiB file of [", strings.Repeat("[", 1<<20-len(head)-len("\n```\n")), "f.md:9: step \"deep\": the ntd block nests arrays and objects deeper than 1000 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compile("f.md", []byte(head+tt.ntd+"\n```\n"))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Compile error (-want +got):\n%s", diff)
			}
		})
	}
}
