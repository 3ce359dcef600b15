package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFenceIndentation: a fence is indented by at most three spaces, as
// CommonMark reads it, the closing one as the opening one. A line of
// backticks indented by four spaces or a tab inside a block is the
// block's content; it closed the block, so a code sample holding one ran
// on past its end as Markdown renders it: a step heading below, shown as
// code, became a step that ran.
func TestFenceIndentation(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		steps []string // the steps compiled, nil when errs
		errs  []string
	}{
		{"closing indented by three", "## Step: a\n```ntd\n{\"a\": 1}\n   ```\n", []string{"a"}, nil},
		{"both indented, content too", "## Step: a\n  ```ntd\n  {\"a\": 1}\n   ```\n", []string{"a"}, nil},
		{"tildes, a longer closing", "## Step: a\n ~~~ntd\n{\"a\": 1}\n  ~~~~~  \n", []string{"a"}, nil},
		{"a step under a sample whose backticks are indented by four",
			"## Step: a\n```ntd\n{\"a\": 1}\n```\n\n# Notes\n```sh\necho hi\n    ```\n\n## Step: b\n```ntd\n{\"b\": 2}\n```\n",
			[]string{"a"}, nil},
		{"a step under a sample whose backticks follow a tab",
			"## Step: a\n```ntd\n{\"a\": 1}\n```\n\n# Notes\n```sh\necho hi\n\t```\n\n## Step: b\n```ntd\n{\"b\": 2}\n```\n",
			[]string{"a"}, nil},
		{"backticks indented by four inside a step's block",
			"## Step: a\n```ntd\n{\"a\": 1}\n    ```\n```\n",
			nil, []string{"f.md:11: step \"a\": ntd block is not valid JSON: unexpected '`' after the JSON document"}},
		{"never closed but by an indented line",
			"## Step: a\n```ntd\n{\"a\": 1}\n    ```\n",
			nil, []string{"f.md:9: the fenced block opened here is not closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, errs := mdCompile(t, mdHead+tt.body)
			var steps, msgs []string
			if f != nil {
				for _, s := range f.Steps() {
					steps = append(steps, s.Name())
				}
			}
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if diff := cmp.Diff(tt.steps, steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.errs, msgs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFenceIndentationTrimsContent: the opening fence's indentation is
// removed from the block's lines, as far as they have it (CommonMark).
func TestFenceIndentationTrimsContent(t *testing.T) {
	f, errs := mdCompile(t, mdHead+"## Step: a\n   ```ntd\n   {\n     \"a\": [1,\n  2]\n    }\n```\n")
	if errs != nil {
		t.Fatal(errs)
	}
	if diff := cmp.Diff("{\n  \"a\": [1,\n2]\n }", f.Steps()[0].NTD().String()); diff != "" {
		t.Errorf("block (-want +got):\n%s", diff)
	}
}
