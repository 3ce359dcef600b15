package flow

import "testing"

// TestSkippedAsNotFlow: Markdown that is not a flow file is said to look
// meant for one when its front matter has a misspelt flowmarkdown_version
// or names a flow and a tenant, or when it is a Git LFS pointer; other Markdown (a README, with or without
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
		{"a Git LFS pointer", "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1234\n",
			"it is a Git LFS pointer: its content is kept outside the repo, and git sync reads the repo only (keep flow files out of LFS: see .gitattributes)"},
		{"a README that mentions LFS", "# Notes\nversion https://git-lfs.github.com/spec/v1\n", ""},
	}
	for _, c := range cases {
		if got := SkippedAsNotFlow([]byte(c.src)); got != c.want {
			t.Errorf("%s: SkippedAsNotFlow = %q, want %q", c.name, got, c.want)
		}
	}
}
