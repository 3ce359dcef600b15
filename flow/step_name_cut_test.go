package flow

import (
	"strings"
	"testing"
)

// An error that names a step quotes at most the first 64 bytes of its
// name, cut with an ellipsis after the quote, as every other value of the
// file is quoted: a heading of a kilobyte made every error of its step a
// kilobyte long.
func TestErrorsCutALongStepName(t *testing.T) {
	long := strings.Repeat("n", 1000)
	cut := `"` + long[:64] + `"…`
	for _, c := range []struct {
		name string
		body string // the file below the front matter; NAME is the step's name
	}{
		{"sets twice", "## Step: NAME\nwhen: true\nwhen: false\n```ntd\n{}\n```\n"},
		{"two effects", "## Step: NAME\neffects: [http_egress, queue_publish]\n"},
		{"unknown effect", "## Step: NAME\neffects: [smtp]\n"},
		{"undeclared effect", "## Step: NAME\neffects: [queue_publish]\nqueue: b\n"},
		{"no endpoint", "## Step: NAME\neffects: [http_egress]\n"},
		{"no queue", "---\n## Step: NAME\neffects: [queue_publish]\n"},
		{"http key without effect", "## Step: NAME\nendpoint: https://x.example.com/\n```ntd\n{}\n```\n"},
		{"queue key without effect", "## Step: NAME\nqueue: b\n```ntd\n{}\n```\n"},
		{"two status keys", "## Fault: NAME\nresponse_status: 500\nfault_status: 500\n```ntd\n{}\n```\n"},
		{"unknown key", "## Step: NAME\nendpont: x\n```ntd\n{}\n```\n"},
		{"empty ntd", "## Step: NAME\n```ntd\n```\n"},
		{"ntd hole", "## Step: NAME\n```ntd\n{\"a\": {{ $. }}}\n```\n"},
		{"empty condition", "## Step: NAME\n```condition\n```\n"},
		{"condition parse", "## Step: NAME\n```condition\n$.a ==\n```\n"},
		{"condition never boolean", "## Step: NAME\n```condition\n$.a + 1\n```\n"},
		{"validate rule", "## Step: NAME\n```validate\n$.a ==\n```\n"},
		{"empty validate", "## Step: NAME\n```validate\n```\n"},
		{"not a list", "## Step: NAME\neffects: http_egress\n"},
		{"list of names", "## Step: NAME\neffects: [[a]]\n"},
		{"second block", "## Step: NAME\n```ntd\n{}\n```\n```ntd\n{}\n```\n"},
		{"block without kind", "## Step: NAME\n```\n{}\n```\n```ntd\n{}\n```\n"},
		{"unknown block", "## Step: NAME\n```json\n{}\n```\n```ntd\n{}\n```\n"},
		{"step after fault", "## Step: s\n```ntd\n{}\n```\n## Fault: f\n```ntd\n{}\n```\n## Step: NAME\n```ntd\n{}\n```\n"},
		{"key away from heading", "## Step: NAME\n```ntd\n{}\n```\n\nwhen: true\n"},
		{"duplicate name", "## Step: NAME\n```ntd\n{}\n```\n## Step: NAME\n```ntd\n{}\n```\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\neffects: [http_egress]\n---\n\n"
			body := strings.TrimPrefix(c.body, "---\n")
			if body != c.body {
				head = strings.Replace(head, "[http_egress]", "[queue_publish]", 1)
			}
			errs := compileErrs(t, head+strings.ReplaceAll(body, "NAME", long))
			if len(errs) == 0 {
				t.Fatal("compiled")
			}
			quoted := 0
			for _, e := range errs {
				if strings.Contains(e.Msg, long[:65]) {
					t.Errorf("line %d quotes the step's name whole: %.120s…", e.Line, e.Msg)
				}
				if strings.Contains(e.Msg, cut) {
					quoted++
				}
			}
			// the name's own error, and the one under test
			if quoted < 2 {
				t.Errorf("%d errors quote the name cut, want at least 2: %v", quoted, errs)
			}
		})
	}
}
