package flow

import "testing"

// TestSkippedAsNotFlow: Markdown that is not a flow file is said to look
// meant for one when its front matter has a misspelt flowmarkdown_version
// or names a flow and a tenant; other Markdown (a README, with or without
// front matter) is not.
func TestSkippedAsNotFlow(t *testing.T) {
	cases := []struct {
		name, src string
		want      string
	}{
		{"a letter swapped", "---\nflowmarkdown_versoin: \"0.1\"\nflow: a\ntenant: acme\n---\n", "its front matter has flowmarkdown_versoin, not flowmarkdown_version"},
		{"a letter missing", "---\nflow: a\nflowmarkdown_versio: \"0.1\"\n---\n", "its front matter has flowmarkdown_versio, not flowmarkdown_version"},
		{"upper case", "---\nFlowmarkdown_Version: \"0.1\"\n---\n", "its front matter has Flowmarkdown_Version, not flowmarkdown_version"},
		{"a flow and a tenant, no version", "---\nflow: a\ntenant: acme\n---\n", "its front matter names a flow and a tenant but has no flowmarkdown_version"},
		{"CRLF", "---\r\nflowmarkdown-version: \"0.1\"\r\n---\r\n", "its front matter has flowmarkdown-version, not flowmarkdown_version"},
		{"a README", "# Flows\n\nflowmarkdown_versoin: is not front matter here\n", ""},
		{"front matter of another tool", "---\ntitle: Notes\nflow: a\n---\n", ""},
		{"a key after the front matter", "---\ntitle: Notes\n---\nflowmarkdown_versoin: x\n", ""},
		{"a far key", "---\nversion: \"0.1\"\n---\n", ""},
		{"nested keys are not top level", "---\nmeta:\n  flow: a\n  tenant: acme\n---\n", ""},
		{"a flow file", "---\nflowmarkdown_version: \"0.1\"\nflow: a\ntenant: acme\n---\n", ""},
		{"a flow file whose front matter is in braces", "---\n{flowmarkdown_version: \"0.1\", flow: a, tenant: acme}\n---\n", ""},
	}
	for _, c := range cases {
		if got := SkippedAsNotFlow([]byte(c.src)); got != c.want {
			t.Errorf("%s: SkippedAsNotFlow = %q, want %q", c.name, got, c.want)
		}
	}
}
