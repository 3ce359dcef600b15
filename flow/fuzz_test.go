package flow

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var errorLine = regexp.MustCompile(`^fuzz\.md:[1-9][0-9]*: [^\n]+$`)

// FuzzCompile holds the compiler's promises on any input: it never panics;
// it either compiles, or returns every error as one FILE:LINE: message
// line; a compiled flow's artifact loads back to the same artifact.
func FuzzCompile(f *testing.F) {
	for _, pattern := range []string{"testdata/valid/*.md", "testdata/invalid/*.md", "../flows-example/flows/*/*.md"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if src, err := os.ReadFile(p); err == nil {
				f.Add(src)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		fl, err := Compile("fuzz.md", src)
		if errors.Is(err, ErrNotFlow) {
			return
		}
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !errorLine.MatchString(line) {
					t.Fatalf("error line %q is not FILE:LINE: message", line)
				}
			}
			return
		}
		art := fl.Artifact()
		again, err := LoadArtifact("fuzz.md", art)
		if err != nil {
			t.Fatalf("artifact does not load: %v", err)
		}
		if !bytes.Equal(again.Artifact(), art) {
			t.Fatal("artifact changed on a round trip")
		}
	})
}
