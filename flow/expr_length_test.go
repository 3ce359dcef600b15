package flow

import (
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExprTooLong: an expression of more than maxTokens tokens is refused
// with one line, and reading it stops there: a 1 MiB `when:` or condition
// (git sync's limit for a whole flow file) was lexed to its end first,
// about 260 MB and 0.4 s, only to be refused. Deep nesting within the
// limit compiles.
func TestExprTooLong(t *testing.T) {
	const tooLong = "expression is too long: more than 4000 tokens"
	tests := []struct {
		name, src, want string
	}{
		{"4000 tokens", "-" + strings.Repeat("1 + ", 1999) + "1", ""},
		{"4001 tokens", strings.Repeat("1 + ", 2000) + "1", tooLong},
		{"1999 parentheses deep", strings.Repeat("(", 1999) + "true" + strings.Repeat(")", 1999), ""},
		{"3999 nots deep", strings.Repeat("!", 3999) + "true", ""},
		{"1 MiB of (", strings.Repeat("(", 1<<20), tooLong},
		{"1 MiB of sums", strings.Repeat("1 + ", 1<<18) + "1", tooLong},
		{"a bad character past the limit", strings.Repeat("1 + ", 2000) + "1 # x", tooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := CompileExpr(tt.src)
			runtime.ReadMemStats(&after)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CompileExpr error (-want +got):\n%s", diff)
			}
			if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; tt.want != "" && mb > 16 {
				t.Errorf("refusing it allocated %d MB, want at most 16", mb)
			}
		})
	}
}
